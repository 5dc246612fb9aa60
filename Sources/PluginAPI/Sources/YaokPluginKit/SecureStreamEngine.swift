#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// (One file of ~900 lines on purpose: everything here runs on the one poll thread and shares
/// its state without locks; split, that would no longer be visible in one place.)
///
/// Secure links over TCP: one poll thread that owns the listeners, the outbound dials and every
/// session, each running the kit's ``SecureLink`` and then moving sealed TLV records back to back.
/// The mesh transport (hubs dial hubs) and the Wi-Fi Direct transport (phones dial the group
/// owner) are this engine with different ``Settings``; ``SecureStreamClient`` is the blocking
/// dialling side for phones (`yaok tcp://`).
///
/// What it enforces, so a transport need not: the accepting side sends nothing before the
/// dialler's hello (a stranger costs no signature and no bytes); a slot table with room kept for
/// the owner's own dials and at most a few inbound sessions per address; the roles a link may
/// prove; one link per proven key, a duplicate settled only on the two proven keys; frames in
/// clear after the handshake end the stream; a frame rate per peer; keepalive and idle timeouts.
///
/// All state is guarded by one lock. Events are collected under it and delivered to the
/// ``LinkEvents`` given at `init` after it is released, in order, from the poll thread (a link's
/// `linkUp` precedes its frames), so an event handler may call ``send(_:to:)`` or
/// ``dial(_:expectedKey:)``; it must not call ``stop(reason:)``.
// @unchecked: sessions live on the poll thread; other threads take `lock` to queue work or read state.
public final class SecureStreamEngine: @unchecked Sendable {

    public struct Settings: Sendable {
        /// `LinkInfo.kind` of the links (`tcp`, `wifi-direct`).
        public var kind: String
        /// The role this side proves.
        public var role: PeerRole
        /// The roles a peer may prove; any other is refused after the handshake.
        public var peerRoles: Set<PeerRole>
        public var cost: Int
        /// Sessions of any state at once (dialled ones included).
        public var maxSessions: Int = 32
        /// Inbound sessions one IP address may hold at once.
        public var maxInboundPerHost: Int = 4
        /// Inbound sessions one network (``IPEndpoint/crowd``: /24, /64) may hold at once;
        /// nil: a quarter of ``maxSessions`` (at least ``maxInboundPerHost``).
        public var maxInboundPerCrowd: Int?
        public var connectTimeoutMs: Int64 = 5_000
        public var handshakeTimeoutMs: Int64 = 10_000
        /// A link silent this long is closed.
        public var idleTimeoutMs: Int64 = 60_000
        /// The config key named when a link is closed for silence.
        public var idleTimeoutKey: String = "idle_timeout_s"
        /// Ping a link not heard from for this long (0: never ping; pings are still answered).
        public var keepaliveMs: Int64 = 0
        public var queueFrames: Int = 1_000
        public var queueBytes: Int = 16 << 20
        /// Records per second one peer may send after its handshake (0: no limit). Faster records
        /// wait (the socket is not read meanwhile, so TCP pushes back on the peer); the bucket holds
        /// one second's worth, so short bursts pass at once.
        public var maxFramesPerSecond: Int = 0
        /// A peer held back by the limit for this long without a 1 s pause is disconnected.
        public var rateLimitDisconnectMs: Int64 = 5_000
        /// Metric names are `<prefix>_links`, `<prefix>_links_up_total`, `<prefix>_misbehaviour_disconnects_total`.
        public var metricPrefix: String
        /// The first link ID (a transport that re-creates its engine keeps IDs unique).
        public var firstLinkID: LinkID = 1
        public var threadName: String = "yaok-stream"

        public init(kind: String, role: PeerRole = .hub, peerRoles: Set<PeerRole>, cost: Int, metricPrefix: String) {
            self.kind = kind
            self.role = role
            self.peerRoles = peerRoles
            self.cost = cost
            self.metricPrefix = metricPrefix
        }
    }

    /// How a session ended, for an owner that keeps its own dial table.
    public struct SessionEnd: Sendable {
        public var id: LinkID
        public var outbound: Bool
        public var remote: IPEndpoint
        /// The key its handshake proved, if it got that far.
        public var peerKey: [UInt8]?
        public var wasUp: Bool
        /// Closed for misbehaviour (bad stream, unsealed frames, flooding, a key other than expected).
        public var misbehaving: Bool
        /// The peer proved this hub's own key: the address is ourselves.
        public var isSelf: Bool
    }

    public struct Counters: Sendable, Equatable {
        public var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        public var linksUpTotal: UInt64 = 0, connectFailures: UInt64 = 0, handshakeFailures: UInt64 = 0
        public var refusedRole: UInt64 = 0, refusedFull: UInt64 = 0, duplicatesClosed: UInt64 = 0
        /// Records after the handshake that were not sealed for the session (each ends its stream).
        public var unsealedFrames: UInt64 = 0
        public var misbehaviourDisconnects: UInt64 = 0
        /// Episodes of a peer held back by `maxFramesPerSecond`, and peers disconnected for staying over it.
        public var throttled: UInt64 = 0, rateLimitDisconnects: UInt64 = 0
        public var idleTimeouts: UInt64 = 0, queueFull: UInt64 = 0
        /// Inbound handshakes closed to make room when the table was full.
        public var halfOpenEvicted: UInt64 = 0
        /// Inbound sessions of the most crowded network closed to make room for a peer from
        /// a less crowded one.
        public var crowdEvicted: UInt64 = 0
        /// Inbound sessions with a stranger closed to make room for a dial to a trusted hub.
        public var trustedDisplaced: UInt64 = 0
        public init() {}
    }

