import Foundation
import Logging
import YaokCrypto
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokWire

/// Measures the relay on loopback: a real server (SQLCipher in a temporary directory) and
/// real UDP clients in this process. Registered users share a few sessions (as a hub's
/// phones do: up to 512 per session), so 10,000 users need no 10,000 sockets and threads. Used by `yaok-relay bench` (build with `-c release` for
/// meaningful figures) and by the `YAOK_BENCH=1` test.
public enum RelayBenchmark {
    /// The figures.
    public struct Report: Sendable, CustomStringConvertible {
        public var clients = 0
        public var sessions = 0
        /// `udp` or `wss` (WebSocket over TLS 1.3).
        public var transport = "udp"
        public var connectSeconds = 0.0
        public var forwarded = 0
        public var forwardSeconds = 0.0
        public var queued = 0
        public var queueSeconds = 0.0
        public var drained = 0
        public var drainSeconds = 0.0
        public var leaseWaits = 0
        public var peakRSSMiB = 0
        public var metrics = RelayMetrics()

        public var description: String {
            func rate(_ n: Int, _ s: Double) -> String { s > 0 ? String(format: "%.0f", Double(n) / s) : "-" }
            return """
            relay benchmark (loopback over \(transport); relay and clients in one process)
              clients registered: \(clients) users on \(sessions) sessions in \(String(format: "%.2f", connectSeconds)) s
              forwarding to online clients: \(forwarded) messages in \(String(format: "%.2f", forwardSeconds)) s = \(rate(forwarded, forwardSeconds)) msg/s (SEND → durable queue → MSG → ACK)
              queueing for offline users:   \(queued) messages in \(String(format: "%.2f", queueSeconds)) s = \(rate(queued, queueSeconds)) msg/s
              poll + ack drain:             \(drained) messages in \(String(format: "%.2f", drainSeconds)) s = \(rate(drained, drainSeconds)) msg/s (\(leaseWaits) lease waits after a lost datagram)
              datagrams in/out: \(metrics.datagramsIn)/\(metrics.datagramsOut); dropped malformed \(metrics.droppedMalformed), rate \(metrics.droppedRateLimited), overload \(metrics.droppedOverload)
              peak RSS of the process: \(peakRSSMiB) MiB
            """
        }
    }

    public enum Failure: Error, CustomStringConvertible {
        case incomplete(String)
        public var description: String {
            switch self { case .incomplete(let what): return "benchmark incomplete: \(what)" }
        }
    }

