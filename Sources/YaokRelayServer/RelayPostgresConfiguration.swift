#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Where a relay node finds its PostgreSQL database: parsed from a `postgres://` URL, with the
/// password read from a 0600 file or a systemd credential (never from the URL, the command
/// line or a log line).
///
/// URL forms:
/// - `postgres://USER@HOST[:PORT]/DATABASE[?sslmode=require|disable]` — TCP; `sslmode`
///   defaults to `require` (TLS with certificate and host name verification against the
///   system's trust roots; `sslrootcert=PATH` adds a CA file).
/// - `postgres://USER@/DATABASE?host=/run/postgresql[&port=5432]` — the UNIX socket
///   `<host>/.s.PGSQL.<port>` (as libpq names it); no TLS.
public struct RelayPostgresConfiguration: Sendable, CustomStringConvertible {
    /// How to reach the server.
    public enum Endpoint: Sendable, Equatable {
        case tcp(host: String, port: Int)
        case unixSocket(path: String)
    }

    /// TLS on a TCP connection.
    public enum TLSMode: String, Sendable {
        case disable, require
    }

    /// The systemd credential name read for the password, if present.
    public static let passwordCredential = "yaok-relay-pg-password"

    public var endpoint: Endpoint
    public var username: String
    public var database: String
    public var tls: TLSMode
    /// A PEM CA file trusted in addition to the system's roots (`sslrootcert=`).
    public var rootCertificatePath: String?
    /// Never printed (``description`` leaves it out).
    public var password: String?

