#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import YaokPluginKit

/// The mesh transport's machinery: one poll thread that owns the TCP listener, every
/// session, the beacon socket and the timers.
///
/// All state is guarded by one lock; host callbacks (link up/down, frames, logs, metrics)
/// are collected while it is held and delivered after it is released, in order, from the
/// poll thread. ``send(_:to:)`` only queues and wakes the thread, so it never blocks.
public final class MeshEngine: @unchecked Sendable {
    /// Log levels the engine uses.
    public enum LogLevel: Sendable { case debug, info, notice, warning }

    /// Where the engine reports. Called on the poll thread, never under the engine's lock.
    public struct Events: Sendable {
        public var linkUp: @Sendable (LinkInfo) -> Void
        public var linkDown: @Sendable (LinkID, String) -> Void
        public var frame: @Sendable ([UInt8], LinkID) -> Void
        public var log: @Sendable (LogLevel, String) -> Void
        public var counter: @Sendable (String, Double) -> Void
        public var gauge: @Sendable (String, Double) -> Void
        public var statusChanged: @Sendable () -> Void

        public init(linkUp: @escaping @Sendable (LinkInfo) -> Void = { _ in },
                    linkDown: @escaping @Sendable (LinkID, String) -> Void = { _, _ in },
                    frame: @escaping @Sendable ([UInt8], LinkID) -> Void = { _, _ in },
                    log: @escaping @Sendable (LogLevel, String) -> Void = { _, _ in },
                    counter: @escaping @Sendable (String, Double) -> Void = { _, _ in },
                    gauge: @escaping @Sendable (String, Double) -> Void = { _, _ in },
                    statusChanged: @escaping @Sendable () -> Void = {}) {
            self.linkUp = linkUp
            self.linkDown = linkDown
            self.frame = frame
            self.log = log
            self.counter = counter
            self.gauge = gauge
            self.statusChanged = statusChanged
        }
    }

    /// Counters shown in status.
    public struct Counters: Sendable, Equatable {
        public var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        public var bundlesIn: UInt64 = 0, bundlesOut: UInt64 = 0
        public var beaconsSent: UInt64 = 0, beaconsReceived: UInt64 = 0, beaconsBad: UInt64 = 0
        public var beaconsStale: UInt64 = 0, beaconsMalformed: UInt64 = 0, beaconsDropped: UInt64 = 0, beaconSendErrors: UInt64 = 0
        public var linksUp: UInt64 = 0, connectFailures: UInt64 = 0, handshakeFailures: UInt64 = 0
        public var refusedRole: UInt64 = 0, refusedFull: UInt64 = 0, duplicatesClosed: UInt64 = 0
        public var droppedBeforeHandshake: UInt64 = 0, misbehaviourDisconnects: UInt64 = 0
        public var throttled: UInt64 = 0, queueFull: UInt64 = 0
    }

    /// A status snapshot.
    public struct Snapshot: Sendable {
        public var running: Bool
        public var listen: String
        public var interfaces: [String]
        public var missingInterfaces: [String]
        /// The IPv6 listener's address, when it is open.
        public var listen6: String?
        /// Why IPv6 (listener or beacons) is not available, when `ipv6` is on.
        public var ipv6Problem: String?
        public var beaconProblem: String?
        public var sessions: Int
        public var neighbours: [String]
        public var peersSeen: Int
        public var counters: Counters
        public var lastError: String?
        /// Bundle frames per neighbour key prefix: (received, sent).
        public var bundlesByPeer: [String: (UInt64, UInt64)]
    }

    /// What makes the engine dial: a configured address, or a hub heard by beacon.
    enum TargetKey: Hashable {
        case configured(MeshAddress)
        case discovered([UInt8])
    }

    struct DialTarget {
        var address: MeshAddress
        /// The key the beacon announced (discovered targets).
        var expectedKey: [UInt8]?
        /// The key the last handshake proved (configured targets).
        var learnedKey: [UInt8]?
        var sessionID: LinkID?
        var backoff = Backoff()
        var nextAttemptMs: Int64
        /// A configured address that turned out to be this hub: never dialled again.
        var isSelf = false
        var lastBeaconMs: Int64 = 0
        /// When a beacon last came from ``address`` (a hub heard several ways moves only when it goes quiet).
        var addressHeardMs: Int64 = 0
        var lastBeaconTimestamp: Int64 = .min
    }

    enum Event {
        case up(LinkInfo)
        case down(LinkID, String)
        case frame([UInt8], LinkID)
        case log(LogLevel, String)
        case counter(String, Double)
        case gauge(String, Double)
        case statusChanged
    }

    /// Largest frame: a whole TLV record.
    public static let mtu = SecureLink.maxFrameLength
    /// Inbound sessions one IP address may hold at once.
    static let maxInboundPerHost = 4

    public let settings: MeshSettings
    private let identity: LinkIdentity
    private let wallClockMs: @Sendable () -> Int64
    private let monotonicNs: @Sendable () -> UInt64
    /// Where reports go; set before ``start()``.
    public var events = Events()

