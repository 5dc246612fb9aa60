import CSQLCipher
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import enum YaokCrypto.PrivateFile

/// What ``SQLCipherDatabase/rewrite(path:key:pageSize:progress:)`` did.
public struct StoreRewriteReport: Sendable, Equatable {
    /// The page size of the file before and after.
    public var oldPageSize: Int
    public var newPageSize: Int
    /// Tables copied (SQLite's own included) and their rows, counted in both files.
    public var tables: Int
    public var rows: Int
    /// The file with its WAL before, and the new file.
    public var bytesBefore: Int64
    public var bytesAfter: Int64
}

extension SQLCipherDatabase {
    /// The page size new files get.
    public static var defaultPageSize: Int { pageSizes[0] }

    /// Where ``rewrite(path:key:pageSize:progress:)`` builds the new file, next to `path`.
    public static func rewriteFile(for path: String) -> String { path + ".rewrite" }

    /// Rewrites the database at `path` into a fresh file with pages of `pageSize` bytes, and
    /// replaces the old file with it. A store keeps the page size it was made with, so this
    /// is the one way to move a store made with 4 KB pages to 2 KB ones (about 40 % fewer
    /// bytes written per message at light load, Docs/performance.md); free pages are dropped
    /// on the way. For a stopped hub: the file is opened with SQLite's exclusive lock, so
    /// this fails with ``StoreError/databaseInUse(path:)`` while any other connection has it
    /// open, and nothing can open it until the copy is in place.
    ///
    /// Crash safety, step by step (each leaves one complete database at `path`):
    /// 1. `sqlcipher_export` copies every table, index, trigger and the meta values into
    ///    `<path>.rewrite` (0600, the old file's owner) in one transaction; a leftover from an
    ///    interrupted run is removed first, and by the hub at start.
    /// 2. Every table's row count is compared across the two files, and the new one passes
    ///    `quick_check`; otherwise the new file is removed and the old one is untouched.
    /// 3. The old file leaves WAL mode (checkpointing and deleting its WAL), so no WAL is
    ///    left that would be replayed into the new file.
    /// 4. `rename(2)` puts the new file in place; the directory is fsynced.
    ///
    /// - Parameters:
    ///   - pageSize: one of the sizes ``init(path:key:busyTimeoutMs:)`` tries (2048, 4096,
    ///     1024), so the hub can open the result.
    ///   - progress: called with a short line before each long step.
    /// - Throws: `StoreError.unsupportedPageSize`, `.fileError` (no file at `path`),
    ///   `.wrongKey`, `.databaseInUse`, `.rewriteCheckFailed`, `.sqlite`.
    @discardableResult
    public static func rewrite(path: String, key: [UInt8], pageSize: Int = defaultPageSize,
                               progress: (String) -> Void = { _ in }) throws -> StoreRewriteReport {
        guard pageSizes.contains(pageSize) else {
            throw StoreError.unsupportedPageSize(pageSize, supported: pageSizes)
        }
        var original = stat()
        guard stat(path, &original) == 0 else {
            throw StoreError.fileError(path: path, operation: "find the store", errno: errno)
        }
        let bytesBefore = Int64(original.st_size) + fileSize(path + "-wal")
        let target = rewriteFile(for: path)

        let source: SQLCipherDatabase
        do {
            source = try SQLCipherDatabase(path: path, key: key, busyTimeoutMs: 0, exclusive: true)
        } catch StoreError.sqlite(let code, _, _) where code == SQLITE_BUSY || code == SQLITE_LOCKED {
            throw StoreError.databaseInUse(path: path)
        }
        defer { source.close() }
        // Only now, holding the lock: an interrupted run's leftovers cannot belong to a
        // rewrite still running.
        removeRewriteLeftovers(for: path)
        try createPrivateFile(target, owner: original)

        progress("copying \(path) (pages of \(source.pageSize) bytes) into \(target) (pages of \(pageSize) bytes)")
        let counted: (tables: Int, rows: Int)
        do {
            counted = try source.export(into: target, key: key, pageSize: pageSize)
        } catch {
            removeRewriteLeftovers(for: path)
            throw error
        }

        progress("copied and checked \(counted.rows) rows in \(counted.tables) tables; replacing \(path)")
        do {
            let mode = try source.query("PRAGMA main.journal_mode = DELETE", purpose: "checkpointing the old file and deleting its WAL")
            guard mode.first?.first?.textValue?.lowercased() == "delete", fileSize(path + "-wal") == 0 else {
                throw StoreError.rewriteCheckFailed(path: path, reason: "the old file's WAL could not be checkpointed and removed")
            }
            unlink(path + "-shm")
            guard rename(target, path) == 0 else {
                throw StoreError.fileError(path: path, operation: "rename \(target) over", errno: errno)
            }
        } catch {
            removeRewriteLeftovers(for: path)
            throw error
        }
        PrivateFile.syncDirectory(of: path)
        return StoreRewriteReport(oldPageSize: source.pageSize, newPageSize: pageSize, tables: counted.tables,
                                  rows: counted.rows, bytesBefore: bytesBefore, bytesAfter: fileSize(path))
    }