    /// Parses `url`; reads the password from `$CREDENTIALS_DIRECTORY/yaok-relay-pg-password`
    /// if that exists, else from `passwordFile` (must not be readable by group or others).
    public init(url: String, passwordFile: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        func bad(_ reason: String) -> RelayPostgresError { .badURL(reason: reason) }
        guard let c = URLComponents(string: url) else { throw bad("it is not a URL") }
        guard let scheme = c.scheme, scheme == "postgres" || scheme == "postgresql" else {
            throw bad("the scheme must be postgres:// or postgresql://, got \(c.scheme.map { "\($0)://" } ?? "none")")
        }
        if c.password != nil { throw RelayPostgresError.passwordInURL }
        guard let user = c.user, !user.isEmpty else { throw bad("it names no user (postgres://USER@HOST/DATABASE)") }
        let db = c.path.hasPrefix("/") ? String(c.path.dropFirst()) : c.path
        guard !db.isEmpty, !db.contains("/") else { throw bad("it names no database (the path after the host, e.g. /yaok_relay)") }
        var socketDirectory: String?
        var port = c.port ?? 5432
        var tls: TLSMode?
        var rootCert: String?
        for item in c.queryItems ?? [] {
            guard let value = item.value, !value.isEmpty else { throw bad("the parameter \(item.name) has no value") }
            switch item.name {
            case "host":
                guard value.hasPrefix("/") else { throw bad("host= must be an absolute socket directory, got \(value)") }
                socketDirectory = value
            case "port":
                guard let p = Int(value), (1...65_535).contains(p) else { throw bad("port= must be 1 to 65535, got \(value)") }
                port = p
            case "sslmode":
                guard let m = TLSMode(rawValue: value) else { throw bad("sslmode= must be require or disable, got \(value)") }
                tls = m
            case "sslrootcert":
                rootCert = value
            default:
                throw bad("unknown parameter \(item.name) (known: host, port, sslmode, sslrootcert)")
            }
        }
        if let dir = socketDirectory {
            if let h = c.host, !h.isEmpty { throw bad("give either a host name (\(h)) or host=/socket/dir, not both") }
            if tls == .require { throw bad("sslmode=require does not apply to a UNIX socket") }
            endpoint = .unixSocket(path: (dir.hasSuffix("/") ? dir : dir + "/") + ".s.PGSQL.\(port)")
            self.tls = .disable
        } else {
            guard let h = c.host, !h.isEmpty else { throw bad("it names no host (postgres://USER@HOST/DATABASE or ?host=/socket/dir)") }
            endpoint = .tcp(host: h, port: port)
            self.tls = tls ?? .require
        }
        username = user
        database = db
        rootCertificatePath = rootCert
        password = try Self.readPassword(file: passwordFile, environment: environment)
    }

    /// Reads the password: the systemd credential first, then `file`; nil when neither is given.
    static func readPassword(file: String?, environment: [String: String]) throws -> String? {
        if let dir = environment["CREDENTIALS_DIRECTORY"], !dir.isEmpty {
            let path = (dir.hasSuffix("/") ? dir : dir + "/") + passwordCredential
            if access(path, F_OK) == 0 { return try readSecret(path, requirePrivate: false) }
        }
        guard let file else { return nil }
        return try readSecret(file, requirePrivate: true)
    }

    static func readSecret(_ path: String, requirePrivate: Bool) throws -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw RelayPostgresError.passwordFile(path: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw RelayPostgresError.passwordFile(path: path, reason: String(cString: strerror(errno))) }
        if requirePrivate, st.st_mode & 0o077 != 0 {
            throw RelayPostgresError.passwordFile(path: path, reason: "group or others may read it (mode \(String(st.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
        var buffer = [UInt8](repeating: 0, count: 4097)
        let n = read(fd, &buffer, buffer.count)
        guard n >= 0 else { throw RelayPostgresError.passwordFile(path: path, reason: String(cString: strerror(errno))) }
        guard n < buffer.count else { throw RelayPostgresError.passwordFile(path: path, reason: "longer than 4096 bytes") }
        var text = String(decoding: buffer[..<n], as: UTF8.self)
        while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
        guard !text.isEmpty else { throw RelayPostgresError.passwordFile(path: path, reason: "it is empty") }
        return text
    }

    /// Where the server is, for messages: `host:port` or the socket path.
    public var location: String {
        switch endpoint {
        case .tcp(let h, let p): return h.contains(":") ? "[\(h)]:\(p)" : "\(h):\(p)"
        case .unixSocket(let path): return path
        }
    }

    /// The URL without any secret (for logs).
    public var description: String {
        "postgres://\(username)@\(location)/\(database) (tls \(tls.rawValue)\(password == nil ? "" : ", password from file"))"
    }
}

/// What can go wrong with the PostgreSQL store, with enough to act on.
public enum RelayPostgresError: Error, CustomStringConvertible, Equatable {
    /// The `postgres://` URL is unusable; `reason` names the part.
    case badURL(reason: String)
    /// The URL carries a password (it would show in `ps` and shell history).
    case passwordInURL
    /// The password file or credential cannot be used.
    case passwordFile(path: String, reason: String)
    /// No connection to the server at `location`.
    case connectionFailed(location: String, reason: String)
    /// A statement failed; `purpose` says which.
    case queryFailed(purpose: String, reason: String)
    /// The server did not answer within `seconds`.
    case timedOut(purpose: String, seconds: Int)
    /// The database's schema is newer than this relay knows.
    case schemaTooNew(found: Int, known: Int)
    /// The store was closed (the relay is stopping); nothing more is read or written.
    case closed

    public var description: String {
        switch self {
        case .badURL(let r): return "bad --store URL: \(r)"
        case .passwordInURL:
            return "bad --store URL: it contains a password; put the password in a 0600 file (--store-password-file) or the systemd credential \(RelayPostgresConfiguration.passwordCredential)"
        case .passwordFile(let p, let r): return "PostgreSQL password file \(p): \(r)"
        case .connectionFailed(let l, let r): return "cannot connect to PostgreSQL at \(l): \(r)"
        case .queryFailed(let p, let r): return "PostgreSQL: \(p) failed: \(r)"
        case .timedOut(let p, let s): return "PostgreSQL: \(p) did not finish within \(s) s"
        case .schemaTooNew(let f, let k): return "the relay database is at schema version \(f); this yaok-relay knows up to \(k): upgrade it"
        case .closed: return "PostgreSQL: the relay store is closed"
        }
    }
}
