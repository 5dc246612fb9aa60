import NIOCore

/// Where a relay packet came from and where its answers go: a UDP address, or one
/// WebSocket-over-TLS connection (whose packets must go back on that connection).
public enum RelayPeer: Hashable, Sendable, CustomStringConvertible {
    case udp(SocketAddress)
    /// `connection` is the listener's ID for the TCP connection; `remote` its far end.
    case webSocket(connection: UInt64, remote: SocketAddress)

    /// The far end's socket address.
    public var remote: SocketAddress {
        switch self {
        case .udp(let a): return a
        case .webSocket(_, let a): return a
        }
    }

    /// The far end's IP address as text: the key for per-address limits.
    public var ip: String { remote.ipAddress ?? remote.description }

    public var description: String {
        switch self {
        case .udp: return "udp \(RelayServer.hostPort(remote))"
        case .webSocket(let c, _): return "wss #\(c) \(RelayServer.hostPort(remote))"
        }
    }
}
