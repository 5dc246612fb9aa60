/// Everything that can go wrong in YaokStore. Descriptions name the operation and carry
/// SQLite's own message, but never bound values, key material or message content.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The linked library is plain SQLite, not SQLCipher (`PRAGMA cipher_version` was empty):
    /// the file would be written unencrypted, so we refuse to run.
    case notSQLCipher
    /// The key does not open this file (or it is not a database at all).
    case wrongKey(path: String)
    /// `sqlite3_open_v2` failed.
    case openFailed(path: String, code: Int32, message: String)
    /// A POSIX call on a database or key file failed.
    case fileError(path: String, operation: String, errno: Int32)
    /// A statement failed. `purpose` is the caller's description or the SQL text (which
    /// contains placeholders, never values).
    case sqlite(code: Int32, message: String, purpose: String)
    /// A key is not exactly 32 bytes.
    case invalidKeyLength(Int)
    /// A key file is readable or writable by group/others.
    case insecureKeyFile(path: String, mode: UInt32)
    /// A key file's content is neither 32 raw bytes nor 64 hex digits.
    case malformedKeyFile(path: String, reason: String)
    /// The system random source failed.
    case randomUnavailable(errno: Int32)
    /// A row read back had an unexpected type or value in the named column.
    case corruptRow(table: String, column: String)
    /// A bundle handed to the store breaks a field rule (length etc).
    case invalidBundle(String)
    /// No bundle with that message ID is stored.
    case bundleNotFound
    /// A migration list is not strictly increasing from 1.
    case invalidMigrations(component: String, reason: String)
    /// The database has a newer schema than this program knows.
    case schemaTooNew(component: String, found: Int, known: Int)
    /// The database was closed.
    case closed
    /// A page size a store cannot be rewritten to (the hub would not find it at open).
    case unsupportedPageSize(Int, supported: [Int])
    /// Offline maintenance found another connection (a running hub) holding the file.
    case databaseInUse(path: String)
    /// A rewritten copy did not match its original; the original was left as it was.
    case rewriteCheckFailed(path: String, reason: String)

    public var description: String {
        switch self {
        case .notSQLCipher:
            return "the SQLite library in use is not SQLCipher (PRAGMA cipher_version is empty); refusing to store data unencrypted"
        case .wrongKey(let path):
            return "cannot open database \(path): file is encrypted or is not a database (wrong key?)"
        case .openFailed(let path, let code, let message):
            return "cannot open database \(path): \(message) (sqlite code \(code))"
        case .fileError(let path, let operation, let err):
            return "\(operation) failed for \(path): \(posixMessage(err)) (errno \(err))"
        case .sqlite(let code, let message, let purpose):
            return "database error while \(purpose): \(message) (sqlite code \(code))"
        case .invalidKeyLength(let n):
            return "database key must be 32 bytes, got \(n)"
        case .insecureKeyFile(let path, let mode):
            return "key file \(path) has mode \(String(mode & 0o7777, radix: 8)); it must not be accessible by group or others (chmod 600)"
        case .malformedKeyFile(let path, let reason):
            return "key file \(path) is malformed: \(reason); expected 32 raw bytes or 64 hex digits"
        case .randomUnavailable(let err):
            return "getrandom failed: \(posixMessage(err)) (errno \(err))"
        case .corruptRow(let table, let column):
            return "unexpected value in \(table).\(column)"
        case .invalidBundle(let reason):
            return "invalid bundle: \(reason)"
        case .bundleNotFound:
            return "no stored bundle has that message ID"
        case .invalidMigrations(let component, let reason):
            return "invalid migrations for \(component): \(reason)"
        case .schemaTooNew(let component, let found, let known):
            return "database schema for \(component) is version \(found), newer than this program's \(known); refusing to touch it"
        case .closed:
            return "the database is closed"
        case .unsupportedPageSize(let size, let supported):
            return "a store cannot have pages of \(size) bytes; use one of \(supported.map(String.init).joined(separator: ", "))"
        case .databaseInUse(let path):
            return "database \(path) is open in another process (is yaok-hub running? stop it first)"
        case .rewriteCheckFailed(let path, let reason):
            return "rewriting \(path) failed its check (\(reason)); the store was left as it was"
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func posixMessage(_ err: Int32) -> String {
    guard let s = strerror(err) else { return "unknown error" }
    return String(cString: s)
}
