import YaokPluginKit

/// One connected central: chunk reassembly, the kit's ``SecureLink`` (the hub responds),
/// and sealing and framing of outgoing frames. Pure logic (no sockets): the transport feeds it RX writes and sends what it returns.
/// Not thread-safe: the transport only touches it on the ATT poll thread.
package final class BLELinkSession {
    package enum State: Equatable { case connected, handshaking, up, closed }

    /// What the transport must do after an input.
    package struct Output {
        /// Frames to send to the central as TX notifications (each gets chunked).
        package var framesToSend: [[UInt8]] = []
        /// Frames to hand to the host (only once the link is up).
        package var framesReceived: [[UInt8]] = []
        /// Set when the handshake just completed.
        package var authenticated: AuthenticatedPeer?
        /// Set when the link must be dropped, with the reason.
        package var drop: String?
        /// Set when an authenticated link started a new handshake: the host must see the old
        /// link go down before the new proof brings it up again.
        package var restarted = false

        package init() {}
    }

    package let id: LinkID
    package var remote: String
    /// Monotonic nanoseconds when the central connected.
    package let connectedAt: UInt64
    package private(set) var state: State = .connected
    package private(set) var peer: AuthenticatedPeer?
    private var reassembler: ChunkReassembler
    private var link: SecureLink
    private let identity: LinkIdentity
    private let acceptedRoles: Set<PeerRole>

    package init(id: LinkID, remote: String, identity: LinkIdentity,
         reassemblyTimeoutNanoseconds: UInt64, connectedAt: UInt64 = 0,
         acceptedRoles: Set<PeerRole> = [.endpoint, .hub]) {
        self.id = id
        self.remote = remote
        self.connectedAt = connectedAt
        self.reassembler = ChunkReassembler(timeoutNanoseconds: reassemblyTimeoutNanoseconds)
        self.link = SecureLink(identity: identity, role: .hub, isInitiator: false, channel: .stream)
        self.identity = identity
        self.acceptedRoles = acceptedRoles
    }

    /// The central enabled TX notifications. The hub sends nothing of its own: the phone
    /// starts the handshake with its hello once its CCCD write is acknowledged, so a phone
    /// stack that ignores notifications until the subscription is confirmed never misses one.
    package func notificationsEnabled() -> Output {
        if state == .connected { state = .handshaking }
        return Output()
    }

    /// Seals a frame for the central (only once the link is up).
    package func seal(_ frame: [UInt8]) throws -> [UInt8] { try link.seal(frame) }

    /// One RX write (a chunk) at monotonic time `now`.
    package func received(chunk: [UInt8], now: UInt64) -> Output {
        var out = Output()
        guard state != .closed else { return out }
        let frame: [UInt8]
        do {
            guard let complete = try reassembler.add(chunk, now: now) else { return out }
            frame = complete
        } catch {
            out.drop = "bad chunk: \(error)"
            return out
        }
        guard let record = try? TLVRecord(parsing: frame) else {
            out.drop = "a frame that is not one TLV record"
            return out
        }
        if state == .up && record.type == FrameType.linkHello.rawValue {
            // ATT is a fixed channel: a phone that closed its socket and connects again within
            // the controller's disconnect timeout reuses this LE link, so its fresh hello
            // arrives here. Start over: the old session's keys die with it.
            link = SecureLink(identity: identity, role: .hub, isInitiator: false, channel: .stream)
            peer = nil
            state = .handshaking
            out.restarted = true
        }
        do {
            for output in try link.receive(record) {
                switch output {
                case .send(let reply):
                    out.framesToSend.append(reply)
                case .established(let peer):
                    guard acceptedRoles.contains(peer.role) else {
                        let allowed = acceptedRoles.map { "\($0)" }.sorted().joined(separator: " or ")
                        if let refusal = try? link.refuse(.role, "this BLE transport takes role \(allowed) only") { out.framesToSend.append(refusal) }
                        out.drop = "the central proved role \(peer.role), which this link does not accept"
                        return out
                    }
                    self.peer = peer
                    state = .up
                    out.authenticated = peer
                    if let accepted = try? link.accept() { out.framesToSend.append(accepted) }
                case .frame(let inner):
                    if inner[0] == FrameType.linkIdentity.rawValue { continue }
                    out.framesReceived.append(inner)
                case .refused(let why):
                    // The refusal went out as the output before this one.
                    out.drop = "handshake refused: \(why)"
                    return out
                }
            }
        } catch {
            // A peer of another link version is told which one we speak before the link is
            // dropped (Docs/protocol.md §5, Versions), so a phone app can say "update the app".
            if state != .up, let e = error as? SecureLinkError {
                switch e {
                case .retiredVersion, .unsupportedVersion: out.framesToSend.append(SecureLink.versionRecord())
                default: break
                }
            }
            out.drop = state == .up ? "a frame not sealed for this session: \(error)" : "handshake failed: \(error)"
        }
        return out
    }

    /// Drops the partly received frame (Control write 0x01); returns how many of its chunks had arrived.
    @discardableResult
    package func resetReassembly() -> Int {
        let chunks = reassembler.receivedChunkCount
        reassembler.reset()
        return chunks
    }

    /// Chunks of a frame received so far (0 between frames).
    package var partialFrameChunks: Int { reassembler.receivedChunkCount }

    /// Expires a stale partial frame; true if one was dropped.
    package func expire(now: UInt64) -> Bool { reassembler.expire(now: now) }

    package func close() { state = .closed }

    /// Why the link should be dropped at monotonic time `now`, if it should: a central that
    /// has not completed the handshake within `handshakeTimeout` holds a connection slot for nothing.
    package func overdue(now: UInt64, handshakeTimeoutNanoseconds: UInt64) -> String? {
        guard state == .connected || state == .handshaking, now >= connectedAt,
              now - connectedAt > handshakeTimeoutNanoseconds else { return nil }
        return "no completed link handshake within \(handshakeTimeoutNanoseconds / 1_000_000_000) s"
    }

    /// The chunk size at an ATT MTU: what one write or notification carries (MTU − 3), but
    /// never more than an attribute value may hold (512 bytes, Core Spec Vol 3 Part F 3.2.9).
    package static func chunkSize(attMTU: Int) -> Int {
        max(min(attMTU - 3, 512), Chunker.headerLength + 1)
    }

    /// Splits a frame into chunks for notifications at the current ATT MTU.
    package static func chunks(of frame: [UInt8], attMTU: Int) throws -> [[UInt8]] {
        try Chunker.split(frame, chunkSize: chunkSize(attMTU: attMTU))
    }
}
