#if canImport(Glibc)
import Glibc
#endif
import Foundation
import YaokPluginKit

/// The TCP side of the group: accepts phones on the group owner's address, runs the kit's
/// kit's ``SecureLink`` as responder (phones must prove role endpoint), then moves sealed TLV records back to back.
///
/// One poll thread owns the listener and every session. State sits behind one lock; host
/// callbacks are collected under it and delivered after it is released, in order, so a link's
/// `linkUp` precedes its frames and the host may call ``send(_:to:)`` from a callback.
/// (The same design as the mesh plugin's engine; see the report for moving it into the kit.)
public final class LinkServer: @unchecked Sendable {
    public struct Settings: Sendable {
        public var host: String
        public var port: UInt16
        public var cost: Int
        public var maxSessions: Int
        public var handshakeTimeoutMs: Int64 = 10_000
        public var readTimeoutMs: Int64
        public var queueBytes: Int
        public var queueFrames: Int
        /// Records per second one phone may send after its handshake (0: no limit). Faster
        /// records wait (the socket is not read meanwhile, so TCP pushes back on the phone);
        /// the bucket holds one second's worth, so short bursts pass at once.
        public var maxFramesPerSecond: Int
        /// A phone held back by the limit for this long without a 1 s pause is disconnected.
        public var rateLimitDisconnectMs: Int64

        public init(host: String, port: UInt16, cost: Int = 5, maxSessions: Int = 32, readTimeoutMs: Int64 = 60_000,
                    queueFrames: Int = 1000, queueBytes: Int = 16 << 20, maxFramesPerSecond: Int = 0,
                    rateLimitDisconnectMs: Int64 = 5_000) {
            self.maxFramesPerSecond = maxFramesPerSecond
            self.rateLimitDisconnectMs = rateLimitDisconnectMs
            self.host = host
            self.port = port
            self.cost = cost
            self.maxSessions = maxSessions
            self.readTimeoutMs = readTimeoutMs
            self.queueFrames = queueFrames
            self.queueBytes = queueBytes
        }
    }

    /// Where the server reports; called on the poll thread, never under its lock.
    public struct Events: Sendable {
        public var linkUp: @Sendable (LinkInfo) -> Void = { _ in }
        public var linkDown: @Sendable (LinkID, String) -> Void = { _, _ in }
        public var frame: @Sendable ([UInt8], LinkID) -> Void = { _, _ in }
        public var log: @Sendable (String) -> Void = { _ in }
        /// Misbehaving phones (rate limit): worth an operator's attention.
        public var warning: @Sendable (String) -> Void = { _ in }
        public init() {}
    }

    public struct Counters: Sendable, Equatable {
        public var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        public var linksUpTotal: UInt64 = 0, handshakeFailures: UInt64 = 0, refusedRole: UInt64 = 0
        public var refusedFull: UInt64 = 0, readTimeouts: UInt64 = 0, queueFull: UInt64 = 0
        /// Times a phone's records were held back by `maxFramesPerSecond` (episodes, not records),
        /// and phones disconnected for staying over it.
        public var rateLimited: UInt64 = 0, rateLimitDisconnects: UInt64 = 0
    }

    /// Largest frame: a whole TLV record that still fits one sealed record.
    public static let mtu = SecureLink.maxFrameLength

    final class Session {
        let id: LinkID
        let fd: Int32
        let remote: String
        /// The kit's secure session (the phone initiates); every frame after it is sealed.
        let link: SecureLink
        var decoder = TLVStreamDecoder()
        var up = false
        var peerKey: [UInt8] = []
        var sinceMs: Int64
        var lastHeardMs: Int64
        var out: [[UInt8]] = []
        var outHead = 0
        var outBytes = 0
        var writeBuffer: [UInt8] = []
        var writeOffset = 0
        /// Rate limit: tokens (records) available, records decoded but held back, and when
        /// the current episode of holding back began / was last seen.
        var tokens: Double = 0
        var refilledMs: Int64 = 0
        var backlog: [[UInt8]] = []
        var backlogHead = 0
        var throttledSinceMs: Int64?
        var lastThrottledMs: Int64 = 0
        var hasBacklog: Bool { backlogHead < backlog.count }
        init(id: LinkID, fd: Int32, remote: String, link: SecureLink, nowMs: Int64) {
            self.id = id; self.fd = fd; self.remote = remote; self.link = link
            sinceMs = nowMs; lastHeardMs = nowMs
        }
        var hasPendingWrite: Bool { writeOffset < writeBuffer.count || outHead < out.count }
    }

    enum Event {
        case up(LinkInfo), down(LinkID, String), frame([UInt8], LinkID), log(String), warning(String)
    }

    public let settings: Settings
    private let identity: LinkIdentity
    public var events = Events()

