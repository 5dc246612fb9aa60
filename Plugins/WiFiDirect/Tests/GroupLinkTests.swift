import Foundation
import XCTest
import YaokPluginKit
@testable import YaokWiFiDirectPlugin
import YaokTesting

/// The group's TCP side over real loopback sockets: the kit's stream engine as the transport
/// configures it, and the kit's client as a phone uses it.
final class GroupLinkTests: XCTestCase {
    let hub = TestLinkIdentity(seed: 1)
    let phone = TestLinkIdentity(seed: 2)

    /// The transport's own engine settings for a group (defaults of the config keys), adjusted.
    func started(_ extra: (inout SecureStreamEngine.Settings) -> Void = { _ in }) throws -> (SecureStreamEngine, LinkEventRecorder) {
        var s = WiFiDirectTransport.linkSettings(try WiFiDirectSettings(config: TestConfig.section([:]), instanceName: "wifi-direct"), firstLinkID: 40)
        extra(&s)
        let r = LinkEventRecorder()
        let server = SecureStreamEngine(identity: hub, settings: s, events: r)
        try server.start()
        address = try server.listen(on: IPEndpoint(host: "127.0.0.1", port: 0))
        addTeardownBlock { server.stop() }
        return (server, r)
    }
    var address = IPEndpoint(host: "127.0.0.1", port: 0)

    func testPhoneLinksUpAsEndpointAndRecordsCrossBothWaysInOrder() throws {
        let (server, r) = try started()
        let client = try SecureStreamClient(to: address, identity: phone)
        XCTAssertEqual(client.peer.signingKey, hub.signingKey)
        XCTAssertEqual(client.peer.role, .hub)
        r.wait("link up") { $0.ups.count == 1 }
        let up = try XCTUnwrap(r.ups.first)
        XCTAssertEqual(up.id, 40)
        XCTAssertEqual(up.peerSigningKey, phone.signingKey)
        XCTAssertEqual(up.peerKXKey, phone.kxKey)
        XCTAssertEqual(up.peerRole, .endpoint)
        XCTAssertEqual(up.mtu, 65_511, "the largest frame one sealed record carries")
        XCTAssertEqual(up.cost, 5)

        let sizes = [0, 1, 100, SecureStreamEngine.mtu - 3, 3, 40_000]
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
            XCTAssertEqual($0 as? TransportError, .frameTooLarge(size: 65_539, mtu: SecureStreamEngine.mtu))
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
        if let intruder = try? SecureStreamClient(to: address, identity: TestLinkIdentity(seed: 3), role: .hub, connectTimeout: 3) {
            XCTAssertThrowsError(try intruder.receive(timeout: 3), "the hub closes a peer proving role hub")
        }
        r.wait("refusal counted") { _ in server.snapshot.counters.refusedRole == 1 }
        XCTAssertTrue(r.ups.isEmpty)

        let fd = try PosixSocket.connect(to: address, timeoutMs: 2_000)
        defer { close(fd) }
        try PosixSocket.writeAll(fd, TLVRecord(.bundle, value: [1, 2, 3]).encoded)
        var decoder = TLVStreamDecoder(), ready: [[UInt8]] = []
        // The hub sends nothing before the phone's hello (no signature, no bytes for a stranger) and closes.
        XCTAssertThrowsError(try SecureStreamClient.readRecord(fd, &decoder, &ready, timeoutMs: 3_000))
        XCTAssertTrue(ready.isEmpty)
        XCTAssertEqual(server.snapshot.counters.handshakeFailures, 1)
    }

    func testASilentLinkIsClosedAfterTheReadTimeout() throws {
        let (_, r) = try started { $0.idleTimeoutMs = 600 }
        let client = try SecureStreamClient(to: address, identity: phone)
        r.wait("link up") { $0.ups.count == 1 }
        r.wait("link down", timeout: 5) { $0.downs.count == 1 }
        XCTAssertTrue(r.downs[0].1.contains("read_timeout_s"), r.downs[0].1)
        XCTAssertThrowsError(try client.receive(timeout: 3), "the hub said goodbye")
    }

    func testConnectToANonListeningPortFailsFastWithAReason() throws {
        let (server, _) = try started()
        server.stop()
        XCTAssertThrowsError(try SecureStreamClient(to: address, identity: phone, connectTimeout: 2)) {
            XCTAssertTrue("\($0)".contains("cannot connect"), "\($0)")
        }
    }

    /// A burst over `max_frames_per_second` is held back and delivered in order at the limit, not
    /// dropped; the phone is not disconnected when it stops in time.
    func testABurstOverTheFrameRateIsDeliveredLateButComplete() throws {
        let (server, r) = try started { $0.maxFramesPerSecond = 100; $0.rateLimitDisconnectMs = 5_000 }
        let client = try SecureStreamClient(to: address, identity: phone)
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
        XCTAssertEqual(server.snapshot.counters.throttled, 1)
        XCTAssertTrue(r.logs.contains { $0.hasPrefix("warning: ") && $0.contains("rate-limited") }, "\(r.logs)")
        // The phone behaves again: it is still linked and heard.
        try client.send(frames[0])
        r.wait("one more") { $0.frames.count == 251 }
        XCTAssertEqual(server.snapshot.counters.rateLimitDisconnects, 0)
    }

