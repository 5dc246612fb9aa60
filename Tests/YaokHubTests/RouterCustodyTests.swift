import XCTest
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting

/// Custody, trust and `held` on an in-memory router (``RouterHarness``): the same rules the
/// process tests (HubRolesTests, HeldAnswerTests) check end to end, in milliseconds.
final class RouterCustodyTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    func testAPhonesBundleIsAcknowledgedStoredAndPushedToItsRecipientOnce() throws {
        let h = try RouterHarness(self)
        let a = h.attach(alice, as: .endpoint)
        let message = try seal("hello", from: alice, to: bob)
        h.receive(message, on: a)
        XCTAssertEqual(h.acknowledged(on: a), [message.bundleID], "acknowledged once committed")
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .queued)

        let b = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [message.bundleID], "pushed to Bob at attach")
        h.tick()
        XCTAssertEqual(h.envelopes(on: b).count, 1, "once: its custody answer is awaited, not re-pushed")
        h.receive(TLVRecord(.custodyAck, value: CustodyAck(bundleID: message.bundleID).encoded), on: b)
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .delivered)
        XCTAssertTrue(h.envelopes(on: a).isEmpty, "a phone is sent only its own mail")
    }

    func testAPhoneCannotAskForAnotherPhonesMail() throws {
        let h = try RouterHarness(self)
        let a = h.attach(alice, as: .endpoint)
        let message = try seal("for bob only", from: alice, to: bob)
        h.receive(message, on: a)
        let mallory = h.attach(Identity.generate(), as: .endpoint)
        h.receive(TLVRecord(.request, value: try BundleIDList(bundleIDs: [message.bundleID]).encoded), on: mallory)
        XCTAssertTrue(h.envelopes(on: mallory).isEmpty)
        XCTAssertEqual(h.router.statusSnapshot().counters.framesRefusedForRole, 1)
    }

    /// Under open trust, an untrusted hub's custody of a message keeps it
    /// ours and queued; its custody of a receipt hands the receipt over, kept, with no holder.
    func testAnUntrustedHubsCustodyHandsOverAReceiptButNotAMessage() throws {
        let h = try RouterHarness(self)
        let b = h.attach(bob, as: .endpoint)
        let earlier = try seal("earlier", from: alice, to: bob)
        let receipt = try Envelope.receipt(kind: .deliveryReceipt, for: earlier.messageID, originalSenderUserID: alice.userID,
                                           from: bob, createdMs: WallClock.nowMilliseconds())
        let message = try seal("to carol", from: bob, to: Identity.generate())
        h.receive(receipt, on: b)
        h.receive(message, on: b)
        h.detach(b)

        let malloryKey = Identity.generate()
        let mallory = h.attach(malloryKey, as: .hub)
        XCTAssertEqual(Set(h.offered(on: mallory)), [receipt.bundleID, message.bundleID])
        h.receive(TLVRecord(.request, value: try BundleIDList(bundleIDs: [receipt.bundleID, message.bundleID].sorted { $0.lexicographicallyPrecedes($1) }).encoded), on: mallory)
        XCTAssertEqual(Set(h.envelopes(on: mallory).map(\.bundleID)), [receipt.bundleID, message.bundleID])
        for id in [receipt.bundleID, message.bundleID] {
            h.receive(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: mallory)
        }
        // What the store records waits a tick for a delivery receipt; two ticks later the
        // message's retry is scheduled, and the receipt is handed over, never retried.
        h.tick()
        h.tick()
        XCTAssertEqual(try h.stored(receipt.bundleID)?.state, .handedOver)
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .queued)
        XCTAssertFalse(try h.store.peerHas(receipt.bundleID, peer: malloryKey.userID), "the untrusted hub is not recorded as its holder")
        XCTAssertEqual(try h.stored(message.bundleID)?.attempts, 1)
        XCTAssertEqual(try h.stored(receipt.bundleID)?.attempts, 0)
        let status = h.router.statusSnapshot()
        XCTAssertEqual(status.queue.queued, 1)
        XCTAssertEqual(status.counters.untrustedReceiptHandOvers, 1)
    }

    /// The attack on that rule: under open trust a self-declared hub (any key) says it holds a
    /// victim's bundle. It is not offered it again on that link, but nothing is handed over.
    func testAnUntrustedHubsHeldHandsNothingOver() throws {
        let h = try RouterHarness(self)
        let a = h.attach(alice, as: .endpoint)
        let victim = try seal("for bob", from: alice, to: bob)
        h.receive(victim, on: a)
        let mallory = h.attach(Identity.generate(), as: .hub)
        XCTAssertEqual(h.offered(on: mallory), [victim.bundleID])
        h.receive(TLVRecord(.held, value: try BundleIDList(bundleIDs: [victim.bundleID]).encoded), on: mallory)
        h.run(seconds: 3)
        XCTAssertEqual(try h.stored(victim.bundleID)?.state, .queued)
        XCTAssertEqual(h.router.statusSnapshot().queue.queued, 1)
        XCTAssertEqual(h.offered(on: mallory), [victim.bundleID], "not offered to it again")
        // Bob still gets it from here.
        let b = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [victim.bundleID])
    }

    /// In memory: a trusted hub's `held` for a bundle queued here is its custody.
    func testATrustedHubsHeldHandsAQueuedBundleOver() throws {
        let trusty = Identity.generate()
        var settings = Router.Settings()
        settings.trust.mode = .list
        settings.trust.trustedHubs = [trusty.signingKey]
        let h = try RouterHarness(self, settings: settings)
        let a = h.attach(alice, as: .endpoint)
        let message = try seal("held elsewhere", from: alice, to: bob)
        h.receive(message, on: a)
        let t = h.attach(trusty, as: .hub)
        XCTAssertEqual(h.offered(on: t), [message.bundleID])
        h.receive(TLVRecord(.held, value: try BundleIDList(bundleIDs: [message.bundleID]).encoded), on: t)
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .handedOver)
        XCTAssertEqual(h.router.statusSnapshot().queue.queued, 0)
        // An untrusted hub's `held` hands nothing over (list trust: it is not even heard).
        let other = try seal("second", from: alice, to: bob)
        h.receive(other, on: a)
        let stranger = h.attach(Identity.generate(), as: .hub)
        h.receive(TLVRecord(.held, value: try BundleIDList(bundleIDs: [other.bundleID]).encoded), on: stranger)
        XCTAssertEqual(try h.stored(other.bundleID)?.state, .queued)
    }
}

