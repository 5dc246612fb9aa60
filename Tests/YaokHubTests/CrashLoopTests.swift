import HubTestSupport
import Foundation
import XCTest
import YaokEndpoint
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting
import YaokWire

/// SIGKILL the hub over and over during a large transfer: no message may be lost and
/// none may reach the recipient twice.
final class CrashLoopTests: XCTestCase {
    func testKill9LoopDuringTransferLosesNothingAndDeliversNothingTwice() throws {
        let count = Int(ProcessInfo.processInfo.environment["YAOK_CRASH_TEST_MESSAGES"] ?? "") ?? 10_000
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 10\n  link_frames_per_second: 100000\n  sender_envelopes_per_minute: 1000000")
            .replacingOccurrences(of: "log_level: debug", with: "log_level: info")

        let (alice, bob, bobContact) = try TestSupport.aliceAndBob(in: dir)
        let texts = (0..<count).map { "crash-loop message \($0)" }
        let composeStart = Date()
        for chunk in stride(from: 0, to: count, by: 1000) {
            _ = try alice.compose(to: bobContact, texts: Array(texts[chunk..<min(count, chunk + 1000)]))
        }
        print("composed \(count) messages in \(String(format: "%.1f", Date().timeIntervalSince(composeStart))) s")

        var hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        try hub.waitReady()
        let hubAddress = try HubSession.parseHub("udp://127.0.0.1:\(port)")
        let aliceSession = HubSession(endpoint: alice, hub: hubAddress) { _ in }
        let bobSession = HubSession(endpoint: bob, hub: hubAddress) { _ in }
        try aliceSession.start()
        try bobSession.start()
        defer {
            aliceSession.stop()
            bobSession.stop()
            hub.stop()
        }

        func received() -> Int { (try? bob.store.inbox().count) ?? 0 }
        let start = Date()
        var kills = 0
        // Kill at growing intervals while the transfer runs, then let it finish.
        let maxKills = Int(ProcessInfo.processInfo.environment["YAOK_CRASH_TEST_KILLS"] ?? "") ?? 6
        while received() < count && kills < maxKills && Date().timeIntervalSince(start) < 240 {
            Thread.sleep(forTimeInterval: 0.7 + Double(kills) * 0.4)
            hub.signal(SIGKILL)
            XCTAssertNotNil(hub.waitExit(timeout: 10))
            kills += 1
            hub = try HubProcess(dir: dir, config: config, executable: hubExe)
            try hub.waitReady()
        }
        do {
            try Wait.until(timeout: 600, "all \(count) messages at Bob") { received() >= count }
        } catch {
            let status = (try? String(decoding: hub.client.request("status"), as: UTF8.self)) ?? "no status"
            XCTFail("stalled at \(received()) of \(count); alice pending \((try? alice.store.outbox(states: [.pending]).count) ?? -1); hub status: \(status)\nhub log tail: \(hub.log.suffix(3000))")
            throw error
        }
        let elapsed = Date().timeIntervalSince(start)

        let inbox = try bob.store.inbox()
        let ids = Set(inbox.map(\.messageID))
        let lost = Set(texts).subtracting(inbox.map(\.text)).count
        let duplicatedAtRecipient = inbox.count - ids.count
        let redelivered = try Self.duplicates(at: bob)
        print("crash loop: \(count) messages, \(kills) SIGKILLs, \(String(format: "%.1f", elapsed)) s; lost \(lost), delivered twice \(duplicatedAtRecipient), redeliveries suppressed by the endpoint \(redelivered)")
        XCTAssertGreaterThan(kills, 0, "the hub must have been killed at least once mid-transfer")
        XCTAssertEqual(lost, 0)
        XCTAssertEqual(duplicatedAtRecipient, 0)
        XCTAssertEqual(inbox.count, count)
        XCTAssertEqual(Set(inbox.map(\.text)), Set(texts))
        // Every message left Alice's outbox for good.
        try Wait.until(timeout: 60, "alice's outbox drained") {
            try alice.store.outbox(states: [.pending], limit: 1).isEmpty
        }
    }

