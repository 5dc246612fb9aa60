import Foundation
import Logging
import YaokCrypto
import YaokRelayProtocol
import YaokWire

/// Measures a two-node relay cluster on loopback: two ``RelayServer``s in this process, each
/// with its own ``RelayPostgresStore`` on one PostgreSQL database, and real UDP clients whose
/// sessions alternate between the nodes (so about half of all messages cross nodes). Used by
/// `yaok-relay bench --cluster postgres://…`; prints figures, asserts none.
///
/// Needs a scratch database with nothing queued (it refuses otherwise); it leaves no queued
/// messages behind (used nonces and hourly counters expire by themselves).
public enum RelayClusterBenchmark {
    public struct Report: Sendable, CustomStringConvertible {
        public var clients = 0
        public var sessions = 0
        public var connectSeconds = 0.0
        public var forwarded = 0
        public var forwardSeconds = 0.0
        public var queued = 0
        public var queueSeconds = 0.0
        public var drained = 0
        public var drainSeconds = 0.0
        public var leaseWaits = 0
        /// Cross-node push latency (SEND on node 0 → MSG from node 1), milliseconds, sorted.
        public var latenciesMs: [Double] = []
        public var peakRSSMiB = 0

        func percentile(_ p: Double) -> Double {
            guard !latenciesMs.isEmpty else { return 0 }
            return latenciesMs[min(latenciesMs.count - 1, Int(Double(latenciesMs.count) * p))]
        }

        public var description: String {
            func rate(_ n: Int, _ s: Double) -> String { s > 0 ? String(format: "%.0f", Double(n) / s) : "-" }
            return """
            relay cluster benchmark (two nodes in one process, one PostgreSQL, loopback UDP)
              clients registered: \(clients) users on \(sessions) sessions (alternating nodes) in \(String(format: "%.2f", connectSeconds)) s
              forwarding to online clients: \(forwarded) messages in \(String(format: "%.2f", forwardSeconds)) s = \(rate(forwarded, forwardSeconds)) msg/s (about half cross nodes)
              queueing for offline users:   \(queued) messages in \(String(format: "%.2f", queueSeconds)) s = \(rate(queued, queueSeconds)) msg/s
              poll + ack drain (other node): \(drained) messages in \(String(format: "%.2f", drainSeconds)) s = \(rate(drained, drainSeconds)) msg/s (\(leaseWaits) lease waits)
              cross-node push latency, \(latenciesMs.count) sequential messages: p50 \(String(format: "%.1f", percentile(0.5))) ms, p99 \(String(format: "%.1f", percentile(0.99))) ms
              peak RSS of the process (both nodes and all clients): \(peakRSSMiB) MiB
            """
        }
    }

    public static func run(store configuration: RelayPostgresConfiguration, clients: Int = 200, sessions: Int? = nil,
                           messagesPerClient: Int = 10, offlineMessages: Int = 2_000, latencySamples: Int = 200) throws -> Report {
        let sessionCount = max(2, min(clients, sessions ?? min(clients, 50)))
        guard (clients + sessionCount - 1) / sessionCount <= RelayLimits().maxRegistrationsPerSession else {
            throw RelayBenchmark.Failure.incomplete("\(clients) users on \(sessionCount) sessions exceeds \(RelayLimits().maxRegistrationsPerSession) per session")
        }
        var logger = Logger(label: "yaok-relay-bench")
        logger.logLevel = .error
        let observer = try RelayPostgresStore(configuration: configuration, logger: logger)
        defer { observer.close() }
        let already = try observer.countsByRecipient().values.reduce(0, +)
        guard already == 0 else {
            throw RelayBenchmark.Failure.incomplete("the database holds \(already) queued messages: run the benchmark on a scratch database")
        }
        var limits = RelayLimits()
        limits.messagesPerHour = 1_000_000
        limits.packetsPerSecondPerIP = 1_000_000
        limits.hellosPerSecondPerIP = 100_000
        limits.registrationsPerMinutePerIP = 1_000_000
        limits.sendsPerHourPerIP = 1_000_000_000
        limits.maxRegistrations = max(limits.maxRegistrations, clients + 100)
        limits.leaseMs = 1_000
        limits.maxSessionsPerPrefix = limits.maxSessions
        limits.maxQueuedPerSender = limits.maxQueuedTotal
        limits.maxQueuedPerPrefix = limits.maxQueuedTotal
        limits.maxReassemblyBytesPerPrefix = limits.maxReassemblyBytes
        limits.cookieHellosPerSecond = Int.max
        let identity = Identity.generate()
        let now = { Int64(Date().timeIntervalSince1970 * 1000) }
        var servers: [RelayServer] = []
        var stores: [RelayPostgresStore] = []
        defer {
            for s in servers { s.stop() }
            for s in stores { s.close() }
        }
        for _ in 0..<2 {
            let store = try RelayPostgresStore(configuration: configuration, logger: logger)
            stores.append(store)
            let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger, now: now)
            let server = RelayServer(engine: engine, configuration: .init(host: "127.0.0.1", port: 0), logger: logger)
            try server.start()
            servers.append(server)
        }
        let addresses = servers.map { RelayAddress(host: "127.0.0.1", port: UInt16($0.localAddress?.port ?? 0)) }
        func makeClient(node: Int) -> RelayClient {
            var cfg = RelayClient.Configuration(relay: addresses[node], relaySigningKey: identity.signingKey)
            cfg.handshakeRetryMs = 200
            cfg.eventHistory = 600
            return RelayClient(configuration: cfg)
        }
        func register(_ users: [Identity], on c: RelayClient) throws {
            guard let channel = c.channelBinding else { throw RelayBenchmark.Failure.incomplete("no channel binding after connect") }
            let regs = try users.map { try Registration.owner($0, relaySigningKey: identity.signingKey, channel: channel, timestampMs: now()) }
            let r = try c.registerAndWait(regs, timeout: 60)
            guard r.count == users.count, r.allSatisfy({ $0.status == .accepted }) else { throw RelayBenchmark.Failure.incomplete("registration refused") }
        }
        let window = max(8, min(256, limits.maxPendingDatagrams / (2 * sessionCount)))
        func bundle(_ from: Identity, _ to: Identity) throws -> [UInt8] {
            let e = try Envelope.sealMessage(plaintext: [UInt8](repeating: 0x61, count: 200), from: from, toSigningKey: to.signingKey,
                                             recipientKXKey: to.kxKey, createdMs: now())
            return YaokWire.Bundle(envelope: e).encoded
        }

