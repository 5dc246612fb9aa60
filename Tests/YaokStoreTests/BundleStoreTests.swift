import XCTest
import YaokCrypto
@testable import YaokStore
import YaokStoreBenchmark
#if canImport(Glibc)
import Glibc
#endif

final class BundleStoreTests: XCTestCase {
    private func openStore(_ dir: String, sizeCap: Int64 = 500_000_000) throws -> BundleStore {
        let db = try SQLCipherDatabase(path: dir + "/hub.db", key: testKey)
        return try BundleStore(database: db, sizeCapBytes: sizeCap)
    }

    func testAcceptStoresAndReadsBack() throws {
        let store = try openStore(try makeTempDirectory(self))
        let b = makeBundle(1, previousHop: userID(7))
        XCTAssertEqual(try store.accept(b, nowMs: 5_000), .stored)
        let s = try XCTUnwrap(try store.bundle(bundleID(1)))
        XCTAssertEqual(s.bundleID, b.bundleID)
        XCTAssertEqual(s.destination, b.destination)
        XCTAssertEqual(s.kind, 1)
        XCTAssertEqual(s.sourceUserID, b.sourceUserID)
        XCTAssertEqual(s.hopCount, 1)
        XCTAssertEqual(s.hopLimit, 8)
        XCTAssertEqual(s.previousHop, userID(7))
        XCTAssertEqual(s.createdMs, 1_000)
        XCTAssertEqual(s.expiresMs, b.expiresMs)
        XCTAssertEqual(s.bytes, .held(b.bytes))
        XCTAssertEqual(s.receivedFrom, "test:1")
        XCTAssertEqual(s.state, .queued)
        XCTAssertEqual(s.attempts, 0)
        XCTAssertEqual(s.nextAttemptMs, 5_000)
        XCTAssertEqual(s.acceptedMs, 5_000)
        XCTAssertEqual(s.size, 100)
        XCTAssertNil(try store.bundle(bundleID(2)))
        XCTAssertEqual(try store.totalBytes(), 100)
        // The previous hop already has it.
        XCTAssertTrue(try store.peerHas(bundleID(1), peer: userID(7)))
    }