    private let lock = NSLock()
    private var running = false
    private var listenFD: Int32 = -1
    private var wakeRead: Int32 = -1, wakeWrite: Int32 = -1
    private var sessions: [LinkID: Session] = [:]
    private var pending: [Event] = []
    private var nextID: LinkID
    private var counters = Counters()
    private var peersSeen = Set<[UInt8]>()
    private var boundPort: UInt16 = 0
    private var exited = DispatchSemaphore(value: 0)

    /// `firstLinkID` lets the transport keep link IDs unique across group re-formations.
    public init(identity: LinkIdentity, settings: Settings, firstLinkID: LinkID = 1) {
        self.identity = identity
        self.settings = settings
        self.nextID = firstLinkID
    }

    private var nowMs: Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    /// Binds the listener and starts the poll thread.
    public func start() throws {
        guard !lock.withLock({ running }) else { return }
        let (fd, port) = try TCPSockets.listen(host: settings.host, port: settings.port)
        var p: [Int32] = [0, 0]
        guard pipe(&p) == 0 else { close(fd); throw TransportError.system(call: "pipe", errno: errno) }
        for f in p { TCPSockets.setNonBlocking(f); _ = fcntl(f, F_SETFD, FD_CLOEXEC) }
        lock.withLock {
            listenFD = fd; boundPort = port; wakeRead = p[0]; wakeWrite = p[1]
            running = true
            exited = DispatchSemaphore(value: 0)
        }
        let t = Thread { [self] in run() }
        t.name = "yaok-wifidirect-tcp"
        t.start()
    }

    /// Closes every session (reporting links down) and the listener. Returns within about 1.5 s.
    public func stop(reason: String = "transport stopped") {
        let was: Bool = lock.withLock {
            let w = running
            running = false
            stopReason = reason
            return w
        }
        guard was else { return }
        wake()
        let done = lock.withLock { exited }
        _ = done.wait(timeout: .now() + 1.5)
    }
    private var stopReason = "transport stopped"

    /// The bound TCP port (useful with port 0).
    public var port: UInt16 { lock.withLock { boundPort } }
    public var isRunning: Bool { lock.withLock { running } }

    public var snapshot: (counters: Counters, links: Int, sessions: Int, peers: Int, remotes: [String]) {
        lock.withLock {
            let ups = sessions.values.filter(\.up)
            return (counters, ups.count, sessions.count, peersSeen.count, ups.map { "\(Hex.encode($0.peerKey.prefix(4)))@\($0.remote)" }.sorted())
        }
    }

