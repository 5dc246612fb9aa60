#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import enum YaokPluginKit.Hex

/// Why a private file could not be written or read. Every case names the path the failing
/// step was on: the file itself, or for the steps on the temporary file, that file
/// (`<path>.tmp-<random>`, beside it).
public enum PrivateFileError: Error, Sendable, Equatable, CustomStringConvertible {
    /// ``PrivateFile/create(_:at:mode:owner:)`` found something at the path (a file, a
    /// directory, a symlink, even a dangling one); it was left as it was.
    case exists(path: String)
    /// The path is not a regular file (a directory, a FIFO, a device).
    case notARegularFile(path: String)
    /// Group or others may access the file. `mode` is the whole `st_mode`, file type included.
    case insecurePermissions(path: String, mode: UInt32)
    /// The file is longer than its reader accepts.
    case tooLarge(path: String, size: Int, limit: Int)
    /// A system call failed.
    case system(call: String, path: String, errno: Int32)

    /// The path the failing step was on.
    public var path: String {
        switch self {
        case .exists(let p), .notARegularFile(let p), .insecurePermissions(let p, _), .tooLarge(let p, _, _), .system(_, let p, _): return p
        }
    }

    /// What went wrong, without the path (for messages that name the file themselves).
    public var reason: String {
        switch self {
        case .exists: return "it already exists and is never replaced"
        case .notARegularFile: return "not a regular file"
        case .insecurePermissions(_, let mode):
            return "mode \(String(mode & 0o7777, radix: 8)): group or others may access it (chmod 600)"
        case .tooLarge(_, let size, let limit): return "\(size) bytes, more than the \(limit) expected"
        case .system(let call, _, let e): return "\(call) failed: \(String(cString: strerror(e))) (errno \(e))"
        }
    }

    public var description: String { "\(path): \(reason)" }
}

/// Files that hold secrets (keys, password hashes), written whole or not at all and never
/// readable by anyone but their owner while they are written.
///
/// A write goes to a temporary file beside the target, `<path>.tmp-<16 random hex digits>`,
/// created with `O_EXCL | O_NOFOLLOW | O_CLOEXEC` and mode 0600 (so no symlink or file planted
/// there is followed or reused), optionally given to another owner, filled completely
/// (`EINTR` retried), set to exactly `mode` (the umask neither widens nor narrows it),
/// fsynced, then moved into place: renamed over the target (``write(_:to:mode:owner:)``), or
/// hard-linked so that nothing already there is replaced (``create(_:at:mode:owner:)``).
/// The directory is fsynced last (best effort), so the new entry survives a power cut. The
/// temporary file is removed on every failure.
///
/// ``read(_:maxBytes:followSymlinks:requirePrivate:)`` is the other half: it reads such a
/// file only if it is a regular file that group and others cannot access.
public enum PrivateFile {
    /// Who should own a file written by root on behalf of a service user.
    public struct Owner: Sendable, Equatable {
        public var uid: uid_t
        public var gid: gid_t
        public init(uid: uid_t, gid: gid_t) {
            self.uid = uid
            self.gid = gid
        }
    }

