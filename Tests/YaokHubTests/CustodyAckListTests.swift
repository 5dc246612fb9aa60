import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// `custodyAcks` (Docs/protocol.md): a real hub answers a burst from a peer that announced it
/// reads lists with one list per commit, answers a peer that did not (a node from before)
/// with single acks, and counts a peer's list only for what it sent on that peer's link.
final class CustodyAckListTests: XCTestCase {
    func counters(_ hub: HubProcess) throws -> Router.Counters { try hub.status().router.counters }

    /// Lists with at least one ID (the announcement is the empty one).
    func lists(_ peer: RawPeer) -> [SummaryVector] {
        peer.frames(.custodyAcks).compactMap { try? SummaryVector(parsing: $0.value) }.filter { !$0.bundleIDs.isEmpty }
    }

    func testAPeerThatAnnouncedGetsOneListPerCommitAndAnOlderPeerSingleAcks() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5\n  sender_envelopes_per_minute: 100000")
        // Each commit held 100 ms, so a burst lands in a few groups whatever the machine's speed.
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"),
                                 extraEnvironment: ["YAOK_TEST_COMMIT_DELAY_MS": "100"])
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        let alice = Identity.generate(), carol = Identity.generate(), bob = Identity.generate()
        let n = 200

        // A phone from before `custodyAcks`: it never announces, so it gets single acks.
        let old = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        try Wait.until(timeout: 10, "the hub's announcement") {
            old.frames(.custodyAcks).contains { $0.value == CustodyAcks.announcement.value }
        }
        let fromOld = try (0..<n).map { try seal("old \($0)", from: alice, to: bob) }
        try old.sendUntilAcknowledged(fromOld)
        XCTAssertEqual(lists(old).count, 0, "no list goes to a peer that did not announce")
        XCTAssertEqual(Set(old.frames(.custodyAck).map(\.value)), Set(fromOld.map(\.bundleID)))

        // A phone that announced: the same burst is answered in lists, one per commit.
        let new = try RawPeer(identity: carol, role: .endpoint, hubPort: port)
        // The router reads one link's frames in order: the announcement before the burst.
        try new.send(CustodyAcks.announcement)
        let before = try counters(hub)
        let fromNew = try (0..<n).map { try seal("new \($0)", from: carol, to: bob) }
        try new.sendUntilAcknowledged(fromNew)
        let received = lists(new)
        XCTAssertGreaterThan(received.count, 0, "a burst from a peer that reads lists is answered with lists")
        let answerFrames = received.count + new.frames(.custodyAck).count
        XCTAssertLessThan(answerFrames, n / 4, "\(n) bundles answered in \(answerFrames) frames")
        for list in received { XCTAssertGreaterThan(list.bundleIDs.count, 1, "a single ack is sent as custodyAck") }
        let after = try counters(hub)
        XCTAssertEqual(after.ackListsSent - before.ackListsSent, received.count)
        XCTAssertEqual(after.acksInListsSent - before.acksInListsSent, received.reduce(0) { $0 + $1.bundleIDs.count })
        print("\(n) bundles acknowledged in \(received.count) lists and \(new.frames(.custodyAck).count) single acks")
    }

    func testAListCountsOnlyForBundlesSentOnThatLinkAndAMalformedListForNothing() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let alicePhone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let bobPhone = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        let mallory = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port)
        let envelopes = try (0..<5).map { try seal("to bob \($0)", from: s.alice, to: s.bob) }
        try alicePhone.sendUntilAcknowledged(envelopes)
        try Wait.until(timeout: 20, "five bundles at Bob") { Set(bobPhone.receivedEnvelopes.map(\.bundleID)).count == 5 }
        let ids = try SummaryVector(bundleIDs: envelopes.map(\.bundleID))
        let start = try counters(s.hub)

        // Another phone names Bob's bundles: none of them was sent on its link.
        try mallory.send(TLVRecord(.custodyAcks, value: ids.encoded))
        // A list out of order is refused whole.
        var unsorted = ids.encoded
        unsorted.replaceSubrange(2..<18, with: ids.bundleIDs[1])
        unsorted.replaceSubrange(18..<34, with: ids.bundleIDs[0])
        try bobPhone.send(TLVRecord(.custodyAcks, value: unsorted))
        // A count that disagrees with the length, too.
        try bobPhone.send(TLVRecord(.custodyAcks, value: [0, 9] + ids.bundleIDs[0]))
        try Wait.until(timeout: 10, "two malformed lists counted") {
            try counters(s.hub).refusedMalformed - start.refusedMalformed == 2
        }
        try Wait.until(timeout: 10, "mallory's list read") { try counters(s.hub).ackListsReceived - start.ackListsReceived == 1 }
        var c = try counters(s.hub)
        XCTAssertEqual(c.deliveredDirect, start.deliveredDirect, "neither list delivered anything")
        XCTAssertEqual(try s.hub.status().router.queue.delivered, 0)

        // Bob's own list delivers all five at once.
        try bobPhone.send(TLVRecord(.custodyAcks, value: ids.encoded))
        try Wait.until(timeout: 10, "five delivered") { try s.hub.status().router.queue.delivered == 5 }
        c = try counters(s.hub)
        XCTAssertEqual(c.deliveredDirect - start.deliveredDirect, 5)
        XCTAssertEqual(c.ackListsReceived - start.ackListsReceived, 2)
        XCTAssertEqual(c.acksInListsReceived - start.acksInListsReceived, 10)
    }
}