    /// Removes what an interrupted ``rewrite(path:key:pageSize:progress:)`` left beside
    /// `path` (the half-built copy and its rollback journal). Call it only when no rewrite
    /// can be running: holding the store's lock, or the hub's data directory lock.
    public static func removeRewriteLeftovers(for path: String) {
        let target = rewriteFile(for: path)
        for file in [target, target + "-journal", target + "-wal", target + "-shm"] { unlink(file) }
    }

    /// Copies this connection's `main` database into a new file with `sqlcipher_export` and
    /// checks the copy: same row count in every table, same `user_version`, `quick_check`
    /// clean. Returns the tables and rows counted.
    private func export(into target: String, key: [UInt8], pageSize: Int) throws -> (tables: Int, rows: Int) {
        // The key goes in as a bound value (SQLCipher takes a blob as the key text), never
        // in SQL text.
        var keyText = Self.rawKeyLiteral(key)
        defer { wipe(&keyText) }
        try execute("ATTACH DATABASE ? AS rewritten KEY ?", [.text(target), .blob(keyText)], purpose: "attaching the new file")
        defer { try? execute("DETACH DATABASE rewritten", purpose: "detaching the new file") }
        // Both before the new file's first page exists: they are fixed when it is made.
        try execute("PRAGMA rewritten.cipher_page_size = \(pageSize)", purpose: "setting the new file's page size")
        try execute("PRAGMA rewritten.auto_vacuum = INCREMENTAL", purpose: "setting the new file's auto_vacuum")
        try execute("PRAGMA rewritten.synchronous = FULL", purpose: "setting the new file's synchronous")
        try execute("SELECT sqlcipher_export('rewritten')", purpose: "copying the store into the new file")

        let oldVersion = try scalar("PRAGMA main.user_version", purpose: "reading user_version")?.int64Value ?? 0
        let newVersion = try scalar("PRAGMA rewritten.user_version", purpose: "reading the new file's user_version")?.int64Value ?? 0
        if newVersion != oldVersion {
            // sqlcipher_export copies the meta values in the versions we know; set it if not.
            try execute("PRAGMA rewritten.user_version = \(oldVersion)", purpose: "setting the new file's user_version")
        }
        let tables = try query("SELECT name FROM main.sqlite_master WHERE type = 'table' ORDER BY name",
                               purpose: "listing the tables").compactMap { $0.first?.textValue }
        var rows = 0
        for table in tables {
            let quoted = "\"" + table.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            let old = try scalar("SELECT count(*) FROM main.\(quoted)", purpose: "counting rows")?.intValue ?? -1
            let new = try scalar("SELECT count(*) FROM rewritten.\(quoted)", purpose: "counting rows in the new file")?.intValue ?? -2
            guard old == new else {
                throw StoreError.rewriteCheckFailed(path: path, reason: "table \(table) has \(old) rows but its copy \(new)")
            }
            rows += old
        }
        let newTables = try scalar("SELECT count(*) FROM rewritten.sqlite_master WHERE type = 'table'",
                                   purpose: "counting the new file's tables")?.intValue
        guard newTables == tables.count else {
            throw StoreError.rewriteCheckFailed(path: path, reason: "\(tables.count) tables but the copy has \(newTables ?? 0)")
        }
        let check = try query("PRAGMA rewritten.quick_check(10)", purpose: "checking the new file").compactMap { $0.first?.textValue }
        guard check == ["ok"] else {
            throw StoreError.rewriteCheckFailed(path: path, reason: "the copy fails quick_check: \(check.joined(separator: "; "))")
        }
        return (tables.count, rows)
    }

    /// Creates `path` with mode 0600 and, when run as root, the old file's owner: a rewrite
    /// run by root must leave a file the hub's own user can still open.
    private static func createPrivateFile(_ path: String, owner: stat) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.fileError(path: path, operation: "create", errno: errno) }
        defer { closeDescriptor(fd) }
        if geteuid() == 0 && fchown(fd, owner.st_uid, owner.st_gid) != 0 {
            let e = errno
            unlink(path)
            throw StoreError.fileError(path: path, operation: "chown to the store's owner", errno: e)
        }
    }

    private static func fileSize(_ path: String) -> Int64 {
        var st = stat()
        return stat(path, &st) == 0 ? Int64(st.st_size) : 0
    }
}
