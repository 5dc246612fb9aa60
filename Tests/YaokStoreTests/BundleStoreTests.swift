import XCTest
@testable import YaokStore
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
        let s = try XCTUnwrap(try store.bundle(messageID(1)))
        XCTAssertEqual(s.messageID, b.messageID)
        XCTAssertEqual(s.destination, b.destination)
        XCTAssertEqual(s.kind, 1)
        XCTAssertEqual(s.sourceUserID, b.sourceUserID)
        XCTAssertEqual(s.hopCount, 1)
        XCTAssertEqual(s.hopLimit, 8)
        XCTAssertEqual(s.previousHop, userID(7))
        XCTAssertEqual(s.createdMs, 1_000)
        XCTAssertEqual(s.expiresMs, b.expiresMs)
        XCTAssertEqual(s.bytes, b.bytes)
        XCTAssertEqual(s.receivedFrom, "test:1")
        XCTAssertEqual(s.state, .queued)
        XCTAssertEqual(s.attempts, 0)
        XCTAssertEqual(s.nextAttemptMs, 5_000)
        XCTAssertEqual(s.acceptedMs, 5_000)
        XCTAssertEqual(s.size, 100)
        XCTAssertNil(s.lastLink)
        XCTAssertNil(try store.bundle(messageID(2)))
        XCTAssertEqual(try store.totalBytes(), 100)
        // The previous hop already has it.
        XCTAssertTrue(try store.peerHas(messageID(1), peer: userID(7)))
    }

    func testReopenKeepsBundlesAndStatistics() throws {
        let dir = try makeTempDirectory(self)
        do {
            let store = try openStore(dir)
            XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .stored)
            XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .duplicate)
        }
        let store = try openStore(dir)
        XCTAssertEqual(try store.bundle(messageID(1))?.state, .queued)
        XCTAssertEqual(store.statistics.duplicatesDropped, 1)
        XCTAssertEqual(try store.totalBytes(), 100)
    }

    func testInvalidBundlesAreRejectedWithReasons() throws {
        let store = try openStore(try makeTempDirectory(self))
        var b = makeBundle(1)
        b.messageID = [1, 2, 3]
        XCTAssertThrowsError(try store.accept(b, nowMs: 0)) { error in
            guard case StoreError.invalidBundle(let reason) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("message ID"))
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
        XCTAssertNil(try store.bundle(messageID(1)))
    }

    func testDuplicatesAreDroppedAndCountedEvenAfterDelivery() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(1, previousHop: userID(5)), nowMs: 10), .duplicate)
        XCTAssertEqual(store.statistics.duplicatesDropped, 1)
        XCTAssertTrue(try store.peerHas(messageID(1), peer: userID(5)), "an offering peer holds it")
        try store.markDelivered(messageID(1), nowMs: 20)
        let tomb = try XCTUnwrap(try store.bundle(messageID(1)))
        XCTAssertEqual(tomb.state, .delivered)
        XCTAssertEqual(tomb.bytes, [])
        XCTAssertEqual(tomb.size, 100)
        XCTAssertEqual(try store.totalBytes(), 0)
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 30), .duplicate)
        XCTAssertEqual(store.statistics.duplicatesDropped, 2)
        XCTAssertEqual(try store.counts()[.delivered], 1)
        XCTAssertEqual(try store.counts()[.queued], 0)
    }

    func testReceiptBeforeBundleLeavesATombstone() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertTrue(try store.rememberDelivered(messageID(1), destination: userID(1), expiresMs: 5_000, nowMs: 100))
        XCTAssertFalse(try store.rememberDelivered(messageID(1), destination: userID(1), expiresMs: 5_000, nowMs: 101))
        XCTAssertFalse(try store.rememberDelivered(messageID(2), destination: userID(1), expiresMs: 100, nowMs: 100))
        XCTAssertEqual(try store.bundle(messageID(1))?.state, .delivered)
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 5_000), nowMs: 200), .duplicate)
        XCTAssertEqual(try store.lastDelivery().first?.atMs, 100)
        XCTAssertEqual(try store.totalBytes(), 0)
        // A receipt for a bundle we carry does not disturb it.
        XCTAssertEqual(try store.accept(makeBundle(3), nowMs: 0), .stored)
        XCTAssertFalse(try store.rememberDelivered(messageID(3), destination: userID(1), expiresMs: 5_000, nowMs: 300))
        XCTAssertEqual(try store.bundle(messageID(3))?.state, .queued)
        XCTAssertEqual(try store.expire(nowMs: 5_000), 0)
        XCTAssertNil(try store.bundle(messageID(1)), "tombstone swept at expiry")
    }

    func testBackoffScheduleIsExact() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: Int64.max / 2), nowMs: 0), .stored)
        let expected: [Int64] = [60_000, 300_000, 900_000, 3_600_000, 21_600_000, 21_600_000, 21_600_000]
        var now: Int64 = 1_000
        for (i, delay) in expected.enumerated() {
            try store.markInFlight(messageID(1), link: "udp", nowMs: now)
            XCTAssertEqual(try store.bundle(messageID(1))?.state, .inFlight)
            try store.markAttemptFailed(messageID(1), nowMs: now)
            let s = try XCTUnwrap(try store.bundle(messageID(1)))
            XCTAssertEqual(s.state, .queued)
            XCTAssertEqual(s.attempts, i + 1)
            XCTAssertEqual(s.nextAttemptMs, now + delay, "attempt \(i + 1)")
            XCTAssertTrue(try store.due(nowMs: now + delay - 1, limit: 10).isEmpty)
            XCTAssertEqual(try store.due(nowMs: now + delay, limit: 10).map(\.messageID), [messageID(1)])
            now += delay + 7
        }
    }

    func testDueIsOldestFirstAndRespectsRetryTime() throws {
        let store = try openStore(try makeTempDirectory(self))
        for (n, t) in [(3, 300), (1, 100), (2, 200), (4, 400)] {
            XCTAssertEqual(try store.accept(makeBundle(n), nowMs: Int64(t)), .stored)
        }
        XCTAssertEqual(try store.due(nowMs: 250, limit: 10).map(\.messageID), [messageID(1), messageID(2)])
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 10).map(\.messageID), [1, 2, 3, 4].map(messageID))
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 2).map(\.messageID), [1, 2].map(messageID))
        try store.markInFlight(messageID(1), link: "ble", nowMs: 1_000)
        try store.markAttemptFailed(messageID(2), nowMs: 1_000) // queued → retry at 61_000
        XCTAssertEqual(try store.due(nowMs: 1_000, limit: 10).map(\.messageID), [3, 4].map(messageID))
        XCTAssertEqual(try store.due(nowMs: 61_000, limit: 10).map(\.messageID), [2, 3, 4].map(messageID))
        XCTAssertEqual(try store.bundle(messageID(1))?.lastLink, "ble")
    }

    func testHandOverAndPeerTable() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2), nowMs: 1), .stored)
        XCTAssertEqual(try store.peersHolding(messageID(1)), 0)
        XCTAssertFalse(try store.peerHas(messageID(1), peer: userID(5)))
        try store.markInFlight(messageID(1), link: "udp", nowMs: 5)
        try store.markHandedOver(messageID(1), to: userID(5), nowMs: 6)
        XCTAssertEqual(try store.bundle(messageID(1))?.state, .handedOver)
        XCTAssertTrue(try store.peerHas(messageID(1), peer: userID(5)))
        XCTAssertFalse(try store.peerHas(messageID(1), peer: userID(6)))
        try store.recordPeerHas(messageID(1), peer: userID(6))
        try store.recordPeerHas(messageID(1), peer: userID(6)) // idempotent
        XCTAssertEqual(try store.peersHolding(messageID(1)), 2)
        try store.recordPeerHas(messageID(99), peer: userID(6)) // unknown: ignored
        XCTAssertEqual(try store.peersHolding(messageID(99)), 0)
        // A handed-over bundle is still offered to others, not to those that have it.
        XCTAssertEqual(try store.forwardable(limit: 10).map(\.messageID), [1, 2].map(messageID))
        XCTAssertEqual(try store.forwardable(limit: 10, excludingPeer: userID(5)).map(\.messageID), [messageID(2)])
        XCTAssertEqual(try store.forwardable(limit: 10, excludingPeer: userID(8)).map(\.messageID), [1, 2].map(messageID))
        // Handed over is not due for retry, and a failure report does not requeue it.
        XCTAssertEqual(try store.due(nowMs: 100, limit: 10).map(\.messageID), [messageID(2)])
        try store.markAttemptFailed(messageID(1), nowMs: 100)
        XCTAssertEqual(try store.bundle(messageID(1))?.state, .handedOver)
        // Pending for the recipient includes it until delivered.
        XCTAssertEqual(try store.pending(destination: userID(1), limit: 10).count, 2)
        try store.markDelivered(messageID(1), nowMs: 200)
        XCTAssertEqual(try store.pending(destination: userID(1), limit: 10).map(\.messageID), [messageID(2)])
        XCTAssertEqual(try store.forwardable(limit: 10).map(\.messageID), [messageID(2)])
        XCTAssertTrue(try store.pending(destination: userID(2), limit: 10).isEmpty)
    }

    func testListingsWithoutBytes() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, size: 500), nowMs: 0), .stored)
        for light in [try store.due(nowMs: 0, limit: 5, withBytes: false),
                      try store.pending(destination: userID(1), limit: 5, withBytes: false),
                      try store.forwardable(limit: 5, withBytes: false),
                      try store.forwardable(limit: 5, excludingPeer: userID(3), withBytes: false)] {
            XCTAssertEqual(light.count, 1)
            XCTAssertEqual(light.first?.bytes, [])
            XCTAssertEqual(light.first?.size, 500)
            XCTAssertEqual(light.first?.messageID, messageID(1))
            XCTAssertEqual(light.first?.destination, userID(1))
        }
        XCTAssertEqual(try store.due(nowMs: 0, limit: 5).first?.bytes.count, 500)
    }

    func testUnknownIDsThrowNotFound() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertThrowsError(try store.markInFlight(messageID(1), link: "x", nowMs: 0)) { XCTAssertEqual($0 as? StoreError, .bundleNotFound) }
        XCTAssertThrowsError(try store.markHandedOver(messageID(1), to: userID(1), nowMs: 0)) { XCTAssertEqual($0 as? StoreError, .bundleNotFound) }
        XCTAssertThrowsError(try store.markAttemptFailed(messageID(1), nowMs: 0)) { XCTAssertEqual($0 as? StoreError, .bundleNotFound) }
        XCTAssertThrowsError(try store.markDelivered(messageID(1), nowMs: 0)) { XCTAssertEqual($0 as? StoreError, .bundleNotFound) }
    }

    func testRequeueInFlight() throws {
        let dir = try makeTempDirectory(self)
        do {
            let store = try openStore(dir)
            for n in 1...3 { XCTAssertEqual(try store.accept(makeBundle(n), nowMs: Int64(n)), .stored) }
            try store.markInFlight(messageID(1), link: "udp", nowMs: 10)
            try store.markInFlight(messageID(2), link: "udp", nowMs: 10)
            try store.markHandedOver(messageID(2), to: userID(4), nowMs: 11)
            try store.markInFlight(messageID(3), link: "udp", nowMs: 12)
            XCTAssertEqual(try store.due(nowMs: 100, limit: 10).count, 0)
        }
        let store = try openStore(dir) // "restart"
        XCTAssertEqual(try store.requeueInFlight(nowMs: 500), 2)
        XCTAssertEqual(try store.due(nowMs: 500, limit: 10).map(\.messageID), [1, 3].map(messageID))
        XCTAssertEqual(try store.bundle(messageID(1))?.attempts, 0)
        XCTAssertEqual(try store.bundle(messageID(2))?.state, .handedOver)
        XCTAssertEqual(try store.requeueInFlight(nowMs: 600), 0)
    }

    func testExpiryDropsBytesThenTombstones() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 1_000), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, expiresMs: 2_000), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(3, expiresMs: 3_000), nowMs: 0), .stored)
        try store.markDelivered(messageID(3), nowMs: 10)
        try store.markInFlight(messageID(2), link: "x", nowMs: 10)
        XCTAssertEqual(try store.expire(nowMs: 999), 0)
        XCTAssertEqual(try store.expire(nowMs: 1_000), 1)
        let tomb = try XCTUnwrap(try store.bundle(messageID(1)))
        XCTAssertEqual(tomb.state, .expired)
        XCTAssertEqual(tomb.bytes, [])
        XCTAssertEqual(store.statistics.expired, 1)
        XCTAssertEqual(try store.totalBytes(), 100)
        XCTAssertEqual(try store.accept(makeBundle(1, expiresMs: 1_500), nowMs: 1_100), .duplicate)
        XCTAssertTrue(try store.due(nowMs: 5_000, limit: 10).isEmpty)
        XCTAssertEqual(try store.expire(nowMs: 3_000), 1) // bundle 2 (in flight) expires
        XCTAssertNil(try store.bundle(messageID(1)), "expired tombstone swept")
        XCTAssertNil(try store.bundle(messageID(3)), "delivered tombstone swept at its expiry")
        XCTAssertEqual(try store.bundle(messageID(2))?.state, .expired)
        XCTAssertEqual(try store.totalBytes(), 0)
        XCTAssertEqual(store.statistics.expired, 2)
        let c = try store.counts()
        XCTAssertEqual(c[.expired], 1)
        XCTAssertEqual(c[.queued], 0)
        XCTAssertEqual(c[.delivered], 0)
    }

    func testEvictsSoonestExpiringUnderCap() throws {
        // Cap: 10 bundles of 100 bytes.
        let store = try openStore(try makeTempDirectory(self), sizeCap: 1_000)
        for n in 1...10 {
            XCTAssertEqual(try store.accept(makeBundle(n, expiresMs: Int64(10_000 + n * 1_000)), nowMs: 0), .stored)
        }
        XCTAssertEqual(try store.totalBytes(), 1_000)
        // Expires latest: evicts the soonest-expiring (bundle 1).
        XCTAssertEqual(try store.accept(makeBundle(11, expiresMs: 50_000), nowMs: 0), .stored)
        XCTAssertNil(try store.bundle(messageID(1)))
        XCTAssertEqual(store.statistics.evicted, 1)
        XCTAssertEqual(store.statistics.evictedBytes, 100)
        // Needs 250 bytes: evicts bundles 2, 3 and 4 (next soonest).
        XCTAssertEqual(try store.accept(makeBundle(12, expiresMs: 50_000, size: 250), nowMs: 0), .stored)
        XCTAssertNil(try store.bundle(messageID(2)))
        XCTAssertNil(try store.bundle(messageID(3)))
        XCTAssertNil(try store.bundle(messageID(4)))
        XCTAssertNotNil(try store.bundle(messageID(5)))
        XCTAssertEqual(store.statistics.evicted, 4)
        XCTAssertLessThanOrEqual(try store.totalBytes(), 1_000)
        // A bundle expiring sooner than everything held is the one that goes: rejected, nothing evicted.
        XCTAssertEqual(try store.accept(makeBundle(13, expiresMs: 11_000), nowMs: 0), .rejectedTooLarge)
        XCTAssertNil(try store.bundle(messageID(13)))
        XCTAssertEqual(store.statistics.evicted, 4)
        // Larger than the whole cap.
        XCTAssertEqual(try store.accept(makeBundle(14, expiresMs: 99_000, size: 1_001), nowMs: 0), .rejectedTooLarge)
        // In-flight bundles are not evicted.
        try store.markInFlight(messageID(5), link: "x", nowMs: 0)
        XCTAssertEqual(try store.accept(makeBundle(15, expiresMs: 60_000), nowMs: 0), .stored)
        XCTAssertNotNil(try store.bundle(messageID(5)))
        XCTAssertNil(try store.bundle(messageID(6)))
        // Evicted bundles are forgotten (not tombstones).
        XCTAssertEqual(try store.counts()[.expired], 0)
        XCTAssertEqual(try store.accept(makeBundle(16, expiresMs: 60_500, size: 50), nowMs: 0), .stored)
    }

    func testIDsAreSortedAndFilteredByState() throws {
        let store = try openStore(try makeTempDirectory(self))
        for n in [5, 3, 9, 1] { XCTAssertEqual(try store.accept(makeBundle(n), nowMs: 0), .stored) }
        try store.markDelivered(messageID(9), nowMs: 1)
        XCTAssertEqual(try store.ids(states: [.queued], limit: 10), [1, 3, 5].map(messageID))
        XCTAssertEqual(try store.ids(states: [.queued, .delivered], limit: 10), [1, 3, 5, 9].map(messageID))
        XCTAssertEqual(try store.ids(states: [.queued], limit: 2), [1, 3].map(messageID))
        XCTAssertEqual(try store.ids(states: [], limit: 10), [])
    }

    func testLastDeliveryPerRecipient() throws {
        let store = try openStore(try makeTempDirectory(self))
        XCTAssertEqual(try store.accept(makeBundle(1, destination: 1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(2, destination: 1), nowMs: 0), .stored)
        XCTAssertEqual(try store.accept(makeBundle(3, destination: 2), nowMs: 0), .stored)
        try store.markDelivered(messageID(1), nowMs: 100)
        try store.markDelivered(messageID(3), nowMs: 200)
        try store.markDelivered(messageID(2), nowMs: 300)
        let last = try store.lastDelivery()
        XCTAssertEqual(last.map(\.destination), [userID(1), userID(2)])
        XCTAssertEqual(last.map(\.atMs), [300, 200])
    }

    func testVacuumReturnsFreePages() throws {
        let dir = try makeTempDirectory(self)
        let store = try openStore(dir)
        for n in 1...200 { XCTAssertEqual(try store.accept(makeBundle(n, expiresMs: 1_000, size: 4_000), nowMs: 0), .stored) }
        XCTAssertEqual(try store.expire(nowMs: 1_000), 200)
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
        try store.markInFlight(messageID(1), link: marker, nowMs: 1)
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
        XCTAssertTrue(contains(try XCTUnwrap(try reopened.bundle(messageID(5))).bytes, Array(marker.utf8)))
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
