import XCTest
@testable import YaokStore
import CSQLCipher
#if canImport(Glibc)
import Glibc
import YaokTesting
#endif

final class SQLCipherDatabaseTests: XCTestCase {
    func testCipherVersionIsReported() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        let version = try db.pragma("cipher_version")?.textValue
        XCTAssertNotNil(version)
        XCTAssertFalse(version?.isEmpty ?? true)
    }

    func testDurabilityPragmasReadBack() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        XCTAssertEqual(try db.pragma("journal_mode")?.textValue?.lowercased(), "wal")
        XCTAssertEqual(try db.pragma("synchronous")?.int64Value, 2, "synchronous must be FULL (2)")
        XCTAssertEqual(try db.pragma("foreign_keys")?.int64Value, 0, "off: BundleStore cascades by hand (statement journals are encrypted)")
        XCTAssertEqual(db.pageSize, 2048, "a new store uses 2 KB pages")
        XCTAssertEqual(try db.pragma("temp_store")?.int64Value, 2, "temp_store must be MEMORY (2)")
        XCTAssertEqual(try db.pragma("auto_vacuum")?.int64Value, 2, "new files use incremental auto-vacuum")
        XCTAssertEqual(try db.pragma("journal_size_limit")?.int64Value, 67_108_864)
    }

    /// SQLCipher 4 (Debian 13, the arm64 packages) answers `page_size` as text, SQLCipher 3
    /// (Debian 12) as an integer: the store's maintenance read it as an integer only and, on a
    /// Debian 13 hub, never gave free pages back (found running this suite on arm64).
    func testNumericPragmasReadTheSameOnEitherSQLCipher() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        XCTAssertEqual(try db.integerPragma("page_size"), 2048)
        XCTAssertEqual(try db.integerPragma("auto_vacuum"), 2)
        XCTAssertGreaterThanOrEqual(try db.integerPragma("page_count"), 1)
        XCTAssertThrowsError(try db.integerPragma("cipher_version")) { error in
            XCTAssertTrue("\(error)".contains("cipher_version"), "the error names the pragma: \(error)")
        }
    }

    /// SQLite's allocation statistics are off for the whole process (with them on, each
    /// allocation takes a global mutex): they must be switched off before the library
    /// initializes, so if any path opened a connection first they would still be counting.
    func testAllocationStatisticsAreOff() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        try db.execute("CREATE TABLE t (x BLOB)", purpose: "test")
        try db.execute("INSERT INTO t VALUES (zeroblob(100000))", purpose: "test")
        XCTAssertEqual(try db.scalar("SELECT length(x) FROM t", purpose: "test")?.int64Value, 100_000)
        XCTAssertEqual(sqlite3_memory_used(), 0, "SQLite still counts its allocations")
        XCTAssertEqual(sqlite3_memory_highwater(0), 0)
    }

    /// Stores made by older hubs have SQLCipher 3's 1 KB pages, or 4 KB pages; both still open
    /// (a wrong page size reads like a wrong key, so 2 KB is tried first, then 4 KB and 1 KB),
    /// keep their page size, and a wrong key is still named as such.
    func testOlderPageSizeStoresOpenAndKeepTheirPageSize() throws {
        let dir = try makeTempDirectory(self)
        for size in [1024, 4096] {
            let path = dir + "/legacy-\(size).db"
            makeLegacyFile(path, pageSize: size, sql: "CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('old');")
            let db = try SQLCipherDatabase(path: path, key: testKey)
            XCTAssertEqual(db.pageSize, size)
            XCTAssertEqual(try db.query("SELECT x FROM t").first?.first?.textValue, "old")
            try db.execute("INSERT INTO t VALUES ('new')")
            db.close()
            let again = try SQLCipherDatabase(path: path, key: testKey)
            XCTAssertEqual(again.pageSize, size)
            XCTAssertEqual(try again.scalar("SELECT count(*) FROM t")?.intValue, 2)
            again.close()
            XCTAssertThrowsError(try SQLCipherDatabase(path: path, key: otherKey)) { error in
                guard case StoreError.wrongKey = error else { return XCTFail("expected wrongKey, got \(error)") }
            }
        }
    }

    func testOpenReopenPersists() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            try db.execute("CREATE TABLE t (x INTEGER, y TEXT, z BLOB, w REAL)")
            try db.execute("INSERT INTO t VALUES (?, ?, ?, ?)", [.integer(42), .text("héllo"), .blob([0, 1, 2]), .real(1.5)])
            try db.execute("INSERT INTO t VALUES (?, ?, ?, ?)", [.null, .text(""), .blob([]), .null])
            db.close()
        }
        let db = try SQLCipherDatabase(path: path, key: testKey)
        let rows = try db.query("SELECT x, y, z, w FROM t ORDER BY rowid")
        XCTAssertEqual(rows.count, 2)
        XCTAssertEqual(rows[0], [.integer(42), .text("héllo"), .blob([0, 1, 2]), .real(1.5)])
        XCTAssertEqual(rows[1], [.null, .text(""), .blob([]), .null])
        XCTAssertEqual(try db.pragma("journal_mode")?.textValue?.lowercased(), "wal")
    }

    func testQuickCheckSpotsATamperedPage() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            try db.execute("CREATE TABLE t (x BLOB)")
            for i in 0..<50 { try db.execute("INSERT INTO t VALUES (?)", [.blob([UInt8](repeating: UInt8(i), count: 900))]) }
            XCTAssertEqual(try db.quickCheck(), [])
        }
        // Flip one byte in the middle of a data page (the file is checkpointed on close).
        var bytes = try XCTUnwrap(fileBytes(path))
        XCTAssertGreaterThan(bytes.count, 20 * 1024)
        bytes[10 * 1024 + 500] ^= 0xFF
        try writeFile(path, bytes, mode: 0o600)
        // Page HMACs catch it: either opening or the check reports it, never silent success.
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            let problems = try db.quickCheck()
            XCTAssertFalse(problems.isEmpty)
        } catch {
            guard case StoreError.sqlite = error else { return XCTFail("unexpected \(error)") }
        }
    }

    func testWrongKeyIsRejected() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            try db.execute("CREATE TABLE t (x)")
        }
        XCTAssertThrowsError(try SQLCipherDatabase(path: path, key: otherKey)) { error in
            XCTAssertEqual(error as? StoreError, .wrongKey(path: path))
            XCTAssertTrue("\(error)".contains("file is encrypted or is not a database"), "\(error)")
        }
        // The right key still works afterwards.
        XCTAssertNoThrow(try SQLCipherDatabase(path: path, key: testKey))
    }

    func testKeyLengthIsChecked() throws {
        let dir = try makeTempDirectory(self)
        XCTAssertThrowsError(try SQLCipherDatabase(path: dir + "/a.db", key: [1, 2, 3])) { error in
            XCTAssertEqual(error as? StoreError, .invalidKeyLength(3))
        }
    }

    func testFilesAreOwnerOnly() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        let old = umask(0o022)
        defer { umask(old) }
        let db = try SQLCipherDatabase(path: path, key: testKey)
        try db.execute("CREATE TABLE t (x)")
        try db.execute("INSERT INTO t VALUES (1)")
        XCTAssertEqual(fileMode(path), 0o600)
        XCTAssertEqual(fileMode(path + "-wal"), 0o600)
        XCTAssertEqual(fileMode(path + "-shm"), 0o600)
    }

    func testLooseExistingFileIsTightened() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        try writeFile(path, [], mode: 0o644)
        XCTAssertEqual(fileMode(path), 0o644)
        _ = try SQLCipherDatabase(path: path, key: testKey)
        XCTAssertEqual(fileMode(path), 0o600)
    }

    func testPlainSQLiteFileIsRefused() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/plain.db"
        // A genuine unencrypted SQLite file made by the sqlcipher library without a key.
        var raw: OpaquePointer?
        XCTAssertEqual(sqlite3_open(path, &raw), SQLITE_OK)
        XCTAssertEqual(sqlite3_exec(raw, "CREATE TABLE t (x); INSERT INTO t VALUES ('PLAIN');", nil, nil, nil), SQLITE_OK)
        sqlite3_close(raw)
        XCTAssertTrue(contains(fileBytes(path) ?? [], Array("PLAIN".utf8)), "control: an unkeyed file is plaintext")
        XCTAssertThrowsError(try SQLCipherDatabase(path: path, key: testKey)) { error in
            XCTAssertEqual(error as? StoreError, .wrongKey(path: path))
        }
    }

    // MARK: Group transactions (the router's group commit)

    struct Refused: Error {}

    func testAGroupCommitsManyTransactionsAtOnceAndDurably() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/g.db"
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            try db.execute("CREATE TABLE t (x INTEGER)")
            try db.beginGroup()
            XCTAssertTrue(db.inGroup)
            for i in 0..<10 { try db.transaction { try db.execute("INSERT INTO t VALUES (?)", [.integer(Int64(i))]) } }
            // A refusal before any write leaves the group whole.
            XCTAssertThrowsError(try db.transaction { () throws -> Void in throw Refused() })
            XCTAssertTrue(try db.commitGroup(), "the group changed rows")
            XCTAssertFalse(db.inGroup)
            db.close()
        }
        let db = try SQLCipherDatabase(path: path, key: testKey)
        XCTAssertEqual(try db.query("SELECT count(*) FROM t").first?.first?.int64Value, 10, "all ten survive a reopen")
    }

    func testAChangeThatFailsHalfWayRollsBackTheWholeGroup() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/g.db", key: testKey)
        try db.execute("CREATE TABLE t (x INTEGER)")
        try db.execute("INSERT INTO t VALUES (1)")
        try db.beginGroup()
        try db.transaction { try db.execute("INSERT INTO t VALUES (2)") }
        XCTAssertThrowsError(try db.transaction { () throws -> Void in
            try db.execute("INSERT INTO t VALUES (3)")
            throw Refused()
        })
        XCTAssertThrowsError(try db.commitGroup()) { XCTAssertTrue("\($0)".contains("rolled back"), "\($0)") }
        XCTAssertEqual(try db.query("SELECT x FROM t ORDER BY x").compactMap { $0.first?.int64Value }, [1],
                       "nothing of the group happened, not even the change that succeeded")
        // The connection is usable again, outside any group.
        try db.transaction { try db.execute("INSERT INTO t VALUES (4)") }
        XCTAssertEqual(try db.query("SELECT count(*) FROM t").first?.first?.int64Value, 2)
    }

    func testAnEmptyGroupCommitsNothing() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/g.db", key: testKey)
        try db.execute("CREATE TABLE t (x INTEGER)")
        try db.beginGroup()
        _ = try db.query("SELECT count(*) FROM t")
        XCTAssertFalse(try db.commitGroup(), "reads only: nothing to write or sync")
        XCTAssertThrowsError(try { try db.beginGroup(); try db.beginGroup() }(), "groups do not nest")
        try db.commitGroup()
    }

    func testTransactionRollsBackOnError() throws {
        struct Boom: Error {}
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        try db.execute("CREATE TABLE t (x INTEGER)")
        XCTAssertThrowsError(try db.transaction {
            try db.execute("INSERT INTO t VALUES (1)")
            throw Boom()
        })
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t"), .integer(0))
        // Nested: the inner failure rolls back only the inner part.
        try db.transaction {
            try db.execute("INSERT INTO t VALUES (1)")
            XCTAssertThrowsError(try db.transaction {
                try db.execute("INSERT INTO t VALUES (2)")
                throw Boom()
            })
            try db.execute("INSERT INTO t VALUES (3)")
        }
        XCTAssertEqual(try db.query("SELECT x FROM t ORDER BY x"), [[.integer(1)], [.integer(3)]])
    }

    func testErrorsNameThePurposeNotTheValues() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        try db.execute("CREATE TABLE t (x TEXT UNIQUE)")
        try db.execute("INSERT INTO t VALUES (?)", [.text("secret-value-1")])
        XCTAssertThrowsError(try db.execute("INSERT INTO t VALUES (?)", [.text("secret-value-1")], purpose: "adding a row")) { error in
            guard case StoreError.sqlite(_, let message, let purpose) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(purpose, "adding a row")
            XCTAssertTrue(message.contains("UNIQUE"), message)
            XCTAssertFalse("\(error)".contains("secret-value-1"))
        }
        XCTAssertThrowsError(try db.execute("INSERT INTO t VALUES (?)", [])) { error in
            guard case StoreError.sqlite = error else { return XCTFail("\(error)") }
        }
    }

    func testMigrationsRunOnceInOrderPerComponent() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        let v1 = Migration(version: 1, script: "CREATE TABLE a (x);")
        let v2 = Migration(version: 2, script: "ALTER TABLE a ADD COLUMN y;")
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            XCTAssertEqual(try db.migrate(component: "alpha", [v1]), 1)
            XCTAssertEqual(try db.migrate(component: "beta", [Migration(version: 1, script: "CREATE TABLE b (x);")]), 1)
        }
        let db = try SQLCipherDatabase(path: path, key: testKey)
        XCTAssertEqual(try db.migrate(component: "alpha", [v1, v2]), 2)
        XCTAssertEqual(try db.schemaVersion(component: "alpha"), 2)
        XCTAssertEqual(try db.schemaVersion(component: "beta"), 1)
        try db.execute("INSERT INTO a (x, y) VALUES (1, 2)")
        XCTAssertEqual(try db.pragma("user_version")?.int64Value, 1)
        // An older program must not touch a newer schema.
        XCTAssertThrowsError(try db.migrate(component: "alpha", [v1])) { error in
            XCTAssertEqual(error as? StoreError, .schemaTooNew(component: "alpha", found: 2, known: 1))
        }
        XCTAssertThrowsError(try db.migrate(component: "gamma", [v2])) { error in
            guard case StoreError.invalidMigrations = error else { return XCTFail("\(error)") }
        }
        // A failing migration leaves the version where it was.
        let bad = Migration(version: 3, script: "CREATE TABLE c (x); THIS IS NOT SQL;")
        XCTAssertThrowsError(try db.migrate(component: "alpha", [v1, v2, bad]))
        XCTAssertEqual(try db.schemaVersion(component: "alpha"), 2)
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'c'"), .integer(0))
    }

    func testRekeyChangesTheKey() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            try db.execute("CREATE TABLE t (x)")
            try db.execute("INSERT INTO t VALUES ('kept')")
            try db.rekey(newKey: otherKey)
            XCTAssertEqual(try db.pragma("journal_mode")?.textValue?.lowercased(), "wal")
            try db.execute("INSERT INTO t VALUES ('after')")
        }
        XCTAssertThrowsError(try SQLCipherDatabase(path: path, key: testKey)) { error in
            XCTAssertEqual(error as? StoreError, .wrongKey(path: path))
        }
        let db = try SQLCipherDatabase(path: path, key: otherKey)
        XCTAssertEqual(try db.query("SELECT x FROM t ORDER BY rowid"), [[.text("kept")], [.text("after")]])
    }

    func testConcurrentUseIsSerialized() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        try db.execute("CREATE TABLE t (x INTEGER)")
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            for i in 0..<25 {
                try? db.transaction {
                    try db.execute("INSERT INTO t VALUES (?)", [.int(worker * 100 + i)])
                }
            }
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t"), .integer(100))
    }
}