        var report = Report()
        report.clients = clients
        report.sessions = sessionCount
        let users = (0..<clients).map { _ in Identity.generate() }
        let queued = RelayBenchmark.Counter(), received = RelayBenchmark.Counter()
        var connections: [RelayClient] = []
        var credits: [DispatchSemaphore] = []
        defer { for c in connections { c.stop() } }
        let t0 = Date()
        for k in 0..<sessionCount {
            let c = makeClient(node: k % 2)
            let credit = DispatchSemaphore(value: window)
            c.onEvent = { [weak c] event in
                switch event {
                case .queued: queued.add(); credit.signal()
                case .sendFailed: credit.signal()
                case .message(_, let id):
                    received.add()
                    try? c?.ack([id])
                default: break
                }
            }
            try c.connect(timeout: 20)
            try register(stride(from: k, to: clients, by: sessionCount).map { users[$0] }, on: c)
            connections.append(c)
            credits.append(credit)
        }
        report.connectSeconds = Date().timeIntervalSince(t0)

        var outgoing: [[[UInt8]]] = []
        for i in 0..<clients {
            outgoing.append(try (0..<messagesPerClient).map { _ in
                var j = Int.random(in: 0..<clients)
                if j == i { j = (j + 1) % clients }
                return try bundle(users[i], users[j])
            })
        }
        let total = clients * messagesPerClient
        let t1 = Date()
        DispatchQueue.concurrentPerform(iterations: sessionCount) { k in
            for i in stride(from: k, to: clients, by: sessionCount) {
                for b in outgoing[i] {
                    credits[k].wait()
                    do { try connections[k].send(bundle: b) } catch { credits[k].signal() }
                }
            }
        }
        guard queued.wait(for: total, timeout: 600), received.wait(for: total, timeout: 120) else {
            throw RelayBenchmark.Failure.incomplete("queued \(queued.value), received \(received.value) of \(total)")
        }
        report.forwardSeconds = Date().timeIntervalSince(t1)
        report.forwarded = total

        // Cross-node push latency: one sender on node 0, one recipient on node 1, one message at a time.
        let sender = Identity.generate(), recipient = Identity.generate()
        let s = makeClient(node: 0), r = makeClient(node: 1)
        defer { s.stop(); r.stop() }
        try s.connect(timeout: 20)
        try r.connect(timeout: 20)
        try register([sender], on: s)
        try register([recipient], on: r)
        var latencies: [Double] = []
        for _ in 0..<latencySamples {
            let b = try bundle(sender, recipient)
            let mark = r.currentSeq()
            let t = Date()
            _ = try s.sendAndWait(bundle: b)
            let got = try r.nextMessage(after: mark, timeout: 10)
            latencies.append(Date().timeIntervalSince(t) * 1000)
            try r.ack([got.bundleID])
        }
        report.latenciesMs = latencies.sorted()

        // Offline users: queued through both nodes, drained on node 1 by poll + ack.
        let offline = (0..<20).map { _ in Identity.generate() }
        let bundles = try (0..<offlineMessages).map { k in try bundle(users[k % clients], offline[k % offline.count]) }
        let before = queued.value
        let t2 = Date()
        for (k, b) in bundles.enumerated() {
            let sIndex = k % sessionCount
            credits[sIndex].wait()
            do { try connections[sIndex].send(bundle: b) } catch { credits[sIndex].signal() }
        }
        guard queued.wait(for: before + offlineMessages, timeout: 600) else {
            throw RelayBenchmark.Failure.incomplete("queued \(queued.value - before) of \(offlineMessages)")
        }
        report.queueSeconds = Date().timeIntervalSince(t2)
        report.queued = offlineMessages

        let t3 = Date()
        var drained = Set<[UInt8]>()
        for (index, user) in offline.enumerated() {
            let c = makeClient(node: 1)
            defer { c.stop() }
            try c.connect(timeout: 20)
            let mark = c.currentSeq()
            try register([user], on: c)
            let expected = offlineMessages / offline.count + (index < offlineMessages % offline.count ? 1 : 0)
            var mine = Set<[UInt8]>()
            var pending = try c.nextMessages(min(limits.pollBatch, expected), after: mark, timeout: 20).map(\.bundleID)
            var rounds = 0
            while rounds < 2_000 {
                rounds += 1
                if !pending.isEmpty {
                    try c.ack(pending)
                    mine.formUnion(pending)
                }
                if mine.count >= expected { break }
                pending = (try? c.pollAndWait(timeout: 5).map(\.bundleID)) ?? []
                if pending.isEmpty {
                    report.leaseWaits += 1
                    Thread.sleep(forTimeInterval: Double(limits.leaseMs) / 1000)
                }
            }
            drained.formUnion(mine)
        }
        report.drainSeconds = Date().timeIntervalSince(t3)
        report.drained = drained.count
        report.peakRSSMiB = RelayBenchmark.peakRSSKiB() / 1024
        return report
    }
}