    /// Writes `bytes` to `path`, replacing whatever is there (a symlink at `path` is replaced
    /// itself, never followed). Readers see the old file or the new one, never a part.
    /// - Parameters:
    ///   - mode: the file's exact mode; 0600 unless the content is not secret.
    ///   - owner: given the file before it appears at `path` (needs root).
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600, owner: Owner? = nil) throws(PrivateFileError) {
        try place(bytes, at: path, mode: mode, owner: owner, replacing: true)
    }

    /// Creates `path` holding `bytes`, never replacing anything: if anything is at `path`
    /// (also when another process creates it meanwhile), throws ``PrivateFileError/exists(path:)``
    /// and leaves it untouched. On a filesystem without hard links it falls back to a rename
    /// after checking that `path` is free, which a file created in between would lose to.
    public static func create(_ bytes: [UInt8], at path: String, mode: mode_t = 0o600, owner: Owner? = nil) throws(PrivateFileError) {
        try place(bytes, at: path, mode: mode, owner: owner, replacing: false)
    }

    /// The steps of ``write(_:to:mode:owner:)`` and ``create(_:at:mode:owner:)``; tests name
    /// `temporaryPath` to plant something there.
    static func place(_ bytes: [UInt8], at path: String, mode: mode_t, owner: Owner?, replacing: Bool,
                      temporaryPath: String? = nil) throws(PrivateFileError) {
        let tmp = temporaryPath ?? path + ".tmp-" + Hex.encode(Random.bytes(8))
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw .system(call: "open", path: tmp, errno: errno) }
        var tmpExists = true
        defer { if tmpExists { unlink(tmp) } }
        do {
            defer { close(fd) }
            if let owner, fchown(fd, owner.uid, owner.gid) != 0 { throw PrivateFileError.system(call: "fchown", path: tmp, errno: errno) }
            var written = 0
            while written < bytes.count {
                let n = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress! + written, $0.count - written) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw PrivateFileError.system(call: "write", path: tmp, errno: errno)
                }
                written += n
            }
            // After fchown, which may clear set-ID bits; before fsync, so the mode is durable too.
            guard fchmod(fd, mode) == 0 else { throw PrivateFileError.system(call: "fchmod", path: tmp, errno: errno) }
            guard fsync(fd) == 0 else { throw PrivateFileError.system(call: "fsync", path: tmp, errno: errno) }
        }
        if replacing {
            guard rename(tmp, path) == 0 else { throw .system(call: "rename", path: path, errno: errno) }
            tmpExists = false
        } else if link(tmp, path) != 0 {
            let err = errno
            if err == EEXIST { throw .exists(path: path) }
            // Filesystems without hard links (FAT, some FUSE ones).
            guard err == EPERM || err == ENOTSUP || err == EOPNOTSUPP else { throw .system(call: "link", path: path, errno: err) }
            var st = stat()
            if lstat(path, &st) == 0 { throw .exists(path: path) }
            guard rename(tmp, path) == 0 else { throw .system(call: "rename", path: path, errno: errno) }
            tmpExists = false
        }
        // Linked: the temporary name goes before the directory is synced.
        if tmpExists { unlink(tmp); tmpExists = false }
        syncDirectory(of: path)
    }

    /// Reads a whole private file: a regular file (symlinks not followed unless asked) that
    /// group and others cannot access (unless `requirePrivate` is false, for a file whose
    /// access someone else controls, such as a systemd credential), at most `maxBytes` long.
    /// The caller should ``wipe(_:)`` the result when done with it.
    public static func read(_ path: String, maxBytes: Int, followSymlinks: Bool = false,
                            requirePrivate: Bool = true) throws(PrivateFileError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC | (followSymlinks ? 0 : O_NOFOLLOW))
        guard fd >= 0 else { throw .system(call: "open", path: path, errno: errno) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw .system(call: "fstat", path: path, errno: errno) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw .notARegularFile(path: path) }
        if requirePrivate, st.st_mode & 0o077 != 0 { throw .insecurePermissions(path: path, mode: UInt32(st.st_mode)) }
        guard Int(st.st_size) <= maxBytes else { throw .tooLarge(path: path, size: Int(st.st_size), limit: maxBytes) }
        // One byte more than allowed, so a file that grew since fstat is reported, not cut.
        var buffer = [UInt8](repeating: 0, count: maxBytes + 1)
        defer { wipe(&buffer) }
        var got = 0
        while got < buffer.count {
            let n = buffer.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress! + got, $0.count - got) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .system(call: "read", path: path, errno: errno)
            }
            if n == 0 { break }
            got += n
        }
        guard got <= maxBytes else { throw .tooLarge(path: path, size: got, limit: maxBytes) }
        return Array(buffer[0..<got])
    }

    /// Makes a new or renamed directory entry for `path` durable: fsync of its directory.
    /// Best effort (some filesystems refuse to fsync a directory; the entry is there anyway).
    public static func syncDirectory(of path: String) {
        let dir: String
        if let slash = path.lastIndex(of: "/") {
            dir = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            dir = "."
        }
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }
}

/// `write(2)` and `read(2)`, named apart from ``PrivateFile``'s own `write` and `read`.
private func systemWrite(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int { write(fd, bytes, count) }
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int { read(fd, buffer, count) }
