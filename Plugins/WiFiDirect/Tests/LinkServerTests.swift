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
        XCTAssertEqual(up.mtu, 65_538)
        XCTAssertEqual(up.cost, 5)

        let sizes = [0, 1, 100, 65_535, 3, 40_000]
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
            XCTAssertEqual($0 as? TransportError, .frameTooLarge(size: 65_539, mtu: 65_538))
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
        // The challenge comes first, then the server closes.
        XCTAssertEqual(try WiFiDirectClient.readFrame(fd, &decoder, &ready, timeoutMs: 3_000)?.first, FrameType.linkChallenge.rawValue)
        XCTAssertThrowsError(try WiFiDirectClient.readFrame(fd, &decoder, &ready, timeoutMs: 3_000))
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
