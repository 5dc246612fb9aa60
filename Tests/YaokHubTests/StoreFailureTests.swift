import HubTestSupport
import Foundation
import XCTest
import YaokStore
import YaokTesting
@testable import YaokHubCore

/// The router's store calls fail in one place (``Router/storeCall(_:_:)``): a failing store is
/// counted and logged once, the hub stays up and answers, and it recovers when the store does.
final class StoreFailureTests: XCTestCase {
    func testAFailingStoreIsCountedLoggedOnceAndTheHubCarriesOnAndRecovers() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let hub = try HubProcess(dir: dir, config: HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: HubProcessTests.freePort()),
                                 executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()
        XCTAssertEqual(try hub.status().router.counters.storeFailures, 0)

        // Another connection takes the bundles table away under the running hub, as a damaged
        // or foreign-modified file would: the status report's counts and the tick's due walk
        // now fail, again and again.
        let db = try TestSupport.openHubStore(dir)
        try db.execute("ALTER TABLE bundles RENAME TO bundles_away")
        try Wait.until(timeout: 10, "the router to count failing store calls") { try hub.status().router.counters.storeFailures >= 6 }
        let errors = hub.log.components(separatedBy: "\n").filter { $0.contains(" error yaok-hub: ") && $0.contains("] store: ") }
        let operations = errors.compactMap { line -> String? in
            guard let r = line.range(of: "] store: ") else { return nil }
            return line[r.upperBound...].split(separator: " ").first.map(String.init)
        }
        XCTAssertFalse(operations.isEmpty, hub.log)
        XCTAssertEqual(operations.count, Set(operations).count,
                       "each failing operation is logged as an error once, not at every call:\n\(errors.joined(separator: "\n"))")
        XCTAssertFalse(hub.log.contains("Fatal error"), "the hub must not crash on a failing store")

        // The store comes back: the due walk works again, and a new failure would be logged again.
        try db.execute("ALTER TABLE bundles_away RENAME TO bundles")
        let before = try hub.status().router.counters.storeFailures
        Thread.sleep(forTimeInterval: 2.5)  // two ticks: an observation window, not a synchronisation
        XCTAssertEqual(try hub.status().router.counters.storeFailures, before, "the store works again: nothing more fails")
        XCTAssertNil(hub.waitExit(timeout: 0), "the hub is still running")
    }
}
