import Foundation
import Synchronization

/// A UDP port that takes datagrams and never answers (a node that is silent, not refused).
public final class UDPSink: Sendable {
    private let fd: Int32
    public let port: UInt16
    /// Datagrams received, and whether the receive loop should go on.
    private let state = Mutex((count: 0, open: true))
    private let finished = DispatchSemaphore(value: 0)

    public init() throws {
        let s = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        fd = s
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr)
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { throw NSError(domain: "UDPSink", code: 1) }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) } }
        port = UInt16(bigEndian: sa.sin_port)
        var tv = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        startLoop()
    }

    private func startLoop() {
        let sockFD = fd, finished = self.finished
        Thread { [weak self] in
            var buf = [UInt8](repeating: 0, count: 2048)
            while self?.state.withLock({ $0.open }) ?? false {
                let n = buf.withUnsafeMutableBytes { recv(sockFD, $0.baseAddress, $0.count, 0) }
                if n > 0 { self?.state.withLock { $0.count += 1 } }
            }
            finished.signal()
        }.start()
    }

    public var received: Int { state.withLock { $0.count } }

    public func close() {
        guard state.withLock({ s -> Bool in defer { s.open = false }; return s.open }) else { return }
        // The receive loop sees `open` false within its 100 ms receive timeout and ends.
        _ = finished.wait(timeout: .now() + 2)
        Glibc.close(fd)
    }
}
