import Foundation
import YaokCrypto
import YaokRelayServer
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokWire
import enum YaokPluginKit.Hex
import struct YaokPluginKit.IPEndpoint

/// Measures relay nodes on loopback. Each node is a real `yaok-relay run` process (the binary
/// passed in), so the figures include its memory alone; the clients are real ``RelayClient``s
/// in this process. Registered users share a few sessions (as a hub's phones do: up to 512 per
/// session), so 10,000 users need no 10,000 sockets and threads. One node with its SQLCipher
/// store (``run(relay:clients:sessions:messagesPerClient:offlineMessages:latencySamples:webSocket:)``)
/// or two on one PostgreSQL database (``RelayClusterBenchmark``) run the same phases:
///
/// 1. register the users, sessions alternating between the nodes;
/// 2. forwarding: each user sends to random online users, who acknowledge (with two nodes,
///    about half of the messages are queued on one node and pushed by the other);
/// 3. push latency: one message at a time from a user on the first node to one on the last;
/// 4. queueing for 20 offline users through every node, then draining them by poll + ack on
///    the last node.
///
/// Used by `yaok-relay bench` (build with `-c release` for meaningful figures) and by the
/// `YAOK_BENCH=1` test. Prints figures; asserts none.
public enum RelayBenchmark {
    /// Memory of one node, in KiB (from `/proc/PID/status`).
    public struct NodeMemory: Sendable {
        public var pid: Int32 = 0
        /// VmRSS once every user is registered (before any message).
        public var registeredRSSKiB = 0
        /// VmRSS at the end of the run.
        public var endRSSKiB = 0
        /// VmHWM at the end of the run: the node's peak.
        public var peakRSSKiB = 0
    }

    /// The figures.
    public struct Report: Sendable, CustomStringConvertible {
        /// `sqlcipher` (one node) or `postgres` (a cluster).
        public var store = "sqlcipher"
        /// `udp` or `wss` (WebSocket over TLS 1.3).
        public var transport = "udp"
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
        /// Push latency (SEND on the first node → MSG from the last), milliseconds, sorted.
        public var latenciesMs: [Double] = []
        /// Counters summed over the nodes (from their `/metrics`).
        public var datagramsIn = 0, datagramsOut = 0, droppedMalformed = 0, droppedRateLimited = 0, droppedOverload = 0
        /// Per node.
        public var nodes: [NodeMemory] = []
        /// Peak RSS of the benchmark process itself (the clients), KiB.
        public var clientsPeakRSSKiB = 0

        func percentile(_ p: Double) -> Double {
            guard !latenciesMs.isEmpty else { return 0 }
            return latenciesMs[min(latenciesMs.count - 1, Int(Double(latenciesMs.count) * p))]
        }

        public var description: String {
            func rate(_ n: Int, _ s: Double) -> String { s > 0 ? String(format: "%.0f", Double(n) / s) : "-" }
            func mib(_ kib: Int) -> String { String(format: "%.1f MiB", Double(kib) / 1024) }
            let two = nodes.count > 1
            let what = two ? "\(nodes.count) nodes on one PostgreSQL" : "one node, \(store)"
            var lines = [
                "relay benchmark (\(what); each node a `yaok-relay run` process; clients in this process over loopback \(transport))",
                "  clients registered: \(clients) users on \(sessions) sessions\(two ? " (alternating nodes)" : "") in \(String(format: "%.2f", connectSeconds)) s",
                "  forwarding to online clients: \(forwarded) messages in \(String(format: "%.2f", forwardSeconds)) s = \(rate(forwarded, forwardSeconds)) msg/s (SEND → durable queue → MSG → ACK\(two ? "; about half cross nodes" : ""))",
                "  queueing for offline users:   \(queued) messages in \(String(format: "%.2f", queueSeconds)) s = \(rate(queued, queueSeconds)) msg/s",
                "  poll + ack drain\(two ? " (last node)" : ""):\(two ? "" : "             ") \(drained) messages in \(String(format: "%.2f", drainSeconds)) s = \(rate(drained, drainSeconds)) msg/s (\(leaseWaits) lease waits after a lost datagram)",
                "  push latency\(two ? " across nodes" : " on the node"), \(latenciesMs.count) sequential messages: p50 \(String(format: "%.1f", percentile(0.5))) ms, p99 \(String(format: "%.1f", percentile(0.99))) ms",
                "  datagrams in/out: \(datagramsIn)/\(datagramsOut); dropped malformed \(droppedMalformed), rate \(droppedRateLimited), overload \(droppedOverload)",
            ]
            for (i, n) in nodes.enumerated() {
                lines.append("  node \(i) RSS (pid \(n.pid)): \(mib(n.registeredRSSKiB)) with \(clients) users registered, \(mib(n.endRSSKiB)) at the end, peak (VmHWM) \(mib(n.peakRSSKiB))")
            }
            lines.append("  peak RSS of the benchmark process (the clients): \(mib(clientsPeakRSSKiB))")
            return lines.joined(separator: "\n")
        }
    }

