import HubTestSupport
import Foundation
import XCTest
@testable import YaokHubCore
import YaokTesting

/// The hub's Prometheus endpoint, scraped over a real TCP connection.
final class MetricsEndpointTests: XCTestCase {
    static func freeTCPPort() -> UInt16 { TestSupport.freePort(type: Int32(SOCK_STREAM.rawValue)) }

    static func get(port: UInt16, path: String) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { throw NSError(domain: "connect", code: Int(errno)) }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }

    func testMetricsEndpointServesTransportAndQueueFigures() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let port = Self.freeTCPPort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: HubProcessTests.freePort())
            .replacingOccurrences(of: "router:\n", with: "metrics:\n  enabled: true\n  listen: 127.0.0.1:\(port)\nrouter:\n")
        let hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()
        var text = ""
        try Wait.until(timeout: 10, "metrics endpoint answers") {
            text = (try? Self.get(port: port, path: "/metrics")) ?? ""
            return text.contains("200")
        }
        XCTAssertTrue(text.contains("yaok_transport_up{transport=\"udp\",kind=\"udp\"} 1"), text)
        XCTAssertTrue(text.contains("yaok_transport_links{transport=\"udp\",kind=\"udp\"} 0"), text)
        XCTAssertTrue(text.contains("yaok_transport_frames_total{transport=\"udp\",kind=\"udp\",direction=\"in\"}"), text)
        XCTAssertTrue(text.contains("yaok_queue_bundles{state=\"queued\"} 0"), text)
        XCTAssertTrue(text.contains("# TYPE yaok_router_refused_total counter"), text)
        let notFound = try Self.get(port: port, path: "/secrets")
        XCTAssertTrue(notFound.hasPrefix("HTTP/1.1 404") || notFound.hasPrefix("HTTP/1.0 404"), notFound)
    }
}
