#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Synchronization
import YaokPluginKit

/// The mesh transport's machinery: the kit's ``SecureStreamEngine`` carries the authenticated
/// TCP links between hubs; this adds what is the mesh's own: multicast beacons (IPv4 and
/// link-local IPv6) that find neighbours, and the dial table of configured and discovered hubs
/// with its backoff.
///
/// Discovery runs on its own thread under its own lock. Stream events reach it from the engine's
/// poll thread with the engine's lock released, and this engine calls into the stream engine
/// while holding its own lock (never the reverse), so the two locks cannot deadlock.
// @unchecked: its state only under `lock` (the discovery thread takes it too).
public final class MeshEngine: @unchecked Sendable {
    /// Counters shown in status: the mesh's own, and the stream engine's (``link``), readable
    /// as if they were one struct (`counters.handshakeFailures`).
    @dynamicMemberLookup
    public struct Counters: Sendable, Equatable {
        public var bundlesIn: UInt64 = 0, bundlesOut: UInt64 = 0
        public var beaconsSent: UInt64 = 0, beaconsReceived: UInt64 = 0, beaconsBad: UInt64 = 0
        public var beaconsStale: UInt64 = 0, beaconsMalformed: UInt64 = 0, beaconsDropped: UInt64 = 0, beaconSendErrors: UInt64 = 0
        public var link = SecureStreamEngine.Counters()
        public subscript<T>(dynamicMember path: KeyPath<SecureStreamEngine.Counters, T>) -> T { link[keyPath: path] }
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
        case configured(IPEndpoint)
        case discovered([UInt8])
    }

    struct DialTarget {
        var address: IPEndpoint
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
        case log(LogLevel, String)
        case counter(String, Double)
        case statusChanged
    }

    /// Largest frame: a whole TLV record in one sealed record.
    public static let mtu = SecureStreamEngine.mtu

    public let settings: MeshSettings
    private let identity: LinkIdentity
    private let wallClockMs: @Sendable () -> Int64
    private let monotonicNs: @Sendable () -> UInt64
    private let links: SecureStreamEngine
    private let events: any LinkEvents

    private let lock = NSLock()
    private var running = false
    private var threadAlive = false
    private var exited = DispatchSemaphore(value: 0)
    private var beaconFD: Int32 = -1
    private var beaconFD6: Int32 = -1
    private var ipv6Problem: String?
    private var wakeRead: Int32 = -1
    private var wakeWrite: Int32 = -1
    private var boundListen: IPEndpoint?
    private var boundListen6: IPEndpoint?
    /// Up links by proven key and the reverse, as the stream engine reported them.
    private var upByKey: [[UInt8]: LinkID] = [:]
    private var keyByLink: [LinkID: [UInt8]] = [:]
    private var targets: [TargetKey: DialTarget] = [:]
    private var counters = Counters()
    private var pending: [Event] = []
    private var bundlesByPeer: [String: (UInt64, UInt64)] = [:]
    private var lastError: String?
    private var joined: [String: NetworkInterface] = [:]
    /// Interfaces whose IPv6 group we joined (by name; the index and link-local address as joined).
    private var joined6: [String: NetworkInterface] = [:]
    private var missingInterfaces: [String] = []
    private var beaconProblem: String?
    private var nextBeaconMs: Int64 = 0
    private var nextInterfaceScanMs: Int64 = 0
    /// Beacon verification costs CPU: a flood gets a fixed budget per second.
    private var beaconVerifyBudget = TokenBucket(capacity: 200, nowMs: 0)

    /// - Parameter events: where links, frames, log lines and metrics are reported; called on the
    ///   stream or discovery thread, never under a lock.
    public init(identity: LinkIdentity, settings: MeshSettings,
                wallClockMs: @escaping @Sendable () -> Int64,
                monotonicNs: @escaping @Sendable () -> UInt64,
                events: any LinkEvents) {
        self.identity = identity
        self.settings = settings
        self.wallClockMs = wallClockMs
        self.monotonicNs = monotonicNs
        self.events = events
        var s = SecureStreamEngine.Settings(kind: "tcp", role: .hub, peerRoles: [.hub], cost: settings.cost, metricPrefix: "mesh")
        s.maxSessions = settings.maxSessions
        s.connectTimeoutMs = settings.connectTimeoutMs
        s.handshakeTimeoutMs = settings.handshakeTimeoutMs
        s.idleTimeoutMs = settings.idleTimeoutMs
        s.idleTimeoutKey = "idle_timeout_s"
        s.keepaliveMs = settings.keepaliveMs
        s.queueFrames = settings.queueFrames
        s.queueBytes = settings.queueBytes
        s.maxFramesPerSecond = settings.maxFramesPerSecond
        s.threadName = "yaok-mesh-links"
        let relay = StreamEvents()
        links = SecureStreamEngine(identity: identity, settings: s, events: relay,
                                   sessionEnded: { [relay] in relay.sessionEnded($0) })
        links.trustedPeerKeys = settings.trustedHubKeys
        relay.attach(self)
    }