    public enum Failure: Error, CustomStringConvertible {
        case incomplete(String)
        public var description: String {
            switch self { case .incomplete(let what): return "benchmark incomplete: \(what)" }
        }
    }

    // @unchecked: `n` only under `c`.
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

    /// The `yaok-relay run` options that lift every per-address and per-sender limit a
    /// loopback benchmark exceeds (all its users come from 127.0.0.1), for `users` users.
    static func unthrottledNodeArguments(users: Int) -> [String] {
        let limits = RelayLimits()
        return ["--messages-per-hour", "1000000", "--packets-per-second-per-ip", "1000000",
                "--hellos-per-second-per-ip", "100000", "--registrations-per-minute-per-ip", "1000000",
                "--sends-per-hour-per-ip", "1000000000", "--max-registrations", "\(max(limits.maxRegistrations, users + 100))",
                "--lease-seconds", "1", "--cookie-hellos-per-second", "1000000000",
                "--sessions-per-prefix", "\(limits.maxSessions)", "--queue-share-per-sender", "\(limits.maxQueuedTotal)",
                "--queue-share-per-prefix", "\(limits.maxQueuedTotal)", "--reassembly-share-per-prefix", "\(limits.maxReassemblyBytes)"]
    }

    /// A fresh 0700 directory under the system's temporary directory.
    static func temporaryDirectory(_ prefix: String) throws -> String {
        let dir = NSTemporaryDirectory() + prefix + Hex.encode(Random.bytes(6))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return dir
    }

    /// One node with its SQLCipher store in a temporary directory: `clients` registered
    /// clients each send `messagesPerClient` messages to random online clients; then
    /// `offlineMessages` go to 20 offline users who come online and drain them with poll + ack.
    ///
    /// - Parameters:
    ///   - relay: the `yaok-relay` executable the node runs as.
    ///   - sessions: connections carrying the users (nil: one per user up to 50, then 50; at
    ///     most 512 users each).
    ///   - webSocket: a PEM certificate and its 0600 key: the clients then talk to the node
    ///     over WebSocket + TLS 1.3 with the certificate's SPKI pinned, instead of UDP.
    public static func run(relay: String, clients: Int = 200, sessions: Int? = nil, messagesPerClient: Int = 10,
                           offlineMessages: Int = 2_000, latencySamples: Int = 200,
                           webSocket: (certificate: String, key: String)? = nil) throws -> Report {
        let dir = try temporaryDirectory("yaok-relay-bench-")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var arguments = unthrottledNodeArguments(users: clients)
        if let webSocket {
            arguments += ["--wss-listen", "127.0.0.1:0", "--tls-cert", webSocket.certificate, "--tls-key", webSocket.key]
        }
        let node = try RelayNodeProcess(executable: relay, dataDir: dir + "/node0", arguments: arguments)
        defer { node.stop() }
        var report = try drive([node], webSocket: webSocket != nil, clients: clients, sessions: sessions,
                               messagesPerClient: messagesPerClient, offlineMessages: offlineMessages, latencySamples: latencySamples)
        report.store = "sqlcipher"
        return report
    }