    /// The light-load attack on the deferred commit (Docs/protocol.md §4, "Forgotten
    /// handovers"): one message at a time, and each time the hub has handed the delivery receipt
    /// to Alice (her custody ack taken, in a group that holds no answer and so waits up to 1 s
    /// for the next one), SIGKILL it. That handover is lost with the group; the hub must resend
    /// the receipt after its restart, Alice must find it a duplicate, and nothing may be lost or
    /// reach Bob twice.
    func testKill9InsideADeferredCommitResendsTheForgottenHandoverAndLosesNothing() throws {
        let rounds = 5
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port)
        let (alice, bob, bobContact) = try TestSupport.aliceAndBob(in: dir)
        var hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        try hub.waitReady()
        let hubAddress = try HubSession.parseHub("udp://127.0.0.1:\(port)")
        // Both phones attach again after each restart, as an app does when it reopens; left to
        // themselves they would notice the restart only by their 10 s keepalive.
        var sessions: [HubSession] = []
        func attach() throws {
            sessions.forEach { $0.stop() }
            sessions = [HubSession(endpoint: alice, hub: hubAddress) { _ in }, HubSession(endpoint: bob, hub: hubAddress) { _ in }]
            try sessions.forEach { try $0.start() }
        }
        try attach()
        defer {
            sessions.forEach { $0.stop() }
            hub.stop()
        }
        func receiptBundleIDs() throws -> Set<[UInt8]> {
            Set(try bob.store.outbox().filter { $0.kind != Envelope.Kind.message.rawValue }.map { bob.bundleID(of: $0) })
        }

        var texts: [String] = []
        var resent = 0
        for round in 0..<rounds {
            let before = try receiptBundleIDs()
            let text = "deferred-commit message \(round)"
            texts.append(text)
            _ = try alice.compose(to: bobContact, texts: [text])
            sessions[0].flush()
            // Bob's receipt for it, then the hub's record that Alice took it: that record is what
            // the deferred group holds.
            var receipt: [UInt8] = []
            try Wait.until(timeout: 30, "Bob's receipt for message \(round)") {
                guard let new = try receiptBundleIDs().subtracting(before).first else { return false }
                receipt = new
                return true
            }
            let handedOver = "delivered \(Router.shortID(receipt)) to \(Router.shortID(alice.identity.userID))"
            try Wait.until(timeout: 30, "the hub's log line `\(handedOver)`") { hub.log.contains(handedOver) }
            let duplicatesBefore = try Self.duplicates(at: alice)
            hub.signal(SIGKILL)
            XCTAssertNotNil(hub.waitExit(timeout: 10))
            hub = try HubProcess(dir: dir, config: config, executable: hubExe)
            try hub.waitReady()
            try attach()
            // The forgotten handover is resent and Alice answers it as a duplicate. (Had the kill
            // come after the group committed, on a machine over 1 s late, nothing would be.)
            if Wait.poll(timeout: 10, { try Self.duplicates(at: alice) > duplicatesBefore }) { resent += 1 }
        }
        try Wait.until(timeout: 30, "every message at Bob, and every receipt at Alice") {
            try bob.store.inbox().count >= rounds && alice.store.outbox(states: [.pending, .handedOver]).isEmpty
        }
        let inbox = try bob.store.inbox()
        print("deferred-commit kills: \(rounds) SIGKILLs, \(resent) forgotten handovers resent; Bob's inbox \(inbox.count), duplicates at Bob \(try Self.duplicates(at: bob)), at Alice \(try Self.duplicates(at: alice))")
        XCTAssertGreaterThan(resent, 0, "no kill landed inside a deferred commit: the attack was not made")
        XCTAssertEqual(inbox.count, rounds, "delivered twice or lost")
        XCTAssertEqual(Set(inbox.map(\.text)), Set(texts))
        XCTAssertEqual(try alice.store.outbox(states: [.delivered]).count, rounds, "every message's receipt reached Alice")
    }

    /// Copies an endpoint received again and answered as duplicates (each is a security event).
    private static func duplicates(at endpoint: Endpoint) throws -> Int {
        try endpoint.store.securityEvents().filter { $0.kind == .duplicate }.count
    }
}
