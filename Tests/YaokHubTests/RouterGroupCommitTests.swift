import XCTest
import YaokCrypto
import YaokPluginKit
import YaokTesting
import YaokWire
@testable import YaokRouting

/// Group commit on an in-memory router (Docs/performance.md, "Group commit"): a burst shares
/// commits, an idle hub commits nothing, and only custody answers wait for the commit while the
/// bundle moves on at once. GroupCommitTests has the SIGKILL right after the acks.
final class RouterGroupCommitTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    func testABurstSharesCommitsAndAnIdleHubCommitsNothing() throws {
        let h = try RouterHarness(self, settings: .init(senderEnvelopesPerMinute: 100_000))
        let a = h.attach(alice, as: .endpoint)
        let start = h.router.statusSnapshot().counters
        let n = 300
        let envelopes = try (0..<n).map { try seal("burst \($0)", from: alice, to: bob) }
        h.receive(envelopes, on: a)
        XCTAssertEqual(h.acknowledged(on: a), Set(envelopes.map(\.bundleID)))
        let after = h.router.statusSnapshot().counters
        let commits = after.groupCommits - start.groupCommits
        XCTAssertGreaterThan(commits, 0)
        XCTAssertLessThan(commits, n, "\(n) bundles took \(commits) commits: they were grouped")
        XCTAssertGreaterThanOrEqual(after.groupCommitItems - start.groupCommitItems, n)

        // Idle: the once-a-second tick runs, and commits nothing (no change, no sync).
        h.run(seconds: 5)
        XCTAssertEqual(h.router.statusSnapshot().counters.groupCommits, after.groupCommits, "an idle hub commits no empty groups")
    }

    /// With every commit held 300 ms, Alice's bundle reaches Bob before its commit and Alice's
    /// custody ack only after it; the two latency figures say so (`hopLatency*` to the onward
    /// send, `custodyLatency*` to the ack).
    func testABundleLeavesBeforeItsCommitAndItsCustodyAckOnlyAfter() throws {
        let held: UInt32 = 300_000
        var settings = Router.Settings()
        settings.testing.commitDelayUs = held
        let h = try RouterHarness(self, settings: settings)
        let b = h.attach(bob, as: .endpoint)
        let a = h.attach(alice, as: .endpoint)
        XCTAssertEqual(h.router.statusSnapshot().counters.hopLatencySamples, 0)
        let envelope = try seal("timed", from: alice, to: bob)
        h.arrive(envelope, on: a)
        try Wait.until(timeout: 10, "the bundle at Bob") { !h.envelopes(on: b).isEmpty }
        XCTAssertTrue(h.acknowledged(on: a).isEmpty, "the ack waits for the commit, which is held")
        h.router.settle()
        XCTAssertEqual(h.acknowledged(on: a), [envelope.bundleID])
        let c = h.router.statusSnapshot().counters
        XCTAssertEqual(c.hopLatencySamples, 1, "counted once, on its first onward send")
        XCTAssertGreaterThanOrEqual(c.custodyLatencySamples, 1)
        XCTAssertGreaterThanOrEqual(c.custodyLatencyP50Us, Int(held), "the held commit precedes the custody ack")
        XCTAssertLessThan(c.hopLatencyMaxUs + Int(held) * 2 / 3, c.custodyLatencyP50Us,
                          "the onward send did not wait for the bundle's commit; the ack did")
    }
}