    /// One authenticated link, for status.
    public struct LinkSummary: Sendable {
        public var id: LinkID
        public var peerKey: [UInt8]
        public var role: PeerRole
        public var remote: IPEndpoint
        public var outbound: Bool
    }

    public struct Snapshot: Sendable {
        public var running: Bool
        public var listening: [IPEndpoint]
        public var sessions: Int
        public var links: [LinkSummary]
        public var peersSeen: Int
        public var counters: Counters
        public var lastError: String?
    }

    /// Largest frame: a whole TLV record that still fits one sealed record.
    public static let mtu = SecureLink.maxFrameLength

    public let settings: Settings
    private let identity: LinkIdentity
    private let events: any LinkEvents
    private let sessionEnded: (@Sendable (SessionEnd) -> Void)?

    private let lock = NSLock()
    private var running = false
    private var threadAlive = false
    private var exited = DispatchSemaphore(value: 0)
    private var stopReason = "transport stopped"
    private var listeners: [(fd: Int32, address: IPEndpoint)] = []
    private var wakeRead: Int32 = -1, wakeWrite: Int32 = -1
    private var wakePending = false
    private var sessions: [LinkID: StreamSession] = [:]
    private var upByKey: [[UInt8]: LinkID] = [:]
    private var nextID: LinkID
    private var counters = Counters()
    private var peersSeen = Set<[UInt8]>()
    private var pending: [Event] = []
    private var lastError: String?
    private var reserved = 0
    private var trusted = Set<[UInt8]>()

    private enum Event {
        case up(LinkInfo), down(LinkID, String), frame([UInt8], LinkID), log(LogLevel, String)
        case counter(String, Double), gauge(String, Double), statusChanged, ended(SessionEnd)
    }

    /// - Parameters:
    ///   - events: where links, frames, log lines and metrics are reported; called on the poll
    ///     thread, never under the engine's lock.
    ///   - sessionEnded: called for every session that ends, up or not (after its `linkDown`),
    ///     for an owner that keeps its own dial table.
    public init(identity: LinkIdentity, settings: Settings, events: any LinkEvents,
                sessionEnded: (@Sendable (SessionEnd) -> Void)? = nil) {
        self.identity = identity
        self.settings = settings
        self.events = events
        self.sessionEnded = sessionEnded
        self.nextID = settings.firstLinkID
    }

    private var nowMs: Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    // MARK: Lifecycle

    /// Starts the poll thread (no listener yet: see ``listen(on:)``). May be called again after ``stop(reason:)``.
    public func start() throws {
        let (isRunning, oldThreadAlive) = lock.withLock { (running, threadAlive) }
        if isRunning { return }
        // A previous poll thread still cleaning up: give it a moment.
        if oldThreadAlive { _ = lock.withLock({ exited }).wait(timeout: .now() + 2) }
        var p: [Int32] = [0, 0]
        guard pipe(&p) == 0 else { throw TransportError.system(call: "pipe", errno: errno) }
        for f in p { PosixSocket.setNonBlocking(f); _ = fcntl(f, F_SETFD, FD_CLOEXEC) }
        let done = DispatchSemaphore(value: 0)
        lock.withLock {
            wakeRead = p[0]; wakeWrite = p[1]; wakePending = false
            running = true
            threadAlive = true
            stopReason = "transport stopped"
            exited = done
        }
        let t = Thread { [self] in run(exited: done) }
        t.name = settings.threadName
        t.start()
    }

    /// Opens a listener on `address` (port 0: any) and returns the bound address.
    @discardableResult
    public func listen(on address: IPEndpoint) throws -> IPEndpoint {
        let fd = try PosixSocket.listen(on: address)
        let bound = PosixSocket.localAddress(fd) ?? address
        let ok: Bool = lock.withLock {
            guard running else { return false }
            listeners.append((fd, bound))
            return true
        }
        guard ok else { Glibc.close(fd); throw TransportError.notRunning }
        wake()
        return bound
    }

    /// Says goodbye on every link, reports each down with `reason`, closes every socket.
    /// Returns within about 1.5 s. Must not be called from an event handler.
    public func stop(reason: String = "transport stopped") {
        let was: Bool = lock.withLock {
            let w = running
            running = false
            stopReason = reason
            return w
        }
        guard was else { return }
        wake()
        _ = lock.withLock({ exited }).wait(timeout: .now() + 1.5)
    }

    /// Slots kept free of inbound sessions (an owner's configured peers it has yet to reach).
    public var reservedSlots: Int {
        get { lock.withLock { reserved } }
        set { lock.withLock { reserved = newValue } }
    }

