import Foundation
import Synchronization
import Logging
import XCTest
@testable import YaokHubCore
import YaokTesting

/// The /metrics endpoint over a real TCP socket, spoken to with raw bytes.
final class MetricsHTTPServerTests: XCTestCase {
    private var server: MetricsHTTPServer?

    override func tearDown() {
        server?.stop()
        server = nil
    }

    private func startServer(_ render: @escaping @Sendable () -> String) throws -> Int {
        let s = try MetricsHTTPServer(listen: "127.0.0.1:0", logger: Logger(label: "test"), idleTimeoutSeconds: 2, render: render)
        server = s
        let port = try s.start()
        XCTAssertGreaterThan(port, 0)
        XCTAssertEqual(s.boundPort, port)
        return port
    }

    /// Sends `request`, reads until the server closes (5 s receive timeout), returns the text.
    private func exchange(port: Int, _ request: String) throws -> String {
        let fd = try Loopback.connectTCP(port: port, receiveTimeout: 5)
        defer { close(fd) }
        XCTAssertTrue(Loopback.sendAll(fd, Array(request.utf8)))
        let reply = Loopback.receive(fd, seconds: 10)
        // A reset ends the reply like a close (the server drops garbage that way); a receive
        // timeout means the server never answered nor closed.
        if let e = reply.error, e == EAGAIN || e == ETIMEDOUT { XCTFail("no reply and no close within the timeout: errno \(e)") }
        return String(decoding: reply.bytes, as: UTF8.self)
    }

    func testGetMetricsReturnsRenderedText() throws {
        let text = "# TYPE yaok_transport_frames_in counter\nyaok_transport_frames_in{transport=\"udp\"} 3\n"
        let port = try startServer { text }
        let response = try exchange(port: port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n")
        XCTAssertTrue(response.hasPrefix("HTTP/1.1 200 OK\r\n"), response)
        XCTAssertTrue(response.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), response)
        XCTAssertTrue(response.contains("Content-Length: \(text.utf8.count)\r\n"), response)
        XCTAssertTrue(response.contains("Connection: close\r\n"), response)
        XCTAssertTrue(response.hasSuffix("\r\n\r\n" + text), response)
    }

    func testRenderIsCalledPerRequest() throws {
        let counter = RequestCounter()
        let port = try startServer { "hits \(counter.next())\n" }
        XCTAssertTrue(try exchange(port: port, "GET /metrics HTTP/1.1\r\n\r\n").hasSuffix("hits 1\n"))
        XCTAssertTrue(try exchange(port: port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").hasSuffix("hits 2\n"))
    }

    func testHeadHasNoBody() throws {
        let port = try startServer { "body\n" }
        let response = try exchange(port: port, "HEAD /metrics HTTP/1.1\r\n\r\n")
        XCTAssertTrue(response.hasPrefix("HTTP/1.1 200 OK\r\n"), response)
        XCTAssertTrue(response.contains("Content-Length: 5\r\n"), response)
        XCTAssertTrue(response.hasSuffix("\r\n\r\n"), response)
    }

    func testOtherPathsMethodsAndGarbageAreRefused() throws {
        let port = try startServer { "secret-free text\n" }
        XCTAssertTrue(try exchange(port: port, "GET / HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 404 "))
        let post = try exchange(port: port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        XCTAssertTrue(post.hasPrefix("HTTP/1.1 405 "), post)
        XCTAssertTrue(post.contains("Allow: GET, HEAD\r\n"), post)
        XCTAssertTrue(try exchange(port: port, "\u{1}\u{2}garbage\r\n\r\n").hasPrefix("HTTP/1.1 400 "))
        let huge = "GET /metrics HTTP/1.1\r\nX: " + String(repeating: "a", count: 20_000) + "\r\n\r\n"
        XCTAssertTrue(try exchange(port: port, huge).hasPrefix("HTTP/1.1 431 "))
    }

    func testIdleConnectionIsClosed() throws {
        let port = try startServer { "x\n" }
        // An incomplete request head: the server must close it after its 2 s idle timeout,
        // before our 5 s receive timeout, with no response.
        let response = try exchange(port: port, "GET /metrics HTTP/1.1\r\n")
        XCTAssertEqual(response, "")
    }

    func testListenAddressParsing() throws {
        XCTAssertTrue(try MetricsHTTPServer.parse(listen: "127.0.0.1:9478") == ("127.0.0.1", 9478))
        XCTAssertTrue(try MetricsHTTPServer.parse(listen: "[::1]:80") == ("::1", 80))
        for bad in ["", "127.0.0.1", ":9478", "127.0.0.1:", "127.0.0.1:70000", "::1:80", "[::1]80", "host:-1", "h:１２"] {
            XCTAssertThrowsError(try MetricsHTTPServer.parse(listen: bad), bad) { error in
                XCTAssertEqual(error as? MetricsHTTPError, .badListenAddress(bad))
            }
        }
    }

    func testSecondServerOnSamePortFailsWithBindError() throws {
        let port = try startServer { "" }
        let other = try MetricsHTTPServer(listen: "127.0.0.1:\(port)", logger: Logger(label: "test")) { "" }
        XCTAssertThrowsError(try other.start()) { error in
            guard case .bindFailed = error as? MetricsHTTPError else { return XCTFail("\(error)") }
        }
        other.stop()
    }

    func testStopClosesTheListener() throws {
        let port = try startServer { "x\n" }
        server?.stop()
        XCTAssertThrowsError(try exchange(port: port, "GET /metrics HTTP/1.1\r\n\r\n"))
    }
}

private final class RequestCounter: Sendable {
    private let n = Mutex(0)
    func next() -> Int { n.withLock { $0 += 1; return $0 } }
}
