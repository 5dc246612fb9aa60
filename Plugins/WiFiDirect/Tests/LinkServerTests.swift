import Foundation
import XCTest
import YaokPluginKit
@testable import YaokTransportWiFiDirect

/// The group's TCP side over real loopback sockets: the server and the phone client.
final class LinkServerTests: XCTestCase {
    let hub = TestIdentity(1)
    let phone = TestIdentity(2)

    func started(_ extra: (inout LinkServer.Settings) -> Void = { _ in }) throws -> (LinkServer, Recorder) {
        var s = LinkServer.Settings(host: "127.0.0.1", port: 0)
        extra(&s)
        let server = LinkServer(identity: hub, settings: s, firstLinkID: 40)
        let r = Recorder()
        server.events = r.serverEvents
        try server.start()
        addTeardownBlock { server.stop() }
        return (server, r)
    }

    func testPhoneLinksUpAsEndpointAndRecordsCrossBothWaysInOrder() throws {
        let (server, r) = try started()
        let client = try WiFiDirectClient(host: "127.0.0.1", port: server.port, identity: phone)
        XCTAssertEqual(client.hub.signingKey, hub.signingKey)
        XCTAssertEqual(client.hub.role, .hub)
        r.wait("link up") { $0.ups.count == 1 }
        let up = try XCTUnwrap(r.ups.first)
        XCTAssertEqual(up.id, 40)
        XCTAssertEqual(up.peerSigningKey, phone.signingKey)
        XCTAssertEqual(up.peerKXKey, phone.kxKey)
        XCTAssertEqual(up.peerRole, .endpoint)
        XCTAssertEqual(up.mtu, 65_511, "the largest frame one sealed record carries")
        XCTAssertEqual(up.cost, 5)

        let sizes = [0, 1, 100, LinkServer.mtu - 3, 3, 40_000]
        let toHub = sizes.enumerated().map { TLVRecord(.bundle, value: [UInt8](repeating: UInt8($0.offset), count: $0.element)).encoded }
        for f in toHub { try client.send(f) }
        r.wait("frames at the hub") { $0.frames.count == toHub.count }
        XCTAssertEqual(r.frames.map(\.0), toHub)
        XCTAssertTrue(r.frames.allSatisfy { $0.1 == 40 })

        for f in toHub.reversed() { try server.send(f, to: 40) }
        var got: [[UInt8]] = []
        while got.count < toHub.count, let f = try client.receive(timeout: 5) { got.append(f) }
        XCTAssertEqual(got, toHub.reversed())

        try client.ping() // answered inside the server; not a frame for the host
        XCTAssertThrowsError(try server.send([1, 0, 0], to: 7)) { XCTAssertEqual($0 as? TransportError, .unknownLink(7)) }
        XCTAssertThrowsError(try server.send([UInt8](repeating: 0, count: 65_539), to: 40)) {
            XCTAssertEqual($0 as? TransportError, .frameTooLarge(size: 65_539, mtu: LinkServer.mtu))
        }
        client.close()
        r.wait("link down on goodbye") { $0.downs.count == 1 }
        XCTAssertEqual(r.downs.first?.0, 40)
        XCTAssertEqual(server.snapshot.counters.framesIn, UInt64(toHub.count), "the ping is not counted")
    }

    func testAHubRoleIsRefusedAndJunkBeforeTheHandshakeDisconnects() throws {
        let (server, r) = try started()
        // The peer's side of the handshake may finish before the hub judges its role, so the
        // client can be built; either way the hub closes it and never reports a link.
        if let intruder = try? WiFiDirectClient(host: "127.0.0.1", port: server.port, identity: TestIdentity(3), role: .hub, connectTimeout: 3) {
            XCTAssertThrowsError(try intruder.receive(timeout: 3), "the hub closes a peer proving role hub")
        }
        r.wait("refusal counted") { _ in server.snapshot.counters.refusedRole == 1 }
        XCTAssertTrue(r.ups.isEmpty)

        let fd = try TCPSockets.connect(host: "127.0.0.1", port: server.port, timeoutMs: 2_000)
        defer { close(fd) }
        try WiFiDirectClient.write(fd, TLVRecord(.bundle, value: [1, 2, 3]).encoded)
        var decoder = TLVStreamDecoder(), ready: [[UInt8]] = []
        // The hub sends nothing before the phone's hello (no signature, no bytes for a stranger) and closes.
        XCTAssertThrowsError(try WiFiDirectClient.readFrame(fd, &decoder, &ready, timeoutMs: 3_000))
        XCTAssertTrue(ready.isEmpty)
        XCTAssertEqual(server.snapshot.counters.handshakeFailures, 1)
    }

    func testASilentLinkIsClosedAfterTheReadTimeout() throws {
        let (server, r) = try started { $0.readTimeoutMs = 600 }
        let client = try WiFiDirectClient(host: "127.0.0.1", port: server.port, identity: phone)
        r.wait("link up") { $0.ups.count == 1 }
        r.wait("link down", timeout: 5) { $0.downs.count == 1 }
        XCTAssertTrue(r.downs[0].1.contains("read_timeout_s"), r.downs[0].1)
        XCTAssertThrowsError(try client.receive(timeout: 3), "the hub said goodbye")
    }