    private var nowMs: Int64 { Int64(monotonicNs() / 1_000_000) }

    // MARK: Lifecycle

    /// Binds the listener (throws when it cannot), opens the beacon socket (a failure there
    /// only degrades), and starts the link and discovery threads.
    public func start() throws {
        let (isRunning, oldThreadAlive) = lock.withLock { (self.running, self.threadAlive) }
        if isRunning { return }
        // A previous discovery thread that has not finished cleaning up yet: give it a moment.
        if oldThreadAlive { _ = lock.withLock({ exited }).wait(timeout: .now() + 2) }
        try links.start()
        let listen: IPEndpoint
        do {
            listen = try links.listen(on: settings.listen)
        } catch {
            links.stop()
            throw error
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            links.stop()
            throw TransportError.system(call: "pipe", errno: errno)
        }
        for fd in fds { PosixSocket.setNonBlocking(fd); _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var beacon: Int32 = -1
        var problem: String?
        if settings.discovery {
            do { beacon = try Sockets.beaconSocket(port: settings.beaconPort) } catch { problem = "\(error)" }
        }
        // IPv6 is an addition: without it (no IPv6 in the kernel, port taken) IPv4 still works.
        var listen6: IPEndpoint?
        var beacon6: Int32 = -1
        var problems6: [String] = []
        if settings.ipv6 {
            do { listen6 = try links.listen(on: IPEndpoint(host: "::", port: listen.port)) } catch { problems6.append("\(error)") }
            if settings.discovery {
                do { beacon6 = try Sockets.beaconSocket6(port: settings.beaconPort) } catch { problems6.append("\(error)") }
            }
        }
        let now = nowMs
        let done = DispatchSemaphore(value: 0)
        lock.withLock {
            beaconFD = beacon
            beaconProblem = problem
            beaconFD6 = beacon6
            boundListen = listen
            boundListen6 = listen6
            ipv6Problem = problems6.isEmpty ? nil : problems6.joined(separator: "; ")
            if let p = ipv6Problem { pending.append(.log(.warning, "IPv6 unavailable: \(p)")) }
            wakeRead = fds[0]
            wakeWrite = fds[1]
            running = true
            exited = done
            threadAlive = true
            targets = [:]
            for peer in settings.peers {
                targets[.configured(peer)] = DialTarget(address: peer, nextAttemptMs: now)
            }
            nextBeaconMs = now
            nextInterfaceScanMs = now
            beaconVerifyBudget = TokenBucket(capacity: 200, nowMs: now)
            if let problem { pending.append(.log(.warning, "discovery is off: \(problem)")) }
        }
        let thread = Thread { [weak self] in self?.run(exited: done) }
        thread.name = "yaok-mesh"
        thread.start()
    }

    /// Stops both threads: says goodbye on every link, reports each down, closes every socket.
    /// Returns within about 3 s.
    public func stop() {
        let wasRunning: Bool = lock.withLock {
            let was = running
            running = false
            return was
        }
        guard wasRunning else { return }
        wake()
        _ = lock.withLock({ exited }).wait(timeout: .now() + 1.5)
        links.stop()
    }

    /// The bound listener address (useful with port 0).
    public var listenAddress: IPEndpoint? { lock.withLock { boundListen } }

    // MARK: Sending

    /// Queues one frame for a link; throws when the link is not up or its queue is full. Never blocks.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        try links.send(frame, to: link)
        if frame.first == FrameType.bundle.rawValue {
            lock.withLock {
                counters.bundlesOut += 1
                if let key = keyByLink[link] { bundlesByPeer[Self.shortKey(key), default: (0, 0)].1 += 1 }
            }
        }
    }

    private func wake() {
        let fd = lock.withLock { wakeWrite }
        guard fd >= 0 else { return }
        var b: UInt8 = 1
        _ = write(fd, &b, 1)
    }

    // MARK: Status

