import CYaokPlugin
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokTesting
import YaokWire

/// The example plugin as the hub runs it: the built `libyaok-plugin-udp.so` loaded through
/// the C ABI by ``PluginTestHost``, over real UDP sockets on loopback. This is the pattern
/// Docs/plugin-guide.md shows plugin authors.
final class UDPPluginTests: XCTestCase {
    /// A started instance listening on 127.0.0.1.
    func hub(port: Int, extra: [String: Any] = [:]) throws -> PluginTestHost {
        let host = try PluginTestHost(plugin: "udp")
        var config: [String: Any] = ["enabled": true, "listen": "127.0.0.1:\(port)"]
        for (k, v) in extra { config[k] = v }
        if let error = host.create(config: config) { XCTFail("create: \(error)") }
        try host.start()
        return host
    }

    /// Two started instances, B configured with A as its peer, once both report the link up:
    /// each link's ID, and what each side learnt of the other (key, role) from the handshake.
    func linkedPair() throws -> (a: PluginTestHost, b: PluginTestHost, linkA: UInt64, linkB: UInt64,
                                 keyAtA: [UInt8], keyAtB: [UInt8], roleAtB: UInt32) {
        let (portA, portB) = (Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue))), Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue))))
        let a = try hub(port: portA)
        let markA = a.mark
        let b = try hub(port: portB, extra: ["peers": ["127.0.0.1:\(portA)"]])
        let (linkB, roleB, keyB) = try b.wait("B's link to A", after: 0) { e -> (UInt64, UInt32, [UInt8])? in
            if case .linkUp(let id, let role, let key, _) = e { return (id, role, key) }
            return nil
        }
        let (linkA, keyA) = try a.wait("A's link to B", after: markA) { e -> (UInt64, [UInt8])? in
            if case .linkUp(let id, _, let key, _) = e { return (id, key) }
            return nil
        }
        return (a, b, linkA, linkB, keyA, keyB, roleB)
    }

    func testTwoHubsLinkWithProvenKeysAndCarryFramesBothWays() throws {
        let (a, b, linkA, linkB, keyA, keyB, roleB) = try linkedPair()
        let markA = a.mark
        // Each side learns the other's identity from the handshake, never from a claim.
        XCTAssertEqual(keyB, a.identity.signingKey)
        XCTAssertEqual(roleB, YAOK_PEER_HUB.rawValue)
        XCTAssertEqual(keyA, b.identity.signingKey)

        let hello = TLVRecord(.offer, value: Array("from B".utf8)).encoded
        XCTAssertNil(b.send(hello, link: linkB))
        let atA = try a.wait("B's frame at A", after: markA) { e -> [UInt8]? in
            if case .frame(let id, let bytes) = e, id == linkA { return bytes }
            return nil
        }
        XCTAssertEqual(atA, hello)
        let reply = TLVRecord(.offer, value: Array("from A".utf8)).encoded
        let markB = b.mark
        XCTAssertNil(a.send(reply, link: linkA))
        let atB = try b.wait("A's frame at B", after: markB) { e -> [UInt8]? in
            if case .frame(let id, let bytes) = e, id == linkB { return bytes }
            return nil
        }
        XCTAssertEqual(atB, reply)
        // A link the plugin never reported: refused as gone (the router routes around it), by code.
        let unknown = a.sendWithResult(hello, link: 999_999)
        XCTAssertEqual(unknown.code, Int32(YAOK_SEND_NO_LINK.rawValue), unknown.error)
        // Over the link's MTU: refused as too large, so the router never offers it there again.
        let huge = TLVRecord(.offer, value: [UInt8](repeating: 1, count: 65_000)).encoded
        XCTAssertEqual(a.sendWithResult(huge, link: linkA).code, Int32(YAOK_SEND_TOO_LARGE.rawValue))
    }

    /// A burst several times larger than one wake-up's take (`receiveBurst`) arrives whole and
    /// in order: the receive loop drains what is queued before it polls again, and what it
    /// leaves for the next wake-up is not lost.
    func testABurstLargerThanOneWakeUpArrivesWholeAndInOrder() throws {
        let (a, b, linkA, linkB, _, _, _) = try linkedPair()
        let markA = a.mark
        let count = 3 * 64 + 7
        for i in 0..<count { XCTAssertNil(b.send(TLVRecord(.offer, value: Array("frame \(i)".utf8)).encoded, link: linkB)) }
        var arrived: [String] = []
        _ = try a.wait("the burst's last frame", after: markA) { e -> Bool? in
            guard case .frame(let id, let bytes) = e, id == linkA, let r = try? TLVRecord(parsing: bytes) else { return nil }
            arrived.append(String(decoding: r.value, as: UTF8.self))
            return arrived.count == count ? true : nil
        }
        XCTAssertEqual(arrived, (0..<count).map { "frame \($0)" })
    }

    func testEveryKitErrorHasItsABICodeAndUnknownCodesMeanFailed() {
        XCTAssertEqual(TransportError.queueFull("x").sendResult.rawValue, Int32(YAOK_SEND_QUEUE_FULL.rawValue))
        XCTAssertEqual(TransportError.unknownLink(3).sendResult.rawValue, Int32(YAOK_SEND_NO_LINK.rawValue))
        XCTAssertEqual(TransportError.notRunning.sendResult, .noLink)
        XCTAssertEqual(TransportError.frameTooLarge(size: 9, mtu: 8).sendResult.rawValue, Int32(YAOK_SEND_TOO_LARGE.rawValue))
        XCTAssertEqual(TransportError.failed("x").sendResult.rawValue, Int32(YAOK_SEND_FAILED.rawValue))
        XCTAssertNil(SendResult(code: Int32(YAOK_SEND_OK.rawValue)))
        XCTAssertEqual(SendResult(code: 99), .failed, "a code from a newer plugin that this host does not know")
    }

    func testStatusSaysRunningAndNamesTheAddress() throws {
        let port = Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue)))
        let a = try hub(port: port)
        let status = a.statusJSON()
        XCTAssertEqual(status["state"] as? String, "running")
        XCTAssertTrue((status["reason"] as? String ?? "").contains("127.0.0.1:\(port)"), "\(status)")
    }

    func testABadSectionIsRefusedNamingTheKeyAndLine() throws {
        for (config, key) in [(["enabled": true, "max_sessions": 0] as [String: Any], "max_sessions"),
                              (["enabled": true, "listen": "nowhere"], "listen"),
                              (["enabled": true, "colour": "red"], "colour")] {
            let host = try PluginTestHost(plugin: "udp")
            let error = try XCTUnwrap(host.create(config: config), "\(config) was accepted")
            XCTAssertTrue(error.contains("transports.udp.\(key)"), error)
            XCTAssertTrue(error.contains("line"), error)
        }
    }

    func testGarbageAndForgedFramesFromTheNetworkMakeNoLink() throws {
        let port = Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue)))
        let a = try hub(port: port)
        // An attacker without keys: random bytes, then a record in clear outside any handshake.
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var to = sockaddr_in()
        to.sin_family = sa_family_t(AF_INET)
        to.sin_port = in_port_t(UInt16(port).bigEndian)
        to.sin_addr.s_addr = inet_addr("127.0.0.1")
        for datagram in [Random.bytes(200), TLVRecord(.offer, value: [1, 2, 3]).encoded] {
            _ = datagram.withUnsafeBytes { d in
                withUnsafePointer(to: &to) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, d.baseAddress, d.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            }
        }
        XCTAssertTrue(Wait.poll(timeout: 5) {
            Int((a.statusJSON()["details"] as? [String: Any])?["dropped_datagrams"] as? String ?? "0") ?? 0 >= 2
        }, "\(a.statusJSON())")
        XCTAssertEqual(a.mark, 0, "no link and no frame came of it")
        XCTAssertEqual(a.statusJSON()["links"] as? Int, 0)
    }

    /// A hello that comes twice (duplicated on the way, or resent after a cookie a blind spoofer
    /// forged) gets the same reply: a new one would leave the initiator, established on the
    /// first, with keys the plugin no longer holds, and the link would never come up.
    func testARepeatedHelloGetsTheSameReplyAndTheLinkComesUp() throws {
        let port = Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue)))
        let a = try hub(port: port)
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var to = sockaddr_in()
        to.sin_family = sa_family_t(AF_INET)
        to.sin_port = in_port_t(UInt16(port).bigEndian)
        to.sin_addr.s_addr = inet_addr("127.0.0.1")
        func exchange(_ datagram: [UInt8]) throws -> TLVRecord {
            _ = datagram.withUnsafeBytes { d in
                withUnsafePointer(to: &to) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, d.baseAddress, d.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            }
            var buffer = [UInt8](repeating: 0, count: 2048)
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { throw XCTSkip("no answer") }
            return try TLVRecord(parsing: Array(buffer[0..<n]))
        }
        let phone = SecureLink(identity: TestLinkIdentity(seed: 0x42), role: .endpoint, isInitiator: true, channel: .datagram)
        let cookie = try exchange(try phone.hello())
        guard case .send(let withCookie)? = try phone.receive(cookie).first else { return XCTFail("no hello with the cookie") }
        let first = try exchange(withCookie)
        let again = try exchange(withCookie)
        XCTAssertEqual(first.type, FrameType.linkReply.rawValue)
        XCTAssertEqual(again, first, "the same hello gets the same reply")
        let out = try phone.receive(first)
        guard case .send(let identity) = out[0] else { return XCTFail("no identity") }
        _ = identity.withUnsafeBytes { d in
            withUnsafePointer(to: &to) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, d.baseAddress, d.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        _ = try a.wait("the link up", after: 0) { e -> Bool? in if case .linkUp = e { return true } else { return nil } }
        XCTAssertEqual((a.statusJSON()["details"] as? [String: Any])?["hello_repeats"] as? String, "1")
    }

    /// `stop` returns only after a callback the receive thread is in has returned: the hub
    /// destroys the instance next, and a frame reported after that would use a freed table
    /// (it crashed the test process once). The host holds a frame callback half a second.
    func testStopWaitsForTheCallbackTheReceiveThreadIsIn() throws {
        let (a, b, _, linkB, _, _, _) = try linkedPair()
        let began = a.holdNextFrame(for: 0.5)
        XCTAssertNil(b.send(TLVRecord(.offer, value: Array("held".utf8)).encoded, link: linkB))
        XCTAssertEqual(began.wait(timeout: .now() + 10), .success, "the frame reached A's host")
        a.stop()
        XCTAssertEqual(a.callbacksAfterStop, 0, "a callback was still running when stop returned")
    }

    func testALinkGoesDownWhenThePeerStops() throws {
        let (portA, portB) = (Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue))), Int(Loopback.freePort(type: Int32(SOCK_DGRAM.rawValue))))
        let a = try hub(port: portA, extra: ["idle_timeout_s": 3, "keepalive_s": 1])
        let b = try hub(port: portB, extra: ["peers": ["127.0.0.1:\(portA)"], "idle_timeout_s": 3, "keepalive_s": 1])
        let linkA = try a.wait("A's link", after: 0) { e -> UInt64? in
            if case .linkUp(let id, _, _, _) = e { return id }
            return nil
        }
        _ = try b.wait("B's link", after: 0) { e -> Bool? in
            if case .linkUp = e { return true }
            return nil
        }
        let mark = a.mark
        b.stop()
        _ = try a.wait("A's link down", after: mark, timeout: 15) { e -> Bool? in
            if case .linkDown(let id, _) = e, id == linkA { return true }
            return nil
        }
    }
}
