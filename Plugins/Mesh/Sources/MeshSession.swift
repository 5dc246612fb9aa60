import YaokPluginKit

/// One TCP connection to another hub: its secure link session, TLV reader, bounded writer queue.
/// Owned by ``MeshEngine`` and touched only under its lock.
final class MeshSession {
    enum State: String {
        /// Outbound, TCP connect in progress.
        case connecting
        /// Connected, link handshake running; only handshake frames are accepted.
        case handshaking
        /// Handshake complete, link reported up.
        case up
    }

    let id: LinkID
    let fd: Int32
    /// Whether this hub dialled.
    let outbound: Bool
    let remote: MeshAddress
    /// The dial target that created it (outbound only).
    let target: MeshEngine.TargetKey?
    var state: State
    /// When the current state began (monotonic ms), for the connect and handshake timeouts.
    var stateSinceMs: Int64
    /// The kit's secure session; the dialler is the initiator. Every frame after the handshake is sealed.
    let link: SecureLink
    var decoder = TLVStreamDecoder()
    var queue: OutboundQueue
    var writeBuffer: [UInt8] = []
    var writeOffset = 0
    var lastHeardMs: Int64
    var lastSentMs: Int64
    var lastPingMs: Int64 = 0
    var limiter: RateLimiter
    var throttledThisSecond = false
    var throttledSeconds = 0
    /// Frames read but not yet handled because the peer is over its frame rate. Bounded:
    /// nothing more is read while it is non-empty, so it holds at most one read's worth.
    var backlog: [[UInt8]] = []
    var backlogHead = 0

    var hasBacklog: Bool { backlogHead < backlog.count }

    init(id: LinkID, fd: Int32, outbound: Bool, remote: MeshAddress, target: MeshEngine.TargetKey?, state: State,
         link: SecureLink, queue: OutboundQueue, limiter: RateLimiter, nowMs: Int64) {
        self.id = id
        self.fd = fd
        self.outbound = outbound
        self.remote = remote
        self.target = target
        self.state = state
        self.stateSinceMs = nowMs
        self.link = link
        self.queue = queue
        self.limiter = limiter
        self.lastHeardMs = nowMs
        self.lastSentMs = nowMs
    }

    var peerKey: [UInt8]? { link.peer?.signingKey }

    /// Whether bytes wait to be written.
    var hasPendingWrite: Bool { writeOffset < writeBuffer.count || !queue.isEmpty }

    /// Whether a frame is half written (then a goodbye frame would corrupt the stream).
    var isMidFrame: Bool { writeOffset < writeBuffer.count }

    /// Seals a frame (ping, pong) and queues it as control. Nothing is sent in clear after the handshake.
    func queueSealedControl(_ frame: [UInt8]) {
        guard let sealed = try? link.seal(frame) else { return }
        queueControl(sealed)
    }

    /// Queues a control record (handshake, sealed ping or pong) regardless of the data bounds' fullness.
    func queueControl(_ frame: [UInt8]) {
        if !queue.push(frame) {
            // A full data queue must not stall the handshake or keepalive: put it on the write buffer.
            if writeOffset >= writeBuffer.count {
                writeBuffer = frame
                writeOffset = 0
            }
        }
    }

    /// The tie-break rank among two authenticated sessions with the same peer: lower is kept.
    /// Sessions dialled by the hub with the lower Ed25519 key come first. It depends only on the
    /// two proven keys, never on a value the peer chose, and both hubs compute the same.
    func rank(ourKey: [UInt8]) -> Int {
        guard let peerKey else { return 2 }
        let diallerKey = outbound ? ourKey : peerKey
        let lowerKey = ourKey.lexicographicallyPrecedes(peerKey) ? ourKey : peerKey
        return diallerKey == lowerKey ? 0 : 1
    }
}