    /// Keys of trusted hubs: their sessions are never closed to make room, and a dial to one
    /// may take the place of a stranger's (``makeRoomToDial(_:trustedPeer:)``).
    public var trustedPeerKeys: Set<[UInt8]> {
        get { lock.withLock { trusted } }
        set { lock.withLock { trusted = newValue } }
    }

    public var snapshot: Snapshot {
        lock.withLock {
            let links = upByKey.values.compactMap { id -> LinkSummary? in
                guard let s = sessions[id], let peer = s.link.peer else { return nil }
                return LinkSummary(id: id, peerKey: peer.signingKey, role: peer.role, remote: s.remote, outbound: s.outbound)
            }.sorted { $0.id < $1.id }
            return Snapshot(running: running, listening: listeners.map(\.address), sessions: sessions.count, links: links,
                            peersSeen: peersSeen.count, counters: counters, lastError: lastError)
        }
    }

    /// Sessions of any state.
    public var sessionCount: Int { lock.withLock { sessions.count } }

    // MARK: Dialling and sending

    /// Starts a connection to `address`; the link comes up (``LinkEvents/linkUp(_:)``) once the handshake
    /// proves a key of an accepted role, and `expectedKey` when given. Returns the session's ID
    /// (the link's ID once up); throws when no socket could be made.
    @discardableResult
    public func dial(_ address: IPEndpoint, expectedKey: [UInt8]? = nil) throws -> LinkID {
        guard lock.withLock({ running }) else { throw TransportError.notRunning }
        let fd: Int32
        do {
            fd = try PosixSocket.startConnect(to: address)
        } catch {
            lock.withLock { counters.connectFailures += 1; lastError = "\(error)" }
            throw error
        }
        let id: LinkID = lock.withLock {
            let s = newSession(fd: fd, outbound: true, remote: address, state: .connecting)
            s.expectedKey = expectedKey
            pending.append(.log(.debug, "dialling \(address) (session \(s.id))"))
            return s.id
        }
        wake()
        return id
    }

