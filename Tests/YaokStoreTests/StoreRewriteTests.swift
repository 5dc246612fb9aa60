import XCTest
import CSQLCipher
@testable import YaokStore
#if canImport(Glibc)
import Glibc
#endif

/// `SQLCipherDatabase.rewrite`: moving a store to another page size on real SQLCipher files.
final class StoreRewriteTests: XCTestCase {
    func testA4KStoreMovesTo2KPagesWithEveryBundleAndItsSchema() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/store.db"
        // As stores made before 2 KB pages were; the bundle schema is added by opening it as a store.
        makeLegacyFile(path, pageSize: 4096, sql: "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; CREATE TABLE marker (x TEXT); INSERT INTO marker VALUES ('kept');")
        let ids: [[UInt8]]
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            XCTAssertEqual(db.pageSize, 4096)
            let store = try BundleStore(database: db)
            for n in 0..<300 { _ = try store.accept(makeBundle(n, destination: UInt8(1 + n % 3), size: 200 + n), nowMs: 5_000) }
            ids = (0..<300).map(bundleID)
            // The WAL still holds these commits: the rewrite must carry them too.
            XCTAssertGreaterThan((try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0, 0,
                                 "the commits are still in the WAL before the rewrite")
            db.close()
        }
        // A leftover of an interrupted rewrite is replaced, not appended to.
        try writeFile(SQLCipherDatabase.rewriteFile(for: path), Array("half a copy".utf8), mode: 0o600)
        try writeFile(SQLCipherDatabase.rewriteFile(for: path) + "-journal", Array("junk".utf8), mode: 0o600)

        var steps: [String] = []
        let report = try SQLCipherDatabase.rewrite(path: path, key: testKey) { steps.append($0) }
        XCTAssertEqual(report.oldPageSize, 4096)
        XCTAssertEqual(report.newPageSize, 2048)
        XCTAssertGreaterThanOrEqual(report.rows, 300 + 1 + 1, "bundles, the marker, the schema version")
        XCTAssertEqual(steps.count, 2, "\(steps)")
        XCTAssertTrue(steps[0].hasPrefix("copying"), steps[0])
        for leftover in ["", "-journal", "-wal", "-shm"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: SQLCipherDatabase.rewriteFile(for: path) + leftover), leftover)
        }
        XCTAssertEqual(fileMode(path), 0o600)

        let db = try SQLCipherDatabase(path: path, key: testKey)
        XCTAssertEqual(db.pageSize, 2048, "the rewritten file opens at the new size")
        XCTAssertEqual(try db.pragma("journal_mode")?.textValue?.lowercased(), "wal", "back in WAL once opened")
        XCTAssertEqual(try db.pragma("auto_vacuum")?.intValue, 2, "incremental auto_vacuum carried over")
        XCTAssertEqual(try db.pragma("user_version")?.intValue, 1)
        XCTAssertEqual(try db.query("SELECT x FROM marker").first?.first?.textValue, "kept")
        XCTAssertEqual(try db.quickCheck(), [])
        let store = try BundleStore(database: db)
        XCTAssertEqual(try store.counts()[.queued], 300)
        for (n, id) in ids.enumerated() {
            let b = try XCTUnwrap(store.bundle(id), "bundle \(n)")
            XCTAssertEqual(b.size, 200 + n)
            XCTAssertEqual(b.record.destination, userID(UInt8(1 + n % 3)))
        }
        // The store still works on the new file: a new bundle, a duplicate refused.
        XCTAssertEqual(try store.accept(makeBundle(1_000), nowMs: 6_000), .stored)
        XCTAssertEqual(try store.accept(makeBundle(5, destination: 3, size: 205), nowMs: 6_000), .duplicate)
        db.close()

        // Wrong key: refused before anything is written, the store untouched.
        XCTAssertThrowsError(try SQLCipherDatabase.rewrite(path: path, key: otherKey)) { error in
            guard case StoreError.wrongKey = error else { return XCTFail("expected wrongKey, got \(error)") }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: SQLCipherDatabase.rewriteFile(for: path)))
        XCTAssertEqual(try SQLCipherDatabase(path: path, key: testKey).pageSize, 2048)
    }

    func testARewriteIsRefusedWhileAnotherConnectionHasTheStoreOpen() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/store.db"
        let hub = try SQLCipherDatabase(path: path, key: testKey)
        try hub.execute("CREATE TABLE t (x INTEGER)")
        try hub.execute("INSERT INTO t VALUES (1)")
        XCTAssertThrowsError(try SQLCipherDatabase.rewrite(path: path, key: testKey, pageSize: 4096)) { error in
            XCTAssertEqual(error as? StoreError, .databaseInUse(path: path))
            XCTAssertTrue("\(error)".contains("is yaok-hub running?"), "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: SQLCipherDatabase.rewriteFile(for: path)), "nothing built")
        // The open connection never noticed.
        try hub.execute("INSERT INTO t VALUES (2)")
        XCTAssertEqual(try hub.scalar("SELECT count(*) FROM t")?.intValue, 2)
        hub.close()

        let report = try SQLCipherDatabase.rewrite(path: path, key: testKey, pageSize: 4096)
        XCTAssertEqual(report.tables, 1)
        XCTAssertEqual(report.rows, 2)
        // While a rewrite holds it, the store cannot be opened (its exclusive lock), which
        // the rewrite's own open of the file shows from the other side here.
        let holder = try SQLCipherDatabase(path: path, key: testKey, busyTimeoutMs: 0, exclusive: true)
        XCTAssertThrowsError(try SQLCipherDatabase(path: path, key: testKey, busyTimeoutMs: 0)) { error in
            guard case StoreError.sqlite(let code, _, _) = error, code == SQLITE_BUSY else { return XCTFail("expected SQLITE_BUSY, got \(error)") }
        }
        holder.close()
        XCTAssertEqual(try SQLCipherDatabase(path: path, key: testKey).pageSize, 4096)
    }

    func testBadRequestsSayWhatIsWrongAndChangeNothing() throws {
        let dir = try makeTempDirectory(self)
        XCTAssertThrowsError(try SQLCipherDatabase.rewrite(path: dir + "/none.db", key: testKey)) { error in
            guard case StoreError.fileError(_, _, let e) = error, e == ENOENT else { return XCTFail("\(error)") }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/none.db"), "a missing store is not created")
        let path = dir + "/store.db"
        try SQLCipherDatabase(path: path, key: testKey).execute("CREATE TABLE t (x INTEGER)")
        for size in [512, 3000, 8192] {
            XCTAssertThrowsError(try SQLCipherDatabase.rewrite(path: path, key: testKey, pageSize: size)) { error in
                XCTAssertEqual(error as? StoreError, .unsupportedPageSize(size, supported: [2048, 4096, 1024]))
                XCTAssertTrue("\(error)".contains("use one of 2048, 4096, 1024"), "\(error)")
            }
        }
        XCTAssertEqual(try SQLCipherDatabase(path: path, key: testKey).pageSize, 2048)
    }
}
