import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokRouting

/// What the router does with each reason a transport gives for refusing a frame it was handed
/// (the ABI's `yaok_send_result`, reported after `send` returned), on an in-memory router.
/// SendResultTests checks end to end that the codes cross the plugin process boundary.
final class RouterSendRefusalTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    /// Alice's message for Bob, pushed to Bob's link and then refused there with `result`.
    func refused(_ result: SendResult) throws -> (RouterHarness, LinkID, Envelope) {
        let h = try RouterHarness(self)
        let a = h.attach(alice, as: .endpoint)
        let message = try seal("for Bob", from: alice, to: bob)
        h.receive(message, on: a)
        XCTAssertEqual(h.acknowledged(on: a), [message.bundleID], "custody first")
        let b = h.attach(bob, as: .endpoint)
        let pushed = try XCTUnwrap(h.transport.frames(on: b).first { $0.type == FrameType.bundle.rawValue }, "pushed to Bob")
        h.router.sendFailed(pushed.encoded, link: b, result: result, reason: "refused by the test", on: h.transport)
        h.router.settle()
        return (h, b, message)
    }

    func link(_ h: RouterHarness, _ id: LinkID) -> RouterStatus.LinkView? {
        h.router.statusSnapshot().links.first { $0.link == "\(h.transport.name)/\(id)" }
    }

    func testQueueFullShrinksTheWindowAndResendsOnTheSameLinkAfterItsCustodyWait() throws {
        let (h, b, message) = try refused(.queueFull)
        let counters = h.router.statusSnapshot().counters
        XCTAssertEqual(counters.sendsRefusedQueueFull, 1)
        XCTAssertEqual(counters.sendsFailed, 0)
        let window = try XCTUnwrap(link(h, b), "a saturated link stays up").window
        XCTAssertLessThan(window ?? .max, CustodyPacing.initialWindow, "its window shrank")
        // Within the custody wait nothing is resent; after it, on the same link, long before
        // the store's retry backoff would allow.
        h.run(seconds: 1)
        XCTAssertEqual(h.envelopes(on: b).count, 1)
        h.run(seconds: Int(RouterHarness.defaultCustodyTimeoutMs / 1_000) + 1)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [message.bundleID, message.bundleID], "resent on the saturated link")
        XCTAssertEqual(try h.stored(message.bundleID)?.attempts, 0, "no retry of the store was spent on it")
    }

    func testNoLinkDropsTheLinkAtOnce() throws {
        let (h, b, message) = try refused(.noLink)
        XCTAssertEqual(h.router.statusSnapshot().counters.sendsRefusedNoLink, 1)
        XCTAssertNil(link(h, b), "the transport never said link down; the router routes around the link anyway")
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .queued, "still ours, for the next link to Bob")
        let again = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: again).map(\.bundleID), [message.bundleID])
    }

    func testTooLargeIsNeverSentOnThatLinkAgainButOnAnother() throws {
        let (h, b, message) = try refused(.tooLarge)
        XCTAssertEqual(h.router.statusSnapshot().counters.sendsRefusedTooLarge, 1)
        XCTAssertNotNil(link(h, b), "the link stays up for what fits")
        // Well beyond the custody wait and the store's first retry: never again on that link.
        h.run(seconds: Int(RouterHarness.defaultCustodyTimeoutMs / 1_000) * 4)
        XCTAssertEqual(h.envelopes(on: b).count, 1, "sent again to the link that cannot carry it")
        let other = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: other).map(\.bundleID), [message.bundleID], "another link to Bob carries it")
    }

    func testAFailedSendKeepsTheLinkAndWaitsForTheStoresRetry() throws {
        let (h, b, message) = try refused(.failed)
        let counters = h.router.statusSnapshot().counters
        XCTAssertEqual(counters.sendsFailed, 1)
        XCTAssertEqual(counters.sendsRefusedQueueFull, 0)
        XCTAssertNotNil(link(h, b), "a failed send does not end the link")
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .queued)
        XCTAssertEqual(link(h, b)?.inFlight, 0, "no longer in flight there")
        XCTAssertEqual(try h.stored(message.bundleID)?.attempts, 1, "it waits for the store's retry")
    }
}