    /// Seals and queues one frame for a link; never blocks. Throws when the link is not up or its queue is full.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard frame.count <= Self.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: Self.mtu) }
        let needWake: Bool = try lock.withLock {
            guard running else { throw TransportError.notRunning }
            guard let s = sessions[link], s.state == .up else { throw TransportError.unknownLink(link) }
            guard let sealed = try? s.link.seal(frame), s.queue.push(sealed) else {
                counters.queueFull += 1
                throw TransportError.queueFull("outbound queue of link \(link) is full (\(s.queue.count) frames, \(s.queue.byteCount) bytes; limits \(settings.queueFrames) frames, \(settings.queueBytes >> 20) MB)")
            }
            counters.framesOut += 1
            counters.bytesOut += UInt64(frame.count)
            defer { wakePending = true }
            return !wakePending
        }
        if needWake { wake() }
    }

    private func wake() {
        let fd = lock.withLock { wakeWrite }
        guard fd >= 0 else { return }
        var b: UInt8 = 1
        _ = write(fd, &b, 1)
    }

    // MARK: The poll thread

    private func run(exited: DispatchSemaphore) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            var pfds: [pollfd] = []
            var owners: [LinkID] = []
            var listenerCount = 0
            var timeoutMs: Int32 = 100
            let keep: Bool = lock.withLock {
                guard running else { return false }
                let now = nowMs
                pfds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
                for l in listeners { pfds.append(pollfd(fd: l.fd, events: Int16(POLLIN), revents: 0)) }
                listenerCount = listeners.count
                for s in sessions.values {
                    var ev: Int32 = 0
                    if s.state == .connecting {
                        ev = Int32(POLLOUT)
                    } else {
                        // Read more only when the last read is handled and the peer has frame budget.
                        if !s.hasBacklog && hasBudget(s, now) { ev |= Int32(POLLIN) } else { timeoutMs = rateTick }
                        if s.hasPendingWrite { ev |= Int32(POLLOUT) }
                    }
                    pfds.append(pollfd(fd: s.fd, events: Int16(ev), revents: 0))
                    owners.append(s.id)
                }
                return true
            }
            if !keep { break }
            _ = poll(&pfds, nfds_t(pfds.count), timeoutMs)
            lock.withLock {
                if pfds[0].revents != 0 {
                    var sink = [UInt8](repeating: 0, count: 64)
                    while read(wakeRead, &sink, sink.count) > 0 {}
                    wakePending = false
                }
                for i in 0..<listenerCount where pfds[1 + i].revents & Int16(POLLIN) != 0 && i < listeners.count {
                    acceptAll(listeners[i].fd)
                }
                for s in Array(sessions.values) where s.hasBacklog { drainBacklog(s) }
                for (i, id) in owners.enumerated() {
                    let revents = pfds[1 + listenerCount + i].revents
                    guard revents != 0, let s = sessions[id] else { continue }
                    service(s, revents: revents, buffer: &buffer)
                }
                for s in Array(sessions.values) where s.state != .connecting && s.hasPendingWrite { flush(s) }
                tick()
            }
            deliver()
        }
        lock.withLock {
            for s in Array(sessions.values) { close(s, reason: stopReason, level: .info) }
            for l in listeners { Glibc.close(l.fd) }
            listeners.removeAll()
            Glibc.close(wakeRead); Glibc.close(wakeWrite)
            wakeRead = -1; wakeWrite = -1
            pending.append(.gauge("\(settings.metricPrefix)_links", 0))
            pending.append(.statusChanged)
        }
        deliver()
        lock.withLock { threadAlive = false }
        exited.signal()
    }

    /// The poll timeout while a peer is held back: often enough to pace its records.
    private var rateTick: Int32 { Int32(max(1, min(100, 1000 / max(1, settings.maxFramesPerSecond)))) }

    private func deliver() {
        let batch: [Event] = lock.withLock {
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        for e in batch {
            switch e {
            case .up(let info): events.linkUp(info)
            case .down(let id, let reason): events.linkDown(id, reason: reason)
            case .frame(let f, let id): events.frameReceived(f, on: id)
            case .log(let level, let m): events.log(level, m)
            case .counter(let name, let v): events.increment(name, by: v)
            case .gauge(let name, let v): events.gauge(name, v)
            case .statusChanged: events.statusChanged()
            case .ended(let end): sessionEnded?(end)
            }
        }
    }

    // MARK: Sessions (all under the lock)

    private func newSession(fd: Int32, outbound: Bool, remote: IPEndpoint, state: StreamSession.State) -> StreamSession {
        let s = StreamSession(id: nextID, fd: fd, outbound: outbound, remote: remote, state: state,
                              link: SecureLink(identity: identity, role: settings.role, isInitiator: outbound, channel: .stream),
                              queue: FrameQueue(maxFrames: settings.queueFrames, maxBytes: settings.queueBytes),
                              bucket: TokenBucket(capacity: Double(settings.maxFramesPerSecond), nowMs: nowMs), nowMs: nowMs)
        nextID += 1
        sessions[s.id] = s
        return s
    }

    private func acceptAll(_ listener: Int32) {
        for _ in 0..<32 {
            guard let (fd, remote) = PosixSocket.accept(listener) else { return }
            // One address may hold only a few inbound sessions, and slots the owner keeps for its
            // own dials stay free: throwaway keys from one machine cannot fill the table.
            if let why = roomForInbound(from: remote) {
                counters.refusedFull += 1
                // Log the 1st, 2nd, 4th, 8th... refusal: a connection flood must not flood the log.
                if counters.refusedFull & (counters.refusedFull - 1) == 0 {
                    pending.append(.log(.warning, "refused a connection from \(remote): \(why); \(counters.refusedFull) refused so far"))
                }
                Glibc.close(fd)
                continue
            }
            // The dialler speaks first; until it does, a connection costs no signature and no bytes.
            let s = newSession(fd: fd, outbound: false, remote: remote, state: .handshaking)
            pending.append(.log(.debug, "accepted a connection from \(remote) (session \(s.id))"))
        }
    }

    private var maxInboundPerCrowd: Int {
        settings.maxInboundPerCrowd ?? max(settings.maxInboundPerHost, settings.maxSessions / 4)
    }

    /// Makes room for a connection from `remote`; nil when there is, else why not. One
    /// address and one network (/24, /64) hold only a few inbound sessions, and slots the owner
    /// keeps for its own dials stay free, so throwaway keys from one machine or one network
    /// cannot fill the table. A full table gives up its oldest inbound handshake (it has proven
    /// nothing yet), else the idlest inbound session of the most crowded network, when the
    /// newcomer's is less crowded: many addresses compete with each other, not with a peer
    /// from elsewhere. Under the lock.
    private func roomForInbound(from remote: IPEndpoint) -> String? {
        let inbound = sessions.values.filter { !$0.outbound }
        let fromHost = inbound.filter { $0.remote.host == remote.host }.count
        if fromHost >= settings.maxInboundPerHost { return "\(fromHost) sessions from that address is the limit" }
        let mine = remote.crowd
        let fromCrowd = inbound.filter { $0.remote.crowd == mine }.count
        if fromCrowd >= maxInboundPerCrowd { return "\(fromCrowd) sessions from \(mine) is the limit" }
        return makeRoom(forCrowd: mine) ? nil
            : "\(sessions.count) sessions\(reserved > 0 ? " and \(reserved) kept for configured peers" : "") is the limit (max_sessions)"
    }

    /// Whether a session for a peer in network `crowd` fits, after closing an inbound
    /// handshake or the idlest inbound session of a more crowded network if the table is full.
    /// Under the lock.
    private func makeRoom(forCrowd mine: String) -> Bool {
        guard sessions.count + reserved >= settings.maxSessions else { return true }
        let inbound = sessions.values.filter { !$0.outbound }
        // Oldest first; sessions accepted within one millisecond by their order (IDs grow).
        if let oldest = inbound.filter({ $0.state == .handshaking }).min(by: { ($0.stateSinceMs, $0.id) < ($1.stateSinceMs, $1.id) }) {
            counters.halfOpenEvicted += 1
            close(oldest, reason: "\(oldest.remote) had not finished its handshake and the session table is full", level: .debug, goodbye: false)
            return true
        }
        // Crowds are counted over every session (our own dials too), evicted only among inbound
        // sessions with strangers.
        let crowds = Dictionary(grouping: sessions.values) { $0.remote.crowd }
        let mineCount = crowds[mine]?.count ?? 0
        guard let (crowd, members) = crowds.filter({ $0.key != mine }).max(by: { $0.value.count < $1.value.count }),
              members.count > mineCount + 1,
              let idlest = members.filter(isStrangerInbound).min(by: { ($0.lastHeardMs, $0.id) < ($1.lastHeardMs, $1.id) }) else { return false }
        counters.crowdEvicted += 1
        close(idlest, reason: "\(idlest.remote) gave its place to a peer from a less crowded network (\(crowd) held \(members.count) of \(settings.maxSessions) sessions)",
              level: .info)
        return true
    }

    /// Whether a dial to `address` fits now: room in the table, made as for an inbound peer
    /// from that network (``makeRoom(forCrowd:)``). For peers that need no reserved slot
    /// (discovered ones); configured peers are dialled whatever the count.
    ///
    /// A dial to a `trustedPeer` (its key, from a signed beacon, is one of ``trustedPeerKeys``;
    /// the handshake must still prove it) counts the slot its owner reserved for it as its own,
    /// and with the table full takes the place of an inbound session with a stranger (the
    /// oldest unfinished handshake, else the idlest), from any network: strangers on many
    /// networks cannot keep a trusted hub out.
    public func makeRoomToDial(_ address: IPEndpoint, trustedPeer: Bool = false) -> Bool {
        let (fits, evicted) = lock.withLock {
            let before = counters.crowdEvicted + counters.halfOpenEvicted + counters.trustedDisplaced
            let fits = trustedPeer ? makeRoomForTrustedDial(to: address) : makeRoom(forCrowd: address.crowd)
            return (fits, counters.crowdEvicted + counters.halfOpenEvicted + counters.trustedDisplaced != before)
        }
        if evicted { wake() }   // the poll thread reports the closed session
        return fits
    }

    /// An inbound session whose peer is not a trusted hub (or has not proved who it is yet). Under the lock.
    private func isStrangerInbound(_ s: StreamSession) -> Bool {
        !s.outbound && !(s.link.peer.map { trusted.contains($0.signingKey) } ?? false)
    }

    /// Under the lock.
    private func makeRoomForTrustedDial(to address: IPEndpoint) -> Bool {
        guard sessions.count >= settings.maxSessions else { return true }
        guard let victim = sessions.values.filter(isStrangerInbound).min(by: {
            ($0.state == .up ? 1 : 0, $0.lastHeardMs, $0.id) < ($1.state == .up ? 1 : 0, $1.lastHeardMs, $1.id)
        }) else { return false }
        counters.trustedDisplaced += 1
        close(victim, reason: "\(victim.remote) gave its place to a trusted hub at \(address) (\(sessions.count) of \(settings.maxSessions) sessions)",
              level: .info)
        return true
    }

    private func beginHandshake(_ s: StreamSession) {
        s.state = .handshaking
        s.stateSinceMs = nowMs
        do {
            s.queueControl(try s.link.hello())
        } catch {
            close(s, reason: "cannot start the handshake with \(s.remote): \(error)", level: .warning, goodbye: false)
            return
        }
        flush(s)
    }

    private func service(_ s: StreamSession, revents: Int16, buffer: inout [UInt8]) {
        if s.state == .connecting {
            let e = PosixSocket.pendingError(s.fd)
            if e != 0 || revents & Int16(POLLERR | POLLHUP) != 0 {
                counters.connectFailures += 1
                close(s, reason: "connect to \(s.remote) failed: \(PosixSocket.errorText(e == 0 ? ECONNREFUSED : e))", level: .debug)
                return
            }
            beginHandshake(s)
            return
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 && !s.hasBacklog {
            let n = buffer.withUnsafeMutableBytes { recv(s.fd, $0.baseAddress, $0.count, 0) }
            if n == 0 {
                close(s, reason: "\(s.remote) closed the connection", level: .info, goodbye: false)
                return
            }
            if n < 0 {
                let e = errno
                if e == EAGAIN || e == EWOULDBLOCK || e == EINTR { return }
                close(s, reason: "read from \(s.remote) failed: \(PosixSocket.errorText(e))", level: .info, goodbye: false)
                return
            }
            s.lastHeardMs = nowMs
            do {
                s.backlog = try s.decoder.feed(buffer[0..<n])
            } catch {
                misbehaved(s, "sent a bad TLV stream: \(error)")
                return
            }
            s.backlogHead = 0
            drainBacklog(s)
        }
        if sessions[s.id] != nil && revents & Int16(POLLOUT) != 0 { flush(s) }
    }

    /// Whether an up peer may have another record handled now (always, before the handshake or without a limit).
    private func hasBudget(_ s: StreamSession, _ now: Int64) -> Bool {
        guard s.state == .up, settings.maxFramesPerSecond > 0 else { return true }
        let rate = Double(settings.maxFramesPerSecond)
        s.bucket.refill(capacity: rate, perMs: rate / 1000, nowMs: now)
        return s.bucket.tokens >= 1
    }

    /// Handles read records while the peer has budget; the rest wait (and the socket is not read)
    /// until it refills. A peer held back without a 1 s pause for `rateLimitDisconnectMs` is disconnected.
    private func drainBacklog(_ s: StreamSession) {
        let now = nowMs
        while s.hasBacklog && sessions[s.id] != nil {
            if !hasBudget(s, now) {
                throttle(s, now)
                return
            }
            if s.state == .up && settings.maxFramesPerSecond > 0 { s.bucket.tokens -= 1 }
            let record = s.backlog[s.backlogHead]
            s.backlog[s.backlogHead] = []
            s.backlogHead += 1
            handle(record, on: s)
        }
        if !s.hasBacklog {
            s.backlog = []
            s.backlogHead = 0
        }
    }

    private func throttle(_ s: StreamSession, _ now: Int64) {
        if s.throttledSinceMs == nil || now - s.lastThrottledMs > 1_000 {
            s.throttledSinceMs = now
            counters.throttled += 1
            pending.append(.log(.warning, "link \(s.id) from \(s.remote) rate-limited: more than \(settings.maxFramesPerSecond) frames/s (max_frames_per_second)"))
        }
        s.lastThrottledMs = now
        if let since = s.throttledSinceMs, now - since >= settings.rateLimitDisconnectMs {
            counters.rateLimitDisconnects += 1
            misbehaved(s, "sent more than \(settings.maxFramesPerSecond) frames/s for \(Double(settings.rateLimitDisconnectMs) / 1000) s (max_frames_per_second); disconnected")
        }
    }

    private func handle(_ bytes: [UInt8], on s: StreamSession) {
        guard let record = try? TLVRecord(parsing: bytes) else { return }
        guard s.state == .up else {
            do {
                for out in try s.link.receive(record) {
                    switch out {
                    case .send(let reply): s.queueControl(reply)
                    case .established(let peer): established(s, peer)
                    case .frame: break
                    case .refused(let why):
                        flush(s)
                        counters.handshakeFailures += 1
                        close(s, reason: "handshake with \(s.remote) refused: \(why)", level: .warning, goodbye: false)
                    }
                    if sessions[s.id] == nil { return }
                }
                flush(s)
            } catch {
                counters.handshakeFailures += 1
                close(s, reason: "handshake with \(s.remote) failed: \(error)", level: .warning, goodbye: false)
            }
            return
        }
        let inner: [UInt8]
        do {
            let outputs = try s.link.receive(record)
            if case .refused(let why)? = outputs.first {
                counters.handshakeFailures += 1
                close(s, reason: "\(s.remote) refused the link: \(why)", level: .warning, goodbye: false)
                return
            }
            guard case .frame(let f)? = outputs.first else { return }
            inner = f
        } catch {
            // Anything not sealed with this session's keys (in clear, forged, replayed) ends the stream.
            counters.unsealedFrames += 1
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
            pending.append(.frame(inner, s.id))
        }
    }

    private func established(_ s: StreamSession, _ peer: AuthenticatedPeer) {
        let key = peer.signingKey
        if key == identity.signingKey {
            // Dialled ourselves: the outbound half is the session whose local address is this one's remote.
            let halves = s.outbound ? [s] : sessions.values.filter { $0.outbound && PosixSocket.localAddress($0.fd) == s.remote }
            for o in halves where o !== s {
                close(o, reason: "\(o.remote) is this hub itself; not dialling it again", level: .notice, goodbye: false, isSelf: true)
            }
            close(s, reason: "\(s.remote) is this hub itself; not dialling it again", level: .notice, goodbye: false, isSelf: s.outbound)
            return
        }
        guard settings.peerRoles.contains(peer.role) else {
            counters.refusedRole += 1
            let allowed = settings.peerRoles.map { "\($0)" }.sorted().joined(separator: " or ")
            if !s.outbound { sendNow(s, try? s.link.refuse(.role, "this \(settings.kind) transport takes role \(allowed) only")) }
            close(s, reason: "\(s.remote) proved the role \(peer.role); \(settings.kind) links carry role \(allowed) only", level: .warning, goodbye: false)
            return
        }
        if let expected = s.expectedKey, expected != key {
            counters.handshakeFailures += 1
            close(s, reason: "\(s.remote) proved key \(Self.shortKey(key)), not the expected \(Self.shortKey(expected))", level: .warning, goodbye: false, misbehaving: true)
            return
        }
        if let existingID = upByKey[key], let existing = sessions[existingID] {
            counters.duplicatesClosed += 1
            // Both sessions are authenticated by the same key, so only that peer can have made them.
            // A silent existing link is presumed dead (the peer restarted without a goodbye). Between
            // two live ones both ends keep the one dialled by the lower key; two dialled by the same
            // side mean it redialled, so the newer one is kept.
            let silence = nowMs - existing.lastHeardMs
            let silentAfterMs = settings.keepaliveMs > 0 ? 2 * settings.keepaliveMs : 10_000
            if silence > silentAfterMs {
                close(existing, reason: "replaced by session \(s.id): nothing heard on it for \(silence) ms", level: .info)
            } else if s.rank(ourKey: identity.signingKey) <= existing.rank(ourKey: identity.signingKey) {
                close(existing, reason: "replaced by session \(s.id) with the same peer (duplicate-session tie-break)", level: .info)
            } else {
                close(s, reason: "duplicate session with \(Self.shortKey(key)); keeping link \(existing.id)", level: .debug)
                return
            }
        }
        s.state = .up
        s.stateSinceMs = nowMs
        if !s.outbound, let accepted = try? s.link.accept() { s.queueControl(accepted) }
        s.bucket = TokenBucket(capacity: Double(settings.maxFramesPerSecond), nowMs: nowMs)
        upByKey[key] = s.id
        peersSeen.insert(key)
        counters.linksUpTotal += 1
        // A phone's key and address only at debug (Docs/operations.md, "What the log holds").
        if peer.role == .endpoint {
            pending.append(.log(.info, "link \(s.id) up with an endpoint (\(s.outbound ? "dialled" : "accepted"))"))
            pending.append(.log(.debug, "link \(s.id): endpoint \(Self.shortKey(key)) at \(s.remote)"))
        } else {
            pending.append(.log(.info, "link \(s.id) up with \(peer.role) \(Self.shortKey(key)) at \(s.remote) (\(s.outbound ? "dialled" : "accepted"))"))
        }
        pending.append(.up(LinkInfo(id: s.id, peerSigningKey: key, peerKXKey: peer.kxKey, peerRole: peer.role,
                                    mtu: Self.mtu, cost: settings.cost, kind: settings.kind, remote: s.remote.description, proof: peer.proof)))
        pending.append(.counter("\(settings.metricPrefix)_links_up_total", 1))
        pending.append(.gauge("\(settings.metricPrefix)_links", Double(upByKey.count)))
        pending.append(.statusChanged)
    }

    private func misbehaved(_ s: StreamSession, _ what: String) {
        counters.misbehaviourDisconnects += 1
        pending.append(.counter("\(settings.metricPrefix)_misbehaviour_disconnects_total", 1))
        let who = s.link.peer.map { "\($0.role) \(Self.shortKey($0.signingKey)) at \(s.remote)" } ?? "\(s.remote)"
        close(s, reason: "disconnected \(who): it \(what)", level: .warning, misbehaving: true)
    }

    /// Writes one record at once, before a close (a refusal); between frames only. What is
    /// queued goes first; a flush that closed the session or stopped mid-frame sends nothing.
    private func sendNow(_ s: StreamSession, _ record: [UInt8]?) {
        guard let record else { return }
        flush(s)
        guard sessions[s.id] != nil, !s.isMidFrame else { return }
        _ = record.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Closes a session: a sealed goodbye when up and between frames, link down if it was up.
    private func close(_ s: StreamSession, reason: String, level: LogLevel, goodbye: Bool = true,
                       misbehaving: Bool = false, isSelf: Bool = false) {
        guard sessions.removeValue(forKey: s.id) != nil else { return }
        let wasUp = s.state == .up
        if goodbye && wasUp && !s.isMidFrame, let bye = try? s.link.seal(TLVRecord(.linkClose, value: []).encoded) {
            _ = bye.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        shutdown(s.fd, Int32(SHUT_RDWR))
        Glibc.close(s.fd)
        let key = s.link.peer?.signingKey
        if wasUp, let key, upByKey[key] == s.id {
            upByKey[key] = nil
            pending.append(.down(s.id, reason))
            pending.append(.gauge("\(settings.metricPrefix)_links", Double(upByKey.count)))
            pending.append(.statusChanged)
        }
        pending.append(.log(level, wasUp ? "link \(s.id) down: \(reason)" : "session \(s.id) closed: \(reason)"))
        if misbehaving || level == .warning { lastError = reason }
        pending.append(.ended(SessionEnd(id: s.id, outbound: s.outbound, remote: s.remote, peerKey: key, wasUp: wasUp,
                                         misbehaving: misbehaving, isSelf: isSelf)))
    }

    private func flush(_ s: StreamSession) {
        while sessions[s.id] != nil {
            if !s.isMidFrame {
                s.writeBuffer = s.queue.pop(upTo: 256 * 1024)
                s.writeOffset = 0
                if s.writeBuffer.isEmpty { return }
            }
            let n = s.writeBuffer.withUnsafeBytes { Glibc.send(s.fd, $0.baseAddress! + s.writeOffset, $0.count - s.writeOffset, Int32(MSG_NOSIGNAL)) }
            if n > 0 { s.writeOffset += n; continue }
            let e = errno
            if n < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) { return }
            close(s, reason: "write to \(s.remote) failed: \(PosixSocket.errorText(e))", level: .info, goodbye: false)
            return
        }
    }

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
                    counters.idleTimeouts += 1
                    close(s, reason: "nothing heard from \(s.remote) for \(now - s.lastHeardMs) ms (\(settings.idleTimeoutKey))", level: .info)
                } else if settings.keepaliveMs > 0 && now - s.lastHeardMs >= settings.keepaliveMs && now - s.lastPingMs >= settings.keepaliveMs {
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
    }

    /// The first 4 bytes of a key in hex: enough for an operator to tell peers apart.
    public static func shortKey(_ key: [UInt8]) -> String { Hex.encode(key.prefix(4)) }
}

/// One TCP connection: its secure link session, TLV reader and bounded writer queue.
/// Owned by ``SecureStreamEngine`` and touched only under its lock.
final class StreamSession {
    enum State {
        /// Outbound, TCP connect in progress.
        case connecting
        /// Connected, link handshake running; only handshake records are accepted.
        case handshaking
        /// Handshake complete, link reported up.
        case up
    }

    let id: LinkID
    let fd: Int32
    /// Whether this side dialled (then it is the handshake's initiator).
    let outbound: Bool
    let remote: IPEndpoint
    var state: State
    var stateSinceMs: Int64
    let link: SecureLink
    /// The key a dial must reach (a hub announced by beacon).
    var expectedKey: [UInt8]?
    var decoder = TLVStreamDecoder()
    var queue: FrameQueue
    var writeBuffer: [UInt8] = []
    var writeOffset = 0
    var lastHeardMs: Int64
    var lastPingMs: Int64 = 0
    var bucket: TokenBucket
    var throttledSinceMs: Int64?
    var lastThrottledMs: Int64 = 0
    /// Records read but not yet handled (the peer is over its rate). Nothing more is read while
    /// it is non-empty, so it holds at most one read's worth.
    var backlog: [[UInt8]] = []
    var backlogHead = 0

    init(id: LinkID, fd: Int32, outbound: Bool, remote: IPEndpoint, state: State, link: SecureLink,
         queue: FrameQueue, bucket: TokenBucket, nowMs: Int64) {
        self.id = id; self.fd = fd; self.outbound = outbound; self.remote = remote; self.state = state
        self.link = link; self.queue = queue; self.bucket = bucket
        stateSinceMs = nowMs
        lastHeardMs = nowMs
    }

    var hasBacklog: Bool { backlogHead < backlog.count }
    var hasPendingWrite: Bool { isMidFrame || !queue.isEmpty }
    /// Whether a record is half written (then a goodbye would corrupt the stream).
    var isMidFrame: Bool { writeOffset < writeBuffer.count }

    /// Seals a control record (ping, pong) and queues it. Nothing is sent in clear after the handshake.
    func queueSealedControl(_ frame: [UInt8]) {
        guard let sealed = try? link.seal(frame) else { return }
        queueControl(sealed)
    }

    /// Queues a control record whatever the data queue's fullness: a full queue must not stall
    /// the handshake or the keepalive, so it goes straight to an idle write buffer.
    func queueControl(_ record: [UInt8]) {
        if !queue.push(record), !isMidFrame {
            writeBuffer = record
            writeOffset = 0
        }
    }

    /// The tie-break rank among two authenticated sessions with one peer: lower is kept. Sessions
    /// dialled by the side with the lower Ed25519 key come first. It depends only on the two proven
    /// keys, never on a value the peer chose, and both ends compute the same.
    func rank(ourKey: [UInt8]) -> Int {
        guard let peerKey = link.peer?.signingKey else { return 2 }
        return SecureLink.duplicateRank(ourKey: ourKey, peerKey: peerKey, weDialled: outbound)
    }
}

extension SecureStreamEngine.Counters {
    /// The sum of two engines' counters (a transport that re-creates its engine keeps totals).
    public static func + (a: Self, b: Self) -> Self {
        var c = Self()
        c.framesIn = a.framesIn + b.framesIn; c.framesOut = a.framesOut + b.framesOut
        c.bytesIn = a.bytesIn + b.bytesIn; c.bytesOut = a.bytesOut + b.bytesOut
        c.linksUpTotal = a.linksUpTotal + b.linksUpTotal; c.connectFailures = a.connectFailures + b.connectFailures
        c.handshakeFailures = a.handshakeFailures + b.handshakeFailures; c.refusedRole = a.refusedRole + b.refusedRole
        c.refusedFull = a.refusedFull + b.refusedFull; c.duplicatesClosed = a.duplicatesClosed + b.duplicatesClosed
        c.unsealedFrames = a.unsealedFrames + b.unsealedFrames; c.misbehaviourDisconnects = a.misbehaviourDisconnects + b.misbehaviourDisconnects
        c.throttled = a.throttled + b.throttled; c.rateLimitDisconnects = a.rateLimitDisconnects + b.rateLimitDisconnects
        c.idleTimeouts = a.idleTimeouts + b.idleTimeouts; c.queueFull = a.queueFull + b.queueFull
        c.halfOpenEvicted = a.halfOpenEvicted + b.halfOpenEvicted; c.crowdEvicted = a.crowdEvicted + b.crowdEvicted
        c.trustedDisplaced = a.trustedDisplaced + b.trustedDisplaced
        return c
    }
}
