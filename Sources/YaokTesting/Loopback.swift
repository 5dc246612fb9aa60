import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Real sockets on loopback for tests: what a browser, a scraper or a peer would open, with
/// every wait bounded.
public enum Loopback {
    /// Why a loopback exchange failed.
    public struct Failure: Error, CustomStringConvertible {
        public var what: String
        public var errno: Int32
        public var description: String { "\(what): \(String(cString: strerror(errno)))" }
    }

    /// A port on 127.0.0.1 that was free a moment ago (`type`: SOCK_STREAM or SOCK_DGRAM).
    public static func freePort(type: Int32 = Int32(SOCK_STREAM.rawValue)) -> UInt16 {
        let fd = socket(AF_INET, type, 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return UInt16(bigEndian: addr.sin_port)
    }

    /// A TCP socket connected to 127.0.0.1:`port`, each receive bounded by `receiveTimeout`
    /// seconds; the caller closes it.
    public static func connectTCP(port: Int, receiveTimeout: Int = 10) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(what: "socket", errno: errno) }
        var tv = timeval(tv_sec: receiveTimeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            close(fd)
            throw Failure(what: "connect to 127.0.0.1:\(port)", errno: e)
        }
        return fd
    }

    /// Sends every byte (no SIGPIPE); false if the peer went away first.
    @discardableResult
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }

    /// Reads until the peer closes, `done` says the bytes so far are enough, or `seconds` pass.
    /// `error` is the errno of a failed or timed-out receive (nil when it ended cleanly).
    public static func receive(_ fd: Int32, seconds: Double = 10, done: ([UInt8]) -> Bool = { _ in false }) -> (bytes: [UInt8], error: Int32?) {
        var data = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 { return (data, errno) }
            if n == 0 { return (data, nil) }
            data += chunk[0..<n]
            if done(data) { return (data, nil) }
        }
        return (data, ETIMEDOUT)
    }
}