/// Custody waits, resends and stalls (Docs/protocol.md, custodyAck: "When a custody answer is
/// late") on an in-memory router whose clock the test moves.
final class RouterCustodyTimingTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    /// A router with custody_timeout_s 5, Alice's message stored and Bob attached: the push is out.
    func pushedToBob() throws -> (RouterHarness, LinkID, Envelope) {
        var settings = Router.Settings()
        settings.custodyTimeoutMs = 5_000
        let h = try RouterHarness(self, settings: settings)
        let message = try seal("are you there", from: alice, to: bob)
        h.receive(message, on: h.attach(alice, as: .endpoint))
        let b = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [message.bundleID])
        return (h, b, message)
    }

    func testAnUnansweredPushIsResentAfterTheCustodyWaitThenBacksOff() throws {
        let (h, b, message) = try pushedToBob()
        h.run(seconds: 4)
        XCTAssertEqual(h.envelopes(on: b).count, 1, "no resend before the wait (5 s before any measurement)")
        h.run(seconds: 2)
        XCTAssertEqual(h.envelopes(on: b).count, 2, "resent on the same link once the wait ran out")
        XCTAssertEqual(h.router.statusSnapshot().counters.custodyTimeouts, 1)
        // Resent on the live link until 3 × custody_timeout_s since the first send; then a
        // failed attempt that waits out the store's first backoff (1 min).
        h.run(seconds: 10)
        let copies = h.envelopes(on: b).count
        XCTAssertGreaterThanOrEqual(copies, 3)
        XCTAssertEqual(try h.stored(message.bundleID)?.attempts, 1, "a failed attempt after 15 s unanswered")
        // Bob stays attached: before, he was pushed it again every custody wait, for ever.
        h.run(seconds: 30)
        XCTAssertEqual(h.envelopes(on: b).count, copies, "nothing during the backoff, though Bob is attached")
        h.run(seconds: 31)
        XCTAssertEqual(h.envelopes(on: b).count, copies + 1, "pushed again once the retry is due")
        h.receive(TLVRecord(.custodyAck, value: CustodyAck(bundleID: message.bundleID).encoded), on: b)
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .delivered)
        h.run(seconds: 60)
        XCTAssertEqual(h.envelopes(on: b).count, copies + 1)
    }

    /// In memory: a hub that did not run for 4 s (its ticks stopped, the answer
    /// waiting in its queue) moves its deadlines on instead of resending what the phone took.
    func testAHubThatDidNotRunDefersItsDeadlinesInsteadOfResending() throws {
        let (h, b, message) = try pushedToBob()
        h.run(seconds: 3)
        h.clock.advance(ms: 4_000)   // stopped: no tick for 4 s
        h.tick()
        XCTAssertEqual(h.router.statusSnapshot().counters.stallsDeferred, 1)
        XCTAssertEqual(h.envelopes(on: b).count, 1, "not resent: the stall was ours")
        h.receive(TLVRecord(.custodyAck, value: CustodyAck(bundleID: message.bundleID).encoded), on: b)
        XCTAssertEqual(try h.stored(message.bundleID)?.state, .delivered)
        XCTAssertEqual(h.router.statusSnapshot().counters.custodyTimeouts, 0)
    }
}
