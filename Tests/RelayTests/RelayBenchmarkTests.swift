import Foundation
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer

/// Relay throughput figures. Skipped unless `YAOK_BENCH=1`; prints, never asserts speed.
/// `YAOK_BENCH_CLIENTS` (default 200) and `YAOK_BENCH_MESSAGES` (per client, default 10).
///
///     YAOK_BENCH=1 swift test --scratch-path .build-relay --filter RelayBenchmarkTests
final class RelayBenchmarkTests: XCTestCase {
    final class Counter: @unchecked Sendable {
        private let c = NSCondition()
        private var n = 0
        func add() { c.withLock { n += 1; c.broadcast() } }
        var value: Int { c.withLock { n } }
        /// Waits until the count reaches `target`; false on timeout.
        func wait(for target: Int, timeout: TimeInterval) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            c.lock()
            defer { c.unlock() }
            while n < target { if !c.wait(until: deadline) { return n >= target } }
            return true
        }
    }

    static func peakRSSKiB() -> Int {
        guard let s = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in s.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        return 0
    }

    func testForwardingAndQueueRates() throws {
        let env = ProcessInfo.processInfo.environment
        guard env["YAOK_BENCH"] == "1" else { throw XCTSkip("set YAOK_BENCH=1 to run the relay benchmark") }
        let clients = Int(env["YAOK_BENCH_CLIENTS"] ?? "") ?? 200
        let perClient = Int(env["YAOK_BENCH_MESSAGES"] ?? "") ?? 10
        var limits = RelayLimits()
        limits.messagesPerHour = 1_000_000
        limits.packetsPerSecondPerIP = 1_000_000
        limits.hellosPerSecondPerIP = 100_000
        limits.leaseMs = 500
        let relay = try RelayHarness(limits: limits)
        defer { relay.tearDown() }
        let rssStart = Self.peakRSSKiB()

        // Many registered clients.
        let users = (0..<clients).map { _ in Identity.generate() }
        let queued = Counter(), received = Counter(), failed = Counter()
        var connections: [RelayClient] = []
        let t0 = Date()
        for user in users {
            let c = relay.client()
            c.onEvent = { event in
                switch event {
                case .queued: queued.add()
                case .message: received.add()
                case .sendFailed: failed.add()
                default: break
                }
            }
            try c.connect(timeout: 20)
            XCTAssertEqual(try c.registerAndWait([relay.registration(user)], timeout: 20).map(\.status), [.accepted])
            connections.append(c)
        }
        let connectSeconds = Date().timeIntervalSince(t0)

        // Forwarding: every client sends `perClient` messages to random online clients.
        var outgoing: [[[UInt8]]] = []
        for i in 0..<clients {
            outgoing.append(try (0..<perClient).map { _ in
                var j = Int.random(in: 0..<clients)
                if j == i { j = (j + 1) % clients }
                return try messageBundle(from: users[i], to: users[j], size: 200)
            })
        }
        let total = clients * perClient
        let t1 = Date()
        DispatchQueue.concurrentPerform(iterations: clients) { i in
            for b in outgoing[i] { try? connections[i].send(bundle: b) }
        }
        XCTAssertTrue(queued.wait(for: total, timeout: 300), "queued \(queued.value) of \(total), failed \(failed.value)")
        XCTAssertTrue(received.wait(for: total, timeout: 60), "received \(received.value) of \(total)")
        let forwardSeconds = Date().timeIntervalSince(t1)

        // Queue and poll: messages for offline users, then they come online and drain.
        let offline = (0..<20).map { _ in Identity.generate() }
        let queueTotal = min(2_000, 100 * offline.count)
        let bundles = try (0..<queueTotal).map { k in try messageBundle(from: users[k % clients], to: offline[k % offline.count], size: 200) }
        let queuedBefore = queued.value
        let t2 = Date()
        for (k, b) in bundles.enumerated() { try connections[k % clients].send(bundle: b) }
        XCTAssertTrue(queued.wait(for: queuedBefore + queueTotal, timeout: 300))
        let queueSeconds = Date().timeIntervalSince(t2)

        let t3 = Date()
        var drainedIDs = Set<[UInt8]>()
        var reoffers = 0
        for user in offline {
            let c = relay.client()
            try c.connect(timeout: 20)
            let mark = c.currentSeq()
            _ = try c.registerAndWait([relay.registration(user)], timeout: 20)
            // Registration pushes the first batch; then poll + ack until empty.
            var pending = try c.nextMessages(min(limits.pollBatch, queueTotal / offline.count), after: mark, timeout: 20).map(\.messageID)
            var rounds = 0
            while !pending.isEmpty || (relay.server.withEngine { $0.queuedCount(for: user.userID) } > 0 && rounds < 100) {
                rounds += 1
                try c.ack(pending)
                drainedIDs.formUnion(pending)
                pending = try c.pollAndWait(timeout: 20).map(\.messageID)
                if pending.isEmpty && relay.server.withEngine({ $0.queuedCount(for: user.userID) }) > 0 {
                    // A datagram was lost: the relay re-offers after the lease.
                    reoffers += 1
                    Thread.sleep(forTimeInterval: Double(limits.leaseMs) / 1000)
                }
            }
            c.stop()
        }
        let drainSeconds = Date().timeIntervalSince(t3)
        let drained = drainedIDs.count
        XCTAssertEqual(drained, queueTotal)

        let m = relay.server.metricsSnapshot()
        print("""
        relay benchmark (debug build unless -c release; loopback; one process for relay and clients)
          clients connected+registered: \(clients) in \(String(format: "%.2f", connectSeconds)) s
          forwarding: \(total) messages pushed to online clients in \(String(format: "%.2f", forwardSeconds)) s = \(String(format: "%.0f", Double(total) / forwardSeconds)) msg/s
          queueing: \(queueTotal) messages for offline users in \(String(format: "%.2f", queueSeconds)) s = \(String(format: "%.0f", Double(queueTotal) / queueSeconds)) msg/s
          poll+ack drain: \(drained) messages in \(String(format: "%.2f", drainSeconds)) s = \(String(format: "%.0f", Double(drained) / drainSeconds)) msg/s (\(reoffers) waits for a lease after a lost datagram)
          datagrams in/out: \(m.datagramsIn)/\(m.datagramsOut), dropped: malformed \(m.droppedMalformed) rate \(m.droppedRateLimited) overload \(m.droppedOverload)
          peak RSS (whole test process): \(Self.peakRSSKiB() / 1024) MiB (at start \(rssStart / 1024) MiB)
        """)
    }
}
