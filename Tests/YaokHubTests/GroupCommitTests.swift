import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// Group commit in a real hub (Docs/performance.md, "Group commit"): a burst of bundles shares
/// commits, every custody ack comes only after the commit covering its bundle (so a SIGKILL
/// right after the acks loses none) while the bundle itself moves on at once, and an idle hub
/// commits nothing.
final class GroupCommitTests: XCTestCase {
    func counters(_ hub: HubProcess) throws -> Router.Counters { try hub.status().router.counters }

    func testEveryAckedBundleSurvivesASIGKILLRightAfterTheAcksAndBurstsShareCommits() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5\n  sender_envelopes_per_minute: 100000")
        // Every commit held 200 ms: an ack sent before its commit would be out long before it.
        var hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"),
                                 extraEnvironment: ["YAOK_TEST_COMMIT_DELAY_MS": "200"])
        addTeardownBlock { hub.stop() }
        try hub.waitReady()

        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        let n = 300
        let envelopes = try (0..<n).map { try seal("burst \($0)", from: alice, to: bob) }
        try phone.sendUntilAcknowledged(envelopes)
        // The moment the last ack is in: no clean shutdown, no chance to flush anything.
        hub.signal(SIGKILL)
        XCTAssertNotNil(hub.waitExit(timeout: 10))

        hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        try hub.waitReady()
        let queue = try hub.status().router.queue
        XCTAssertEqual(queue.queued + queue.inFlight, n, "every bundle the hub acknowledged was durable before its ack left")
        XCTAssertEqual(Set(phone.frames(.custodyAck).map { Array($0.value.prefix(16)) }), Set(envelopes.map(\.bundleID)))
    }

    /// Only custody answers wait for the commit (Docs/performance.md, "Group commit"): with the
    /// commit held 1 s, the bundle reaches Bob first and Alice's ack comes after it, and the
    /// two latency figures say so (`hopLatency*` to the onward send, `custodyLatency*` to the ack).
    func testABundleLeavesBeforeItsCommitAndItsCustodyAckOnlyAfter() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"),
                                 extraEnvironment: ["YAOK_TEST_COMMIT_DELAY_MS": "1000"])
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        let alice = Identity.generate(), bob = Identity.generate()
        let bobPhone = try RawPeer(identity: bob, role: .endpoint, hubPort: port)
        // Bob attached at the router before Alice's bundle comes, so it can leave at once (a
        // link the router learns of later is served from the store, after the commit).
        // The router's view, not the transport's: the plugin counts the link a moment before
        // the router has it (seen in CI: the bundle then waited for the commit).
        let bobShort = Router.shortID(Hash.sha256(bob.signingKey))
        try Wait.until(timeout: 10, "Bob's link at the router") {
            try hub.status().router.links.contains { $0.role == "endpoint" && $0.peer == bobShort }
        }
        let alicePhone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        XCTAssertEqual(try counters(hub).hopLatencySamples, 0)
        let envelope = try seal("timed", from: alice, to: bob)
        try alicePhone.send(envelope)
        try Wait.until(timeout: 30, "the bundle at Bob") { !bobPhone.frames(.bundle).isEmpty }
        XCTAssertTrue(alicePhone.acknowledged.isEmpty, "the ack waits for the commit, which is held 1 s")
        _ = try alicePhone.answer(for: envelope.bundleID, timeout: 30)
        let c = try counters(hub)
        XCTAssertEqual(c.hopLatencySamples, 1, "counted once, on its first onward send")
        XCTAssertGreaterThanOrEqual(c.custodyLatencySamples, 1)
        XCTAssertGreaterThanOrEqual(c.custodyLatencyP50Us, 1_000_000, "the 1 s commit precedes the custody ack")
        // Relative, not absolute: on a loaded machine the bundle may first wait behind an
        // earlier group's 1 s commit (Alice's attach), which delays its send and its ack alike
        // (seen in CI: 1.0015 s to the send). Only the ack waits for the bundle's own commit.
        XCTAssertLessThan(c.hopLatencyMaxUs + 800_000, c.custodyLatencyP50Us,
                          "the onward send did not wait for the bundle's commit; the ack did (1 s held)")
        XCTAssertEqual(alicePhone.acknowledged, [envelope.bundleID])
    }

    func testABurstSharesCommitsAndAnIdleHubCommitsNothing() throws {
        let s = try startUDPHub(router: "\n  sender_envelopes_per_minute: 100000")
        defer { s.hub.stop() }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let start = try counters(s.hub)
        let n = 300
        try phone.sendUntilAcknowledged(try (0..<n).map { try seal("burst \($0)", from: s.alice, to: s.bob) })
        let after = try counters(s.hub)
        let commits = after.groupCommits - start.groupCommits
        XCTAssertGreaterThan(commits, 0)
        XCTAssertLessThan(commits, n, "\(n) bundles took \(commits) commits: they were grouped")
        XCTAssertGreaterThanOrEqual(after.groupCommitItems - start.groupCommitItems, n)

        // Idle: the router's once-a-second tick runs, and commits nothing (no change, no sync).
        // Absence over time cannot be awaited as an event; three ticks are waited out.
        let idle = try counters(s.hub).groupCommits
        Thread.sleep(forTimeInterval: 3.2)
        XCTAssertEqual(try counters(s.hub).groupCommits, idle, "an idle hub commits no empty groups")
    }
}
