import YaokPluginKit

/// An IPv4 address and TCP/UDP port, as written in the config (`10.0.0.2:7813`): the kit's
/// ``SocketAddress``, shared with the other IP transports.
public typealias MeshAddress = SocketAddress