    /// The phases (see the type's documentation), on running nodes that sign with one key.
    static func drive(_ nodes: [RelayNodeProcess], webSocket: Bool = false, clients: Int, sessions: Int?,
                      messagesPerClient: Int, offlineMessages: Int, latencySamples: Int) throws -> Report {
        let limits = RelayLimits()
        let sessionCount = max(nodes.count, min(clients, sessions ?? min(clients, 50)))
        guard (clients + sessionCount - 1) / sessionCount <= limits.maxRegistrationsPerSession else {
            throw Failure.incomplete("\(clients) users on \(sessionCount) sessions exceeds \(limits.maxRegistrationsPerSession) per session")
        }
        let key = nodes[0].key
        guard nodes.allSatisfy({ $0.key == key }) else { throw Failure.incomplete("the nodes do not sign with one key") }
        let now = { Int64(Date().timeIntervalSince1970 * 1000) }
        func makeClient(node: Int) -> RelayClient {
            let n = nodes[node]
            var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: UInt16(n.port)), relaySigningKey: key)
            if webSocket {
                cfg.makeLink = RelayWebSocketLink.factory(url: RelayWebSocketURL(host: "127.0.0.1", port: UInt16(n.wssPort)), spkiSHA256: n.tlsPin)
            }
            cfg.handshakeRetryMs = 200
            // Enough for one session's REGISTERED results; the rate counters use onEvent.
            cfg.eventHistory = 600
            return RelayClient(configuration: cfg)
        }
        func register(_ users: [Identity], on c: RelayClient) throws {
            guard let channel = c.channelBinding else { throw Failure.incomplete("no channel binding after connect") }
            let regs = try users.map { try Registration.owner($0, relaySigningKey: key, channel: channel, timestampMs: now()) }
            let r = try c.registerAndWait(regs, timeout: 60)
            guard r.count == users.count, r.allSatisfy({ $0.status == .accepted }) else {
                throw Failure.incomplete("registration refused: \(Set(r.map { "\($0.status)" }).sorted())")
            }
        }
        /// SENDs in flight per session at most (a node's inbox holds 10,000 datagrams).
        let window = max(8, min(256, limits.maxPendingDatagrams / (2 * sessionCount)))
        func bundle(_ from: Identity, _ to: Identity) throws -> [UInt8] {
            let e = try Envelope.sealMessage(plaintext: [UInt8](repeating: 0x61, count: 200), from: from, toSigningKey: to.signingKey,
                                             recipientKXKey: to.kxKey, createdMs: now())
            return YaokWire.Bundle(envelope: e).encoded
        }
        /// `metric` over every node and every label set.
        func sum(_ metric: String) -> Int {
            nodes.reduce(0) { acc, n in
                acc + n.metrics().reduce(0) { $0 + ($1.key == metric || $1.key.hasPrefix(metric + "{") ? Int($1.value) : 0) }
            }
        }

        var report = Report()
        report.clients = clients
        report.transport = webSocket ? "wss" : "udp"
        report.sessions = sessionCount
        let users = (0..<clients).map { _ in Identity.generate() }
        let queued = Counter(), received = Counter()
        var connections: [RelayClient] = []
        var credits: [DispatchSemaphore] = []
        defer { for c in connections { c.stop() } }
        let t0 = Date()
        for k in 0..<sessionCount {
            let c = makeClient(node: k % nodes.count)
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
            try register(stride(from: k, to: clients, by: sessionCount).map { users[$0] }, on: c)
            connections.append(c)
            credits.append(credit)
        }
        report.connectSeconds = Date().timeIntervalSince(t0)
        let registered = sum("yaok_relay_registered_users")
        guard registered == clients else { throw Failure.incomplete("\(registered) of \(clients) users registered") }
        report.nodes = nodes.map { NodeMemory(pid: $0.pid, registeredRSSKiB: $0.memory().rssKiB) }

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
        // Frozen copies: the senders run concurrently and only read them.
        let (plan, sessions, gates) = (outgoing, connections, credits)
        DispatchQueue.concurrentPerform(iterations: sessionCount) { k in
            for i in stride(from: k, to: clients, by: sessionCount) {
                for b in plan[i] {
                    gates[k].wait()
                    do { try sessions[k].send(bundle: b) } catch { gates[k].signal() }
                }
            }
        }
        guard queued.wait(for: total, timeout: 600), received.wait(for: total, timeout: 120) else {
            throw Failure.incomplete("queued \(queued.value), received \(received.value) of \(total); refused: \(sum("yaok_relay_sends_refused_total"))")
        }
        report.forwardSeconds = Date().timeIntervalSince(t1)
        report.forwarded = total

        // Push latency: one sender on the first node, one recipient on the last, one message at a time.
        let sender = Identity.generate(), recipient = Identity.generate()
        let s = makeClient(node: 0), r = makeClient(node: nodes.count - 1)
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

        // Offline users: queued through every node, drained on the last by poll + ack.
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
            throw Failure.incomplete("queued \(queued.value - before) of \(offlineMessages); refused: \(sum("yaok_relay_sends_refused_total"))")
        }
        report.queueSeconds = Date().timeIntervalSince(t2)
        report.queued = offlineMessages

        let t3 = Date()
        var drained = Set<[UInt8]>()
        for (index, user) in offline.enumerated() {
            let c = makeClient(node: nodes.count - 1)
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
                // POLL is not retransmitted: a lost POLL or NO_MESSAGES is a round without answer.
                pending = (try? c.pollAndWait(timeout: 5).map(\.bundleID)) ?? []
                if pending.isEmpty {
                    report.leaseWaits += 1   // a datagram was lost; the node re-offers after the lease (1 s)
                    Thread.sleep(forTimeInterval: 1)
                }
            }
            drained.formUnion(mine)
        }
        report.drainSeconds = Date().timeIntervalSince(t3)
        report.drained = drained.count

        for (i, n) in nodes.enumerated() {
            let m = n.memory()
            report.nodes[i].endRSSKiB = m.rssKiB
            report.nodes[i].peakRSSKiB = m.peakKiB
        }
        let all = nodes.map { $0.metrics() }
        func summed(_ name: String) -> Int { all.reduce(0) { $0 + Int($1[name] ?? 0) } }
        report.datagramsIn = summed("yaok_relay_datagrams_in_total")
        report.datagramsOut = summed("yaok_relay_datagrams_out_total")
        report.droppedMalformed = summed(#"yaok_relay_dropped_total{reason="malformed"}"#)
        report.droppedRateLimited = summed(#"yaok_relay_dropped_total{reason="rate_limited"}"#)
        report.droppedOverload = summed(#"yaok_relay_dropped_total{reason="overload"}"#)
        report.clientsPeakRSSKiB = peakRSSKiB()
        return report
    }
}