    /// Queues one frame for a link; never blocks.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard frame.count <= Self.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: Self.mtu) }
        try lock.withLock {
            guard running else { throw TransportError.notRunning }
            guard let s = sessions[link], s.up else { throw TransportError.unknownLink(link) }
            guard s.out.count - s.outHead < settings.queueFrames, s.outBytes + frame.count <= settings.queueBytes else {
                counters.queueFull += 1
                throw TransportError.failed("outbound queue of link \(link) is full (\(s.out.count - s.outHead) frames, \(s.outBytes) bytes)")
            }
            let sealed = try s.link.seal(frame)
            s.out.append(sealed)
            s.outBytes += sealed.count
            counters.framesOut += 1
            counters.bytesOut += UInt64(frame.count)
        }
        wake()
    }

    private func wake() {
        let fd = lock.withLock { wakeWrite }
        guard fd >= 0 else { return }
        var b: UInt8 = 1
        _ = write(fd, &b, 1)
    }

    // MARK: Poll thread

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var timeoutMs: Int32 = 200
        while true {
            var pfds: [pollfd] = []
            var ids: [LinkID] = []
            let keep: Bool = lock.withLock {
                guard running else { return false }
                pfds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
                pfds.append(pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0))
                for s in sessions.values {
                    // A phone over its rate limit is not read until its held-back records are delivered.
                    let events = (s.hasBacklog ? 0 : Int16(POLLIN)) | (s.hasPendingWrite ? Int16(POLLOUT) : 0)
                    if events == 0 { continue }
                    pfds.append(pollfd(fd: s.fd, events: events, revents: 0))
                    ids.append(s.id)
                }
                if sessions.values.contains(where: \.hasBacklog) {
                    timeoutMs = Int32(max(1, min(200, 1000 / max(1, settings.maxFramesPerSecond))))
                } else {
                    timeoutMs = 200
                }
                return true
            }
            if !keep { break }
            _ = poll(&pfds, nfds_t(pfds.count), timeoutMs)
            lock.withLock {
                if pfds[0].revents != 0 {
                    var sink = [UInt8](repeating: 0, count: 256)
                    while read(wakeRead, &sink, sink.count) > 0 {}
                }
                if pfds[1].revents & Int16(POLLIN) != 0 { acceptAll() }
                for (i, id) in ids.enumerated() where pfds[i + 2].revents != 0 {
                    guard let s = sessions[id] else { continue }
                    if pfds[i + 2].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 && !s.hasBacklog { readFrom(s, &buffer) }
                }
                for s in Array(sessions.values) where s.hasBacklog { drain(s) }
                for s in Array(sessions.values) where s.hasPendingWrite { flush(s) }
                timers()
            }
            deliver()
        }
        lock.withLock {
            for s in Array(sessions.values) { closeSession(s, reason: stopReason, goodbye: true) }
            close(listenFD); close(wakeRead); close(wakeWrite)
            listenFD = -1; wakeRead = -1; wakeWrite = -1
        }
        deliver()
        lock.withLock { exited }.signal()
    }

    private func deliver() {
        let batch: [Event] = lock.withLock { defer { pending.removeAll() }; return pending }
        for e in batch {
            switch e {
            case .up(let info): events.linkUp(info)
            case .down(let id, let reason): events.linkDown(id, reason)
            case .frame(let f, let id): events.frame(f, id)
            case .log(let m): events.log(m)
            case .warning(let m): events.warning(m)
            }
        }
    }

    private func acceptAll() {
        while let (fd, remote) = TCPSockets.accept(listenFD) {
            guard sessions.count < settings.maxSessions else {
                counters.refusedFull += 1
                close(fd)
                pending.append(.log("refused \(remote): \(settings.maxSessions) sessions already open (max_sessions)"))
                continue
            }
            // The phone speaks first; until it does, a connection costs no signature and no bytes.
            let link = SecureLink(identity: identity, role: .hub, isInitiator: false, channel: .stream)
            let s = Session(id: nextID, fd: fd, remote: remote, link: link, nowMs: nowMs)
            nextID += 1
            sessions[s.id] = s
        }
    }

    private func readFrom(_ s: Session, _ buffer: inout [UInt8]) {
        let n = buffer.withUnsafeMutableBytes { recv(s.fd, $0.baseAddress, $0.count, 0) }
        if n == 0 { closeSession(s, reason: "\(s.remote) closed the connection", goodbye: false); return }
        if n < 0 {
            let e = errno
            if e == EAGAIN || e == EINTR { return }
            closeSession(s, reason: "read from \(s.remote) failed: \(TCPSockets.errorText(e))", goodbye: false)
            return
        }
        s.lastHeardMs = nowMs
        let frames: [[UInt8]]
        do { frames = try s.decoder.feed(buffer[0..<n]) } catch {
            closeSession(s, reason: "\(s.remote) sent a bad TLV stream: \(error)", goodbye: false)
            return
        }
        for f in frames {
            guard sessions[s.id] != nil else { return }
            if s.up && settings.maxFramesPerSecond > 0 { s.backlog.append(f) } else { handle(f, from: s) }
        }
        if s.hasBacklog { drain(s) }
    }

    /// Delivers held-back records as the phone's token bucket allows; a phone that stays over
    /// `maxFramesPerSecond` (no pause of 1 s) for `rateLimitDisconnectMs` is disconnected.
    private func drain(_ s: Session) {
        let now = nowMs
        let rate = Double(settings.maxFramesPerSecond)
        s.tokens = min(rate, s.tokens + Double(now - s.refilledMs) * rate / 1000)
        s.refilledMs = now
        while s.hasBacklog && s.tokens >= 1 && sessions[s.id] != nil {
            let f = s.backlog[s.backlogHead]
            s.backlog[s.backlogHead] = []
            s.backlogHead += 1
            s.tokens -= 1
            handle(f, from: s)
        }
        guard sessions[s.id] != nil else { return }
        guard s.hasBacklog else {
            s.backlog.removeAll(keepingCapacity: true)
            s.backlogHead = 0
            return
        }
        if s.throttledSinceMs == nil || now - s.lastThrottledMs > 1_000 {
            s.throttledSinceMs = now
            counters.rateLimited += 1
            pending.append(.warning("link \(s.id) from \(s.remote) rate-limited: more than \(settings.maxFramesPerSecond) records/s (max_frames_per_second)"))
        }
        s.lastThrottledMs = now
        if let since = s.throttledSinceMs, now - since >= settings.rateLimitDisconnectMs {
            counters.rateLimitDisconnects += 1
            let why = "\(s.remote) sent more than \(settings.maxFramesPerSecond) records/s for \(Double(settings.rateLimitDisconnectMs) / 1000) s (max_frames_per_second); disconnected"
            pending.append(.warning("link \(s.id): \(why)"))
            closeSession(s, reason: why, goodbye: true)
        }
    }

    private func handle(_ frame: [UInt8], from s: Session) {
        guard let record = try? TLVRecord(parsing: frame) else { return }
        let outputs: [SecureLink.Output]
        do {
            outputs = try s.link.receive(record)
        } catch {
            counters.handshakeFailures += 1
            closeSession(s, reason: s.up ? "\(s.remote) sent a frame not sealed for this session: \(error)" : "handshake with \(s.remote) failed: \(error)", goodbye: false)
            return
        }
        for out in outputs {
            switch out {
            case .send(let reply):
                // Before the handshake the server sends exactly one reply: nothing to bound beyond that.
                s.out.append(reply); s.outBytes += reply.count
            case .established(let peer):
                linkUp(s, peer)
            case .frame(let inner):
                switch FrameType(rawValue: inner[0]) {
                case .ping:
                    // Pongs share the link's queue bounds: a peer that pings faster than it reads gets none.
                    guard s.out.count - s.outHead < settings.queueFrames, let pong = try? s.link.seal(TLVRecord(.pong, value: []).encoded) else { continue }
                    s.out.append(pong); s.outBytes += pong.count
                case .pong, .linkIdentity:
                    break
                case .linkClose:
                    closeSession(s, reason: "\(s.remote) said goodbye", goodbye: false)
                default:
                    counters.framesIn += 1
                    counters.bytesIn += UInt64(inner.count)
                    pending.append(.frame(inner, s.id))
                }
            }
        }
    }

    private func linkUp(_ s: Session, _ peer: AuthenticatedPeer) {
        guard peer.role == .endpoint else {
            counters.refusedRole += 1
            closeSession(s, reason: "\(s.remote) proved role \(peer.role); Wi-Fi Direct links carry phones (role endpoint) only", goodbye: true)
            return
        }
        s.up = true
        s.tokens = Double(settings.maxFramesPerSecond)
        s.refilledMs = nowMs
        s.peerKey = peer.signingKey
        peersSeen.insert(peer.signingKey)
        counters.linksUpTotal += 1
        pending.append(.log("link \(s.id) up with endpoint \(Hex.encode(peer.signingKey.prefix(4))) at \(s.remote)"))
        pending.append(.up(LinkInfo(id: s.id, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey, peerRole: .endpoint,
                                    mtu: Self.mtu, cost: settings.cost, kind: "wifi-direct", remote: s.remote)))
    }

    private func flush(_ s: Session) {
        while sessions[s.id] != nil {
            if s.writeOffset >= s.writeBuffer.count {
                guard s.outHead < s.out.count else { break }
                var chunk: [UInt8] = []
                while s.outHead < s.out.count && chunk.count < 256 * 1024 {
                    chunk += s.out[s.outHead]
                    s.outBytes -= s.out[s.outHead].count
                    s.out[s.outHead] = []
                    s.outHead += 1
                }
                if s.outHead > 64 && s.outHead * 2 > s.out.count { s.out.removeFirst(s.outHead); s.outHead = 0 }
                s.writeBuffer = chunk
                s.writeOffset = 0
            }
            let n = s.writeBuffer.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress! + s.writeOffset, $0.count - s.writeOffset, Int32(MSG_NOSIGNAL)) }
            if n > 0 { s.writeOffset += n; continue }
            let e = errno
            if n < 0 && (e == EAGAIN || e == EINTR) { return }
            closeSession(s, reason: "write to \(s.remote) failed: \(TCPSockets.errorText(e))", goodbye: false)
            return
        }
    }

    private func timers() {
        let now = nowMs
        for s in Array(sessions.values) {
            if !s.up && now - s.sinceMs > settings.handshakeTimeoutMs {
                counters.handshakeFailures += 1
                closeSession(s, reason: "\(s.remote) did not complete the handshake within \(settings.handshakeTimeoutMs / 1000) s", goodbye: false)
            } else if s.up && now - s.lastHeardMs > settings.readTimeoutMs {
                counters.readTimeouts += 1
                closeSession(s, reason: "nothing heard from \(s.remote) for \(settings.readTimeoutMs / 1000) s (read_timeout_s)", goodbye: true)
            }
        }
    }

    private func closeSession(_ s: Session, reason: String, goodbye: Bool) {
        guard sessions.removeValue(forKey: s.id) != nil else { return }
        if goodbye && s.up && s.writeOffset >= s.writeBuffer.count, let bye = try? s.link.seal(TLVRecord(.linkClose, value: []).encoded) {
            _ = bye.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        shutdown(s.fd, Int32(SHUT_RDWR))
        close(s.fd)
        if s.up { pending.append(.down(s.id, reason)) }
        pending.append(.log(s.up ? "link \(s.id) down: \(reason)" : "session \(s.id) closed: \(reason)"))
    }
}
