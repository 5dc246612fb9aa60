import Glibc

/// Why a UNIX seqpacket socket operation failed.
public enum ATTSocketError: Error, Equatable, CustomStringConvertible {
    /// The path does not fit `sockaddr_un.sun_path` (with its terminating NUL).
    case pathTooLong(path: String, maxBytes: Int)
    /// The path is empty.
    case emptyPath
    /// Another server is accepting connections on this path.
    case addressInUse(path: String)
    /// Something that is not a socket already exists at the path; it is left alone.
    case pathOccupied(path: String)
    /// A system call failed.
    case system(operation: String, errno: Int32)
    /// `start()` was called on a server that is already running or was stopped.
    case notStartable

    public var description: String {
        switch self {
        case .pathTooLong(let path, let maxBytes):
            return "socket path \(path) is longer than \(maxBytes) bytes"
        case .emptyPath: return "socket path is empty"
        case .addressInUse(let path): return "another server is already listening on \(path)"
        case .pathOccupied(let path): return "\(path) exists and is not a socket; not replacing it"
        case .system(let operation, let code):
            return "\(operation) failed: \(String(cString: strerror(code))) (errno \(code))"
        case .notStartable: return "the server was already started (a stopped server cannot restart)"
        }
    }
}

/// Small wrappers over the BSD socket calls for AF_UNIX / SOCK_SEQPACKET.
enum UnixSeqpacket {
    static let seqpacket = Int32(SOCK_SEQPACKET.rawValue)

    /// Sets O_NONBLOCK and FD_CLOEXEC (accept4/pipe2 are not visible from Swift's Glibc).
    static func makeNonBlockingCloseOnExec(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }

    /// A `sockaddr_un` for `path`, or a typed error when the path cannot fit.
    static func address(for path: String) throws -> sockaddr_un {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty else { throw ATTSocketError.emptyPath }
        var address = sockaddr_un()
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { throw ATTSocketError.pathTooLong(path: path, maxBytes: capacity - 1) }
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// A new AF_UNIX seqpacket socket (close-on-exec, non-blocking when asked).
    static func makeSocket(nonBlocking: Bool) throws -> Int32 {
        var type = seqpacket | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        let fd = socket(AF_UNIX, type, 0)
        guard fd >= 0 else { throw ATTSocketError.system(operation: "socket", errno: errno) }
        return fd
    }

    /// Connects a blocking seqpacket socket to `path`.
    static func connect(to path: String) throws -> Int32 {
        var address = try address(for: path)
        let fd = try makeSocket(nonBlocking: false)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result != 0 {
            let code = errno
            close(fd)
            throw ATTSocketError.system(operation: "connect", errno: code)
        }
        return fd
    }

    /// A listening, non-blocking seqpacket socket bound at `path`. A stale socket file (no
    /// one accepting) is replaced; a live one or a non-socket file is an error.
    static func listen(at path: String, backlog: Int32) throws -> Int32 {
        var address = try address(for: path)
        var info = stat()
        if lstat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFSOCK else { throw ATTSocketError.pathOccupied(path: path) }
            if let probe = try? connect(to: path) {
                close(probe)
                throw ATTSocketError.addressInUse(path: path)
            }
            unlink(path)
        }
        let fd = try makeSocket(nonBlocking: true)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if bound != 0 {
            let code = errno
            close(fd)
            throw ATTSocketError.system(operation: "bind \(path)", errno: code)
        }
        if Glibc.listen(fd, backlog) != 0 {
            let code = errno
            close(fd)
            unlink(path)
            throw ATTSocketError.system(operation: "listen", errno: code)
        }
        return fd
    }
}
