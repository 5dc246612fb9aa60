import CSQLCipher
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import enum YaokPluginKit.Hex
import enum YaokCrypto.PrivateFile

/// SQLite's "copy the bound value now" destructor sentinel (SQLITE_TRANSIENT), which the C
/// macro expresses as a cast of -1 that Swift cannot import.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// Process-wide SQLite settings, applied once before the first connection opens (Swift
/// initializes a global once, thread-safely). Allocation statistics are off: nothing here
/// reads them, and they cost a global mutex per allocation. If the
/// library was initialized earlier by other code, the call is refused and nothing changes
/// but speed.
private let sqliteProcessSettings: Void = {
    _ = yaok_sqlite3_config_memstatus_off()
}()

/// One encrypted SQLCipher database file, opened on one connection.
///
/// Every call is serialized by an internal recursive lock, so one instance can be shared by
/// any number of threads; a `transaction` holds the lock until it commits, so other threads'
/// statements never interleave with it.
///
/// Opening refuses to continue unless the linked library really is SQLCipher and the key
/// really opens the file. The file and its `-wal`/`-shm` companions are mode 0600. Commits are
/// durable when they return (`journal_mode=WAL`, `synchronous=FULL`).
// @unchecked: the connection handle, its statement cache and pageSize are touched only under `lock`.
public final class SQLCipherDatabase: @unchecked Sendable {
    /// The database file's path.
    public let path: String

    private var handle: OpaquePointer?
    /// The page size this file was made with: 2048 for a store this hub makes, 4096 or 1024
    /// for stores older hubs made.
    public private(set) var pageSize = 0
    /// Page sizes tried on open, newest first (a new file gets the first). A commit writes
    /// each page it dirtied whole, and at light load a commit dirties one leaf of each of
    /// about seven b-trees, so the page size sets the bytes written per message: at 20 msg/s
    /// 2 KB pages wrote 41.5 KB per message against 69 KB with 4 KB pages, at the same CPU and
    /// with the same throughput under a backlog; 1 KB pages wrote 28 KB at light load but
    /// cost a backlog about a tenth more CPU and a fifth more writes (Docs/performance.md).
    static let pageSizes = [2048, 4096, 1024]
    private let lock = RecursiveLock()
    /// Prepared statements by SQL text. The store's SQL is a fixed set of strings, so the
    /// cache stays small; it is bounded anyway in case a caller builds SQL dynamically.
    private var statementCache: [String: OpaquePointer] = [:]
    private let statementCacheLimit = 128
    private var transactionDepth = 0
    /// 1 while a group transaction is open (``beginGroup()``), else 0.
    private var groupDepth = 0
    /// A change inside the group failed after writing rows: the group must be rolled back.
    private var groupPoisoned = false
    private var groupChangesAtBegin: Int32 = 0

    /// Opens (creating if needed) the database at `path` with a 32-byte raw key.
    ///
    /// - Parameters:
    ///   - path: database file; its directory must exist.
    ///   - key: exactly 32 bytes, used directly as the AES key (no passphrase derivation).
    ///   - busyTimeoutMs: how long a statement waits for a lock held by another process.
    /// - Throws: `StoreError.invalidKeyLength`, `.fileError`, `.openFailed`, `.notSQLCipher`,
    ///   `.wrongKey`, `.sqlite`.
    public convenience init(path: String, key: [UInt8], busyTimeoutMs: Int32 = 5_000) throws {
        try self.init(path: path, key: key, busyTimeoutMs: busyTimeoutMs, exclusive: false)
    }

