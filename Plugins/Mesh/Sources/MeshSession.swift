import YaokPluginKit

/// One TCP connection to another hub: handshake state, TLV reader, bounded writer queue.
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
    let handshake: LinkHandshake
    var decoder = TLVStreamDecoder()
    var queue: OutboundQueue
    var writeBuffer: [UInt8] = []
    var writeOffset = 0
    var lastHeardMs: Int64
    var lastSentMs: Int64
    var lastPingMs: Int64 = 0
    /// The challenge nonce this side sent, and the one the peer sent: the dialler's nonce
    /// breaks ties between duplicate sessions identically on both hubs.
    var ourNonce: [UInt8] = []
    var peerNonce: [UInt8] = []
    var limiter: RateLimiter
    var throttledThisSecond = false
    var throttledSeconds = 0
    var droppedBeforeHandshake = 0
    /// Frames read but not yet handled because the peer is over its frame rate. Bounded:
    /// nothing more is read while it is non-empty, so it holds at most one read's worth.
    var backlog: [[UInt8]] = []
    var backlogHead = 0

    var hasBacklog: Bool { backlogHead < backlog.count }

    init(id: LinkID, fd: Int32, outbound: Bool, remote: MeshAddress, target: MeshEngine.TargetKey?, state: State,
         handshake: LinkHandshake, queue: OutboundQueue, limiter: RateLimiter, nowMs: Int64) {
        self.id = id
        self.fd = fd
        self.outbound = outbound
        self.remote = remote
        self.target = target
        self.state = state
        self.stateSinceMs = nowMs
        self.handshake = handshake
        self.queue = queue
        self.limiter = limiter
        self.lastHeardMs = nowMs
        self.lastSentMs = nowMs
    }

    var peerKey: [UInt8]? { handshake.peer?.signingKey }

    /// Whether bytes wait to be written.
    var hasPendingWrite: Bool { writeOffset < writeBuffer.count || !queue.isEmpty }

    /// Whether a frame is half written (then a goodbye frame would corrupt the stream).
    var isMidFrame: Bool { writeOffset < writeBuffer.count }

    /// Queues a control frame (handshake, ping, pong) regardless of the data bounds' fullness.
    func queueControl(_ frame: [UInt8]) {
        if !queue.push(frame) {
            // A full data queue must not stall the handshake or keepalive: put it on the write buffer.
            if writeOffset >= writeBuffer.count {
                writeBuffer = frame
                writeOffset = 0
            }
        }
    }

    /// The tie-break rank among duplicate sessions with the same peer: lower is kept.
    /// Sessions dialled by the hub with the lower Ed25519 key come first; then the dialler's nonce.
    func rank(ourKey: [UInt8]) -> [UInt8] {
        guard let peerKey else { return [0xff] }
        let diallerKey = outbound ? ourKey : peerKey
        let lowerKey = ourKey.lexicographicallyPrecedes(peerKey) ? ourKey : peerKey
        let diallerNonce = outbound ? ourNonce : peerNonce
        return [diallerKey == lowerKey ? 0 : 1] + diallerNonce
    }
}