final class SQLCipherDatabaseStatementTests: XCTestCase {
    func testSecondStatementIsRefusedNotIgnored() throws {
        let dir = try makeTempDirectory(self)
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: testKey)
        try db.execute("CREATE TABLE t (x);\n  ")
        XCTAssertThrowsError(try db.execute("INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);")) { error in
            guard case StoreError.sqlite(let code, _, _) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(code, 21) // SQLITE_MISUSE
        }
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t"), .integer(0))
        try db.executeScript("INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);", purpose: "test")
        XCTAssertEqual(try db.scalar("SELECT count(*) FROM t"), .integer(2))
    }
}

final class SQLCipherCLIInteropTests: XCTestCase {
    /// The documented inspection path works: the `sqlcipher` CLI opens our file with
    /// `PRAGMA key = "x'<hex>'"` (so the key really is applied as a raw key).
    func testSQLCipherCLIReadsTheFileWithTheRawKey() throws {
        let cli = "/usr/bin/sqlcipher"
        try RequiredTool.require(cli, package: "sqlcipher")
        let dir = try makeTempDirectory(self)
        let path = dir + "/a.db"
        let pageSize: Int
        do {
            let db = try SQLCipherDatabase(path: path, key: testKey)
            try db.execute("CREATE TABLE t (x TEXT)")
            try db.execute("INSERT INTO t VALUES (?)", [.text("interop-ok")])
            pageSize = db.pageSize
        }
        func run(_ key: [UInt8]) throws -> String {
            let hex = key.map { String(format: "%02x", $0) }.joined()
            let p = Process()
            p.executableURL = URL(fileURLWithPath: cli)
            p.arguments = [path, "PRAGMA key = \"x'\(hex)'\"; PRAGMA cipher_page_size = \(pageSize); SELECT x FROM t;"]
            let out = Pipe()
            p.standardOutput = out
            p.standardError = out
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
        XCTAssertEqual(try run(testKey).trimmingCharacters(in: .whitespacesAndNewlines), "interop-ok")
        XCTAssertTrue(try run(otherKey).contains("file is encrypted or is not a database"))
    }
}