    /// - Parameter exclusive: take SQLite's exclusive lock on the file at the first read and
    ///   hold it until closed (`locking_mode = EXCLUSIVE` before the WAL is opened). Opening
    ///   then fails with `SQLITE_BUSY` while any other connection has the file open, and no
    ///   other connection can open it meanwhile: for offline maintenance (``rewrite``).
    init(path: String, key: [UInt8], busyTimeoutMs: Int32, exclusive: Bool) throws {
        guard key.count == 32 else { throw StoreError.invalidKeyLength(key.count) }
        self.path = path
        try Self.prepareFile(path)

        // A store keeps the page size it was made with (it cannot change without rewriting the
        // file): 2 KB for a new one, 4 KB or SQLCipher 3's default of 1 KB in stores older hubs made.
        // A wrong page size reads like a wrong key, so the newest is tried first.
        _ = sqliteProcessSettings
        var lastError: Error = StoreError.wrongKey(path: path)
        for (attempt, size) in Self.pageSizes.enumerated() {
            var db: OpaquePointer?
            let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
            let rc = sqlite3_open_v2(path, &db, flags, nil)
            guard rc == SQLITE_OK, let db else {
                let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
                if let db { sqlite3_close_v2(db) }
                throw StoreError.openFailed(path: path, code: rc, message: message)
            }
            handle = db
            do {
                try applyKey(key)
                if exclusive { try execute("PRAGMA locking_mode = EXCLUSIVE", purpose: "taking the store for maintenance") }
                try execute("PRAGMA cipher_page_size = \(size)", purpose: "setting the page size")
                try checkCipher()
                try verifyKey()
                pageSize = size
                sqlite3_busy_timeout(db, busyTimeoutMs)
                try configure()
                lastError = StoreError.closed
                break
            } catch StoreError.wrongKey(let p) where attempt + 1 < Self.pageSizes.count {
                close()
                lastError = StoreError.wrongKey(path: p)
            } catch {
                close()
                throw error
            }
        }
        guard pageSize != 0 else { throw lastError }
        Self.tightenCompanionFiles(path)
    }

    deinit { close() }

    /// Finalizes cached statements and closes the connection. Later calls throw `.closed`.
    public func close() {
        lock.withLock {
            for (_, stmt) in statementCache { sqlite3_finalize(stmt) }
            statementCache.removeAll()
            if let handle { sqlite3_close_v2(handle) }
            handle = nil
        }
    }

    // MARK: Opening

    /// Creates the file with mode 0600 before SQLite sees it (SQLite would use 0644 minus the
    /// umask), and tightens an existing file that is group/other accessible. SQLite gives the
    /// -wal and -shm files the main file's permissions.
    private static func prepareFile(_ path: String) throws {
        var fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        let created = fd >= 0
        if !created && errno == EEXIST {
            fd = open(path, O_RDWR | O_CLOEXEC)
        }
        guard fd >= 0 else { throw StoreError.fileError(path: path, operation: "open", errno: errno) }
        defer { closeDescriptor(fd) }
        if created {
            // The new directory entry must survive a power cut too (SQLite syncs the
            // directory for the WAL it creates, not for a main file it did not create).
            _ = fsync(fd)
            PrivateFile.syncDirectory(of: path)
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw StoreError.fileError(path: path, operation: "fstat", errno: errno)
        }
        if st.st_mode & 0o077 != 0 {
            guard fchmod(fd, 0o600) == 0 else {
                throw StoreError.fileError(path: path, operation: "chmod 600", errno: errno)
            }
        }
    }

    /// WAL/SHM files left by an older, looser file keep their mode; tighten them too.
    private static func tightenCompanionFiles(_ path: String) {
        for suffix in ["-wal", "-shm", "-journal"] {
            var st = stat()
            let companion = path + suffix
            if stat(companion, &st) == 0, st.st_mode & 0o077 != 0 {
                _ = chmod(companion, 0o600)
            }
        }
    }

    /// Equivalent to `PRAGMA key = "x'<64 hex>'"`: the raw-key form skips SQLCipher's PBKDF2
    /// (the key is already 256 random bits). The hex text is built in a byte buffer that is
    /// wiped afterwards, rather than in an immutable Swift String.
    private func applyKey(_ key: [UInt8]) throws {
        var text = Self.rawKeyLiteral(key)
        defer { wipe(&text) }
        let rc = text.withUnsafeBytes { raw in
            sqlite3_key(handle, raw.baseAddress, Int32(raw.count))
        }
        try check(rc, "applying the database key")
    }

