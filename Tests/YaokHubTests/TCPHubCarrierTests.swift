import Foundation
import Synchronization
import XCTest
import YaokCrypto
@testable import YaokEndpoint
import YaokPluginKit
import YaokWire
#if canImport(Glibc)
import Glibc
import YaokTesting
#endif

/// The TCP hub carrier (`yaok --hub tcp://` and `p2p://`) against a real loopback hub that
/// proves itself and then goes silent, as one does when its Wi-Fi Direct group vanishes.
final class TCPHubCarrierTests: XCTestCase {
    func testSilentHubIsDroppedAndFoundAgainBeforeReconnecting() throws {
        let hub = SilentHub(identity: Identity.generate())
        try hub.start()
        defer { hub.stop() }

        let events = EventLog()
        let rejoins = EventLog()
        let carrier = TCPHubCarrier(host: "127.0.0.1", port: hub.port, identity: Identity.generate(), rejoin: {
            rejoins.append("rejoin")
            return ("127.0.0.1", hub.port)
        }, log: { events.append("log: \($0)") }, silenceLimit: 2)
        carrier.onUp = { _ in events.append("up") }
        carrier.onDown = { events.append("down: \($0)") }
        carrier.start()
        defer { carrier.stop() }

        // Up, then declared lost for silence, then found again and up on a second connection.
        try Wait.until(timeout: 20, "a second link after the silent one") {
            events.items.filter { $0 == "up" }.count >= 2
        }
        let items = events.items
        XCTAssertTrue(items.contains("down: the hub has not answered for 2 s"), "\(items)")
        XCTAssertTrue(items.contains { $0.hasPrefix("log: p2p: link to the hub lost") }, "\(items)")
        XCTAssertGreaterThanOrEqual(rejoins.items.count, 1)
        XCTAssertGreaterThanOrEqual(hub.connections, 2)
    }

    func testPlainTCPHubIsNotRejoined() throws {
        let hub = SilentHub(identity: Identity.generate())
        try hub.start()
        defer { hub.stop() }
        let events = EventLog()
        let carrier = TCPHubCarrier(host: "127.0.0.1", port: hub.port, identity: Identity.generate(),
                                    log: { events.append("log: \($0)") }, silenceLimit: 2)
        carrier.onDown = { events.append("down: \($0)") }
        carrier.start()
        defer { carrier.stop() }
        try Wait.until(timeout: 20, "the carrier to reconnect") { hub.connections >= 2 }
        XCTAssertFalse(events.items.contains { $0.hasPrefix("log:") }, "\(events.items)")
    }
}

private final class EventLog: Sendable {
    private let list = Mutex<[String]>([])
    func append(_ s: String) { list.withLock { $0.append(s) } }
    var items: [String] { list.withLock { $0 } }
}

/// Accepts TCP connections on 127.0.0.1, completes the link handshake as a hub, then reads
/// and ignores everything (no pongs).
// @unchecked: `fd` and `port` set in start before its threads exist, then read-only; the rest under `lock`.
private final class SilentHub: @unchecked Sendable {
    let identity: Identity
    private var fd: Int32 = -1
    private(set) var port: UInt16 = 0
    private let lock = NSLock()
    private var accepted = 0
    private var running = true
    var connections: Int { lock.withLock { accepted } }

    init(identity: Identity) { self.identity = identity }

    func start() throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &sa) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && listen(fd, 8) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard ok else { throw TransportError.system(call: "bind", errno: errno) }
        port = UInt16(bigEndian: sa.sin_port)
        let listener = fd
        Thread.detachNewThread { [self] in
            while lock.withLock({ running }) {
                let c = accept(listener, nil, nil)
                if c < 0 { return }
                lock.withLock { accepted += 1 }
                Thread.detachNewThread { [self] in serve(c) }
            }
        }
    }

    func stop() {
        lock.withLock { running = false }
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }

    private func serve(_ c: Int32) {
        defer { close(c) }
        var tv = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let hs = SecureLink(identity: identity, role: .hub, isInitiator: false, channel: .stream)
        func write(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { send(c, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
        var decoder = TLVStreamDecoder()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while lock.withLock({ running }) {
            let n = buffer.withUnsafeMutableBytes { recv(c, $0.baseAddress, $0.count, 0) }
            if n == 0 { return }
            if n < 0 { if errno == EAGAIN || errno == EINTR { continue } else { return } }
            guard let frames = try? decoder.feed(buffer[0..<n]) else { return }
            for frame in frames where !hs.isEstablished {
                guard let record = try? TLVRecord(parsing: frame), let outputs = try? hs.receive(record) else { continue }
                for case .send(let reply) in outputs { write(reply) }
            }
        }
    }
}
