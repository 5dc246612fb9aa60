import YaokPluginKit

/// What the router needs of a transport: its name, which roles its peers may claim, whether it
/// is the pinned relay, and sending. The daemon's transport host is the real one (a plugin in its own
/// process); tests drive a router through an in-memory one.
public protocol RouterTransport: AnyObject, Sendable {
    /// The config section's name (`udp`, `mesh`), which names its links (`udp/3`).
    var name: String { get }
    /// The roles its peers may claim (`peer_roles`); the relay role is judged apart.
    var peerRoles: Set<PeerRole> { get }
    /// The relay key this transport pins, when it runs the relay plugin itself (a `command:`
    /// program does not qualify): a link whose proven key is this one is the relay.
    var pinnedRelayKey: [UInt8]? { get }
    /// Sends a frame on a link. `held`: more sends follow in this pass, the frame may wait for
    /// ``flushHeldSends()``. Returns whether it waits. A refusal that comes later reaches the
    /// handler's `sendFailed`.
    @discardableResult
    func send(_ frame: [UInt8], to link: LinkID, held: Bool) throws -> Bool
    /// Writes the frames held by ``send(_:to:held:)``.
    func flushHeldSends()
}