    static func rawKeyLiteral(_ key: [UInt8]) -> [UInt8] {
        var digits = Hex.ascii(key)
        defer { wipe(&digits) }
        var text: [UInt8] = [UInt8(ascii: "x"), UInt8(ascii: "'")]
        text.reserveCapacity(3 + digits.count)
        text += digits
        text.append(UInt8(ascii: "'"))
        return text
    }

    private func checkCipher() throws {
        let rows = try query("PRAGMA cipher_version", purpose: "reading cipher_version")
        guard let version = rows.first?.first?.textValue, !version.isEmpty else {
            throw StoreError.notSQLCipher
        }
    }

    private func verifyKey() throws {
        do {
            _ = try query("SELECT count(*) FROM sqlite_master", purpose: "verifying the database key")
        } catch StoreError.sqlite(let code, _, _) where code == SQLITE_NOTADB {
            throw StoreError.wrongKey(path: path)
        }
    }

    private func configure() throws {
        // Temporary tables, sorts and indices stay in memory: SQLCipher does not encrypt
        // those temporary files.
        try execute("PRAGMA temp_store = MEMORY", purpose: "setting temp_store")
        // Only takes effect on a brand-new file (before the first table); lets the store give
        // freed pages back without a full VACUUM, which would need a copy of the database.
        try execute("PRAGMA auto_vacuum = INCREMENTAL", purpose: "setting auto_vacuum")
        let mode = try query("PRAGMA journal_mode = WAL", purpose: "enabling WAL")
        guard mode.first?.first?.textValue?.lowercased() == "wal" else {
            throw StoreError.sqlite(code: SQLITE_ERROR, message: "journal_mode did not switch to WAL",
                                    purpose: "enabling WAL")
        }
        // FULL syncs the WAL on every commit: an accepted row survives SIGKILL and power loss.
        try execute("PRAGMA synchronous = FULL", purpose: "setting synchronous")
        // After a checkpoint, a WAL grown by a burst is truncated back to this size.
        try execute("PRAGMA journal_size_limit = 67108864", purpose: "setting journal_size_limit")
        // Off: an enforced foreign key makes every insert into a child table keep a statement
        // journal, and SQLCipher encrypts each page journalled (about 2× the statement's cost,
        // measured). The one cascade (a bundle's holders) is a trigger in BundleStore's schema.
        try execute("PRAGMA foreign_keys = OFF", purpose: "disabling foreign key enforcement")
        // A delivered or evicted bundle's envelope is zeroed where it lay, not left in the
        // page's free space for whoever takes the hub with its key (the key file is on the same
        // box). Debian's SQLCipher is built with this default; set here so no build can drop it.
        try execute("PRAGMA secure_delete = ON", purpose: "setting secure_delete")
        // Decrypted pages stay cached: every miss costs a read plus an AES and HMAC of the page.
        // 8 MB (the default is 2 MB) holds the working set of a hub carrying thousands of bundles.
        try execute("PRAGMA cache_size = -8192", purpose: "setting cache_size")
    }

    // MARK: Statements

    /// Runs one statement (any result rows are discarded).
    /// - Parameter purpose: what the statement is for, used in error messages (defaults to the
    ///   SQL text, which holds placeholders, never values).
    public func execute(_ sql: String, _ params: [SQLValue] = [], purpose: String? = nil) throws {
        try eachRow(sql, params, purpose: purpose) { _ in }
    }

