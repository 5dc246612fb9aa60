#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Thin POSIX socket helpers for the IP transports: plain sockets driven by one poll thread
/// keep a dlopen'd plugin small (no event-loop library inside it). IPv4 and IPv6 alike.
public enum PosixSocket {
    /// `strerror` text for an errno.
    public static func errorText(_ e: Int32) -> String { String(cString: strerror(e)) }

    public static func setNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK)
    }

    public static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) {
        var v = value
        setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size))
    }

    public static func bind(_ fd: Int32, _ address: IPEndpoint) -> Int32 {
        address.withSockaddr { Glibc.bind(fd, $0, $1) }
    }

    /// The socket's own address (`getsockname`).
    public static func localAddress(_ fd: Int32) -> IPEndpoint? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &ss) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return rc == 0 ? IPEndpoint(storage: ss) : nil
    }

    /// A non-blocking TCP listener. An IPv6 listener is IPv6-only (an IPv4 one is separate).
    public static func listen(on address: IPEndpoint) throws -> Int32 {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        if address.isIPv6 { setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1) }
        guard bind(fd, address) == 0, Glibc.listen(fd, 64) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot listen on TCP \(address): \(errorText(e))")
        }
        setNonBlocking(fd)
        return fd
    }

    /// Starts a non-blocking TCP connect. The caller polls for POLLOUT and checks ``pendingError(_:)``.
    public static func startConnect(to address: IPEndpoint) throws -> Int32 {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setNonBlocking(fd)
        setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        let rc = address.withSockaddr { Glibc.connect(fd, $0, $1) }
        if rc != 0 && errno != EINPROGRESS {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot connect to \(address): \(errorText(e))")
        }
        return fd
    }

    /// The socket's pending error (`SO_ERROR`), 0 when connected.
    public static func pendingError(_ fd: Int32) -> Int32 {
        var e: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 else { return errno }
        return e
    }

    /// A connected blocking TCP socket, or an error naming the address; the connect is bounded by `timeoutMs`.
    public static func connect(to address: IPEndpoint, timeoutMs: Int32) throws -> Int32 {
        let fd = try startConnect(to: address)
        var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        var rc: Int32
        repeat { rc = poll(&pfd, 1, timeoutMs) } while rc < 0 && errno == EINTR
        guard rc == 1 else {
            close(fd)
            throw TransportError.failed("connecting to \(address) timed out after \(Double(timeoutMs) / 1000) s")
        }
        let e = pendingError(fd)
        guard e == 0 else {
            close(fd)
            throw TransportError.failed("cannot connect to \(address): \(errorText(e))")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) & ~O_NONBLOCK)
        return fd
    }

    /// Accepts one waiting connection (non-blocking, close-on-exec, no Nagle), or nil.
    public static func accept(_ listener: Int32) -> (Int32, IPEndpoint)? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = withUnsafeMutablePointer(to: &ss) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(listener, $0, &len) }
        }
        guard fd >= 0 else { return nil }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        guard let remote = IPEndpoint(storage: ss) else {
            close(fd)
            return nil
        }
        setNonBlocking(fd)
        setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        return (fd, remote)
    }

    /// Writes all of `bytes` to a blocking socket (never raising SIGPIPE).
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw TransportError.system(call: "send", errno: errno)
            }
            offset += n
        }
    }
}
