#if canImport(Glibc)
import Glibc
#endif
import YaokPluginKit

/// Small POSIX TCP helpers (IPv4). Plain sockets and one poll thread, like the mesh plugin:
/// no event-loop library inside a dlopen'd plugin.
enum TCPSockets {
    static func errorText(_ e: Int32) -> String { String(cString: strerror(e)) }

    static func sockaddrIn(_ host: String, _ port: UInt16) -> sockaddr_in? {
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &sa.sin_addr) == 1 else { return nil }
        return sa
    }

    static func describe(_ sa: sockaddr_in) -> String {
        var addr = sa.sin_addr
        var buf = [CChar](repeating: 0, count: 16)
        inet_ntop(AF_INET, &addr, &buf, 16)
        return "\(String(cString: buf)):\(UInt16(bigEndian: sa.sin_port))"
    }

    static func setNonBlocking(_ fd: Int32) { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK) }

    static func setInt(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) {
        var v = value
        setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size))
    }

    /// A non-blocking listener on host:port (port 0 = any).
    static func listen(host: String, port: UInt16) throws -> (fd: Int32, port: UInt16) {
        guard var sa = sockaddrIn(host, port) else { throw TransportError.failed("\(host) is not an IPv4 address") }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setInt(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0, Glibc.listen(fd, 64) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot listen on TCP \(host):\(port): \(errorText(e))")
        }
        setNonBlocking(fd)
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return (fd, UInt16(bigEndian: bound.sin_port))
    }

    /// Accepts one waiting connection (non-blocking), or nil.
    static func accept(_ listener: Int32) -> (Int32, String)? {
        var sa = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let fd = withUnsafeMutablePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(listener, $0, &len) } }
        guard fd >= 0 else { return nil }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        setNonBlocking(fd)
        setInt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        return (fd, describe(sa))
    }

    /// A blocking connect with a timeout (non-blocking connect + poll), then back to blocking.
    static func connect(host: String, port: UInt16, timeoutMs: Int32) throws -> Int32 {
        guard var sa = sockaddrIn(host, port) else { throw TransportError.failed("\(host) is not an IPv4 address") }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setNonBlocking(fd)
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        if rc != 0 {
            guard errno == EINPROGRESS else {
                let e = errno
                close(fd)
                throw TransportError.failed("cannot connect to \(host):\(port): \(errorText(e))")
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            guard poll(&pfd, 1, timeoutMs) == 1 else {
                close(fd)
                throw TransportError.failed("connecting to \(host):\(port) timed out after \(timeoutMs / 1000) s")
            }
            var e: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len)
            guard e == 0 else {
                close(fd)
                throw TransportError.failed("cannot connect to \(host):\(port): \(errorText(e))")
            }
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) & ~O_NONBLOCK)
        setInt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        return fd
    }
}
