import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokRouting

/// Set reconciliation between two hubs (Docs/protocol.md, reconcile 0x0A) on two in-memory
/// routers (``RouterPair``): only the difference is listed, a hub that speaks version 1 only
/// or none at all still syncs, and live traffic does not wait for a pending exchange.
/// ReconcileTests runs two real hubs over UDP across a kill -9, and a hostile peer.
final class RouterReconcileTests: XCTestCase {
    static let shared = 200, unique = 10
    let alice = Identity.generate(), bob = Identity.generate()

    /// Each hub loaded while apart with the same `shared` bundles and `unique` of its own.
    func loadedPair(testingA: Router.Testing = .init(), testingB: Router.Testing = .init()) throws -> RouterPair {
        let pair = try RouterPair(self, testingA: testingA, testingB: testingB)
        let both = try (0..<Self.shared).map { try seal("shared \($0)", from: alice, to: bob) }
        let onlyA = try (0..<Self.unique).map { try seal("only at A \($0)", from: alice, to: bob) }
        let onlyB = try (0..<Self.unique).map { try seal("only at B \($0)", from: alice, to: bob) }
        for (hub, envelopes) in [(pair.a, both + onlyA), (pair.b, both + onlyB)] {
            for start in stride(from: 0, to: envelopes.count, by: 100) {
                pair.load(Array(envelopes[start..<min(envelopes.count, start + 100)]), into: hub, from: alice)
            }
            XCTAssertEqual(hub.router.statusSnapshot().counters.accepted, Self.shared + Self.unique)
        }
        return pair
    }

    func counters(_ h: RouterHarness) -> Router.Counters { h.router.statusSnapshot().counters }

    func testTwoHubsFindTheirDifferenceWithoutListingAndCarryOnlyIt() throws {
        let pair = try loadedPair()
        let before = (a: counters(pair.a).accepted, b: counters(pair.b).accepted)
        pair.connect()
        let a = counters(pair.a), b = counters(pair.b)
        XCTAssertEqual(a.accepted - before.a, Self.unique, "A took B's own bundles")
        XCTAssertEqual(b.accepted - before.b, Self.unique, "B took A's own bundles")
        assertReconciledOnlyTheDifference(a, b, unique: Self.unique)

        // They part and meet again: the sets are equal, so nothing is offered either way.
        pair.disconnect()
        pair.connect()
        pair.run(seconds: 3)
        let a2 = counters(pair.a), b2 = counters(pair.b)
        XCTAssertEqual(a2.reconciled, 2)
        XCTAssertEqual(a2.idsOffered, a.idsOffered, "A offers B nothing new")
        XCTAssertEqual(b2.idsOffered, b.idsOffered, "B offers A nothing new")
        XCTAssertEqual(a2.accepted, a.accepted)
        XCTAssertEqual(b2.accepted, b.accepted)
        XCTAssertEqual(a2.reconcileDifferences + b2.reconcileDifferences, a.reconcileDifferences + b.reconcileDifferences, "the sets are equal now")
    }

    /// A speaks version 1 only and, as the lower ID, starts: its version 1 estimate is
    /// answered in version 1, and nobody refuses anything.
    func testAHubSpeakingVersion1OnlyStillReconcilesWhenItStarts() throws {
        var testing = Router.Testing()
        testing.reconcileVersion1Only = true
        let pair = try loadedPair(testingA: testing)
        pair.connect()
        let a = counters(pair.a), b = counters(pair.b)
        XCTAssertEqual(a.accepted, Self.shared + 2 * Self.unique)
        XCTAssertEqual(b.accepted, Self.shared + 2 * Self.unique)
        XCTAssertEqual(a.reconciledVersion1, 1)
        XCTAssertEqual(b.reconciledVersion1, 1, "B answered in version 1")
        XCTAssertEqual(a.reconcileFallbacks + b.reconcileFallbacks, 0)
        XCTAssertEqual(a.duplicates + b.duplicates, 0)
        XCTAssertFalse(pair.a.log.text.contains("reconcile version 2 is not supported"), pair.a.log.text)
    }