    private let lock = NSLock()
    private var running = false
    private var thread: Thread?
    private var threadAlive = false
    private var exited = DispatchSemaphore(value: 0)
    private var listenFD: Int32 = -1
    private var beaconFD: Int32 = -1
    /// The IPv6 listener and beacon socket (-1 when `ipv6` is off or they could not be opened).
    private var listenFD6: Int32 = -1
    private var beaconFD6: Int32 = -1
    private var ipv6Problem: String?
    private var wakeRead: Int32 = -1
    private var wakeWrite: Int32 = -1
    private var wakePending = false
    private var boundListen: MeshAddress?
    private var boundListen6: MeshAddress?
    private var sessions: [LinkID: MeshSession] = [:]
    private var upByKey: [[UInt8]: LinkID] = [:]
    private var targets: [TargetKey: DialTarget] = [:]
    private var nextLinkID: LinkID = 1
    private var counters = Counters()
    private var pending: [Event] = []
    private var peersSeen = Set<[UInt8]>()
    private var bundlesByPeer: [String: (UInt64, UInt64)] = [:]
    private var lastError: String?
    private var joined: [String: NetworkInterface] = [:]
    /// Interfaces whose IPv6 group we joined (by name; the index and link-local address as joined).
    private var joined6: [String: NetworkInterface] = [:]
    private var missingInterfaces: [String] = []
    private var beaconProblem: String?
    private var nextBeaconMs: Int64 = 0
    private var nextInterfaceScanMs: Int64 = 0
    private var lastSecondMs: Int64 = 0
    private var beaconVerifyBudget = RateLimiter(perSecond: 200, nowNs: 0)

    public init(identity: LinkIdentity, settings: MeshSettings,
                wallClockMs: @escaping @Sendable () -> Int64,
                monotonicNs: @escaping @Sendable () -> UInt64) {
        self.identity = identity
        self.settings = settings
        self.wallClockMs = wallClockMs
        self.monotonicNs = monotonicNs
    }

    private var nowMs: Int64 { Int64(monotonicNs() / 1_000_000) }

    // MARK: Lifecycle

