import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokStore
import YaokWire
@testable import YaokHubCore
import YaokTesting

/// The store's upkeep in a running hub (Docs/store.md): the vacuum, and emptying the WAL once
/// the store is quiet. Both cannot run inside a transaction, and the router's timer runs inside
/// its open group, so they queue behind it and commit the group first.
final class StoreMaintenanceTests: XCTestCase {
    private func startHub(_ dir: String, port: UInt16, environment: [String: String] = [:]) throws -> HubProcess {
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5\n  sender_envelopes_per_minute: 100000")
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"), extraEnvironment: environment)
        try hub.waitReady()
        return hub
    }

    private func fileBytes(_ path: String) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? -1
    }

    private func lines(_ hub: HubProcess, _ text: String) -> Int {
        hub.log.components(separatedBy: "\n").filter { $0.contains(text) }.count
    }

    /// A store a quarter free: the hub's first timer tick runs the full VACUUM (it failed with
    /// "cannot VACUUM from within a transaction" every hour before), the file shrinks and the
    /// WAL is left empty.
    func testTheRunningHubVacuumsItsStore() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        var hub = try startHub(dir, port: port)
        addTeardownBlock { hub.stop() }
        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        try phone.sendUntilAcknowledged(try (0..<200).map { try seal("big \($0)", from: alice, to: bob, size: 5_000) })
        hub.stop()

        // What the hub no longer holds: every row gone, its pages free.
        let storePath = dir + "/data/store.db"
        do {
            let db = try TestSupport.openHubStore(dir)
            try db.execute("DELETE FROM bundles")
            try db.emptyWAL()
            let free = try XCTUnwrap(db.pragma("freelist_count")?.int64Value)
            let pages = try XCTUnwrap(db.pragma("page_count")?.int64Value)
            XCTAssertGreaterThanOrEqual(free * 4, pages, "a quarter of the file is free")
            db.close()
        }
        let before = fileBytes(storePath)

        hub = try startHub(dir, port: port)
        try Wait.until(timeout: 30, "the hub's vacuum") { self.lines(hub, "store: vacuumed") > 0 || self.lines(hub, "store vacuum failed") > 0 }
        XCTAssertEqual(lines(hub, "store vacuum failed"), 0, hub.log)
        XCTAssertEqual(lines(hub, "store: vacuumed"), 1)
        XCTAssertLessThan(fileBytes(storePath), before / 2, "the free pages went back to the file system")
        XCTAssertEqual(fileBytes(storePath + "-wal"), 0, "the vacuum's pages are checkpointed and the WAL truncated")
        XCTAssertEqual(try hub.status().router.queue.queued, 0)
    }

    /// After a burst the WAL holds older images of the pages it wrote; once nothing has changed
    /// for the quiet period (3 s here, 5 min by default) it is checkpointed and truncated, once,
    /// and an idle hub then leaves it alone.
    func testTheWALIsEmptiedOnceTheStoreIsQuietAndAnIdleHubDoesNothingMore() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let hub = try startHub(dir, port: port, environment: ["YAOK_TEST_WAL_QUIET_MS": "3000"])
        addTeardownBlock { hub.stop() }
        let wal = dir + "/data/store.db-wal"
        // What start-up wrote (a new store's schema) is emptied after the first quiet period.
        try Wait.until(timeout: 30, "the WAL emptied after start-up") { self.lines(hub, "store: WAL emptied") == 1 }
        XCTAssertEqual(fileBytes(wal), 0)
        let emptiedAtStart = lines(hub, "store: WAL emptied")

        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        try phone.sendUntilAcknowledged(try (0..<20).map { try seal("burst \($0)", from: alice, to: bob) })
        // The acks came after the commit that made the bundles durable: the WAL holds it.
        XCTAssertGreaterThan(fileBytes(wal), 0, "the commit is in the WAL")
        try Wait.until(timeout: 30, "the WAL emptied after the burst") { self.lines(hub, "store: WAL emptied") > emptiedAtStart }
        XCTAssertEqual(fileBytes(wal), 0)
        XCTAssertTrue(hub.log.contains("store: WAL emptied, the store is quiet"))
        XCTAssertEqual(try hub.status().router.queue.queued, 20, "nothing was lost by it")

        // Idle: three more quiet periods, no second emptying (and nothing written).
        let emptied = lines(hub, "store: WAL emptied")
        let idleUntil = Date().addingTimeInterval(9)
        while Date() < idleUntil { usleep(200_000) }
        XCTAssertEqual(lines(hub, "store: WAL emptied"), emptied, "an idle hub empties nothing again")
        XCTAssertEqual(fileBytes(wal), 0, "an idle hub writes nothing")
    }
}