    func testConnectToANonListeningPortFailsFastWithAReason() throws {
        let (server, _) = try started()
        let port = server.port
        server.stop()
        XCTAssertThrowsError(try WiFiDirectClient(host: "127.0.0.1", port: port, identity: phone, connectTimeout: 2)) {
            XCTAssertTrue("\($0)".contains("cannot connect"), "\($0)")
        }
    }

    /// A burst over `max_frames_per_second` is held back and delivered in order at the limit, not
    /// dropped; the phone is not disconnected when it stops in time.
    func testABurstOverTheFrameRateIsDeliveredLateButComplete() throws {
        let (server, r) = try started { $0.maxFramesPerSecond = 100; $0.rateLimitDisconnectMs = 5_000 }
        let client = try WiFiDirectClient(host: "127.0.0.1", port: server.port, identity: phone)
        r.wait("link up") { $0.ups.count == 1 }
        let frames = (0..<250).map { TLVRecord(.bundle, value: [UInt8(truncatingIfNeeded: $0), UInt8($0 >> 8)]).encoded }
        let t0 = Date()
        for f in frames { try client.send(f) }
        r.wait("the first second's worth at once", timeout: 5) { $0.frames.count >= 100 }
        XCTAssertLessThan(r.frames.count, 250, "not all at once: the rest is held back")
        r.wait("all 250, paced", timeout: 10) { $0.frames.count == 250 }
        // 100 in the bucket, 150 more at 100/s: at least about 1.5 s.
        XCTAssertGreaterThan(Date().timeIntervalSince(t0), 1.3)
        XCTAssertEqual(r.frames.map(\.0), frames, "in order, none lost")
        XCTAssertTrue(r.downs.isEmpty)
        XCTAssertEqual(server.snapshot.counters.rateLimited, 1)
        XCTAssertTrue(r.logs.contains { $0.hasPrefix("warning: ") && $0.contains("rate-limited") }, "\(r.logs)")
        // The phone behaves again: it is still linked and heard.
        try client.send(frames[0])
        r.wait("one more") { $0.frames.count == 251 }
        XCTAssertEqual(server.snapshot.counters.rateLimitDisconnects, 0)
    }

    /// A phone flooding records is held at the limit, then disconnected with the reason logged.
    func testAPhoneThatKeepsFloodingIsDisconnectedWithAReason() throws {
        let (server, r) = try started { $0.maxFramesPerSecond = 100; $0.rateLimitDisconnectMs = 1_500 }
        let client = try WiFiDirectClient(host: "127.0.0.1", port: server.port, identity: phone)
        r.wait("link up") { $0.ups.count == 1 }
        let frame = TLVRecord(.bundle, value: [1, 2, 3]).encoded
        let t0 = Date()
        let flooding = DispatchSemaphore(value: 0)
        Thread {
            while (try? client.send(frame)) != nil {} // blocks when the hub stops reading; fails once it closes
            flooding.signal()
        }.start()
        r.wait("link down for the rate", timeout: 15) { $0.downs.count == 1 }
        let elapsed = Date().timeIntervalSince(t0)
        XCTAssertEqual(flooding.wait(timeout: .now() + 10), .success, "the phone's sends fail once the hub has closed")
        let reason = r.downs[0].1
        XCTAssertTrue(reason.contains("more than 100 records/s for 1.5 s (max_frames_per_second); disconnected"), reason)
        XCTAssertGreaterThanOrEqual(elapsed, 1.5, "held back for rate_limit_disconnect_s before the disconnect")
        // Delivered no faster than the limit: the bucket (100) plus 100/s, however fast it sent.
        let delivered = r.frames.count
        XCTAssertLessThanOrEqual(Double(delivered), 100 + 100 * elapsed + 5, "\(delivered) records in \(elapsed) s")
        XCTAssertGreaterThanOrEqual(delivered, 100)
        XCTAssertTrue(r.logs.contains { $0.hasPrefix("warning: ") && $0.contains("max_frames_per_second); disconnected") }, "\(r.logs)")
        XCTAssertEqual(server.snapshot.counters.rateLimitDisconnects, 1)
        XCTAssertEqual(server.snapshot.links, 0)
        client.close()
    }

    /// Benchmark (printed, not asserted): 1 MB of 1 KB TLV records from phone to hub over loopback.
    func testBenchmarkOneMegabyteStream() throws {
        let (server, r) = try started()
        let client = try WiFiDirectClient(host: "127.0.0.1", port: server.port, identity: phone)
        r.wait("link up") { $0.ups.count == 1 }
        let frame = TLVRecord(.bundle, value: [UInt8](repeating: 7, count: 1021)).encoded
        let t0 = Date()
        for _ in 0..<1024 { try client.send(frame) }
        r.wait("1 MB at the hub", timeout: 30) { $0.frames.count == 1024 }
        let s = Date().timeIntervalSince(t0)
        print("BENCH wifidirect loopback: 1 MB in 1024 records: \(String(format: "%.1f", s * 1000)) ms, \(String(format: "%.1f", 8 / s)) Mbit/s")
    }
}
