import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokRouting

/// Offers between two hubs that list them (one an older hub without set reconciliation, so
/// offers are listed) on two in-memory routers: nothing is offered back to the hub it came
/// from, and a hub that already holds a bundle says `held` and the offers stop. HeldAnswerTests
/// runs the second with two real hubs across a kill -9.
final class RouterHeldTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    func listingPair() throws -> RouterPair {
        var testing = Router.Testing()
        testing.noReconcile = true
        return try RouterPair(self, testingA: testing, testingB: testing)
    }

    /// A bundle a hub takes from a neighbour is never offered back to it: the store records the
    /// neighbour as its holder with the row, and the router, routing the bundle in the same work
    /// item, knows that without asking the store per link.
    func testABundleTakenFromANeighbourIsNotOfferedBackToIt() throws {
        let pair = try listingPair()
        pair.connect()
        // Bob is attached nowhere: B offers Alice's bundle to A, A takes it and keeps it.
        let envelope = try seal("one way", from: alice, to: bob)
        pair.load([envelope], into: pair.b, from: alice)
        pair.settle()
        let a = pair.a.router.statusSnapshot().counters
        XCTAssertEqual(a.accepted, 1, "A took the bundle from B")
        XCTAssertGreaterThanOrEqual(a.offersReceived, 1, "it reached A by an offer")
        pair.run(seconds: 10)
        XCTAssertEqual(pair.a.router.statusSnapshot().counters.idsOffered, 0, "A offered it to nobody")
        let b = pair.b.router.statusSnapshot().counters
        XCTAssertEqual(b.offersReceived, 0, "B was offered nothing")
        XCTAssertEqual(b.heldSent, 0, "B never had to say it holds it")
    }

    /// Both hubs hold the same bundle without knowing the other does (as after a kill -9 between
    /// storing a copy and recording the hand-over). Each says `held` once; the offers stop, and
    /// a trusted hub's `held` hands the bundle over.
    func testANeighbourThatHoldsABundleSaysSoAndTheOffersStop() throws {
        let pair = try listingPair()
        let envelope = try seal("held twice", from: alice, to: bob)
        pair.load([envelope], into: pair.a, from: alice)
        pair.load([envelope], into: pair.b, from: alice)
        pair.connect()
        pair.run(seconds: 30)
        let a = pair.a.router.statusSnapshot(), b = pair.b.router.statusSnapshot()
        XCTAssertEqual(a.counters.heldSent + b.counters.heldSent, 2, "each said once that it holds it")
        XCTAssertLessThanOrEqual(a.counters.idsOffered + b.counters.idsOffered, 2, "offered once each way, then never again")
        XCTAssertEqual(a.counters.duplicates + b.counters.duplicates, 0, "the bundle never crossed")
        XCTAssertEqual(a.queue.queued + b.queue.queued, 0, "neither keeps it queued for the other")
        XCTAssertEqual(a.queue.handedOver, 1)
        XCTAssertEqual(b.queue.handedOver, 1)
    }
}