    final class Counter: @unchecked Sendable {
        private let c = NSCondition()
        private var n = 0
        func add() { c.withLock { n += 1; c.broadcast() } }
        var value: Int { c.withLock { n } }
        func wait(for target: Int, timeout: TimeInterval) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            c.lock()
            defer { c.unlock() }
            while n < target { if !c.wait(until: deadline) { return n >= target } }
            return true
        }
    }

    /// Peak resident set size of this process (VmHWM), in KiB.
    public static func peakRSSKiB() -> Int {
        guard let s = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in s.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        return 0
    }

    /// Runs the benchmark: `clients` registered clients each send `messagesPerClient`
    /// messages to random online clients; then `offlineMessages` go to 20 offline users who
    /// come online and drain them with poll + ack.
    ///
    /// `sessions` connections carry the users (nil: one per user up to 50, then 50; at most
    /// 512 users each).
    ///
    /// With `webSocket` (a PEM certificate and its 0600 key), the clients talk to the relay
    /// over WebSocket + TLS 1.3 with the certificate's SPKI pinned, instead of UDP.
    public static func run(clients: Int = 200, sessions: Int? = nil, messagesPerClient: Int = 10, offlineMessages: Int = 2_000,
                           webSocket: (certificate: String, key: String)? = nil) throws -> Report {
        let sessionCount = max(1, min(clients, sessions ?? min(clients, 50)))
        guard (clients + sessionCount - 1) / sessionCount <= RelayLimits().maxRegistrationsPerSession else {
            throw Failure.incomplete("\(clients) users on \(sessionCount) sessions exceeds \(RelayLimits().maxRegistrationsPerSession) per session")
        }
        let dir = NSTemporaryDirectory() + "yaok-relay-bench-" + Hex.encode(Random.bytes(6))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (identity, store) = try RelayServer.openDataDirectory(dir)
        defer { store.database.close() }
        var logger = Logger(label: "yaok-relay-bench")
        logger.logLevel = .error
        var limits = RelayLimits()
        limits.messagesPerHour = 1_000_000
        limits.packetsPerSecondPerIP = 1_000_000
        limits.hellosPerSecondPerIP = 100_000
        limits.registrationsPerMinutePerIP = 1_000_000
        limits.sendsPerHourPerIP = 1_000_000_000
        limits.maxRegistrations = max(limits.maxRegistrations, clients + 100)
        limits.leaseMs = 500
        // Every client is on 127.0.0.1 and one sender may queue much: lift the shares.
        limits.maxSessionsPerPrefix = limits.maxSessions
        limits.maxQueuedPerSender = limits.maxQueuedTotal
        limits.maxQueuedPerPrefix = limits.maxQueuedTotal
        limits.maxReassemblyBytesPerPrefix = limits.maxReassemblyBytes
        limits.cookieHellosPerSecond = Int.max
        let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger,
                                     now: { Int64(Date().timeIntervalSince1970 * 1000) })
        var configuration = RelayServer.Configuration(host: "127.0.0.1", port: 0)
        var pin: [UInt8] = []
        if let webSocket {
            var ws = RelayWebSocketListener.Configuration(host: "127.0.0.1", port: 0, certificatePath: webSocket.certificate, privateKeyPath: webSocket.key)
            ws.maxConnections = sessionCount + 100
            configuration.webSocket = ws
            pin = try SPKIPin.sha256(certificateFile: webSocket.certificate)
        }
        let server = RelayServer(engine: engine, configuration: configuration, logger: logger)
        try server.start()
        defer { server.stop() }
        let address = RelayAddress(host: "127.0.0.1", port: UInt16(server.localAddress?.port ?? 0))
        let now = { Int64(Date().timeIntervalSince1970 * 1000) }
        func makeClient() -> RelayClient {
            var cfg = RelayClient.Configuration(relay: address, relaySigningKey: identity.signingKey)
            if webSocket != nil {
                let url = RelayWebSocketURL(host: "127.0.0.1", port: UInt16(server.webSocketAddress?.port ?? 0))
                cfg.makeLink = RelayWebSocketLink.factory(url: url, spkiSHA256: pin)
            }
            cfg.handshakeRetryMs = 200
            // Enough for one session's REGISTERED results; the rate counters use onEvent.
            cfg.eventHistory = 600
            return RelayClient(configuration: cfg)
        }
        /// SENDs in flight per session at most (the relay's inbox holds 10,000 datagrams).
        let window = max(8, min(256, limits.maxPendingDatagrams / (2 * sessionCount)))
        func bundle(_ from: Identity, _ to: Identity) throws -> [UInt8] {
            let e = try Envelope.sealMessage(plaintext: [UInt8](repeating: 0x61, count: 200), from: from, toSigningKey: to.signingKey,
                                             recipientKXKey: to.kxKey, createdMs: now())
            return YaokWire.Bundle(envelope: e).encoded
        }

        var report = Report()
        report.clients = clients
        report.transport = webSocket == nil ? "udp" : "wss"
        report.sessions = sessionCount
        let users = (0..<clients).map { _ in Identity.generate() }
        let queued = Counter(), received = Counter()
        var connections: [RelayClient] = []
        var credits: [DispatchSemaphore] = []
        defer { for c in connections { c.stop() } }
        let t0 = Date()
        for k in 0..<sessionCount {
            let c = makeClient()
            let credit = DispatchSemaphore(value: window)
            // Recipients acknowledge what they receive, as real clients do once it is stored:
            // otherwise the pushed messages stay queued and the relay fills up (100,000).
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
            let mine = stride(from: k, to: clients, by: sessionCount).map { users[$0] }
            guard let channel = c.channelBinding else { throw Failure.incomplete("no channel binding after connect") }
            let regs = try mine.map { try Registration.owner($0, relaySigningKey: identity.signingKey, channel: channel, timestampMs: now()) }
            let r = try c.registerAndWait(regs, timeout: 60)
            guard r.count == mine.count, r.allSatisfy({ $0.status == .accepted }) else { throw Failure.incomplete("registration refused") }
            connections.append(c)
            credits.append(credit)
        }
        report.connectSeconds = Date().timeIntervalSince(t0)
        guard server.metricsSnapshot().registeredUsers == clients else {
            throw Failure.incomplete("\(server.metricsSnapshot().registeredUsers) of \(clients) users registered")
        }

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
        // User i sends on the session that registered it; at most `window` unanswered per session.
        DispatchQueue.concurrentPerform(iterations: sessionCount) { k in
            for i in stride(from: k, to: clients, by: sessionCount) {
                for b in outgoing[i] {
                    credits[k].wait()
                    do { try connections[k].send(bundle: b) } catch { credits[k].signal() }
                }
            }
        }
        guard queued.wait(for: total, timeout: 300), received.wait(for: total, timeout: 60) else {
            throw Failure.incomplete("queued \(queued.value), received \(received.value) of \(total)")
        }
        report.forwardSeconds = Date().timeIntervalSince(t1)
        report.forwarded = total

        let offline = (0..<20).map { _ in Identity.generate() }
        let bundles = try (0..<offlineMessages).map { k in try bundle(users[k % clients], offline[k % offline.count]) }
        let before = queued.value
        let t2 = Date()
        for (k, b) in bundles.enumerated() {
            let s = k % sessionCount
            credits[s].wait()
            do { try connections[s].send(bundle: b) } catch { credits[s].signal() }
        }
        guard queued.wait(for: before + offlineMessages, timeout: 300) else { throw Failure.incomplete("queued \(queued.value - before) of \(offlineMessages); refused: \(server.metricsSnapshot().sendsRefused)") }
        report.queueSeconds = Date().timeIntervalSince(t2)
        report.queued = offlineMessages

        let t3 = Date()
        var drained = Set<[UInt8]>()
        for user in offline {
            let c = makeClient()
            defer { c.stop() }
            try c.connect(timeout: 20)
            let mark = c.currentSeq()
            guard let channel = c.channelBinding else { throw Failure.incomplete("no channel binding after connect") }
            _ = try c.registerAndWait([Registration.owner(user, relaySigningKey: identity.signingKey, channel: channel, timestampMs: now())], timeout: 20)
            let expected = offlineMessages / offline.count + (offline.firstIndex { $0.userID == user.userID }! < offlineMessages % offline.count ? 1 : 0)
            var pending = try c.nextMessages(min(limits.pollBatch, expected), after: mark, timeout: 20).map(\.bundleID)
            var rounds = 0
            while rounds < 1_000 {
                rounds += 1
                if !pending.isEmpty {
                    try c.ack(pending)
                    drained.formUnion(pending)
                }
                let left = server.withEngine { $0.queuedCount(for: user.userID) } - pending.count
                if pending.isEmpty && left <= 0 { break }
                // POLL is not retransmitted: a lost POLL or NO_MESSAGES is a round without answer.
                pending = (try? c.pollAndWait(timeout: 5).map(\.bundleID)) ?? []
                if pending.isEmpty, server.withEngine({ $0.queuedCount(for: user.userID) }) > 0 {
                    report.leaseWaits += 1   // a datagram was lost; the relay re-offers after the lease
                    Thread.sleep(forTimeInterval: Double(limits.leaseMs) / 1000)
                }
            }
        }
        report.drainSeconds = Date().timeIntervalSince(t3)
        report.drained = drained.count
        report.metrics = server.metricsSnapshot()
        report.peakRSSMiB = peakRSSKiB() / 1024
        return report
    }
}