    public var snapshot: Snapshot {
        let link = links.snapshot
        return lock.withLock {
            let neighbours = link.links.map { "\(Self.shortKey($0.peerKey))@\($0.remote)" }.sorted()
            let names = Set(joined.keys).union(joined6.keys).sorted()
            let interfaces = names.map { name in
                "\(name)(\([joined[name]?.ipv4, joined6[name]?.linkLocal6].compactMap { $0 }.joined(separator: ","))"
            }
            var c = counters
            c.link = link.counters
            return Snapshot(running: running, listen: (boundListen ?? settings.listen).description,
                            interfaces: interfaces,
                            missingInterfaces: missingInterfaces, listen6: boundListen6?.description, ipv6Problem: ipv6Problem,
                            beaconProblem: beaconProblem,
                            sessions: link.sessions, neighbours: neighbours, peersSeen: link.peersSeen,
                            counters: c, lastError: link.lastError ?? lastError, bundlesByPeer: bundlesByPeer)
        }
    }

    /// The first 4 bytes of a key in hex: enough for an operator to tell hubs apart.
    static func shortKey(_ key: [UInt8]) -> String { SecureStreamEngine.shortKey(key) }

    // MARK: Stream events (the link thread, no lock held on entry)

    /// The stream engine's reports, through the mesh engine: it keeps its link table, bundle
    /// counts and dial targets from them, and passes them on to ``events``. It holds the mesh
    /// engine weakly (the mesh engine owns the stream engine, which holds this), attached at
    /// the end of the mesh engine's `init`, before the stream engine can start.
    private final class StreamEvents: LinkEvents {
        private struct Weak { weak var mesh: MeshEngine? }
        private let owner = Mutex(Weak())
        private var mesh: MeshEngine? { owner.withLock { $0.mesh } }

        func attach(_ mesh: MeshEngine) { owner.withLock { $0.mesh = mesh } }

        func linkUp(_ link: LinkInfo) { mesh?.linkCameUp(link) }
        func linkDown(_ id: LinkID, reason: String?) { mesh?.linkWentDown(id, reason) }
        func frameReceived(_ frame: [UInt8], on link: LinkID) { mesh?.frameArrived(frame, link) }
        func statusChanged() { mesh?.events.statusChanged() }
        func log(_ level: LogLevel, _ message: String) { mesh?.events.log(level, message) }
        func increment(_ name: String, by value: Double) { mesh?.events.increment(name, by: value) }
        func gauge(_ name: String, _ value: Double) { mesh?.events.gauge(name, value) }
        func sessionEnded(_ end: SecureStreamEngine.SessionEnd) { mesh?.sessionEnded(end) }
    }

    private func linkCameUp(_ info: LinkInfo) {
        lock.withLock {
            upByKey[info.peerSigningKey] = info.id
            keyByLink[info.id] = info.peerSigningKey
            for (k, t) in targets where t.sessionID == info.id {
                targets[k]?.backoff.reset()
                if case .configured = k { targets[k]?.learnedKey = info.peerSigningKey }
            }
        }
        events.linkUp(info)
    }

    private func linkWentDown(_ id: LinkID, _ reason: String?) {
        lock.withLock {
            if let key = keyByLink.removeValue(forKey: id), upByKey[key] == id { upByKey[key] = nil }
        }
        events.linkDown(id, reason: reason)
    }

    private func frameArrived(_ frame: [UInt8], _ id: LinkID) {
        if frame.first == FrameType.bundle.rawValue {
            lock.withLock {
                counters.bundlesIn += 1
                if let key = keyByLink[id] { bundlesByPeer[Self.shortKey(key), default: (0, 0)].0 += 1 }
            }
        }
        events.frameReceived(frame, on: id)
    }

    /// Reschedules the dial target a session belonged to.
    private func sessionEnded(_ end: SecureStreamEngine.SessionEnd) {
        lock.withLock {
            guard let (key, target) = targets.first(where: { $0.value.sessionID == end.id }) else { return }
            var t = target
            t.sessionID = nil
            if end.isSelf, case .configured = key {
                t.isSelf = true
            } else if end.wasUp {
                // A link that worked: try again soon.
                t.backoff.reset()
                t.nextAttemptMs = nowMs + 1_000
            } else {
                t.nextAttemptMs = nowMs + t.backoff.nextDelayMs() * (end.misbehaving ? 10 : 1)
            }
            targets[key] = t
        }
    }

    // MARK: The discovery thread