    /// Prepares (cached), binds and steps one statement under the lock, handing `row` the
    /// statement at each result row: the one loop behind execute, query and forEachBlob.
    private func eachRow(_ sql: String, _ params: [SQLValue], purpose: String?,
                         _ row: (OpaquePointer) throws -> Void) throws {
        try lock.withLock {
            let stmt = try statement(sql, purpose: purpose)
            defer { reset(stmt) }
            try bind(params, to: stmt, sql: sql, purpose: purpose)
            while true {
                let rc = sqlite3_step(stmt)
                if rc == SQLITE_DONE { return }
                guard rc == SQLITE_ROW else { try fail(rc, purpose ?? Self.describe(sql)) }
                try row(stmt)
            }
        }
    }

    /// Runs one statement and returns all its rows.
    public func query(_ sql: String, _ params: [SQLValue] = [], purpose: String? = nil) throws -> [[SQLValue]] {
        var rows: [[SQLValue]] = []
        try eachRow(sql, params, purpose: purpose) { stmt in
            let columns = sqlite3_column_count(stmt)
            var row: [SQLValue] = []
            row.reserveCapacity(Int(columns))
            for i in 0..<columns { row.append(Self.column(stmt, i)) }
            rows.append(row)
        }
        return rows
    }

    /// Runs a query and hands `body` the first column of each row as raw bytes (NULL or a
    /// non-blob is an empty buffer), without building rows: for scans of many small blobs.
    /// The buffer is valid only during the call.
    public func forEachBlob(_ sql: String, _ params: [SQLValue] = [], purpose: String? = nil,
                            _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        try eachRow(sql, params, purpose: purpose) { stmt in
            let n = Int(sqlite3_column_bytes(stmt, 0))
            if sqlite3_column_type(stmt, 0) == SQLITE_BLOB, n > 0, let p = sqlite3_column_blob(stmt, 0) {
                try body(UnsafeRawBufferPointer(start: p, count: n))
            } else {
                try body(UnsafeRawBufferPointer(start: nil, count: 0))
            }
        }
    }

    /// The first column of the first row, or nil if there are no rows.
    public func scalar(_ sql: String, _ params: [SQLValue] = [], purpose: String? = nil) throws -> SQLValue? {
        try query(sql, params, purpose: purpose).first?.first
    }

    /// Runs several statements separated by semicolons, without parameters (schema scripts).
    public func executeScript(_ sql: String, purpose: String) throws {
        try lock.withLock {
            guard let handle else { throw StoreError.closed }
            var errmsg: UnsafeMutablePointer<CChar>?
            let rc = sqlite3_exec(handle, sql, nil, nil, &errmsg)
            if rc != SQLITE_OK {
                let message = errmsg.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
                sqlite3_free(errmsg)
                throw StoreError.sqlite(code: rc, message: message, purpose: purpose)
            }
        }
    }