    /// A held receipt gives way to another envelope under its bundle ID (the router's answer
    /// to a re-dated copy of a proven receipt): bytes, size and times change, the state
    /// stays, and the holders are forgotten (one may only have refused the old envelope for
    /// its signature); a tombstone or an unknown ID changes nothing.
    func testReplaceEnvelopeChangesOnlyAHeldBundlesEnvelope() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, kind: 2, acknowledging: bundleID(7)), nowMs: 0), .stored)
        try store.recordPeerHas(bundleID(1), peer: userID(6))
        var real = makeBundle(1, expiresMs: 20_000_000, size: 120, kind: 2, acknowledging: bundleID(7))
        real.bytes = [UInt8](repeating: 0xEE, count: 120)
        XCTAssertTrue(try store.replaceEnvelope(with: real))
        let held = try XCTUnwrap(try store.bundle(bundleID(1)))
        XCTAssertEqual(held.bytes, .held(real.bytes))
        XCTAssertEqual(held.size, 120)
        XCTAssertEqual(held.expiresMs, 20_000_000)
        XCTAssertEqual(held.state, .queued)
        XCTAssertFalse(try store.peerHas(bundleID(1), peer: userID(6)), "offered the real envelope again")
        XCTAssertEqual(try store.totalBytes(), 120)

        XCTAssertEqual(try store.accept(makeBundle(2), nowMs: 0), .stored)
        try store.markDelivered(bundleID(2), nowMs: 10)
        XCTAssertFalse(try store.replaceEnvelope(with: makeBundle(2)), "a tombstone keeps no envelope to replace")
        XCTAssertEqual(try store.bundle(bundleID(2))?.bytes, .dropped)
        XCTAssertFalse(try store.replaceEnvelope(with: makeBundle(3)), "not held")
        XCTAssertNil(try store.bundle(bundleID(3)))
    }

    func testUnknownIDsRecordsNobodyAsHolder() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 5_000), .stored)
        XCTAssertEqual(try store.unknownIDs([bundleID(1), bundleID(2)]), [bundleID(2)])
        XCTAssertEqual(try store.peersHolding(bundleID(1)), 0, "an untrusted offer is not a holder")
        XCTAssertEqual(try store.noteOffered([bundleID(1), bundleID(2)], by: userID(6)), [bundleID(2)])
        XCTAssertEqual(try store.peersHolding(bundleID(1)), 1, "a trusted offer is")
    }

    /// A receipt counts only for a message held here, and only when its signer is that
    /// message's recipient; then the message becomes a tombstone, once.
    func testADeliveryReceiptCountsOnlyForItsRecipientsMessage() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 2, kind: 2, acknowledging: bundleID(7)), nowMs: 0), .stored)
        XCTAssertFalse(try store.deliveryReceipt(for: bundleID(1), signedBy: userID(2), nowMs: 10), "signed by somebody else")
        XCTAssertFalse(try store.deliveryReceipt(for: bundleID(2), signedBy: userID(2), nowMs: 10), "a receipt is not a message")
        XCTAssertFalse(try store.deliveryReceipt(for: bundleID(3), signedBy: userID(1), nowMs: 10), "not held")
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .queued)
        XCTAssertEqual(try store.bundle(bundleID(2))?.state, .queued)
        XCTAssertTrue(try store.lastDelivery().isEmpty)

        XCTAssertTrue(try store.deliveryReceipt(for: bundleID(1), signedBy: userID(1), nowMs: 20))
        let tomb = try XCTUnwrap(try store.bundle(bundleID(1)))
        XCTAssertEqual(tomb.state, .delivered)
        XCTAssertEqual(tomb.bytes, .dropped)
        XCTAssertTrue(try store.deliveryReceipt(for: bundleID(1), signedBy: userID(1), nowMs: 30), "a second copy still counts")
        XCTAssertEqual(try store.lastDelivery().map(\.atMs), [20], "the tombstone is not delivered twice")
    }

    func testReopenKeepsBundlesAndStatistics() throws {
        let dir = try makeTempDirectory(self)
        do {
            let store = try openStore(dir)
            XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .stored)
            XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .duplicate)
        }
        let store = try openStore(dir)
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .queued)
        XCTAssertEqual(store.statistics.duplicatesDropped, 1)
        XCTAssertEqual(try store.totalBytes(), 100)
    }

    func testInvalidBundlesAreRejectedWithReasons() throws {
        let store = try openStore(try makeTempDirectory(self))
        var b = makeBundle(1)
        b.bundleID = [1, 2, 3]
        XCTAssertThrowsError(try store.accept(b, nowMs: 0)) { error in
            guard case StoreError.invalidBundle(let reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("bundle ID"))
        }
        b = makeBundle(1)
        b.destination = []
        XCTAssertThrowsError(try store.accept(b, nowMs: 0))
        b = makeBundle(1)
        b.previousHop = [1]
        XCTAssertThrowsError(try store.accept(b, nowMs: 0))
        XCTAssertEqual(try store.counts()[.queued], 0)
    }

    func testExpiredOnArrivalIsRejected() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 1_000), nowMs: 1_000), .rejectedExpired)
        XCTAssertNil(try store.bundle(bundleID(1)))
    }

    func testDuplicatesAreDroppedAndCountedEvenAfterDelivery() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(1, previousHop: userID(5)), nowMs: 10), .duplicate)
        XCTAssertEqual(store.statistics.duplicatesDropped, 1)
        XCTAssertTrue(try store.peerHas(bundleID(1), peer: userID(5)), "an offering peer holds it")
        try store.markDelivered(bundleID(1), nowMs: 20)
        let tomb = try XCTUnwrap(try store.bundle(bundleID(1)))
        XCTAssertEqual(tomb.state, .delivered)
        XCTAssertEqual(tomb.bytes, .dropped)
        XCTAssertEqual(tomb.size, 100)
        XCTAssertEqual(try store.totalBytes(), 0)
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 30), .duplicate)
        XCTAssertEqual(store.statistics.duplicatesDropped, 2)
        XCTAssertEqual(try store.counts()[.delivered], 1)
        XCTAssertEqual(try store.counts()[.queued], 0)
    }

    func testHeldDeliveryReceiptFromTheRecipientMakesTheMessageDelivered() throws {
        let store = try openStore(try makeTempDirectory(self))
        // A receipt for bundle 1, signed by someone who is not its recipient (user 1): suppresses nothing.
        XCTAssertEqual(try store.accept(makeBundle(50, destination: 9, sender: 66, kind: 2, acknowledging: bundleID(1)), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1), nowMs: 10), .stored)
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .queued)
        // The recipient's own receipt for bundle 2 arrives first: bundle 2 becomes a tombstone on arrival.
        XCTAssertEqual(try store.accept(makeBundle(51, destination: 9, sender: 1, kind: 2, acknowledging: bundleID(2)), nowMs: 20), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 1), nowMs: 30), .alreadyDelivered)
        let tomb = try XCTUnwrap(try store.bundle(bundleID(2)))
        XCTAssertEqual(tomb.state, .delivered)
        XCTAssertEqual(tomb.bytes, .dropped)
        XCTAssertEqual(tomb.expiresMs, 10_000_000, "the tombstone lives as long as the message, not as the receipt says")
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 1), nowMs: 40), .duplicate)
        // A read receipt (kind 3) is not a delivery receipt.
        XCTAssertEqual(try store.accept(makeBundle(52, destination: 9, sender: 1, kind: 3, acknowledging: bundleID(3)), nowMs: 20), .stored)
        XCTAssertEqual(try store.accept(makeBundle(3, destination: 1), nowMs: 30), .stored)
    }

    /// Schema 6: a delivery receipt keeps (and indexes) the ID it acknowledges only while that
    /// message is not held; a receipt arriving after its message, the usual order, writes
    /// nothing to `bundles_by_ref`, and the message is still delivered once.
    func testOnlyAReceiptAheadOfItsMessageKeepsItsReference() throws {
        let store = try openStore(try makeTempDirectory(self))
        func references() throws -> Int {
            try store.database.scalar("SELECT count(*) FROM bundles WHERE ref_bundle IS NOT NULL")?.intValue ?? -1
        }
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(51, destination: 9, sender: 1, kind: 2, acknowledging: bundleID(1)), nowMs: 10), .stored)
        XCTAssertEqual(try references(), 0, "the message was held: nothing will look the receipt up")
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1), nowMs: 20), .duplicate)
        // Ahead of its message: kept, and the message is delivered on arrival.
        XCTAssertEqual(try store.accept(makeBundle(52, destination: 9, sender: 1, kind: 2, acknowledging: bundleID(2)), nowMs: 30), .stored)
        XCTAssertEqual(try references(), 1)
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 1), nowMs: 40), .alreadyDelivered)
        // A read receipt is never looked up by reference.
        XCTAssertEqual(try store.accept(makeBundle(53, destination: 9, sender: 1, kind: 3, acknowledging: bundleID(4)), nowMs: 50), .stored)
        XCTAssertEqual(try references(), 1)
    }

    func testSameBundleIDWithOtherContentIsAConflict() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, marker: "real"), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(1, marker: "fake"), nowMs: 1), .conflict)
        XCTAssertEqual(store.statistics.conflicts, 1)
        XCTAssertEqual(try store.bundle(bundleID(1))?.bytes, .held(makeBundle(1, marker: "real").bytes), "the held copy is untouched")
        // The same envelope under another hop header, of either version, is a duplicate, not a conflict.
        func behind(_ header: [UInt8], _ n: Int) -> NewBundle {
            var b = makeBundle(n, marker: "real")
            b.bytes = header + b.bytes
            return b
        }
        let v1 = [UInt8(1), 0, 10] + [UInt8](repeating: 0, count: 32)
        XCTAssertEqual(try store.accept(behind(v1, 2), nowMs: 2), .stored)
        XCTAssertEqual(try store.accept(behind([UInt8(1), 3, 10] + [UInt8](repeating: 7, count: 32), 2), nowMs: 3), .duplicate)
        XCTAssertEqual(try store.accept(behind([UInt8(2), 3, 10] + [UInt8](repeating: 7, count: 32) + [0, 0, 1, 0], 2), nowMs: 4), .duplicate)
    }

    func testBackoffScheduleIsExact() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: Int64.max / 2), nowMs: 0), .stored)
        let expected: [Int64] = [60_000, 300_000, 900_000, 3_600_000, 21_600_000, 21_600_000, 21_600_000]
        var now: Int64 = 1_000
        for (i, delay) in expected.enumerated() {
            try store.markAttemptFailed(bundleID(1), nowMs: now)
            let s = try XCTUnwrap(try store.bundle(bundleID(1)))
            XCTAssertEqual(s.state, .queued)
            XCTAssertEqual(s.attempts, i + 1)
            XCTAssertEqual(s.nextAttemptMs, now + delay, "attempt \(i + 1)")
            XCTAssertTrue(try store.due(nowMs: now + delay - 1, limit: 10).isEmpty)
            XCTAssertEqual(try store.due(nowMs: now + delay, limit: 10).map(\.bundleID), [bundleID(1)])
            now += delay + 7
        }
    }

    func testDueIsOldestFirstAndRespectsRetryTime() throws {
        let store = try openStore(try makeTempDirectory(self))
        for (n, t) in [(3, 300), (1, 100), (2, 200), (4, 400)] {
            XCTAssertEqual(try store.accept(makeBundle(n), nowMs: Int64(t)), .stored)
        }
        XCTAssertEqual(try store.due(nowMs: 250, limit: 10).map(\.bundleID), [bundleID(1), bundleID(2)])
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 10).map(\.bundleID), [1, 2, 3, 4].map(bundleID))
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 2).map(\.bundleID), [1, 2].map(bundleID))
        try leaveInFlight(store, 1) // as an older hub left it
        try store.markAttemptFailed(bundleID(2), nowMs: 1_000) // queued → retry at 61_000
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 10).map(\.bundleID), [3, 4].map(bundleID))
        XCTAssertEqual(try store.due(nowMs: 61_000, limit: 10).map(\.bundleID), [2, 3, 4].map(bundleID))
    }

    /// Paging with the cursor visits every due bundle once per round, even when all of them stay
    /// due (the router's tick walks the queue this way; a cursor that does not move on re-reads the
    /// first page forever).
    func testDuePagesWalkTheWholeQueueWithTheCursor() throws {
        let store = try openStore(try makeTempDirectory(self))
        // Ties on acceptance time are ordered by bundle ID.
        for (n, t) in [(5, 100), (3, 100), (1, 200), (4, 100), (2, 300)] {
            XCTAssertEqual(try store.accept(makeBundle(n), nowMs: Int64(t)), .stored)
        }
        var seen: [[UInt8]] = []
        var cursor: StoredBundle?
        var pages = 0
        repeat {
            let page = try store.due(nowMs: 1_000, limit: 2, withBytes: false, after: cursor)
            seen += page.map(\.bundleID)
            cursor = page.count < 2 ? nil : page.last
            pages += 1
        } while cursor != nil && pages < 10
        XCTAssertEqual(seen, [3, 4, 5, 1, 2].map(bundleID), "oldest first, ties by ID, each once")
        XCTAssertEqual(pages, 3)
        // Nothing changed state, so the next round starts over with the oldest.
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 2, withBytes: false, after: nil).map(\.bundleID), [3, 4].map(bundleID))
        // A cursor past the end gives an empty page (the caller wraps round).
        XCTAssertTrue(try store.due(nowMs: 1_000, limit: 2, after: try store.bundle(bundleID(2))).isEmpty)
    }

    func testHandOverAndPeerTable() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2), nowMs: 1), .stored)
        XCTAssertEqual(try store.peersHolding(bundleID(1)), 0)
        XCTAssertFalse(try store.peerHas(bundleID(1), peer: userID(5)))
        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(5), peerIsEndpoint: false, nowMs: 6), .handedOver)
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .handedOver)
        XCTAssertTrue(try store.peerHas(bundleID(1), peer: userID(5)))
        XCTAssertFalse(try store.peerHas(bundleID(1), peer: userID(6)))
        try store.recordPeerHas(bundleID(1), peer: userID(6))
        try store.recordPeerHas(bundleID(1), peer: userID(6)) // idempotent
        XCTAssertEqual(try store.peersHolding(bundleID(1)), 2)
        try store.recordPeerHas(bundleID(99), peer: userID(6)) // unknown: ignored
        XCTAssertEqual(try store.peersHolding(bundleID(99)), 0)
        // A handed-over bundle is still offered to others, not to those that have it.
        XCTAssertEqual(try store.forwardable(limit: 10).map(\.bundleID), [1, 2].map(bundleID))
        XCTAssertEqual(try store.forwardable(limit: 10, excludingPeer: userID(5)).map(\.bundleID), [bundleID(2)])
        XCTAssertEqual(try store.forwardable(limit: 10, excludingPeer: userID(8)).map(\.bundleID), [1, 2].map(bundleID))
        // Handed over is not due for retry, and a failure report does not requeue it.
        XCTAssertEqual(try store.due(nowMs: 100, limit: 10).map(\.bundleID), [bundleID(2)])
        try store.markAttemptFailed(bundleID(1), nowMs: 100)
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .handedOver)
        // Pending for the recipient includes it until delivered.
        XCTAssertEqual(try store.pending(destination: userID(1), limit: 10).count, 2)
        try store.markDelivered(bundleID(1), nowMs: 200)
        XCTAssertEqual(try store.pending(destination: userID(1), limit: 10).map(\.bundleID), [bundleID(2)])
        XCTAssertEqual(try store.forwardable(limit: 10).map(\.bundleID), [bundleID(2)])
        XCTAssertTrue(try store.pending(destination: userID(2), limit: 10).isEmpty)
    }

    /// The recipient's own acknowledgement delivers; any other endpoint's or hub's hands over,
    /// and only a hub is remembered as holding it.
    func testCustodyTakenByTheRecipientDeliversAndByOthersHandsOver() throws {
        let store = try openStore(try makeTempDirectory(self))
        for n in 1...3 { XCTAssertEqual(try store.accept(makeBundle(n, destination: 1), nowMs: 0), .stored) }
        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(1), peerIsEndpoint: true, nowMs: 50), .delivered)
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .delivered)
        XCTAssertEqual(try store.bundle(bundleID(1))?.bytes, .dropped)
        XCTAssertEqual(try store.lastDelivery().map(\.atMs), [50])
        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(1), peerIsEndpoint: true, nowMs: 60), .delivered, "again: still a tombstone")
        XCTAssertEqual(try store.lastDelivery().map(\.atMs), [50], "a tombstone is not delivered twice")
        XCTAssertEqual(try store.custodyTaken(bundleID(2), by: userID(1), peerIsEndpoint: false, nowMs: 70), .handedOver,
                       "a hub with the recipient's ID is still a hop, not the recipient")
        XCTAssertTrue(try store.peerHas(bundleID(2), peer: userID(1)))
        XCTAssertEqual(try store.custodyTaken(bundleID(3), by: userID(9), peerIsEndpoint: true, nowMs: 80), .handedOver)
        XCTAssertEqual(try store.bundle(bundleID(3))?.state, .handedOver)
        XCTAssertFalse(try store.peerHas(bundleID(3), peer: userID(9)), "a phone is never sent others' mail, so it is not recorded")
        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(5), peerIsEndpoint: false, nowMs: 90), .handedOver,
                       "a hub's late answer leaves the tombstone as it is")
        XCTAssertEqual(try store.bundle(bundleID(1))?.state, .delivered)
    }

    func testListingsWithoutBytes() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, size: 500), nowMs: 0), .stored)
        for light in [try store.due(nowMs: 0, limit: 5, withBytes: false),
                      try store.pending(destination: userID(1), limit: 5, withBytes: false),
                      try store.forwardable(limit: 5, withBytes: false),
                      try store.forwardable(limit: 5, excludingPeer: userID(3), withBytes: false)] {
            XCTAssertEqual(light.count, 1)
            XCTAssertEqual(light.first?.bytes, .notRead)
            XCTAssertEqual(light.first?.size, 500)
            XCTAssertEqual(light.first?.bundleID, bundleID(1))
            XCTAssertEqual(light.first?.destination, userID(1))
        }
        XCTAssertEqual(try store.due(nowMs: 0, limit: 5).first?.bytes.held?.count, 500)
    }

    func testUnknownIDsThrowNotFound() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertNil(try store.custodyTaken(bundleID(1), by: userID(1), peerIsEndpoint: false, nowMs: 0), "gone meanwhile: nothing to change")
        XCTAssertThrowsError(try store.markAttemptFailed(bundleID(1), nowMs: 0)) { XCTAssertEqual($0 as? StoreError, .bundleNotFound) }
        XCTAssertThrowsError(try store.markDelivered(bundleID(1), nowMs: 0)) { XCTAssertEqual($0 as? StoreError, .bundleNotFound) }
    }

    /// A store an older hub left with bundles in flight (a state this hub never writes) has
    /// them queued again at startup.
    /// Puts a bundle in the in-flight state as an older hub wrote it.
    func leaveInFlight(_ store: BundleStore, _ n: Int) throws {
        try store.database.execute("UPDATE bundles SET state = 1 WHERE bundle_id = ?", [.blob(bundleID(n))])
        XCTAssertEqual(try store.bundle(bundleID(n))?.state, .inFlight)
    }

    func testRequeueInFlight() throws {
        let dir = try makeTempDirectory(self)
        do {
            let store = try openStore(dir)
            for n in 1...3 { XCTAssertEqual(try store.accept(makeBundle(n), nowMs: Int64(n)), .stored) }
            try leaveInFlight(store, 1)
            XCTAssertEqual(try store.custodyTaken(bundleID(2), by: userID(4), peerIsEndpoint: false, nowMs: 11), .handedOver)
            try leaveInFlight(store, 3)
            XCTAssertEqual(try store.due(nowMs: 100, limit: 10).count, 0)
        }
        let store = try openStore(dir) // "restart"
        XCTAssertEqual(try store.requeueInFlight(nowMs: 500), 2)
        XCTAssertEqual(try store.due(nowMs: 500, limit: 10).map(\.bundleID), [1, 3].map(bundleID))
        XCTAssertEqual(try store.bundle(bundleID(1))?.attempts, 0)
        XCTAssertEqual(try store.bundle(bundleID(2))?.state, .handedOver)
        XCTAssertEqual(try store.requeueInFlight(nowMs: 600), 0)
    }

    func testExpiryDropsBytesThenTombstones() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 1_000), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, expiresMs: 2_000), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(3, expiresMs: 3_000), nowMs: 0), .stored)
        try store.markDelivered(bundleID(3), nowMs: 10)
        try leaveInFlight(store, 2)
        XCTAssertEqual(try store.expire(nowMs: 999), 0)
        XCTAssertEqual(try store.expire(nowMs: 1_000), 1)
        let tomb = try XCTUnwrap(try store.bundle(bundleID(1)))
        XCTAssertEqual(tomb.state, .expired)
        XCTAssertEqual(tomb.bytes, .dropped)
        XCTAssertEqual(store.statistics.expired, 1)
        XCTAssertEqual(try store.totalBytes(), 100)
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 1_500), nowMs: 1_100), .duplicate)
        XCTAssertTrue(try store.due(nowMs: 5_000, limit: 10).isEmpty)
        XCTAssertEqual(try store.expire(nowMs: 3_000), 1) // bundle 2 (in flight) expires
        XCTAssertNil(try store.bundle(bundleID(1)), "expired tombstone swept")
        XCTAssertNil(try store.bundle(bundleID(3)), "delivered tombstone swept at its expiry")
        XCTAssertEqual(try store.bundle(bundleID(2))?.state, .expired)
        XCTAssertEqual(try store.totalBytes(), 0)
        XCTAssertEqual(store.statistics.expired, 2)
        let c = try store.counts()
        XCTAssertEqual(c[.expired], 1)
        XCTAssertEqual(c[.queued], 0)
        XCTAssertEqual(c[.delivered], 0)
    }

    /// Foreign keys are not enforced (an enforced one makes each holder insert keep an
    /// encrypted statement journal), so the store forgets a bundle's holders itself (a
    /// trigger) when the bundle goes: evicted, or an expired tombstone swept.
    func testHoldersGoWithTheirBundleOnEvictionAndSweep() throws {
        let store = try openStore(try makeTempDirectory(self), sizeCap: 300)
        func holderRows() throws -> Int {
            try store.database.scalar("SELECT count(*) FROM bundle_holders")?.intValue ?? -1
        }
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 5_000, sender: 1, origin: "a"), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, expiresMs: 50_000, sender: 1, origin: "a"), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(3, expiresMs: 60_000, sender: 1, origin: "a"), nowMs: 0), .stored)
        for n in 1...3 { try store.recordPeerHas(bundleID(n), peer: userID(7)) }
        try store.recordPeerHas(bundleID(2), peer: userID(8))
        XCTAssertEqual(try holderRows(), 4)
        // A newcomer from another sender (no origin: the new-origin rule does not apply) evicts
        // sender 1's soonest-expiring bundle (1) and its holder row.
        XCTAssertEqual(try store.accept(makeBundle(4, expiresMs: 70_000, sender: 2), nowMs: 0), .stored)
        XCTAssertNil(try store.bundle(bundleID(1)))
        XCTAssertEqual(try holderRows(), 3)
        XCTAssertFalse(try store.peerHas(bundleID(1), peer: userID(7)))
        // Bundle 2 is delivered; once past its expiry the sweep deletes the tombstone and its holders.
        try store.markDelivered(bundleID(2), nowMs: 10)
        XCTAssertEqual(try store.expire(nowMs: 55_000), 0, "nothing carried has expired yet")
        XCTAssertNil(try store.bundle(bundleID(2)))
        XCTAssertEqual(try store.peersHolding(bundleID(2)), 0)
        XCTAssertEqual(try holderRows(), 1, "only bundle 3's holder is left")
        XCTAssertTrue(try store.peerHas(bundleID(3), peer: userID(7)))
    }

    /// Holders are keyed by the bundle's row number. SQLite hands the number of a deleted
    /// newest row to the next insert, so a holder left behind would be inherited by an
    /// unrelated bundle, which would then never be offered to that peer: a lost message.
    func testANewBundleOnAReusedRowNumberInheritsNoHolders() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 50_000), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, expiresMs: 5_000), nowMs: 0), .stored)
        let row = try store.database.scalar("SELECT id FROM bundles WHERE bundle_id = ?", [.blob(bundleID(2))])?.int64Value
        try store.recordPeerHas(bundleID(2), peer: userID(7))
        XCTAssertTrue(try store.peerHas(bundleID(2), peer: userID(7)))
        try store.markDelivered(bundleID(2), nowMs: 10)
        XCTAssertEqual(try store.expire(nowMs: 6_000), 0)
        XCTAssertNil(try store.bundle(bundleID(2)), "the newest row was deleted")
        XCTAssertEqual(try store.accept(makeBundle(3, expiresMs: 50_000), nowMs: 7_000), .stored)
        let reused = try store.database.scalar("SELECT id FROM bundles WHERE bundle_id = ?", [.blob(bundleID(3))])?.int64Value
        XCTAssertEqual(reused, row, "SQLite reused the row number (the case this test is about)")
        XCTAssertFalse(try store.peerHas(bundleID(3), peer: userID(7)))
        XCTAssertEqual(try store.peersHolding(bundleID(3)), 0)
        XCTAssertEqual(try store.forwardable(limit: 10, excludingPeer: userID(7)).map(\.bundleID), [bundleID(1), bundleID(3)])
    }

    /// The raw row of `n`: what someone reading the file with its key would see.
    private func rawRow(_ store: BundleStore, _ n: Int) throws -> [SQLValue] {
        try XCTUnwrap(try store.database.query("""
            SELECT destination, source_user, previous_hop, created_ms, accepted_ms, next_attempt_ms, received_from, \
            last_link, origin, expires_ms, size, kind FROM bundles WHERE bundle_id = ?
            """, [.blob(bundleID(n))]).first)
    }

    private func assertBlanked(_ row: [SQLValue], keepsSigner: Bool = false, expiresMs: Int64 = 10_000_000,
                               file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(row[0], .blob([]), "recipient", file: file, line: line)
        if !keepsSigner { XCTAssertEqual(row[1], .blob([]), "sender", file: file, line: line) }
        XCTAssertEqual(Array(row[2...8]), [.null, .integer(0), .integer(0), .integer(0), .null, .null, .null],
                       "previous hop, times, links, origin", file: file, line: line)
        XCTAssertEqual(row[9], .integer(expiresMs), "the expiry stays for the sweep", file: file, line: line)
    }

    /// A hub seized with its key must not give up who wrote to whom through its tombstones:
    /// delivered, expired and born-delivered rows keep only ID, kind, size and expiry. A
    /// receipt that came ahead of its message keeps its signer, which is what makes the
    /// message arriving later count as delivered. Tombstones still dedupe, and custody acks and
    /// receipts for them are still answered.
    func testTombstonesKeepNeitherSenderNorRecipientNorTimes() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1, previousHop: userID(7), sender: 9, origin: "udp"), nowMs: 5), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 2, expiresMs: 3_000, sender: 9), nowMs: 5), .stored)
        // Bob (1) acknowledges Alice's (9) message 4 before it got here: his receipt, to Alice.
        XCTAssertEqual(try store.accept(makeBundle(5, destination: 9, sender: 1, kind: 2, acknowledging: bundleID(4)), nowMs: 5), .stored)
        let carried = try rawRow(store, 1)
        XCTAssertEqual(carried[0], .blob(userID(1)), "a carried bundle keeps its routing")
        XCTAssertEqual(carried[1], .blob(userID(9)))

        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(1), peerIsEndpoint: true, nowMs: 10), .delivered)
        assertBlanked(try rawRow(store, 1))
        XCTAssertEqual(try store.expire(nowMs: 4_000), 1)
        assertBlanked(try rawRow(store, 2), expiresMs: 3_000)
        try store.markDelivered(bundleID(5), nowMs: 20)   // the receipt reached Alice
        let receipt = try rawRow(store, 5)
        assertBlanked(receipt, keepsSigner: true)
        XCTAssertEqual(receipt[1], .blob(userID(1)), "the early receipt keeps its signer for its message")
        XCTAssertEqual(try store.accept(makeBundle(4, destination: 1, sender: 9), nowMs: 30), .alreadyDelivered,
                       "the message after its receipt is still recognised")
        assertBlanked(try rawRow(store, 4))

        // Tombstones still dedupe and answer acks and receipts as they did.
        for n in [1, 4] { XCTAssertEqual(try store.accept(makeBundle(n, destination: 1, sender: 9), nowMs: 40), .duplicate) }
        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(1), peerIsEndpoint: true, nowMs: 50), .delivered)
        XCTAssertEqual(try store.custodyTaken(bundleID(1), by: userID(6), peerIsEndpoint: false, nowMs: 50), .handedOver)
        XCTAssertEqual(try store.peersHolding(bundleID(1)), 0, "a tombstone records no holders")
        XCTAssertTrue(try store.deliveryReceipt(for: bundleID(1), signedBy: userID(1), nowMs: 60), "delivered already")
        XCTAssertFalse(try store.deliveryReceipt(for: bundleID(2), signedBy: userID(2), nowMs: 60), "an expired one stays expired")
        try store.markDelivered(bundleID(2), nowMs: 70)
        XCTAssertEqual(try store.bundle(bundleID(2))?.state, .expired)
        XCTAssertEqual(try store.counts()[.delivered], 3)
        XCTAssertEqual(Set(try store.lastDelivery().map(\.destination)), [userID(1), userID(9)], "who got something, and when, is kept apart")
    }

    /// A version-7 store's tombstones are blanked when it opens (schema version 8); its
    /// carried bundles are untouched.
    func testVersionSevenTombstonesAreBlankedAtOpen() throws {
        let dir = try makeTempDirectory(self)
        do {
            let db = try SQLCipherDatabase(path: dir + "/hub.db", key: testKey)
            XCTAssertEqual(try db.migrate(component: BundleStore.schemaComponent, Array(BundleSchema.migrations.prefix(7))), 7)
            for (n, state) in [(1, 0), (2, 3), (3, 4), (5, 3)] {
                try db.execute("""
                    INSERT INTO bundles (bundle_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, created_ms, \
                    expires_ms, bytes, size, received_from, state, next_attempt_ms, accepted_ms, origin, ref_bundle, last_link) \
                    VALUES (?, ?, ?, ?, 1, 8, ?, 1000, 10000000, ?, 3, 'udp 10.0.0.7:4000', ?, 2000, 3000, 'udp', ?, 'udp#1')
                    """, [.blob(bundleID(n)), .blob(userID(1)), .int(n == 5 ? 2 : 1), .blob(userID(9)), .blob(userID(7)),
                          state == 0 ? .blob([1, 2, 3]) : .null, .int(state), n == 5 ? .blob(bundleID(4)) : .null])
            }
            db.close()
        }
        let store = try openStore(dir)
        XCTAssertEqual(try store.database.schemaVersion(component: BundleStore.schemaComponent), 8)
        XCTAssertEqual(try rawRow(store, 1)[0], .blob(userID(1)), "a carried bundle is untouched")
        XCTAssertEqual(try rawRow(store, 1)[6], .text("udp 10.0.0.7:4000"))
        assertBlanked(try rawRow(store, 2))
        assertBlanked(try rawRow(store, 3))
        assertBlanked(try rawRow(store, 5), keepsSigner: true)
        XCTAssertEqual(try rawRow(store, 5)[1], .blob(userID(9)))
    }

    /// A version-5 store (holders keyed by bundle ID, state-led due and expiry indexes, carried
    /// bytes in a persisted counter) opens at the current version with every holder kept under its
    /// bundle's row, and its carried bytes counted from the rows.
    func testVersionFiveStoreMigratesItsHoldersAndIndexes() throws {
        let dir = try makeTempDirectory(self)
        do {
            let db = try SQLCipherDatabase(path: dir + "/hub.db", key: testKey)
            XCTAssertEqual(try db.migrate(component: BundleStore.schemaComponent, Array(BundleSchema.migrations.prefix(5))), 5)
            for n in 1...3 {
                try db.execute("""
                    INSERT INTO bundles (bundle_id, destination, kind, source_user, hop_count, hop_limit, created_ms, expires_ms, \
                    bytes, size, state, next_attempt_ms, accepted_ms) VALUES (?, ?, 1, ?, 0, 8, 0, 90000, ?, 3, 0, 0, ?)
                    """, [.blob(bundleID(n)), .blob(userID(1)), .blob(userID(9)), .blob([1, 2, 3]), .int(n)])
            }
            try db.execute("INSERT INTO bundle_peers (bundle_id, peer) VALUES (?, ?)", [.blob(bundleID(2)), .blob(userID(5))])
            try db.execute("INSERT INTO bundle_peers (bundle_id, peer) VALUES (?, ?)", [.blob(bundleID(2)), .blob(userID(6))])
            try db.execute("INSERT INTO bundle_peers (bundle_id, peer) VALUES (?, ?)", [.blob(bundleID(3)), .blob(userID(5))])
            db.close()
        }
        let store = try openStore(dir)
        XCTAssertEqual(try store.database.schemaVersion(component: BundleStore.schemaComponent), 8)
        XCTAssertEqual(try store.totalBytes(), 9)
        XCTAssertEqual(try store.peersHolding(bundleID(1)), 0)
        XCTAssertEqual(try store.peersHolding(bundleID(2)), 2)
        XCTAssertTrue(try store.peerHas(bundleID(3), peer: userID(5)))
        XCTAssertEqual(try store.forwardable(limit: 10, excludingPeer: userID(5)).map(\.bundleID), [bundleID(1)])
        let tables = try store.database.query("SELECT name FROM sqlite_master").compactMap { $0[0].textValue }
        XCTAssertFalse(tables.contains("bundle_peers") || tables.contains("bundles_by_due"), "\(tables)")
        XCTAssertTrue(tables.contains("bundles_queued_by_due") && tables.contains("bundles_forget_holders"), "\(tables)")
        XCTAssertFalse(tables.contains { $0.hasPrefix("bundles_carried_") && $0 != "bundles_carried_by_destination" }, "persisted counter triggers left: \(tables)")
        XCTAssertEqual(try store.due(nowMs: 1, limit: 10).map(\.bundleID), [1, 2, 3].map(bundleID))
    }

    /// Schema 5: eviction reads its victims from the partial indexes of evictable rows, in
    /// their order (no sort), and the state-keyed indexes of earlier schemas are gone.
    func testEvictionVictimsComeFromThePartialIndexesInTheirOrder() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.database.schemaVersion(component: BundleStore.schemaComponent), 8)
        for (sql, index) in [(BundleStore.SQL.victimsOfSender, "bundles_evictable_by_sender"),
                             (BundleStore.SQL.victimsOfOrigin, "bundles_evictable_by_origin")] {
            let plan = try store.database.query("EXPLAIN QUERY PLAN " + sql, [.blob([UInt8](repeating: 1, count: 32)), .int(5)])
                .map { $0.last?.textValue ?? "" }.joined(separator: "\n")
            XCTAssertTrue(plan.contains(index), plan)
            XCTAssertFalse(plan.contains("TEMP B-TREE"), plan)
        }
        let indexes = try store.database.query("SELECT name FROM sqlite_master WHERE type = 'index'").compactMap { $0[0].textValue }
        XCTAssertFalse(indexes.contains("bundles_by_sender") || indexes.contains("bundles_by_origin"), "\(indexes)")
    }

    func testEvictionTakesFromTheHeaviestSenderOrOrigin() throws {
        // Cap: 10 bundles of 100 bytes.
        let store = try openStore(try makeTempDirectory(self), sizeCap: 1_000)
        // A legitimate queue: 3 old bundles from sender 1 via a phone, expiring soonest.
        for n in 1...3 {
            XCTAssertEqual(try store.accept(makeBundle(n, expiresMs: Int64(10_000 + n), sender: 1, origin: "udp:10.0.0.1"), nowMs: 0), .stored)
        }
        // A neighbour hub's bundle, stored while there was room.
        XCTAssertEqual(try store.accept(makeBundle(5, expiresMs: 20_000, sender: 9, origin: "mesh:10.0.0.2"), nowMs: 0), .stored)
        // A flood from one origin with a fresh sender key per bundle, expiring as late as allowed.
        var refused = 0
        for n in 100..<130 {
            let r = try store.accept(makeBundle(n, expiresMs: 99_000, sender: UInt8(n), origin: "udp:10.0.0.66"), nowMs: 0)
            if r == .rejectedOverShare { refused += 1 } else { XCTAssertEqual(r, .stored) }
        }
        XCTAssertEqual(refused, 24, "6 junk bundles fill the store; the rest pay for themselves")
        for n in 1...3 { XCTAssertEqual(try store.bundle(bundleID(n))?.state, .queued, "legitimate bundle \(n) kept") }
        XCTAssertEqual(store.statistics.evicted, 0)
        XCTAssertEqual(store.statistics.refusedOverShare, 24)
        // A newcomer from an origin that already holds space takes from the flooder, the
        // heaviest origin.
        XCTAssertEqual(try store.accept(makeBundle(4, expiresMs: 20_000, sender: 2, origin: "mesh:10.0.0.2"), nowMs: 0), .stored)
        XCTAssertEqual(store.statistics.evicted, 1)
        XCTAssertEqual(store.statistics.evictedHeaviestOrigin, 1)
        XCTAssertNil(try store.bundle(bundleID(100)), "the flood's soonest-expiring bundle went")
        for n in 1...5 { XCTAssertNotNil(try store.bundle(bundleID(n))) }
        // A newcomer from an origin that holds nothing takes nobody's space.
        XCTAssertEqual(try store.accept(makeBundle(6, expiresMs: 20_000, sender: 3, origin: "udp:10.0.7.0/24"), nowMs: 0), .rejectedOverShare)
        XCTAssertEqual(store.statistics.evicted, 1)
        // One sender holding most of the space loses first, whatever its origins.
        let s2 = try openStore(try makeTempDirectory(self), sizeCap: 1_000)
        for n in 1...8 { XCTAssertEqual(try s2.accept(makeBundle(n, sender: 5, origin: "udp:10.0.0.\(n)"), nowMs: 0), .stored) }
        XCTAssertEqual(try s2.accept(makeBundle(9, sender: 6, origin: "udp:10.0.0.1"), nowMs: 0), .stored)
        XCTAssertEqual(try s2.accept(makeBundle(10, sender: 7, origin: "udp:10.0.0.2"), nowMs: 0), .stored)
        XCTAssertEqual(try s2.accept(makeBundle(11, size: 250, sender: 8, origin: "udp:10.0.0.3"), nowMs: 0), .stored)
        XCTAssertEqual(s2.statistics.evicted, 3)
        XCTAssertEqual(s2.statistics.evictedHeaviestSender, 3)
        for n in 9...11 { XCTAssertNotNil(try s2.bundle(bundleID(n))) }
        XCTAssertLessThanOrEqual(try s2.totalBytes(), 1_000)
        // Larger than the whole cap.
        XCTAssertEqual(try s2.accept(makeBundle(14, size: 1_001, sender: 3), nowMs: 0), .rejectedTooLarge)
        // Bundles on the wire are not evicted: with all of sender 5's being sent (the router
        // says which), others pay.
        let sending = Set((4...8).map(bundleID))
        XCTAssertEqual(try s2.accept(makeBundle(15, sender: 3, origin: "udp:10.0.0.1"), nowMs: 0) { sending.contains($0) }, .stored)
        for n in 4...8 { XCTAssertNotNil(try s2.bundle(bundleID(n))) }
        XCTAssertGreaterThan(s2.statistics.evicted, 3)
        // When none are being sent, sender 5 (the heaviest) pays at the next eviction.
        let evictedBefore = s2.statistics.evicted
        for n in 16..<30 where s2.statistics.evicted == evictedBefore {
            XCTAssertEqual(try s2.accept(makeBundle(n, sender: UInt8(n + 20), origin: "udp:10.0.0.\(n % 3 + 1)"), nowMs: 0), .stored)
        }
        XCTAssertEqual(s2.statistics.evicted, evictedBefore + 1)
        XCTAssertNil(try s2.bundle(bundleID(4)), "sender 5's soonest-expiring bundle went")
        // Every eviction is counted under the share it was taken from.
        XCTAssertEqual(s2.statistics.evictedHeaviestSender + s2.statistics.evictedHeaviestOrigin, s2.statistics.evicted)
        // Evicted bundles are forgotten (not tombstones).
        XCTAssertEqual(try s2.counts()[.expired], 0)
        XCTAssertEqual(try s2.counts()[.delivered], 0)
    }

    func testVersionOneStoreMigratesToBundleIDs() throws {
        let dir = try makeTempDirectory(self)
        let sender = [UInt8](repeating: 0x42, count: 32), msg = bundleID(7)
        do {
            let db = try SQLCipherDatabase(path: dir + "/hub.db", key: testKey)
            XCTAssertEqual(try db.migrate(component: BundleStore.schemaComponent, Array(BundleSchema.migrations.prefix(1))), 1)
            try db.execute("""
                INSERT INTO bundles (message_id, destination, kind, source_user, hop_count, hop_limit, created_ms, expires_ms, bytes, size, \
                received_from, state, next_attempt_ms, accepted_ms) VALUES (?, ?, 1, ?, 0, 8, 0, 9000, ?, 3, 'udp/1', 0, 0, 0)
                """, [.blob(msg), .blob(userID(1)), .blob(sender), .blob([1, 2, 3])])
            try db.execute("INSERT INTO bundle_peers (message_id, peer) VALUES (?, ?)", [.blob(msg), .blob(userID(5))])
            // A tombstone a forged receipt left (zero source user): dropped by the migration.
            try db.execute("""
                INSERT INTO bundles (message_id, destination, kind, source_user, hop_count, hop_limit, created_ms, expires_ms, bytes, size, \
                state, next_attempt_ms, accepted_ms) VALUES (?, ?, 0, ?, 0, 0, 0, 9000, NULL, 0, 3, 0, 0)
                """, [.blob(bundleID(8)), .blob(userID(1)), .blob([UInt8](repeating: 0, count: 32))])
            db.close()
        }
        let store = try openStore(dir)
        let id = BundleID.of(senderUserID: sender, messageID: msg)
        let b = try XCTUnwrap(try store.bundle(id))
        XCTAssertEqual(b.bytes, .held([1, 2, 3]))
        XCTAssertEqual(b.state, .queued)
        XCTAssertEqual(b.origin, "udp/1")
        XCTAssertTrue(try store.peerHas(id, peer: userID(5)))
        XCTAssertNil(try store.bundle(msg))
        XCTAssertEqual(try store.counts()[.delivered], 0)
        XCTAssertEqual(try store.totalBytes(), 3)
    }

    func testIDsAreSortedAndFilteredByState() throws {
        let store = try openStore(try makeTempDirectory(self))
        for n in [5, 3, 9, 1] { XCTAssertEqual(try store.accept(makeBundle(n), nowMs: 0), .stored) }
        try store.markDelivered(bundleID(9), nowMs: 1)
        XCTAssertEqual(try store.ids(states: [.queued], limit: 10), [1, 3, 5].map(bundleID))
        XCTAssertEqual(try store.ids(states: [.queued, .delivered], limit: 10), [1, 3, 5, 9].map(bundleID))
        XCTAssertEqual(try store.ids(states: [.queued], limit: 2), [1, 3].map(bundleID))
        XCTAssertEqual(try store.ids(states: [], limit: 10), [])
    }

    func testLastDeliveryPerRecipient() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(3, destination: 2), nowMs: 0), .stored)
        try store.markDelivered(bundleID(1), nowMs: 100)
        try store.markDelivered(bundleID(3), nowMs: 200)
        try store.markDelivered(bundleID(2), nowMs: 300)
        let last = try store.lastDelivery()
        XCTAssertEqual(last.map(\.destination), [userID(1), userID(2)])
        XCTAssertEqual(last.map(\.atMs), [300, 200])
    }

    /// A delivery within a minute of its recipient's persisted one is kept in memory only (it
    /// would cost a page of every light-load commit): shown at once, persisted a minute later.
    func testALastDeliveryIsPersistedAtMostOnceAMinutePerRecipientAndShownAtOnce() throws {
        let dir = try makeTempDirectory(self)
        do {
            let store = try openStore(dir)
            for n in 1...4 { XCTAssertEqual(try store.accept(makeBundle(n, destination: 1), nowMs: 0), .stored) }
            XCTAssertEqual(try store.accept(makeBundle(5, destination: 2), nowMs: 0), .stored)
            try store.markDelivered(bundleID(1), nowMs: 1_000)
            try store.markDelivered(bundleID(2), nowMs: 30_000)
            try store.markDelivered(bundleID(5), nowMs: 40_000)
            XCTAssertEqual(try store.lastDelivery().map(\.atMs), [40_000, 30_000], "the newest delivery shows at once")
            XCTAssertEqual(try store.lastDelivery().map(\.destination), [userID(2), userID(1)])
        }
        do {
            let store = try openStore(dir)
            XCTAssertEqual(try store.lastDelivery().map(\.atMs), [40_000, 1_000], "30 s after the persisted one: not written")
            try store.markDelivered(bundleID(3), nowMs: 61_000)
            try store.markDelivered(bundleID(4), nowMs: 62_000)
        }
        let store = try openStore(dir)
        XCTAssertEqual(try store.lastDelivery().map(\.atMs), [61_000, 40_000], "a minute after the persisted one: written")
    }

    /// Memory keeps at most ``BundleStore/unpersistedDeliveriesLimit`` recipients' unpersisted
    /// deliveries (anyone who can make keys can be many recipients); past it, a delivery to
    /// another recipient is written at once, and one already kept in memory stays there.
    func testUnpersistedDeliveriesAreBoundedAndOverflowIsWritten() throws {
        let dir = try makeTempDirectory(self)
        let limit = BundleStore.unpersistedDeliveriesLimit
        func recipient(_ i: Int) -> [UInt8] { [UInt8(i >> 8), UInt8(i & 0xFF)] + [UInt8](repeating: 7, count: 30) }
        func message(_ n: Int, to i: Int) -> NewBundle {
            var b = makeBundle(n)
            b.destination = recipient(i)
            return b
        }
        do {
            let store = try openStore(dir)
            // Each of limit + 1 recipients gets a persisted delivery at 1 s, then one 10 s later
            // (in one group transaction: one fsync, not thousands).
            try store.database.beginGroup()
            for i in 0...limit {
                XCTAssertEqual(try store.accept(message(2 * i + 1, to: i), nowMs: 0), .stored)
                XCTAssertEqual(try store.accept(message(2 * i + 2, to: i), nowMs: 0), .stored)
                try store.markDelivered(bundleID(2 * i + 1), nowMs: 1_000)
            }
            for i in 0...limit { try store.markDelivered(bundleID(2 * i + 2), nowMs: 11_000) }
            try store.database.commitGroup()
            XCTAssertEqual(Set(try store.lastDelivery().map(\.atMs)), [11_000], "every delivery shows at once")
        }
        let reopened = try openStore(dir).lastDelivery()
        XCTAssertEqual(reopened.filter { $0.atMs == 11_000 }.map(\.destination), [recipient(limit)], "the one past the limit was written")
        XCTAssertEqual(reopened.filter { $0.atMs == 1_000 }.count, limit, "the rest waited in memory")
    }

    /// The carried bytes live in memory (a temp table kept by triggers, counted from the carried
    /// index at open; schema version 7): they must equal the rows' own sum after every kind of
    /// change, after a group that was rolled back, and after a reopen.
    func testCarriedBytesInMemoryMatchTheRowsThroughChangesRollbackAndReopen() throws {
        let dir = try makeTempDirectory(self)
        var store = try openStore(dir, sizeCap: 8_000)
        func summed() throws -> Int64 {
            try XCTUnwrap(try store.database.scalar("SELECT coalesce(sum(size), 0) FROM bundles WHERE bytes IS NOT NULL",
                                                    purpose: "summing the rows")?.int64Value)
        }
        for n in 1...6 {
            XCTAssertEqual(try store.accept(makeBundle(n, expiresMs: n <= 2 ? 2_000 : 100_000, size: 1_000 + n), nowMs: 0), .stored)
        }
        XCTAssertEqual(try store.totalBytes(), 6_021)
        try store.markDelivered(bundleID(3), nowMs: 10)
        XCTAssertEqual(try store.expire(nowMs: 2_000), 2)
        XCTAssertEqual(try store.totalBytes(), 3_015)
        XCTAssertEqual(try store.totalBytes(), try summed())

        // A group whose commit fails is rolled back whole, its count with it.
        try store.database.beginGroup()
        XCTAssertEqual(try store.accept(makeBundle(20, size: 500), nowMs: 0), .stored)
        XCTAssertEqual(try store.totalBytes(), 3_515)
        struct HalfWay: Error {}
        XCTAssertThrowsError(try store.database.transaction {
            try store.database.execute("DELETE FROM bundles WHERE bundle_id = ?", [.blob(bundleID(4))], purpose: "poisoning the group")
            throw HalfWay()
        })
        XCTAssertThrowsError(try store.database.commitGroup())
        XCTAssertEqual(try store.totalBytes(), 3_015)
        XCTAssertNil(try store.bundle(bundleID(20)))

        // Eviction under the cap (8,000): a heavier sender loses bundles to a newcomer.
        for n in 30...33 { XCTAssertEqual(try store.accept(makeBundle(n, size: 1_200, sender: 2), nowMs: 0), .stored) }
        XCTAssertEqual(try store.accept(makeBundle(40, size: 1_000, sender: 3), nowMs: 0), .stored)
        XCTAssertGreaterThan(store.statistics.evicted, 0)
        let carried = try store.totalBytes()
        XCTAssertLessThanOrEqual(carried, 8_000)
        XCTAssertEqual(carried, try summed())

        store = try openStore(dir, sizeCap: 8_000)
        XCTAssertEqual(try store.totalBytes(), carried, "counted again at open")
        XCTAssertEqual(try store.database.scalar("SELECT count(*) FROM bundle_counters WHERE name = 'carried_bytes'", purpose: "test")?.int64Value, 0,
                       "no persisted counter is left to go stale")
    }

    func testVacuumReturnsFreePages() throws {
        let dir = try makeTempDirectory(self)
        let store = try openStore(dir)
        for n in 1...400 { XCTAssertEqual(try store.accept(makeBundle(n, expiresMs: 1_000, size: 4_000), nowMs: 0), .stored) }
        XCTAssertEqual(try store.expire(nowMs: 1_000), 400)
        XCTAssertEqual(try store.expire(nowMs: 1_001), 0)
        let before = try XCTUnwrap(try store.database.pragma("freelist_count")?.int64Value)
        XCTAssertGreaterThan(before, 256)
        XCTAssertTrue(try store.vacuumIfNeeded(nowMs: 100_000_000))
        let after = try XCTUnwrap(try store.database.pragma("freelist_count")?.int64Value)
        XCTAssertLessThan(after, before)
        XCTAssertFalse(try store.vacuumIfNeeded(nowMs: 100_000_001), "nothing left to do")
    }

    /// The database file and its WAL never hold bundle content in the clear.
    func testNoPlaintextOnDisk() throws {
        let dir = try makeTempDirectory(self)
        let marker = "PLAINTEXT-MARKER-1234"
        let path = dir + "/hub.db"
        let db = try SQLCipherDatabase(path: path, key: testKey)
        let store = try BundleStore(database: db)
        for n in 1...20 {
            var b = makeBundle(n, size: 300, marker: marker)
            b.receivedFrom = marker
            XCTAssertEqual(try store.accept(b, nowMs: 0), .stored)
        }
        // While open the content sits in the WAL; check it there, then after close.
        let wal = try XCTUnwrap(fileBytes(path + "-wal"))
        XCTAssertGreaterThan(wal.count, 6_000)
        XCTAssertFalse(contains(wal, Array(marker.utf8)), "marker found in the WAL")
        XCTAssertFalse(contains(fileBytes(path) ?? [], Array(marker.utf8)), "marker found in the database file")
        db.close()
        let file = try XCTUnwrap(fileBytes(path))
        XCTAssertGreaterThan(file.count, 6_000, "the bundles were checkpointed into the file")
        XCTAssertFalse(contains(file, Array(marker.utf8)), "marker found in the database file")
        XCTAssertFalse(contains(fileBytes(path + "-wal") ?? [], Array(marker.utf8)))
        XCTAssertFalse(contains(file, Array("SQLite format 3".utf8)), "even the header is encrypted")
        // Control: the search does find the marker in a plain file.
        try writeFile(dir + "/plain", Array("xx\(marker)yy".utf8), mode: 0o600)
        XCTAssertTrue(contains(fileBytes(dir + "/plain") ?? [], Array(marker.utf8)))
        // And the content is really there, under the key.
        let reopened = try BundleStore(database: try SQLCipherDatabase(path: path, key: testKey))
        XCTAssertTrue(contains(try XCTUnwrap(try reopened.bundle(bundleID(5))).bytes.held ?? [], Array(marker.utf8)))
    }

    func testConcurrentAcceptsAllLand() throws {
        let store = try openStore(try makeTempDirectory(self))
        DispatchQueue.concurrentPerform(iterations: 4) { w in
            for i in 0..<20 { _ = try? store.accept(makeBundle(w * 1_000 + i), nowMs: 0) }
        }
        XCTAssertEqual(try store.counts()[.queued], 80)
        XCTAssertEqual(try store.totalBytes(), 8_000)
    }
}

final class BundleStoreBenchmarkTests: XCTestCase {
    /// Runs the benchmark end to end (its speed is reported, not asserted).
    func testBenchmarkRunsAndCleansUp() throws {
        let dir = try makeTempDirectory(self)
        let rate = try BundleStoreBenchmark.acceptRate(count: 50, directory: dir)
        XCTAssertGreaterThan(rate, 0)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
        print("bundle accept rate (durable, 1 KiB): \(Int(rate))/s")
    }
}
