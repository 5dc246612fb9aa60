import Foundation

/// An operator's network signing key: the Ed25519 key that signs hub certificates
/// (Docs/protocol.md §4, hubCertificate). It never goes on a hub; it stays with whoever
/// admits hubs to the network.
///
/// File layout, 40 bytes, mode 0600: magic `"YAOKNK1\n"` then the 32-byte Ed25519 seed.
public enum NetworkKeyFile {
    static let magic: [UInt8] = Array("YAOKNK1\n".utf8)
    /// The file's exact size.
    public static let size = 40

    /// Creates a new random network key at `path` (``PrivateFile/create(_:at:mode:owner:)``:
    /// mode 0600, written whole or not at all). Refuses to replace anything already there
    /// (symlinks not followed): losing a network key means re-issuing every hub's certificate.
    @discardableResult
    public static func create(path: String) throws -> SigningKeyPair {
        let pair = SigningKeyPair.generate()
        var contents = magic
        var seed = pair.seedBytes()
        contents += seed
        wipe(&seed)
        defer { wipe(&contents) }
        do throws(PrivateFileError) {
            try PrivateFile.create(contents, at: path)
        } catch {
            throw NetworkKeyFileError(error, path: path)
        }
        return pair
    }

    /// Loads a network key, refusing a file readable or writable by group or others.
    public static func load(path: String) throws -> SigningKeyPair {
        var contents: [UInt8]
        do throws(PrivateFileError) {
            contents = try PrivateFile.read(path, maxBytes: size)
        } catch {
            throw NetworkKeyFileError(error, path: path)
        }
        defer { wipe(&contents) }
        guard contents.count == size else { throw NetworkKeyFileError.wrongSize(path: path, size: contents.count) }
        guard Array(contents[0..<8]) == magic else { throw NetworkKeyFileError.badMagic(path: path) }
        var seed = Array(contents[8..<40])
        defer { wipe(&seed) }
        return try SigningKeyPair(seed: seed)
    }
}

/// Why a network key file could not be created or read.
public enum NetworkKeyFileError: Error, Sendable, Equatable, CustomStringConvertible {
    case exists(path: String)
    case insecurePermissions(path: String, mode: UInt32)
    case wrongSize(path: String, size: Int)
    case badMagic(path: String)
    case notARegularFile(path: String)
    case system(call: String, path: String, errno: Int32)

    public var description: String {
        switch self {
        case .exists(let p): return "\(p) already exists; a network key is never overwritten"
        case .insecurePermissions(let p, let m):
            return "\(p) has mode \(String(m, radix: 8)); a network key must not be accessible to group or others (chmod 600 \(p))"
        case .wrongSize(let p, let s): return "\(p) is \(s) bytes; a network key file is \(NetworkKeyFile.size)"
        case .badMagic(let p): return "\(p) is not a Ya OK network key file"
        case .notARegularFile(let p): return "\(p) is not a regular file"
        case .system(let call, let p, let e): return "\(call) \(p): \(String(cString: strerror(e)))"
        }
    }
}

extension NetworkKeyFileError {
    /// The network key file's error for a failure of ``PrivateFile``'s, naming `path`.
    init(_ error: PrivateFileError, path: String) {
        switch error {
        case .exists: self = .exists(path: path)
        case .insecurePermissions(_, let mode): self = .insecurePermissions(path: path, mode: mode & 0o777)
        case .tooLarge(_, let size, _): self = .wrongSize(path: path, size: size)
        case .notARegularFile: self = .notARegularFile(path: path)
        case .system(let call, _, let errno): self = .system(call: call, path: path, errno: errno)
        }
    }
}
