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

    /// Creates a new random network key at `path`. Refuses to replace anything already
    /// there (`O_EXCL`, symlinks not followed): losing a network key means re-issuing
    /// every hub's certificate.
    @discardableResult
    public static func create(path: String) throws -> SigningKeyPair {
        let pair = SigningKeyPair.generate()
        var contents = magic
        var seed = pair.seedBytes()
        contents += seed
        wipe(&seed)
        defer { wipe(&contents) }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            let e = errno
            if e == EEXIST { throw NetworkKeyFileError.exists(path: path) }
            throw NetworkKeyFileError.system(call: "open", path: path, errno: e)
        }
        var complete = false
        defer {
            close(fd)
            if !complete { unlink(path) }
        }
        if let failed = IdentityFile.writeSecret(contents, to: fd) {
            throw NetworkKeyFileError.system(call: failed.call, path: path, errno: failed.errno)
        }
        complete = true
        return pair
    }

    /// Loads a network key, refusing a file readable or writable by group or others.
    public static func load(path: String) throws -> SigningKeyPair {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw NetworkKeyFileError.system(call: "open", path: path, errno: errno) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw NetworkKeyFileError.system(call: "fstat", path: path, errno: errno) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw NetworkKeyFileError.notARegularFile(path: path) }
        guard st.st_mode & 0o077 == 0 else { throw NetworkKeyFileError.insecurePermissions(path: path, mode: UInt32(st.st_mode & 0o777)) }
        guard Int(st.st_size) == size else { throw NetworkKeyFileError.wrongSize(path: path, size: Int(st.st_size)) }
        var contents = [UInt8](repeating: 0, count: size)
        defer { wipe(&contents) }
        let n = contents.withUnsafeMutableBytes { read(fd, $0.baseAddress!, size) }
        guard n == size else { throw NetworkKeyFileError.wrongSize(path: path, size: max(0, n)) }
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