    /// A phone flooding records is held at the limit, then disconnected with the reason logged.
    func testAPhoneThatKeepsFloodingIsDisconnectedWithAReason() throws {
        let (server, r) = try started { $0.maxFramesPerSecond = 100; $0.rateLimitDisconnectMs = 1_500 }
        let client = try SecureStreamClient(to: address, identity: phone)
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
        XCTAssertTrue(reason.contains("more than 100 frames/s for 1.5 s (max_frames_per_second); disconnected"), reason)
        XCTAssertGreaterThanOrEqual(elapsed, 1.5, "held back for rate_limit_disconnect_s before the disconnect")
        // Delivered no faster than the limit: the bucket (100) plus 100/s, however fast it sent.
        let delivered = r.frames.count
        XCTAssertLessThanOrEqual(Double(delivered), 100 + 100 * elapsed + 5, "\(delivered) records in \(elapsed) s")
        XCTAssertGreaterThanOrEqual(delivered, 100)
        r.wait("the warning") { $0.logs.contains { $0.hasPrefix("warning: ") && $0.contains("max_frames_per_second); disconnected") } }
        XCTAssertEqual(server.snapshot.counters.rateLimitDisconnects, 1)
        XCTAssertEqual(server.snapshot.links.count, 0)
        client.close()
    }

    /// One link per phone key: a phone that reconnects (its group blinked, its app restarted)
    /// replaces its old session, and both connections were dialled by the phone, so the newer wins.
    func testAPhoneThatReconnectsReplacesItsOldLink() throws {
        let (server, r) = try started()
        let first = try SecureStreamClient(to: address, identity: phone)
        r.wait("first link up") { $0.ups.count == 1 }
        let second = try SecureStreamClient(to: address, identity: phone)
        r.wait("second link up, first down") { $0.ups.count == 2 && $0.downs.count == 1 }
        XCTAssertEqual(r.downs[0].0, 40)
        XCTAssertTrue(r.downs[0].1.contains("replaced by session 41"), r.downs[0].1)
        XCTAssertEqual(server.snapshot.links.map(\.id), [41])
        XCTAssertEqual(server.snapshot.counters.duplicatesClosed, 1)
        XCTAssertThrowsError(try first.receive(timeout: 3), "the old session was closed with a goodbye")
        try server.send(TLVRecord(.bundle, value: [9]).encoded, to: 41)
        XCTAssertEqual(try second.receive(timeout: 3), TLVRecord(.bundle, value: [9]).encoded)
    }

    /// Connections that never say hello cost a slot each, but one address gets at most four.
    func testOneAddressHoldsAtMostFourSessions() throws {
        let (server, r) = try started()
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        for _ in 0..<4 { fds.append(try PosixSocket.connect(to: address, timeoutMs: 2_000)) }
        r.wait("four sessions open") { _ in server.snapshot.sessions == 4 }
        let fifth = try PosixSocket.connect(to: address, timeoutMs: 2_000)
        fds.append(fifth)
        var decoder = TLVStreamDecoder(), ready: [[UInt8]] = []
        XCTAssertThrowsError(try SecureStreamClient.readRecord(fifth, &decoder, &ready, timeoutMs: 3_000), "the fifth is closed at once")
        XCTAssertEqual(server.snapshot.counters.refusedFull, 1)
        XCTAssertEqual(server.snapshot.sessions, 4)
        r.wait("the refusal logged") { $0.logs.contains { $0.hasPrefix("warning: ") && $0.contains("4 sessions from that address is the limit") } }
    }

    /// A dial to an address that answers with another key than the one expected (a beacon's)
    /// never comes up: the key is proven, not claimed, and the wrong one is refused.
    func testADialThatReachesAnotherKeyIsRefused() throws {
        var hubSettings = SecureStreamEngine.Settings(kind: "tcp", peerRoles: [.hub], cost: 1, metricPrefix: "test")
        hubSettings.threadName = "test-b"
        let b = SecureStreamEngine(identity: TestLinkIdentity(seed: 5), settings: hubSettings, events: LinkEventRecorder())
        try b.start()
        addTeardownBlock { b.stop() }
        let bAddress = try b.listen(on: IPEndpoint(host: "127.0.0.1", port: 0))
        let r = LinkEventRecorder()
        let a = SecureStreamEngine(identity: TestLinkIdentity(seed: 6), settings: hubSettings, events: r)
        try a.start()
        addTeardownBlock { a.stop() }
        try a.dial(bAddress, expectedKey: TestLinkIdentity(seed: 7).signingKey)
        r.wait("the refusal") { $0.logs.contains { $0.contains("not the expected") } }
        XCTAssertTrue(r.ups.isEmpty)
        XCTAssertEqual(a.snapshot.counters.handshakeFailures, 1)
        // Without an expectation the same address links up.
        try a.dial(bAddress)
        r.wait("link up") { $0.ups.count == 1 }
        XCTAssertEqual(r.ups[0].peerSigningKey, TestLinkIdentity(seed: 5).signingKey)
        XCTAssertEqual(r.ups[0].kind, "tcp")
    }

    /// Benchmark (printed, not asserted): 1 MB of 1 KB TLV records from phone to hub over loopback.
    func testBenchmarkOneMegabyteStream() throws {
        let (_, r) = try started()
        let client = try SecureStreamClient(to: address, identity: phone)
        r.wait("link up") { $0.ups.count == 1 }
        let frame = TLVRecord(.bundle, value: [UInt8](repeating: 7, count: 1021)).encoded
        let t0 = Date()
        for _ in 0..<1024 { try client.send(frame) }
        r.wait("1 MB at the hub", timeout: 30) { $0.frames.count == 1024 }
        let s = Date().timeIntervalSince(t0)
        print("BENCH wifidirect loopback: 1 MB in 1024 records: \(String(format: "%.1f", s * 1000)) ms, \(String(format: "%.1f", 8 / s)) Mbit/s")
    }
}