    private func run(exited: DispatchSemaphore) {
        var datagram = [UInt8](repeating: 0, count: 2_048)
        while true {
            var pfds: [pollfd] = []
            let keepGoing: Bool = lock.withLock {
                guard running else { return false }
                pfds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
                        pollfd(fd: beaconFD, events: Int16(POLLIN), revents: 0),
                        pollfd(fd: beaconFD6, events: Int16(POLLIN), revents: 0)]
                return true
            }
            if !keepGoing { break }
            _ = poll(&pfds, nfds_t(pfds.count), 100)
            lock.withLock {
                if pfds[0].revents != 0 {
                    var sink = [UInt8](repeating: 0, count: 64)
                    while read(wakeRead, &sink, sink.count) > 0 {}
                }
                if beaconFD >= 0 && pfds[1].revents & Int16(POLLIN) != 0 { receiveBeacons(beaconFD, &datagram) }
                if beaconFD6 >= 0 && pfds[2].revents & Int16(POLLIN) != 0 { receiveBeacons(beaconFD6, &datagram) }
                tick()
            }
            deliverPending()
        }
        lock.withLock {
            for fd in [beaconFD, beaconFD6, wakeRead, wakeWrite] where fd >= 0 { Glibc.close(fd) }
            beaconFD = -1
            beaconFD6 = -1
            wakeRead = -1
            wakeWrite = -1
            joined.removeAll()
            joined6.removeAll()
            threadAlive = false
        }
        deliverPending()
        exited.signal()
    }

    private func deliverPending() {
        let batch: [Event] = lock.withLock {
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        for e in batch {
            switch e {
            case .log(let level, let message): events.log(level, message)
            case .counter(let name, let value): events.increment(name, by: value)
            case .statusChanged: events.statusChanged()
            }
        }
    }

    // MARK: Timers and dialling (under the lock)

    private func tick() {
        let now = nowMs
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
        // Slots are kept for configured peers (dialled whatever the count) and trusted hubs heard
        // by beacon that we have no session with.
        links.reservedSlots = targets.filter { key, t in
            guard t.sessionID == nil && !t.isSelf else { return false }
            if case .discovered(let k) = key { return settings.trustedHubKeys.contains(k) && upByKey[k] == nil }
            return true
        }.count
        for (key, t) in targets where t.sessionID == nil && !t.isSelf && now >= t.nextAttemptMs {
            if let k = t.expectedKey ?? t.learnedKey, upByKey[k] != nil {
                targets[key]?.nextAttemptMs = now + 1_000
                continue
            }
            // A discovered hub gets a place as an inbound peer from its network would; a trusted
            // one, the place of a stranger's session if need be.
            if case .discovered(let k) = key, !links.makeRoomToDial(t.address, trustedPeer: settings.trustedHubKeys.contains(k)) { continue }
            var target = t
            do {
                target.sessionID = try links.dial(t.address, expectedKey: t.expectedKey)
            } catch {
                lastError = "\(error)"
                target.nextAttemptMs = now + target.backoff.nextDelayMs()
            }
            targets[key] = target
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
                    problems.append("\(name) (cannot join \(settings.multicastGroup): \(PosixSocket.errorText(e)))")
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
                problems.append("\(name) (cannot join \(settings.multicastGroup6): \(PosixSocket.errorText(e)))")
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
        let group = IPEndpoint(host: settings.multicastGroup, port: settings.beaconPort)
        for i in joined.values {
            guard let address = i.ipv4 else { continue }
            results.append((i.name, Sockets.sendMulticast(beaconFD, bytes, group: group, interfaceAddress: address)))
        }
        let group6 = IPEndpoint(host: settings.multicastGroup6, port: settings.beaconPort)
        for i in joined6.values {
            results.append(("\(i.name) (IPv6)", Sockets.sendMulticast6(beaconFD6, bytes, group: group6, interfaceIndex: i.index)))
        }
        for (name, error) in results {
            if let e = error {
                // A link-local address still in duplicate address detection cannot send yet: retried next beacon.
                counters.beaconSendErrors += 1
                lastError = "beacon on \(name): \(PosixSocket.errorText(e))"
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
            guard beaconVerifyBudget.take(capacity: 200, perMs: 0.2, nowMs: nowMs) == nil else {
                counters.beaconsDropped += 1
                continue
            }
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
            heard(beacon, from: IPEndpoint(host: from.host, port: beacon.tcpPort, scopeID: from.isLinkLocal6 ? from.scopeID : 0))
        }
    }

    private func heard(_ beacon: Beacon, from address: IPEndpoint) {
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
            // Throwaway keys beaconing cannot push a trusted hub out of the table.
            guard let victim = discovered.filter({ key, t in
                guard t.sessionID == nil, case .discovered(let k) = key else { return false }
                return !settings.trustedHubKeys.contains(k)
            }).min(by: { $0.value.lastBeaconMs < $1.value.lastBeaconMs }) else {
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