    /// Runs `body` in one transaction: committed (durably) if it returns, rolled back if it
    /// throws. Nested calls become savepoints. Writers take the write lock up front
    /// (`BEGIN IMMEDIATE`), so a transaction never fails half-way on a lock upgrade.
    @discardableResult
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try lock.withLock {
            if groupDepth > 0 && transactionDepth == groupDepth {
                // Directly inside a group: no savepoint (SQLCipher encrypts every page a
                // savepoint journals, which cost more than the statements). A body that throws
                // after changing rows poisons the group: it is rolled back, never half-committed.
                let before = totalChanges
                do {
                    return try body()
                } catch {
                    if totalChanges != before { groupPoisoned = true }
                    throw error
                }
            }
            let depth = transactionDepth
            let savepoint = "sp\(depth)"
            try execute(depth == 0 ? "BEGIN IMMEDIATE" : "SAVEPOINT \(savepoint)", purpose: "beginning a transaction")
            transactionDepth = depth + 1
            defer { transactionDepth = depth }
            let result: T
            do {
                result = try body()
            } catch {
                try? rollback(depth: depth, savepoint: savepoint)
                throw error
            }
            do {
                try execute(depth == 0 ? "COMMIT" : "RELEASE \(savepoint)", purpose: "committing a transaction")
            } catch {
                try? rollback(depth: depth, savepoint: savepoint)
                throw error
            }
            return result
        }
    }

    /// Opens a group transaction that stays open across calls until ``commitGroup()``: every
    /// statement and ``transaction(_:)`` on this connection meanwhile joins it (nested ones as
    /// savepoints), so many state changes share one durable commit. The caller must serialise
    /// its use of the connection while a group is open (the router's queue does).
    public func beginGroup() throws {
        try lock.withLock {
            guard transactionDepth == 0 else { throw StoreError.sqlite(code: SQLITE_MISUSE, message: "a transaction is already open", purpose: "beginning a group transaction") }
            try execute("BEGIN IMMEDIATE", purpose: "beginning a group transaction")
            transactionDepth = 1
            groupDepth = 1
            groupPoisoned = false
            groupChangesAtBegin = totalChanges
        }
    }

    /// Commits the group transaction durably (`synchronous=FULL`); on failure it is rolled back
    /// and the error thrown: none of its changes happened. Returns whether it changed any row
    /// (a group that changed nothing writes nothing and syncs nothing).
    @discardableResult
    public func commitGroup() throws -> Bool {
        try lock.withLock {
            guard groupDepth == 1 else { return false }
            transactionDepth = 0
            groupDepth = 0
            let changed = totalChanges != groupChangesAtBegin
            if groupPoisoned {
                try? rollback(depth: 0, savepoint: "")
                throw StoreError.sqlite(code: SQLITE_ABORT, message: "a change in the group failed half-way; the whole group was rolled back",
                                        purpose: "committing a group transaction")
            }
            do {
                try execute("COMMIT", purpose: "committing a group transaction")
            } catch {
                try? rollback(depth: 0, savepoint: "")
                throw error
            }
            return changed
        }
    }

    /// Whether a group transaction is open.
    public var inGroup: Bool { lock.withLock { transactionDepth > 0 } }

    /// Whether the open group has changed any row yet: its commit would write and sync (a
    /// group that only read commits at no cost, so it need not wait for the commit spacing).
    public var groupHasChanges: Bool {
        lock.withLock { groupDepth == 1 && totalChanges != groupChangesAtBegin }
    }

    /// Rows changed on this connection since it opened (call with `lock` held): a group
    /// changed something when this moved after ``beginGroup()``.
    private var totalChanges: Int32 { handle.map { sqlite3_total_changes($0) } ?? 0 }

    private func rollback(depth: Int, savepoint: String) throws {
        if depth == 0 {
            // A failed COMMIT may already have rolled back; only roll back if still open.
            if let handle, sqlite3_get_autocommit(handle) == 0 {
                try execute("ROLLBACK", purpose: "rolling back a transaction")
            }
        } else {
            try execute("ROLLBACK TO \(savepoint)", purpose: "rolling back a savepoint")
            try execute("RELEASE \(savepoint)", purpose: "releasing a savepoint")
        }
    }

    /// The rowid of the last successful INSERT on this connection.
    public var lastInsertRowID: Int64 {
        lock.withLock { handle.map { sqlite3_last_insert_rowid($0) } ?? 0 }
    }

    /// Rows changed by the last INSERT/UPDATE/DELETE on this connection.
    public var changes: Int {
        lock.withLock { handle.map { Int(sqlite3_changes($0)) } ?? 0 }
    }

    /// Runs `body` holding the connection's lock, so that a statement and a following read
    /// of `changes` or `lastInsertRowID` are not separated by another thread's statement.
    public func withExclusiveAccess<T>(_ body: () throws -> T) rethrows -> T {
        try lock.withLock(body)
    }

    // MARK: Schema versions

    /// Brings `component`'s schema up to date by running the migrations it has not run yet,
    /// each in its own transaction together with the version bump.
    ///
    /// Versions are kept per component in the `yaok_schema` table, because several stores
    /// (bundles, the endpoint's contacts, the relay's queues) may share one file; the file's
    /// `PRAGMA user_version` records the format of that table (1).
    ///
    /// - Parameter migrations: in order; `migrations[i]` takes the schema to version `i + 1`.
    /// - Returns: the schema version after migrating.
    @discardableResult
    public func migrate(component: String, _ migrations: [Migration]) throws -> Int {
        try lock.withLock {
            for (i, m) in migrations.enumerated() where m.version != i + 1 {
                throw StoreError.invalidMigrations(component: component,
                                                   reason: "migration #\(i) has version \(m.version), expected \(i + 1)")
            }
            try transaction {
                try execute("CREATE TABLE IF NOT EXISTS yaok_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL)",
                            purpose: "creating the schema version table")
                let format = try scalar("PRAGMA user_version", purpose: "reading user_version")?.int64Value ?? 0
                if format == 0 { try execute("PRAGMA user_version = 1", purpose: "setting user_version") }
            }
            var current = try scalar("SELECT version FROM yaok_schema WHERE component = ?", [.text(component)],
                                     purpose: "reading the schema version")?.intValue ?? 0
            guard current <= migrations.count else {
                throw StoreError.schemaTooNew(component: component, found: current, known: migrations.count)
            }
            while current < migrations.count {
                let m = migrations[current]
                try transaction {
                    try m.apply(self)
                    try execute("INSERT OR REPLACE INTO yaok_schema (component, version) VALUES (?, ?)",
                                [.text(component), .int(m.version)], purpose: "recording the schema version")
                }
                current = m.version
            }
            return current
        }
    }

    /// The schema version recorded for `component` (0 if never migrated).
    public func schemaVersion(component: String) throws -> Int {
        let exists = try scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'yaok_schema'")
        guard exists?.int64Value == 1 else { return 0 }
        return try scalar("SELECT version FROM yaok_schema WHERE component = ?", [.text(component)])?.intValue ?? 0
    }

    // MARK: Maintenance

    /// Re-encrypts the whole file under `newKey` (`PRAGMA rekey`). SQLCipher 3 cannot rekey
    /// in WAL mode, so the journal is checkpointed and switched to DELETE for the duration.
    /// Call it with no other connection open on the file.
    public func rekey(newKey: [UInt8]) throws {
        guard newKey.count == 32 else { throw StoreError.invalidKeyLength(newKey.count) }
        try lock.withLock {
            guard transactionDepth == 0 else {
                throw StoreError.sqlite(code: SQLITE_MISUSE, message: "rekey inside a transaction", purpose: "rekeying")
            }
            // Cached statements would hold read locks across the journal-mode switch.
            for (_, stmt) in statementCache { sqlite3_finalize(stmt) }
            statementCache.removeAll()
            try execute("PRAGMA wal_checkpoint(TRUNCATE)", purpose: "checkpointing before rekey")
            let mode = try query("PRAGMA journal_mode = DELETE", purpose: "leaving WAL for rekey")
            guard mode.first?.first?.textValue?.lowercased() == "delete" else {
                throw StoreError.sqlite(code: SQLITE_ERROR, message: "journal_mode did not leave WAL", purpose: "rekeying")
            }
            var text = Self.rawKeyLiteral(newKey)
            defer { wipe(&text) }
            let rc = text.withUnsafeBytes { raw in sqlite3_rekey(handle, raw.baseAddress, Int32(raw.count)) }
            try check(rc, "rekeying")
            let back = try query("PRAGMA journal_mode = WAL", purpose: "returning to WAL after rekey")
            guard back.first?.first?.textValue?.lowercased() == "wal" else {
                throw StoreError.sqlite(code: SQLITE_ERROR, message: "journal_mode did not return to WAL", purpose: "rekeying")
            }
        }
    }

    /// Bytes in the `-wal` file: 0 when it is absent or has been emptied (``emptyWAL()``).
    public var walFileBytes: Int64 {
        var st = stat()
        return stat(path + "-wal", &st) == 0 ? Int64(st.st_size) : 0
    }

    /// Copies every committed page from the WAL into the database file and truncates the WAL to
    /// zero bytes (`wal_checkpoint(TRUNCATE)`). Until then the WAL keeps older images of the
    /// pages it holds, a delivered bundle's envelope among them, whatever `secure_delete` has
    /// zeroed since. Cannot run inside a transaction.
    public func emptyWAL() throws {
        let rows = try query("PRAGMA wal_checkpoint(TRUNCATE)", purpose: "emptying the WAL")
        if rows.first?.first?.int64Value == 1 {
            throw StoreError.sqlite(code: SQLITE_BUSY, message: "another connection is reading the WAL", purpose: "emptying the WAL")
        }
    }

    /// Runs `PRAGMA quick_check` (every page decrypts and authenticates, b-trees are well
    /// formed) and returns the problems found, at most `limit`; empty means healthy. Takes
    /// time proportional to the file size; meant for startup or an operator command.
    public func quickCheck(limit: Int = 10) throws -> [String] {
        let rows = try query("PRAGMA quick_check(\(max(1, limit)))", purpose: "checking database integrity")
        let messages = rows.compactMap { $0.first?.textValue }
        return messages == ["ok"] ? [] : messages
    }

    /// Reads a pragma's single value (e.g. `"journal_mode"`, `"synchronous"`).
    public func pragma(_ name: String) throws -> SQLValue? {
        guard name.allSatisfy({ $0.isLetter || $0 == "_" }) else {
            throw StoreError.sqlite(code: SQLITE_MISUSE, message: "bad pragma name", purpose: "reading a pragma")
        }
        return try scalar("PRAGMA \(name)", purpose: "reading PRAGMA \(name)")
    }

    /// A pragma that is a number. SQLCipher 4 (Debian 13) answers some as text — `page_size`
    /// comes back as `"2048"` — where SQLCipher 3 (Debian 12) answers integers; both are read.
    /// Throws `corruptRow` naming the pragma when the answer is neither.
    public func integerPragma(_ name: String) throws -> Int64 {
        let value = try pragma(name)
        if let n = value?.int64Value { return n }
        if let text = value?.textValue, let n = Int64(text) { return n }
        throw StoreError.corruptRow(table: "pragma", column: name)
    }

    // MARK: Internals

    private func statement(_ sql: String, purpose: String?) throws -> OpaquePointer {
        guard let handle else { throw StoreError.closed }
        if let cached = statementCache[sql] { return cached }
        var stmt: OpaquePointer?
        var trailingStatements = false
        let rc = sql.withCString { text -> Int32 in
            var tail: UnsafePointer<CChar>?
            let rc = sqlite3_prepare_v2(handle, text, -1, &stmt, &tail)
            // sqlite3_prepare compiles only the first statement; anything after it would be
            // silently ignored, so refuse it (schema scripts go through executeScript).
            var p = tail
            while let c = p?.pointee, c != 0 {
                if !(c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 || c == 0x3B) { trailingStatements = true; break }
                p = p.map { $0 + 1 }
            }
            return rc
        }
        guard rc == SQLITE_OK, let stmt else {
            sqlite3_finalize(stmt)
            try fail(rc, purpose ?? Self.describe(sql))
        }
        if trailingStatements {
            sqlite3_finalize(stmt)
            throw StoreError.sqlite(code: SQLITE_MISUSE,
                                    message: "more than one statement given to execute/query (use executeScript)",
                                    purpose: purpose ?? Self.describe(sql))
        }
        if statementCache.count >= statementCacheLimit {
            for (_, old) in statementCache { sqlite3_finalize(old) }
            statementCache.removeAll()
        }
        statementCache[sql] = stmt
        return stmt
    }

    private func reset(_ stmt: OpaquePointer) {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    private func bind(_ params: [SQLValue], to stmt: OpaquePointer, sql: String, purpose: String?) throws {
        let expected = Int(sqlite3_bind_parameter_count(stmt))
        guard expected == params.count else {
            throw StoreError.sqlite(code: SQLITE_RANGE,
                                    message: "statement takes \(expected) parameters, got \(params.count)",
                                    purpose: purpose ?? Self.describe(sql))
        }
        for (i, value) in params.enumerated() {
            let index = Int32(i + 1)
            let rc: Int32
            switch value {
            case .integer(let v): rc = sqlite3_bind_int64(stmt, index, v)
            case .real(let v): rc = sqlite3_bind_double(stmt, index, v)
            case .text(let v): rc = sqlite3_bind_text(stmt, index, v, -1, sqliteTransient)
            case .blob(let v):
                rc = v.withUnsafeBytes { raw in
                    // A zero-length blob still needs a non-NULL pointer, or SQLite binds NULL.
                    sqlite3_bind_blob(stmt, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1),
                                      Int32(raw.count), sqliteTransient)
                }
            case .null: rc = sqlite3_bind_null(stmt, index)
            }
            if rc != SQLITE_OK { try fail(rc, purpose ?? Self.describe(sql)) }
        }
    }

    private static func column(_ stmt: OpaquePointer, _ i: Int32) -> SQLValue {
        switch sqlite3_column_type(stmt, i) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(stmt, i))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(stmt, i))
        case SQLITE_TEXT:
            guard let p = sqlite3_column_text(stmt, i) else { return .text("") }
            let n = Int(sqlite3_column_bytes(stmt, i))
            return .text(String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self))
        case SQLITE_BLOB:
            let n = Int(sqlite3_column_bytes(stmt, i))
            guard n > 0, let p = sqlite3_column_blob(stmt, i) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: p, count: n)))
        default: return .null
        }
    }

    private func check(_ rc: Int32, _ purpose: String) throws {
        if rc != SQLITE_OK { try fail(rc, purpose) }
    }

    private func fail(_ rc: Int32, _ purpose: String) throws -> Never {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
        throw StoreError.sqlite(code: rc, message: message, purpose: purpose)
    }

    /// The SQL text shortened for an error message (it holds placeholders, never values).
    private static func describe(_ sql: String) -> String {
        let flat = sql.split(whereSeparator: { $0 == "\n" || $0 == " " }).joined(separator: " ")
        return flat.count > 100 ? "running \"\(flat.prefix(100))…\"" : "running \"\(flat)\""
    }
}

