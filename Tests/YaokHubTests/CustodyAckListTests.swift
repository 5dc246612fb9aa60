import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokRouting

/// `custodyAcks` (Docs/protocol.md) on an in-memory router: a burst from a peer that announced
/// it reads lists is answered with one list per commit, a peer that did not (an older node) gets
/// single acks, and a peer's list counts only for what was sent on that peer's link.
final class CustodyAckListTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate(), carol = Identity.generate()

    /// Lists with at least one ID (the announcement is the empty one).
    func lists(on link: LinkID, _ h: RouterHarness) -> [BundleIDList] {
        h.frames(.custodyAcks, on: link).compactMap { try? BundleIDList(parsing: $0.value) }.filter { !$0.bundleIDs.isEmpty }
    }

    func testAPeerThatAnnouncedGetsOneListPerCommitAndAnOlderPeerSingleAcks() throws {
        let h = try RouterHarness(self, settings: .init(senderEnvelopesPerMinute: 100_000))
        let n = 200

        // A phone from before `custodyAcks`: it never announces, so it gets single acks.
        let old = h.attach(alice, as: .endpoint)
        XCTAssertTrue(h.frames(.custodyAcks, on: old).contains { $0.value == CustodyAcks.announcement.value }, "the hub announces at link up")
        let fromOld = try (0..<n).map { try seal("old \($0)", from: alice, to: bob) }
        h.receive(fromOld, on: old)
        XCTAssertEqual(lists(on: old, h).count, 0, "no list goes to a peer that did not announce")
        XCTAssertEqual(Set(h.frames(.custodyAck, on: old).map(\.value)), Set(fromOld.map(\.bundleID)))

        // A phone that announced: the same burst is answered in lists, one per commit.
        let new = h.attach(carol, as: .endpoint)
        h.receive(CustodyAcks.announcement, on: new)
        let before = h.router.statusSnapshot().counters
        let fromNew = try (0..<n).map { try seal("new \($0)", from: carol, to: bob) }
        h.receive(fromNew, on: new)
        XCTAssertEqual(h.acknowledged(on: new), Set(fromNew.map(\.bundleID)))
        let received = lists(on: new, h)
        XCTAssertGreaterThan(received.count, 0, "a burst from a peer that reads lists is answered with lists")
        let answerFrames = received.count + h.frames(.custodyAck, on: new).count
        XCTAssertLessThan(answerFrames, n / 4, "\(n) bundles answered in \(answerFrames) frames")
        for list in received { XCTAssertGreaterThan(list.bundleIDs.count, 1, "a single ack is sent as custodyAck") }
        let after = h.router.statusSnapshot().counters
        XCTAssertEqual(after.ackListsSent - before.ackListsSent, received.count)
        XCTAssertEqual(after.acksInListsSent - before.acksInListsSent, received.reduce(0) { $0 + $1.bundleIDs.count })
        XCTAssertLessThanOrEqual(received.count, after.groupCommits - before.groupCommits, "at most one list per commit")
    }

    func testAListCountsOnlyForBundlesSentOnThatLinkAndAMalformedListForNothing() throws {
        let h = try RouterHarness(self)
        let a = h.attach(alice, as: .endpoint)
        let b = h.attach(bob, as: .endpoint)
        let mallory = h.attach(Identity.generate(), as: .endpoint)
        let envelopes = try (0..<5).map { try seal("to bob \($0)", from: alice, to: bob) }
        for e in envelopes { h.receive(e, on: a) }
        XCTAssertEqual(Set(h.envelopes(on: b).map(\.bundleID)), Set(envelopes.map(\.bundleID)), "five bundles at Bob")
        let ids = try BundleIDList(bundleIDs: envelopes.map(\.bundleID))
        let start = h.router.statusSnapshot().counters

        // Another phone names Bob's bundles: none of them was sent on its link.
        h.receive(TLVRecord(.custodyAcks, value: ids.encoded), on: mallory)
        // A list out of order is refused whole.
        var unsorted = ids.encoded
        unsorted.replaceSubrange(2..<18, with: ids.bundleIDs[1])
        unsorted.replaceSubrange(18..<34, with: ids.bundleIDs[0])
        h.receive(TLVRecord(.custodyAcks, value: unsorted), on: b)
        // A count that disagrees with the length, too.
        h.receive(TLVRecord(.custodyAcks, value: [0, 9] + ids.bundleIDs[0]), on: b)
        var c = h.router.statusSnapshot().counters
        XCTAssertEqual(c.refusedMalformed - start.refusedMalformed, 2, "two malformed lists counted")
        XCTAssertEqual(c.ackListsReceived - start.ackListsReceived, 1, "Mallory's list read")
        XCTAssertEqual(c.deliveredDirect, start.deliveredDirect, "neither list delivered anything")
        XCTAssertEqual(h.router.statusSnapshot().queue.delivered, 0)

        // Bob's own list delivers all five at once.
        h.receive(TLVRecord(.custodyAcks, value: ids.encoded), on: b)
        XCTAssertEqual(h.router.statusSnapshot().queue.delivered, 5)
        c = h.router.statusSnapshot().counters
        XCTAssertEqual(c.deliveredDirect - start.deliveredDirect, 5)
        XCTAssertEqual(c.ackListsReceived - start.ackListsReceived, 2)
        XCTAssertEqual(c.acksInListsReceived - start.acksInListsReceived, 10)
    }
}
