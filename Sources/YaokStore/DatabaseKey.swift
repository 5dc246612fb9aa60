#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import enum YaokPluginKit.Hex
import enum YaokCrypto.PrivateFile
import enum YaokCrypto.PrivateFileError

/// Where the 32-byte database key comes from.
///
/// 1. `$CREDENTIALS_DIRECTORY/<credentialName>` when systemd passed it with
///    `LoadCredential=` / `LoadCredentialEncrypted=` (systemd controls that file's access).
/// 2. Otherwise `keyFile`, created on first use with 32 random bytes (`getrandom`), mode 0600,
///    fsynced together with its directory. A key file that group or others can access is
///    refused rather than silently used.
///
/// Either file may hold 32 raw bytes or 64 hex digits, optionally followed by a newline.
public enum DatabaseKey {
    /// The longest key file content we read: 64 hex digits plus "\r\n", and some slack so an
    /// over-long file is reported as such rather than truncated.
    static let maxFileBytes = 80

    /// Loads (or creates) the database key. See the type's documentation for the order.
    /// - Parameters:
    ///   - credentialName: the systemd credential's name.
    ///   - keyFile: the fallback key file; its directory must exist.
    ///   - environment: where to look up `CREDENTIALS_DIRECTORY` (tests pass their own).
    ///   - createIfMissing: false for tools that work on an existing store: a missing key
    ///     file is then `StoreError.fileError(ENOENT)`, not a new key that opens nothing.
    public static func load(credentialName: String = "yaok-db-key", keyFile: String,
                            environment: [String: String]? = nil, createIfMissing: Bool = true) throws -> [UInt8] {
        let credentialsDirectory: String?
        if let environment {
            credentialsDirectory = environment["CREDENTIALS_DIRECTORY"]
        } else {
            credentialsDirectory = getenv("CREDENTIALS_DIRECTORY").map { String(cString: $0) }
        }
        if let dir = credentialsDirectory, !dir.isEmpty {
            let credential = dir.hasSuffix("/") ? dir + credentialName : dir + "/" + credentialName
            if access(credential, F_OK) == 0 {
                return try read(credential, requirePrivate: false)
            }
        }
        if access(keyFile, F_OK) == 0 || !createIfMissing {
            return try read(keyFile, requirePrivate: true)
        }
        return try create(keyFile)
    }

    /// Rotates the key of `database`, whose key lives in `keyFile`: a new random key is
    /// written to `<keyFile>.new` (0600, fsynced), the database is rekeyed, and the new file
    /// is renamed over the old one. If the process dies between the rekey and the rename, the
    /// new key is in `<keyFile>.new`. Returns the new key.
    public static func rotate(database: SQLCipherDatabase, keyFile: String) throws -> [UInt8] {
        let staged = keyFile + ".new"
        let key = try randomBytes(32)
        do throws(PrivateFileError) {
            try PrivateFile.write(key, to: staged)
        } catch {
            throw StoreError(error, keyFile: staged, writing: true)
        }
        do {
            try database.rekey(newKey: key)
        } catch {
            unlink(staged)
            throw error
        }
        guard rename(staged, keyFile) == 0 else {
            throw StoreError.fileError(path: keyFile, operation: "rename new key file into place", errno: errno)
        }
        PrivateFile.syncDirectory(of: keyFile)
        return key
    }

    /// Reads and parses a key file (``PrivateFile/read(_:maxBytes:followSymlinks:requirePrivate:)``;
    /// a symlinked key file is followed).
    static func read(_ path: String, requirePrivate: Bool) throws -> [UInt8] {
        var content: [UInt8]
        do throws(PrivateFileError) {
            content = try PrivateFile.read(path, maxBytes: maxFileBytes, followSymlinks: true, requirePrivate: requirePrivate)
        } catch {
            throw StoreError(error, keyFile: path, writing: false)
        }
        defer { wipe(&content) }
        return try parse(content, path: path)
    }

    /// 32 raw bytes, or 64 hex digits with an optional trailing "\n" / "\r\n".
    static func parse(_ content: [UInt8], path: String) throws -> [UInt8] {
        if content.count == 32 { return content }
        var text = content[...]
        if text.last == UInt8(ascii: "\n") { text = text.dropLast() }
        if text.last == UInt8(ascii: "\r") { text = text.dropLast() }
        guard text.count == 64 else {
            throw StoreError.malformedKeyFile(path: path, reason: "\(content.count) bytes")
        }
        guard let key = Hex.decode(ascii: text) else {
            throw StoreError.malformedKeyFile(path: path, reason: "64 characters but not all hex digits")
        }
        return key
    }

    /// Creates a new key file exclusively (``PrivateFile/create(_:at:mode:owner:)``: 0600,
    /// fsynced with its directory). If another process wins the race, its key is used.
    static func create(_ path: String) throws -> [UInt8] {
        let key = try randomBytes(32)
        do throws(PrivateFileError) {
            try PrivateFile.create(key, at: path)
        } catch .exists {
            return try read(path, requirePrivate: true)
        } catch {
            throw StoreError(error, keyFile: path, writing: true)
        }
        return key
    }

    /// `count` bytes from the kernel CSPRNG: `getrandom(2)`, which blocks until the pool is
    /// seeded (unlike reading /dev/urandom early at boot). Glibc's Swift module does not
    /// export <sys/random.h>, so the libc symbol is looked up at run time.
    static func randomBytes(_ count: Int) throws -> [UInt8] {
        typealias GetRandom = @convention(c) (UnsafeMutableRawPointer?, Int, UInt32) -> Int
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "getrandom") else {
            throw StoreError.randomUnavailable(errno: ENOSYS)
        }
        let getrandom = unsafeBitCast(symbol, to: GetRandom.self)
        var out = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = out.withUnsafeMutableBytes { raw in getrandom(raw.baseAddress! + filled, raw.count - filled, 0) }
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError.randomUnavailable(errno: errno)
            }
            filled += n
        }
        return out
    }
}

extension StoreError {
    /// The store's error for a key file that ``PrivateFile`` could not write or read.
    init(_ error: PrivateFileError, keyFile path: String, writing: Bool) {
        switch error {
        case .insecurePermissions(_, let mode): self = .insecureKeyFile(path: path, mode: mode)
        case .tooLarge: self = .malformedKeyFile(path: path, reason: "longer than \(DatabaseKey.maxFileBytes) bytes")
        case .notARegularFile: self = .malformedKeyFile(path: path, reason: "not a regular file")
        case .exists: self = .fileError(path: path, operation: "create key file", errno: EEXIST)
        case .system(let call, _, let errno):
            let operation = writing ? (["open": "create key file", "fchmod": "chmod key file"][call] ?? "\(call) key file") : "\(call) key file"
            self = .fileError(path: path, operation: operation, errno: errno)
        }
    }
}
