#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a data directory could not be claimed.
public enum DataDirectoryLockError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Another process holds the lock: a running hub, or an offline `yaok-hub store` command.
    case held(path: String)
    case system(operation: String, path: String, errno: Int32)

    public var description: String {
        switch self {
        case .held(let path):
            return "\(path) is held by another process: a yaok-hub is already running on this data directory, or a `yaok-hub store` command is working on it"
        case .system(let operation, let path, let e):
            return "\(operation) \(path) failed: \(String(cString: strerror(e))) (errno \(e))"
        }
    }
}

/// One process's claim on a hub data directory: an exclusive `flock(2)` on
/// `<data_dir>/hub.lock`, held until this value is released or the process dies (so kill -9
/// frees it). The hub takes it before it opens anything in the directory, so two hubs never
/// share a store, and offline maintenance (`yaok-hub store rewrite`) takes it so no hub can
/// start while a store file is being replaced.
public final class DataDirectoryLock: Sendable {
    /// The lock file's name inside the data directory.
    public static let fileName = "hub.lock"
    public let path: String
    private let fd: Int32

    /// Claims `dataDirectory` without waiting.
    /// - Throws: `DataDirectoryLockError.held` if another process holds it.
    public init(dataDirectory: String) throws(DataDirectoryLockError) {
        path = Paths.resolve(Self.fileName, in: dataDirectory)
        // Read-only: flock needs no write access. Close-on-exec, so plugin processes do not
        // inherit (and outlive the hub with) the lock.
        var fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 && errno == ENOENT {
            fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
            // Root (an operator's maintenance command) leaves the file to the directory's
            // owner, so the hub's own user can still open it later.
            var dir = stat()
            if fd >= 0, geteuid() == 0, stat(dataDirectory, &dir) == 0 {
                _ = fchown(fd, dir.st_uid, dir.st_gid)
            }
            if fd < 0 && errno == EEXIST { fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
        }
        guard fd >= 0 else { throw .system(operation: "open", path: path, errno: errno) }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            if e == EINTR { continue }
            close(fd)
            if e == EWOULDBLOCK { throw .held(path: path) }
            throw .system(operation: "flock", path: path, errno: e)
        }
        self.fd = fd
    }

    deinit { close(fd) }
}