    /// B speaks version 1 only. A (the lower ID) starts in version 2, is answered
    /// `abort(unsupported version, [1])`, and starts again in version 1.
    func testAHubSpeakingVersion1OnlyStillReconcilesWhenTheOtherStarts() throws {
        var testing = Router.Testing()
        testing.reconcileVersion1Only = true
        let pair = try loadedPair(testingB: testing)
        pair.connect()
        pair.run(seconds: 3)
        let a = counters(pair.a), b = counters(pair.b)
        XCTAssertEqual(a.accepted, Self.shared + 2 * Self.unique)
        XCTAssertEqual(b.accepted, Self.shared + 2 * Self.unique)
        XCTAssertGreaterThanOrEqual(a.reconciledVersion1, 1)
        XCTAssertEqual(a.reconciled, a.reconciledVersion1, "every exchange A finished was version 1")
        XCTAssertEqual(b.reconciled, b.reconciledVersion1)
        XCTAssertEqual(a.reconcileFallbacks, 0, "A never fell back to listing")
        XCTAssertEqual(a.duplicates + b.duplicates, 0, "each was offered only what it lacked")
        XCTAssertTrue(pair.b.log.text.contains("reconcile version 2 is not supported"), pair.b.log.text)
    }

    /// A hub from before reconciliation ignores record 0x0A (counted as unknown) and lists
    /// offers at once. A waits for an exchange that never comes, falls back to listing, and
    /// the two still end up with each other's bundles.
    func testAHubFromBeforeReconciliationStillSyncs() throws {
        var testing = Router.Testing()
        testing.noReconcile = true
        let pair = try loadedPair(testingB: testing)
        pair.connect()
        XCTAssertEqual(counters(pair.a).reconcileFallbacks, 0, "A's exchange is pending")
        pair.run(seconds: Int(Router.syncFirstWaitMs / 1_000) * 2 + 1)
        let a = counters(pair.a), b = counters(pair.b)
        XCTAssertEqual(a.accepted, Self.shared + 2 * Self.unique)
        XCTAssertEqual(b.accepted, Self.shared + 2 * Self.unique)
        XCTAssertEqual(a.reconciled + b.reconciled, 0)
        XCTAssertEqual(a.reconcileFallbacks, 1, "A gave up waiting and listed its offers")
        XCTAssertEqual(b.idsOffered, Self.shared + Self.unique, "the old hub lists everything")
        XCTAssertGreaterThanOrEqual(a.heldSent, Self.shared, "A says which it holds")
        XCTAssertGreaterThanOrEqual(b.unknownFrames, 1, "the old hub ignored the reconcile record")
    }

    /// A bundle accepted while an exchange with the neighbour is pending is offered at once,
    /// not held until the exchange (or its fallback) ends: live traffic would otherwise sit
    /// out every wait and every "busy" retry.
    func testABundleAcceptedWhileAnExchangeWaitsIsOfferedAtOnce() throws {
        var testing = Router.Testing()
        testing.noReconcile = true
        let pair = try RouterPair(self, testingB: testing)
        pair.connect()
        XCTAssertEqual(counters(pair.a).reconcileFallbacks, 0, "the exchange is pending")
        let live = try seal("live traffic", from: alice, to: bob)
        pair.load([live], into: pair.a, from: alice)
        pair.settle()
        XCTAssertEqual(counters(pair.b).accepted, 1, "B took the bundle")
        XCTAssertEqual(counters(pair.a).reconcileFallbacks, 0, "while A's exchange was still pending, not from the fallback listing")
        pair.run(seconds: Int(Router.syncFirstWaitMs / 1_000) * 2 + 1)
        XCTAssertEqual(counters(pair.a).reconcileFallbacks, 1, "A fell back to listing")
        XCTAssertEqual(counters(pair.b).accepted, 1)
        XCTAssertEqual(counters(pair.b).duplicates, 0, "the bundle crossed once")
    }
}