/// One step of a component's schema history.
public struct Migration: Sendable {
    /// The schema version this step produces (1, 2, 3, … in order).
    public let version: Int
    /// Applies the step; runs inside a transaction.
    public let apply: @Sendable (SQLCipherDatabase) throws -> Void

    public init(version: Int, apply: @escaping @Sendable (SQLCipherDatabase) throws -> Void) {
        self.version = version
        self.apply = apply
    }

    /// A step that runs a schema script.
    public init(version: Int, script: String) {
        self.init(version: version) { db in
            try db.executeScript(script, purpose: "migrating the schema to version \(version)")
        }
    }
}

func closeDescriptor(_ fd: Int32) {
    #if canImport(Glibc)
    _ = Glibc.close(fd)
    #else
    _ = Darwin.close(fd)
    #endif
}

/// Overwrites a buffer that held key material.
func wipe(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { raw in
        if let base = raw.baseAddress { memset(base, 0, raw.count) }
    }
    bytes.removeAll()
}

/// A pthread recursive mutex: `transaction` re-enters the lock through `execute`.
// @unchecked: a pthread mutex, the primitive that makes the other types thread-safe.
final class RecursiveLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        var attr = pthread_mutexattr_t()
        pthread_mutexattr_init(&attr)
        pthread_mutexattr_settype(&attr, Int32(PTHREAD_MUTEX_RECURSIVE))
        pthread_mutex_init(mutex, &attr)
        pthread_mutexattr_destroy(&attr)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
