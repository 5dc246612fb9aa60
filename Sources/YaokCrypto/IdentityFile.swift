#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import enum YaokPluginKit.Hex

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
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw IdentityFileError.system(call: "open", path: path, errno: errno)
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw IdentityFileError.system(call: "fstat", path: path, errno: errno) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw IdentityFileError.notARegularFile(path: path) }
        let mode = UInt32(st.st_mode) & 0o7777
        guard mode & 0o077 == 0 else { throw IdentityFileError.insecurePermissions(path: path, mode: mode) }
        guard Int(st.st_size) == size else { throw IdentityFileError.wrongSize(path: path, size: Int(st.st_size), expected: size) }

        var bytes = [UInt8](repeating: 0, count: size)
        defer { wipe(&bytes) }
        var got = 0
        while got < size {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, size - got) }
            if n < 0 {
                if errno == EINTR { continue }
                throw IdentityFileError.system(call: "read", path: path, errno: errno)
            }
            if n == 0 { throw IdentityFileError.wrongSize(path: path, size: got, expected: size) }
            got += n
        }
        guard Array(bytes[0..<8]) == magic else { throw IdentityFileError.badMagic(path: path) }
        var seed = Array(bytes[8..<40])
        var kxSecret = Array(bytes[40..<72])
        defer { wipe(&seed); wipe(&kxSecret) }
        return try Identity(ed25519Seed: seed, x25519Secret: kxSecret)
    }

    /// Writes a fresh identity to `path`: a temporary file created with O_EXCL and mode 0600,
    /// fsynced, then hard-linked into place so an existing file is never replaced (if another
    /// process won the race, its identity is loaded instead).
    static func create(path: String) throws -> Identity {
        let identity = Identity.generate()
        var contents = magic
        var seed = identity.signingKeyPair.seedBytes()
        var kxSecret = identity.kxKeyPair.secretBytes()
        contents += seed
        contents += kxSecret
        wipe(&seed); wipe(&kxSecret)
        defer { wipe(&contents) }

        let tmp = path + ".tmp-" + Hex.encode(Random.bytes(8))
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw IdentityFileError.system(call: "open", path: tmp, errno: errno) }
        var tmpExists = true
        defer { if tmpExists { unlink(tmp) } }
        do {
            defer { close(fd) }
            if let failed = writeSecret(contents, to: fd) { throw IdentityFileError.system(call: failed.call, path: tmp, errno: failed.errno) }
        }
        if link(tmp, path) != 0 {
            let err = errno
            if err == EEXIST, let existing = try load(path: path) { return existing }
            // Filesystems without hard links: fall back to rename (which may replace a racing file).
            guard err == EPERM || err == ENOTSUP || err == EOPNOTSUPP else {
                throw IdentityFileError.system(call: "link", path: path, errno: err)
            }
            guard rename(tmp, path) == 0 else { throw IdentityFileError.system(call: "rename", path: path, errno: errno) }
            tmpExists = false
        }
        syncDirectory(of: path)
        return identity
    }

    /// Writes a secret file's contents to a freshly created descriptor: mode 0600 (the umask can
    /// only remove bits, but be explicit), every byte, then fsync. Returns the call that failed.
    static func writeSecret(_ contents: [UInt8], to fd: Int32) -> (call: String, errno: Int32)? {
        guard fchmod(fd, 0o600) == 0 else { return ("fchmod", errno) }
        var written = 0
        while written < contents.count {
            let n = contents.withUnsafeBytes { write(fd, $0.baseAddress! + written, contents.count - written) }
            if n < 0 {
                if errno == EINTR { continue }
                return ("write", errno)
            }
            written += n
        }
        guard fsync(fd) == 0 else { return ("fsync", errno) }
        return nil
    }

    /// Makes the new directory entry durable; best effort.
    private static func syncDirectory(of path: String) {
        let dir: String
        if let slash = path.lastIndex(of: "/") {
            dir = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            dir = "."
        }
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { _ = fsync(fd); close(fd) }
    }
}