    /// Binds the listener (throws when it cannot), opens the beacon socket (a failure there
    /// only degrades), and starts the poll thread.
    public func start() throws {
        let (isRunning, oldThreadAlive) = lock.withLock { (self.running, self.threadAlive) }
        if isRunning { return }
        // A previous poll thread that has not finished cleaning up yet: give it a moment.
        if oldThreadAlive { _ = exited.wait(timeout: .now() + 2) }
        let listener = try Sockets.listen(on: settings.listen)
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            Glibc.close(listener)
            throw TransportError.system(call: "pipe", errno: errno)
        }
        Sockets.setNonBlocking(fds[0])
        Sockets.setNonBlocking(fds[1])
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        var beacon: Int32 = -1
        var problem: String?
        if settings.discovery {
            do { beacon = try Sockets.beaconSocket(port: settings.beaconPort) } catch { problem = "\(error)" }
        }
        // IPv6 is an addition: without it (no IPv6 in the kernel, port taken) IPv4 still works.
        var listener6: Int32 = -1
        var beacon6: Int32 = -1
        var problems6: [String] = []
        if settings.ipv6 {
            let port = Sockets.localAddress(listener)?.port ?? settings.listen.port
            do { listener6 = try Sockets.listen(on: MeshAddress(host: "::", port: port)) } catch { problems6.append("\(error)") }
            if settings.discovery {
                do { beacon6 = try Sockets.beaconSocket6(port: settings.beaconPort) } catch { problems6.append("\(error)") }
            }
        }
        let now = nowMs
        lock.withLock {
            listenFD = listener
            beaconFD = beacon
            beaconProblem = problem
            listenFD6 = listener6
            beaconFD6 = beacon6
            boundListen6 = listener6 >= 0 ? Sockets.localAddress(listener6) : nil
            ipv6Problem = problems6.isEmpty ? nil : problems6.joined(separator: "; ")
            if let p = ipv6Problem { pending.append(.log(.warning, "IPv6 unavailable: \(p)")) }
            wakeRead = fds[0]
            wakeWrite = fds[1]
            wakePending = false
            boundListen = Sockets.localAddress(listener)
            running = true
            exited = DispatchSemaphore(value: 0)
            threadAlive = true
            targets = [:]
            for peer in settings.peers {
                targets[.configured(peer)] = DialTarget(address: peer, nextAttemptMs: now)
            }
            nextBeaconMs = now
            nextInterfaceScanMs = now
            lastSecondMs = now
            beaconVerifyBudget = RateLimiter(perSecond: 200, nowNs: monotonicNs())
            if let problem { pending.append(.log(.warning, "discovery is off: \(problem)")) }
        }
        let thread = Thread { [weak self] in self?.run() }
        thread.name = "yaok-mesh"
        lock.withLock { self.thread = thread }
        thread.start()
    }

    /// Stops the poll thread: says goodbye on every link, reports each down, closes every socket.
    /// Returns within about 1.5 s.
    public func stop() {
        let wasRunning: Bool = lock.withLock {
            let was = running
            running = false
            return was
        }
        guard wasRunning else { return }
        wake()
        let done = lock.withLock { exited }
        if done.wait(timeout: .now() + 1.5) == .success { done.signal() }
    }

    /// The bound listener address (useful with port 0).
    public var listenAddress: MeshAddress? { lock.withLock { boundListen } }

    // MARK: Sending

    /// Queues one frame for a link; throws when the link is not up or its queue is full. Never blocks.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard frame.count <= Self.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: Self.mtu) }
        let needWake: Bool = try lock.withLock {
            guard running else { throw TransportError.notRunning }
            guard let s = sessions[link], s.state == .up else { throw TransportError.unknownLink(link) }
            guard let sealed = try? s.link.seal(frame), s.queue.push(sealed) else {
                counters.queueFull += 1
                throw TransportError.failed("outbound queue of link \(link) is full (\(s.queue.count) frames, \(s.queue.byteCount) bytes; limits \(settings.queueFrames) frames, \(settings.queueBytes >> 20) MB)")
            }
            counters.framesOut += 1
            counters.bytesOut += UInt64(frame.count)
            if frame.first == FrameType.bundle.rawValue, let key = s.peerKey {
                counters.bundlesOut += 1
                bundlesByPeer[Self.shortKey(key), default: (0, 0)].1 += 1
            }
            let need = !wakePending
            wakePending = true
            return need
        }
        if needWake { wake() }
    }

    private func wake() {
        let fd = lock.withLock { wakeWrite }
        guard fd >= 0 else { return }
        var b: UInt8 = 1
        _ = write(fd, &b, 1)
    }

    // MARK: Status

    public var snapshot: Snapshot {
        lock.withLock {
            let neighbours = upByKey.compactMap { key, id -> String? in
                guard let s = sessions[id] else { return nil }
                return "\(Self.shortKey(key))@\(s.remote)"
            }.sorted()
            let names = Set(joined.keys).union(joined6.keys).sorted()
            let interfaces = names.map { name in
                "\(name)(\([joined[name]?.ipv4, joined6[name]?.linkLocal6].compactMap { $0 }.joined(separator: ","))"
            }
            return Snapshot(running: running, listen: (boundListen ?? settings.listen).description,
                            interfaces: interfaces,
                            missingInterfaces: missingInterfaces, listen6: boundListen6?.description, ipv6Problem: ipv6Problem,
                            beaconProblem: beaconProblem,
                            sessions: sessions.count, neighbours: neighbours, peersSeen: peersSeen.count,
                            counters: counters, lastError: lastError, bundlesByPeer: bundlesByPeer)
        }
    }

    /// The first 4 bytes of a key in hex: enough for an operator to tell hubs apart.
    static func shortKey(_ key: [UInt8]) -> String { Hex.encode(key.prefix(4)) }

    // MARK: The poll thread

    private func run() {
        var readBuffer = [UInt8](repeating: 0, count: 65_536)
        var datagram = [UInt8](repeating: 0, count: 2_048)
        while true {
            // Build the poll set under the lock.
            var pfds: [pollfd] = []
            var owners: [LinkID] = []
            let keepGoing: Bool = lock.withLock {
                guard running else { return false }
                let nowNs = monotonicNs()
                pfds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
                pfds.append(pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0))
                pfds.append(pollfd(fd: beaconFD, events: Int16(POLLIN), revents: 0))
                pfds.append(pollfd(fd: listenFD6, events: Int16(POLLIN), revents: 0))
                pfds.append(pollfd(fd: beaconFD6, events: Int16(POLLIN), revents: 0))
                for s in sessions.values {
                    var ev: Int32 = 0
                    if s.state == .connecting {
                        ev = Int32(POLLOUT)
                    } else {
                        // Read more only when the last read is handled and the peer has frame budget.
                        if !s.hasBacklog && (s.state != .up || s.limiter.hasTokens(nowNs: nowNs)) {
                            ev |= Int32(POLLIN)
                        } else {
                            noteThrottled(s)
                        }
                        if s.hasPendingWrite { ev |= Int32(POLLOUT) }
                    }
                    pfds.append(pollfd(fd: s.fd, events: Int16(ev), revents: 0))
                    owners.append(s.id)
                }
                return true
            }
            if !keepGoing { break }
            _ = poll(&pfds, nfds_t(pfds.count), 100)

            lock.withLock {
                if pfds[0].revents != 0 {
                    var sink = [UInt8](repeating: 0, count: 64)
                    while read(wakeRead, &sink, sink.count) > 0 {}
                    wakePending = false
                }
                if pfds[1].revents & Int16(POLLIN) != 0 { acceptConnections(listenFD) }
                if beaconFD >= 0 && pfds[2].revents & Int16(POLLIN) != 0 { receiveBeacons(beaconFD, &datagram) }
                if listenFD6 >= 0 && pfds[3].revents & Int16(POLLIN) != 0 { acceptConnections(listenFD6) }
                if beaconFD6 >= 0 && pfds[4].revents & Int16(POLLIN) != 0 { receiveBeacons(beaconFD6, &datagram) }
                for s in Array(sessions.values) where s.hasBacklog { drainBacklog(s) }
                for (i, id) in owners.enumerated() {
                    let revents = pfds[i + Self.fixedPollEntries].revents
                    guard revents != 0, let s = sessions[id] else { continue }
                    service(s, revents: revents, buffer: &readBuffer)
                }
                for s in Array(sessions.values) where s.state != .connecting && s.hasPendingWrite { flush(s) }
                tick()
            }
            deliverPending()
        }
        shutdownAll()
        deliverPending()
        let done = lock.withLock {
            threadAlive = false
            return exited
        }
        done.signal()
    }

    /// Poll entries before the sessions': wake pipe, listener, beacon socket, IPv6 listener, IPv6 beacon socket.
    private static let fixedPollEntries = 5

    private func deliverPending() {
        let events = self.events
        let batch: [Event] = lock.withLock {
            let b = pending
            pending.removeAll(keepingCapacity: true)
            return b
        }
        for e in batch {
            switch e {
            case .up(let info): events.linkUp(info)
            case .down(let id, let reason): events.linkDown(id, reason)
            case .frame(let frame, let id): events.frame(frame, id)
            case .log(let level, let message): events.log(level, message)
            case .counter(let name, let value): events.counter(name, value)
            case .gauge(let name, let value): events.gauge(name, value)
            case .statusChanged: events.statusChanged()
            }
        }
    }

    private func shutdownAll() {
        lock.withLock {
            for s in sessions.values {
                if s.state == .up {
                    if !s.isMidFrame, let goodbye = try? s.link.seal(TLVRecord(.linkClose, value: []).encoded) { _ = goodbye.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
                    pending.append(.down(s.id, "transport stopped"))
                }
                shutdown(s.fd, Int32(SHUT_RDWR))
                Glibc.close(s.fd)
            }
            sessions.removeAll()
            upByKey.removeAll()
            for fd in [listenFD, beaconFD, listenFD6, beaconFD6, wakeRead, wakeWrite] where fd >= 0 { Glibc.close(fd) }
            listenFD = -1
            beaconFD = -1
            listenFD6 = -1
            beaconFD6 = -1
            joined6.removeAll()
            wakeRead = -1
            wakeWrite = -1
            joined.removeAll()
            pending.append(.gauge("mesh_links", 0))
            pending.append(.statusChanged)
        }
    }

    // MARK: Sessions (all under the lock)

    private func newSession(fd: Int32, outbound: Bool, remote: MeshAddress, target: TargetKey?, state: MeshSession.State) -> MeshSession {
        let id = nextLinkID
        nextLinkID += 1
        let s = MeshSession(
            id: id, fd: fd, outbound: outbound, remote: remote, target: target, state: state,
            link: SecureLink(identity: identity, role: .hub, isInitiator: outbound, channel: .stream),
            queue: OutboundQueue(maxFrames: settings.queueFrames, maxBytes: settings.queueBytes),
            limiter: RateLimiter(perSecond: settings.maxFramesPerSecond, nowNs: monotonicNs()), nowMs: nowMs)
        sessions[id] = s
        return s
    }

    private func beginHandshake(_ s: MeshSession) {
        s.state = .handshaking
        s.stateSinceMs = nowMs
        // The dialler speaks first; the accepting side only answers (a connection costs it no signature).
        guard s.outbound else { return }
        do {
            s.queueControl(try s.link.hello())
        } catch {
            close(s, reason: "cannot start the handshake with \(s.remote): \(error)", level: .warning, goodbye: false)
            return
        }
        flush(s)
    }

    private func acceptConnections(_ listener: Int32) {
        for _ in 0..<32 {
            guard let (fd, remote) = Sockets.accept(listener) else { return }
            // Slots are kept for configured peers we have no session with (we dial them whatever
            // the count), and one address may hold only a few inbound sessions: throwaway keys
            // from one machine cannot fill the table.
            let reserved = targets.filter { if case .configured = $0.key { return $0.value.sessionID == nil && !$0.value.isSelf }; return false }.count
            let fromSameHost = sessions.values.filter { !$0.outbound && $0.remote.host == remote.host }.count
            guard sessions.count + reserved < settings.maxSessions, fromSameHost < Self.maxInboundPerHost else {
                counters.refusedFull += 1
                // Warn on the 1st, 2nd, 4th, 8th... refusal: a connection flood must not flood the log.
                if counters.refusedFull & (counters.refusedFull - 1) == 0 {
                    let why = fromSameHost >= Self.maxInboundPerHost
                        ? "\(fromSameHost) sessions from that address is the limit"
                        : "\(sessions.count) sessions and \(reserved) kept for configured peers is the limit (max_sessions)"
                    pending.append(.log(.warning, "refused a connection from \(remote): \(why); \(counters.refusedFull) refused so far"))
                }
                Glibc.close(fd)
                continue
            }
            let s = newSession(fd: fd, outbound: false, remote: remote, target: nil, state: .handshaking)
            pending.append(.log(.debug, "accepted a connection from \(remote) (session \(s.id))"))
            beginHandshake(s)
        }
    }

    private func dial(_ key: TargetKey) {
        guard var t = targets[key] else { return }
        do {
            let fd = try Sockets.startConnect(to: t.address)
            let s = newSession(fd: fd, outbound: true, remote: t.address, target: key, state: .connecting)
            t.sessionID = s.id
            pending.append(.log(.debug, "dialling \(t.address) (session \(s.id))"))
        } catch {
            counters.connectFailures += 1
            lastError = "\(error)"
            t.nextAttemptMs = nowMs + t.backoff.nextDelayMs()
        }
        targets[key] = t
    }

    private func service(_ s: MeshSession, revents: Int16, buffer: inout [UInt8]) {
        if s.state == .connecting {
            let e = Sockets.pendingError(s.fd)
            if e != 0 || revents & Int16(POLLERR | POLLHUP) != 0 {
                counters.connectFailures += 1
                close(s, reason: "connect to \(s.remote) failed: \(Sockets.errorText(e == 0 ? ECONNREFUSED : e))", level: .debug)
                return
            }
            beginHandshake(s)
            return
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
            let n = buffer.withUnsafeMutableBytes { read(s.fd, $0.baseAddress, $0.count) }
            if n == 0 {
                close(s, reason: "\(s.remote) closed the connection", level: .info)
                return
            }
            if n < 0 {
                let e = errno
                if e == EAGAIN || e == EWOULDBLOCK || e == EINTR { return }
                close(s, reason: "read from \(s.remote) failed: \(Sockets.errorText(e))", level: .info)
                return
            }
            s.lastHeardMs = nowMs
            let frames: [[UInt8]]
            do {
                frames = try s.decoder.feed(buffer[0..<n])
            } catch {
                misbehaved(s, "sent a bad TLV stream: \(error)")
                return
            }
            s.backlog = frames
            s.backlogHead = 0
            drainBacklog(s)
        }
        if sessions[s.id] != nil && revents & Int16(POLLOUT) != 0 { flush(s) }
    }

    private func noteThrottled(_ s: MeshSession) {
        guard s.state == .up, !s.throttledThisSecond else { return }
        s.throttledThisSecond = true
        counters.throttled += 1
    }

    /// Handles read frames while the peer has frame budget; the rest wait for the budget to refill.
    private func drainBacklog(_ s: MeshSession) {
        let nowNs = monotonicNs()
        while s.hasBacklog && sessions[s.id] != nil {
            if s.state == .up && !s.limiter.hasTokens(nowNs: nowNs) {
                noteThrottled(s)
                return
            }
            let frame = s.backlog[s.backlogHead]
            s.backlogHead += 1
            handle(frame, on: s)
        }
        if !s.hasBacklog {
            s.backlog = []
            s.backlogHead = 0
        }
    }

    private func handle(_ frame: [UInt8], on s: MeshSession) {
        guard let record = try? TLVRecord(parsing: frame) else { return }
        if s.state == .up {
            s.limiter.spend(1)
            let inner: [UInt8]
            do {
                guard case .frame(let f)? = try s.link.receive(record).first else { return }
                inner = f
            } catch {
                // Anything not sealed with this session's key (in clear, forged, replayed) ends a stream.
                counters.droppedBeforeHandshake += 1
                misbehaved(s, "sent a frame that is not sealed for this session: \(error)")
                return
            }
            switch FrameType(rawValue: inner[0]) {
            case .ping:
                s.queueSealedControl(TLVRecord(.pong, value: Array(inner.dropFirst(TLVRecord.headerLength))).encoded)
            case .pong, .linkIdentity:
                break
            case .linkClose:
                close(s, reason: "\(s.remote) closed the link", level: .info, goodbye: false)
            default:
                counters.framesIn += 1
                counters.bytesIn += UInt64(inner.count)
                if inner[0] == FrameType.bundle.rawValue, let key = s.peerKey {
                    counters.bundlesIn += 1
                    bundlesByPeer[Self.shortKey(key), default: (0, 0)].0 += 1
                }
                pending.append(.frame(inner, s.id))
            }
            return
        }
        do {
            for out in try s.link.receive(record) {
                switch out {
                case .send(let reply): s.queueControl(reply)
                case .established(let peer): handshakeCompleted(s, peer)
                case .frame: break
                }
            }
            flush(s)
        } catch {
            counters.handshakeFailures += 1
            close(s, reason: "handshake with \(s.remote) failed: \(error)", level: .warning, goodbye: false)
        }
    }

    private func handshakeCompleted(_ s: MeshSession, _ peer: AuthenticatedPeer) {
        guard sessions[s.id] != nil else { return }
        let key = peer.signingKey
        if key == identity.signingKey {
            // Dialled ourselves: find the outbound half (its local address is this session's remote)
            // and mark its configured address so it is not dialled again.
            let outbound = s.outbound ? [s] : sessions.values.filter { $0.outbound && Sockets.localAddress($0.fd) == s.remote }
            for o in outbound {
                if let t = o.target, case .configured = t { targets[t]?.isSelf = true }
                if o !== s { close(o, reason: "\(o.remote) is this hub itself; not dialling it again", level: .notice, goodbye: false) }
            }
            close(s, reason: "\(s.remote) is this hub itself; not dialling it again", level: .notice, goodbye: false)
            return
        }
        guard peer.role == .hub else {
            counters.refusedRole += 1
            close(s, reason: "\(s.remote) proved the role \(peer.role); the mesh transport links hubs only", level: .warning)
            return
        }
        if let t = s.target {
            switch t {
            case .discovered(let expected) where expected != key:
                counters.handshakeFailures += 1
                close(s, reason: "\(s.remote) proved key \(Self.shortKey(key)) but its beacon announced \(Self.shortKey(expected))", level: .warning)
                return
            case .configured:
                targets[t]?.learnedKey = key
            default:
                break
            }
        }
        if let existingID = upByKey[key], let existing = sessions[existingID] {
            counters.duplicatesClosed += 1
            // Both sessions are authenticated by the same key, so only that hub can have made them.
            // A silent existing link is presumed dead (the peer restarted without a goodbye). Between
            // two live ones both hubs keep the one dialled by the lower key; two dialled by the same
            // hub mean it redialled, so the newer one is kept.
            let existingSilent = nowMs - existing.lastHeardMs > 2 * settings.keepaliveMs
            let (newRank, oldRank) = (s.rank(ourKey: identity.signingKey), existing.rank(ourKey: identity.signingKey))
            if existingSilent {
                close(existing, reason: "replaced by session \(s.id): nothing heard on it for \(nowMs - existing.lastHeardMs) ms", level: .info)
            } else if newRank <= oldRank {
                close(existing, reason: "replaced by session \(s.id) with the same hub (duplicate-session tie-break)", level: .info)
            } else {
                close(s, reason: "duplicate session with hub \(Self.shortKey(key)); keeping link \(existing.id)", level: .debug)
                return
            }
        }
        s.state = .up
        s.stateSinceMs = nowMs
        upByKey[key] = s.id
        peersSeen.insert(key)
        if let t = s.target { targets[t]?.backoff.reset() }
        counters.linksUp += 1
        pending.append(.log(.info, "link \(s.id) up with hub \(Self.shortKey(key)) at \(s.remote) (\(s.outbound ? "dialled" : "accepted"))"))
        pending.append(.up(LinkInfo(id: s.id, peerSigningKey: key, peerKXKey: peer.kxKey, peerRole: .hub,
                                    mtu: Self.mtu, cost: settings.cost, kind: "tcp", remote: s.remote.description)))
        pending.append(.counter("mesh_links_up_total", 1))
        pending.append(.gauge("mesh_links", Double(upByKey.count)))
        pending.append(.statusChanged)
    }

    private func misbehaved(_ s: MeshSession, _ what: String) {
        counters.misbehaviourDisconnects += 1
        pending.append(.counter("mesh_misbehaviour_disconnects_total", 1))
        let who = s.peerKey.map { "hub \(Self.shortKey($0)) at \(s.remote)" } ?? "\(s.remote)"
        close(s, reason: "disconnected \(who): it \(what)", level: .warning, misbehaving: true)
    }

    /// Closes a session: goodbye frame when possible, link down if it was up, redial scheduling.
    private func close(_ s: MeshSession, reason: String, level: LogLevel, goodbye: Bool = true, misbehaving: Bool = false) {
        guard sessions.removeValue(forKey: s.id) != nil else { return }
        let wasUp = s.state == .up
        if goodbye && s.state == .up && !s.isMidFrame, let bye = try? s.link.seal(TLVRecord(.linkClose, value: []).encoded) {
            _ = bye.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        shutdown(s.fd, Int32(SHUT_RDWR))
        Glibc.close(s.fd)
        if wasUp, let key = s.peerKey, upByKey[key] == s.id {
            upByKey[key] = nil
            pending.append(.down(s.id, reason))
            pending.append(.gauge("mesh_links", Double(upByKey.count)))
            pending.append(.statusChanged)
        }
        pending.append(.log(level, wasUp ? "link \(s.id) down: \(reason)" : "session \(s.id) closed: \(reason)"))
        if misbehaving || level == .warning { lastError = reason }
        if let t = s.target, var target = targets[t], target.sessionID == s.id {
            target.sessionID = nil
            if wasUp {
                // A link that worked: try again soon.
                target.backoff.reset()
                target.nextAttemptMs = nowMs + 1_000
            } else {
                target.nextAttemptMs = nowMs + target.backoff.nextDelayMs() * (misbehaving ? 10 : 1)
            }
            targets[t] = target
        }
    }

    private func flush(_ s: MeshSession) {
        while sessions[s.id] != nil {
            if s.writeOffset >= s.writeBuffer.count {
                s.writeBuffer = s.queue.pop(upTo: 256 * 1024)
                s.writeOffset = 0
                if s.writeBuffer.isEmpty { return }
            }
            let n = s.writeBuffer.withUnsafeBytes { buf in
                Glibc.send(s.fd, buf.baseAddress! + s.writeOffset, buf.count - s.writeOffset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                s.writeOffset += n
                s.lastSentMs = nowMs
                continue
            }
            let e = errno
            if n < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) { return }
            close(s, reason: "write to \(s.remote) failed: \(Sockets.errorText(e))", level: .info, goodbye: false)
            return
        }
    }

    // MARK: Timers (under the lock)

    private func tick() {
        let now = nowMs
        for s in Array(sessions.values) {
            switch s.state {
            case .connecting where now - s.stateSinceMs > settings.connectTimeoutMs:
                counters.connectFailures += 1
                close(s, reason: "connect to \(s.remote) timed out after \(settings.connectTimeoutMs / 1000) s", level: .debug)
            case .handshaking where now - s.stateSinceMs > settings.handshakeTimeoutMs:
                counters.handshakeFailures += 1
                close(s, reason: "\(s.remote) did not complete the handshake within \(settings.handshakeTimeoutMs / 1000) s", level: .info)
            case .up:
                if now - s.lastHeardMs > settings.idleTimeoutMs {
                    close(s, reason: "nothing heard from \(s.remote) for \(now - s.lastHeardMs) ms (idle_timeout_s)", level: .info)
                } else if now - s.lastHeardMs >= settings.keepaliveMs && now - s.lastPingMs >= settings.keepaliveMs {
                    // Pinged on what we *hear*, not what we send: a link carrying traffic one way only
                    // must still hear pongs, or the sending side would time it out.
                    s.queueSealedControl(TLVRecord(.ping, value: []).encoded)
                    s.lastPingMs = now
                    flush(s)
                }
            default:
                break
            }
        }
        if now - lastSecondMs >= 1_000 {
            lastSecondMs = now
            for s in Array(sessions.values) where s.state == .up {
                s.throttledSeconds = s.throttledThisSecond ? s.throttledSeconds + 1 : 0
                s.throttledThisSecond = false
                if s.throttledSeconds >= 5 {
                    misbehaved(s, "sent more than \(settings.maxFramesPerSecond) frames/s for \(s.throttledSeconds) s")
                }
            }
        }
        if settings.discovery && (beaconFD >= 0 || beaconFD6 >= 0) {
            if now >= nextInterfaceScanMs {
                nextInterfaceScanMs = now + 5_000
                refreshInterfaces()
            }
            if now >= nextBeaconMs {
                nextBeaconMs = now + settings.beaconIntervalMs * Int64.random(in: 90...110) / 100
                sendBeacons()
            }
            expireDiscovered(now)
        }
        dialDue(now)
    }

    private func dialDue(_ now: Int64) {
        for (key, t) in targets where t.sessionID == nil && !t.isSelf && now >= t.nextAttemptMs {
            if let k = t.expectedKey ?? t.learnedKey, upByKey[k] != nil {
                targets[key]?.nextAttemptMs = now + 1_000
                continue
            }
            // Configured peers are always dialled (their slots are kept); discovered ones only with room.
            if case .discovered = key, sessions.count >= settings.maxSessions { continue }
            dial(key)
        }
    }

    // MARK: Discovery (under the lock)

    private func refreshInterfaces() {
        let useIPv6 = settings.ipv6 && beaconFD6 >= 0
        let (usable, missing) = NetworkInterface.select(named: settings.interfaces, from: NetworkInterface.current(), ipv6: useIPv6)
        var problems = missing
        // IPv4: one membership per interface address.
        let wanted4 = Dictionary(usable.compactMap { i in i.ipv4.map { _ in (i.name, i) } }, uniquingKeysWith: { a, _ in a })
        if beaconFD >= 0 {
            for (name, old) in joined where wanted4[name]?.ipv4 != old.ipv4 {
                if let address = old.ipv4 {
                    _ = Sockets.membership(beaconFD, group: settings.multicastGroup, interfaceAddress: address, join: false)
                }
                joined[name] = nil
                if wanted4[name] == nil { pending.append(.log(.notice, "stopped IPv4 beacons on \(name): interface is down, gone or has no IPv4 address")) }
            }
            for (name, i) in wanted4.sorted(by: { $0.key < $1.key }) where joined[name] == nil {
                guard let address = i.ipv4 else { continue }
                if let e = Sockets.membership(beaconFD, group: settings.multicastGroup, interfaceAddress: address, join: true), e != EADDRINUSE {
                    problems.append("\(name) (cannot join \(settings.multicastGroup): \(Sockets.errorText(e)))")
                    continue
                }
                joined[name] = i
                pending.append(.log(.info, "beaconing on \(name) (\(address)) to \(settings.multicastGroup):\(settings.beaconPort)"))
            }
        }
        // IPv6: one membership per interface index, where the interface has a link-local address.
        let wanted6 = useIPv6
            ? Dictionary(usable.compactMap { i in i.linkLocal6.map { _ in (i.name, i) } }, uniquingKeysWith: { a, _ in a }) : [:]
        for (name, old) in joined6 where wanted6[name]?.index != old.index || wanted6[name]?.linkLocal6 != old.linkLocal6 {
            _ = Sockets.membership6(beaconFD6, group: settings.multicastGroup6, interfaceIndex: old.index, join: false)
            joined6[name] = nil
            if wanted6[name] == nil { pending.append(.log(.notice, "stopped IPv6 beacons on \(name): interface is down, gone or has no link-local address")) }
        }
        for (name, i) in wanted6.sorted(by: { $0.key < $1.key }) where joined6[name] == nil {
            if let e = Sockets.membership6(beaconFD6, group: settings.multicastGroup6, interfaceIndex: i.index, join: true), e != EADDRINUSE {
                problems.append("\(name) (cannot join \(settings.multicastGroup6): \(Sockets.errorText(e)))")
                continue
            }
            joined6[name] = i
            pending.append(.log(.info, "beaconing on \(name) (\(i.linkLocal6 ?? "")) to [\(settings.multicastGroup6)%\(name)]:\(settings.beaconPort)"))
        }
        if problems != missingInterfaces {
            missingInterfaces = problems
            if !problems.isEmpty { pending.append(.log(.warning, "beacon interfaces unavailable: \(problems.joined(separator: ", "))")) }
            pending.append(.statusChanged)
        }
    }

    private func sendBeacons() {
        guard !joined.isEmpty || !joined6.isEmpty else { return }
        let port = (boundListen ?? settings.listen).port
        let beacon = Beacon(signingKey: identity.signingKey, kxKey: identity.kxKey, tcpPort: port, timestampMs: wallClockMs())
        let bytes: [UInt8]
        do {
            bytes = try beacon.encoded(sign: identity.sign)
        } catch {
            lastError = "cannot sign a beacon: \(error)"
            return
        }
        var results: [(String, Int32?)] = []
        let group = MeshAddress(host: settings.multicastGroup, port: settings.beaconPort)
        for i in joined.values {
            guard let address = i.ipv4 else { continue }
            results.append((i.name, Sockets.sendMulticast(beaconFD, bytes, group: group, interfaceAddress: address)))
        }
        let group6 = MeshAddress(host: settings.multicastGroup6, port: settings.beaconPort)
        for i in joined6.values {
            results.append(("\(i.name) (IPv6)", Sockets.sendMulticast6(beaconFD6, bytes, group: group6, interfaceIndex: i.index)))
        }
        for (name, error) in results {
            if let e = error {
                // A link-local address still in duplicate address detection cannot send yet: retried next beacon.
                counters.beaconSendErrors += 1
                lastError = "beacon on \(name): \(Sockets.errorText(e))"
            } else {
                counters.beaconsSent += 1
                pending.append(.counter("mesh_beacons_sent_total", 1))
            }
        }
    }

    private func receiveBeacons(_ fd: Int32, _ buffer: inout [UInt8]) {
        for _ in 0..<64 {
            guard let (bytes, from) = Sockets.receiveDatagram(fd, into: &buffer) else { return }
            // Our own beacons come back (multicast loopback is on): skip them before any work.
            if bytes.count >= 37 && Array(bytes[5..<37]) == identity.signingKey { continue }
            counters.beaconsReceived += 1
            pending.append(.counter("mesh_beacons_received_total", 1))
            // Verification costs CPU: a flood of beacons gets a fixed budget per second.
            guard beaconVerifyBudget.hasTokens(nowNs: monotonicNs()) else {
                counters.beaconsDropped += 1
                continue
            }
            beaconVerifyBudget.spend(1)
            let beacon: Beacon
            do {
                beacon = try Beacon.parse(bytes, nowMs: wallClockMs()) { sig, msg, key in
                    identity.verify(signature: sig, of: msg, by: key)
                }
            } catch BeaconError.badSignature {
                counters.beaconsBad += 1
                pending.append(.counter("mesh_beacons_bad_total", 1))
                pending.append(.log(.debug, "beacon from \(from) has a bad signature"))
                continue
            } catch BeaconError.stale(let skew) {
                counters.beaconsStale += 1
                pending.append(.log(.debug, "beacon from \(from) is \(skew / 1000) s off our clock"))
                continue
            } catch {
                counters.beaconsMalformed += 1
                pending.append(.log(.debug, "datagram from \(from) on the beacon port is not a beacon: \(error)"))
                continue
            }
            // A link-local sender is reachable only through the interface it came in on: keep its scope.
            heard(beacon, from: MeshAddress(host: from.host, port: beacon.tcpPort, scopeID: from.isLinkLocal6 ? from.scopeID : 0))
        }
    }

    private func heard(_ beacon: Beacon, from address: MeshAddress) {
        let now = nowMs
        let key = TargetKey.discovered(beacon.signingKey)
        if var t = targets[key] {
            // Only a newer beacon may move a hub (an old one replayed from elsewhere may not).
            guard beacon.timestampMs > t.lastBeaconTimestamp else { return }
            t.lastBeaconTimestamp = beacon.timestampMs
            t.lastBeaconMs = now
            if t.address == address {
                t.addressHeardMs = now
            } else if now - t.addressHeardMs > 2 * settings.beaconIntervalMs {
                // A hub beaconing on IPv4 and IPv6 (or on two links) sends each round's beacon
                // several ways with one timestamp: it moves only when its current address went
                // quiet, so the address does not flip with the arrival order.
                pending.append(.log(.info, "hub \(Self.shortKey(beacon.signingKey)) now beacons from \(address)"))
                t.address = address
                t.addressHeardMs = now
            }
            targets[key] = t
            return
        }
        let discovered = targets.filter { if case .discovered = $0.key { return true } else { return false } }
        if discovered.count >= settings.maxBeaconTable {
            guard let victim = discovered.filter({ $0.value.sessionID == nil }).min(by: { $0.value.lastBeaconMs < $1.value.lastBeaconMs }) else {
                counters.beaconsDropped += 1
                return
            }
            targets[victim.key] = nil
        }
        // Both hubs hear each other: the one with the lower key dials first, the other waits a
        // little so that usually only one session is made (the tie-break handles the rest).
        let weDialFirst = identity.signingKey.lexicographicallyPrecedes(beacon.signingKey)
        var t = DialTarget(address: address, expectedKey: beacon.signingKey,
                           nextAttemptMs: now + (weDialFirst ? 0 : 2 * settings.beaconIntervalMs + 1_000))
        t.lastBeaconMs = now
        t.addressHeardMs = now
        t.lastBeaconTimestamp = beacon.timestampMs
        targets[key] = t
        pending.append(.log(.info, "heard hub \(Self.shortKey(beacon.signingKey)) at \(address)"))
    }

    private func expireDiscovered(_ now: Int64) {
        let horizon = max(3 * settings.beaconIntervalMs, 15_000)
        for (key, t) in targets {
            guard case .discovered = key, t.sessionID == nil, now - t.lastBeaconMs > horizon else { continue }
            // Keep it while a link to that hub is up: the link itself proves it is there.
            if let k = t.expectedKey, upByKey[k] != nil { continue }
            targets[key] = nil
        }
    }
}
