#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Errors loading or creating the identity file.
public enum IdentityFileError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file can be read or written by group or others; its secret keys may have leaked.
    case insecurePermissions(path: String, mode: UInt32)
    /// The file is not 72 bytes long.
    case wrongSize(path: String, size: Int, expected: Int)
    /// The file does not start with "YAOKID1\n".
    case badMagic(path: String)
    /// The path is not a regular file.
    case notARegularFile(path: String)
    /// A system call failed.
    case system(call: String, path: String, errno: Int32)

    public var description: String {
        switch self {
        case .insecurePermissions(let path, let mode):
            return "identity file \(path) has mode \(String(mode, radix: 8, uppercase: false).leftPadded(to: 4)); it must not be readable or writable by group or others (chmod 600 \(path))"
        case .wrongSize(let path, let size, let expected):
            return "identity file \(path) is \(size) bytes; expected \(expected)"
        case .badMagic(let path):
            return "identity file \(path) does not start with the YAOKID1 magic"
        case .notARegularFile(let path):
            return "identity file \(path) is not a regular file"
        case .system(let call, let path, let errno):
            return "\(call) on \(path) failed: \(String(cString: strerror(errno))) (errno \(errno))"
        }
    }
}

private extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

/// The on-disk identity: `"YAOKID1\n"` (8) + Ed25519 seed (32) + X25519 secret (32) = 72 bytes,
/// mode 0600. Format in Docs/protocol.md.
public enum IdentityFile {
    public static let magic = Array("YAOKID1\n".utf8)
    public static let size = 72

    /// Loads the identity at `path`, creating it (atomically, mode 0600) if it does not exist.
    public static func loadOrCreate(path: String) throws -> Identity {
        if let identity = try load(path: path) { return identity }
        return try create(path: path)
    }

    /// Loads the identity at `path`; nil if there is no file.
    public static func load(path: String) throws -> Identity? {
        var bytes: [UInt8]
        do throws(PrivateFileError) {
            bytes = try PrivateFile.read(path, maxBytes: size)
        } catch .system("open", _, ENOENT) {
            return nil
        } catch {
            throw IdentityFileError(error, path: path)
        }
        defer { wipe(&bytes) }
        guard bytes.count == size else { throw IdentityFileError.wrongSize(path: path, size: bytes.count, expected: size) }
        guard Array(bytes[0..<8]) == magic else { throw IdentityFileError.badMagic(path: path) }
        var seed = Array(bytes[8..<40])
        var kxSecret = Array(bytes[40..<72])
        defer { wipe(&seed); wipe(&kxSecret) }
        return try Identity(ed25519Seed: seed, x25519Secret: kxSecret)
    }

    /// Writes a fresh identity to `path` (``PrivateFile/create(_:at:mode:owner:)``: mode 0600,
    /// fsynced, hard-linked into place so an existing file is never replaced). If another
    /// process won the race, its identity is loaded instead.
    static func create(path: String) throws -> Identity {
        let identity = Identity.generate()
        var contents = magic
        var seed = identity.signingKeyPair.seedBytes()
        var kxSecret = identity.kxKeyPair.secretBytes()
        contents += seed
        contents += kxSecret
        wipe(&seed); wipe(&kxSecret)
        defer { wipe(&contents) }
        do throws(PrivateFileError) {
            try PrivateFile.create(contents, at: path)
        } catch .exists {
            guard let existing = try load(path: path) else { throw IdentityFileError.system(call: "link", path: path, errno: EEXIST) }
            return existing
        } catch {
            throw IdentityFileError(error, path: path)
        }
        return identity
    }
}

extension IdentityFileError {
    /// The identity file's error for a failure of ``PrivateFile``'s, naming `path`.
    init(_ error: PrivateFileError, path: String) {
        switch error {
        case .insecurePermissions(_, let mode): self = .insecurePermissions(path: path, mode: mode & 0o7777)
        case .tooLarge(_, let size, _): self = .wrongSize(path: path, size: size, expected: IdentityFile.size)
        case .notARegularFile: self = .notARegularFile(path: path)
        case .system(let call, _, let errno): self = .system(call: call, path: path, errno: errno)
        case .exists: self = .system(call: "link", path: path, errno: EEXIST)
        }
    }
}
