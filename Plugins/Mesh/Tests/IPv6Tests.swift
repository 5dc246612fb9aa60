import Foundation
import XCTest
import YaokPluginKit
@testable import YaokMeshPlugin
import YaokTesting

/// IPv6: addresses with scopes, the settings that turn it on, interface selection, and
/// sessions over real IPv6 loopback TCP. Link-local discovery between hubs needs two
/// interfaces on one link and runs in the netns test (Tests/netns/ipv6.sh).
final class IPv6Tests: XCTestCase {
    func testAddressesParseAndPrintWithTheirScope() throws {
        let loopback = try XCTUnwrap(IPEndpoint(parsing: "[::1]:7813"))
        XCTAssertEqual(loopback.host, "::1")
        XCTAssertEqual(loopback.port, 7813)
        XCTAssertTrue(loopback.isIPv6)
        XCTAssertFalse(loopback.isLinkLocal6)
        XCTAssertEqual(loopback.description, "[::1]:7813")

        // Scope by interface name (lo always exists) and by index; the text is canonical.
        let loIndex = if_nametoindex("lo")
        XCTAssertNotEqual(loIndex, 0)
        let byName = try XCTUnwrap(IPEndpoint(parsing: "[FE80:0::1%lo]:7813"))
        XCTAssertEqual(byName, IPEndpoint(host: "fe80::1", port: 7813, scopeID: loIndex))
        XCTAssertTrue(byName.isLinkLocal6)
        XCTAssertEqual(byName.description, "[fe80::1%lo]:7813")
        XCTAssertEqual(IPEndpoint(parsing: "[fe80::1%\(loIndex)]:7813"), byName)
        XCTAssertEqual(IPEndpoint(parsing: byName.description), byName, "description parses back")

        let v4 = try XCTUnwrap(IPEndpoint(parsing: "10.0.0.2:7813"))
        XCTAssertFalse(v4.isIPv6)
        XCTAssertEqual(v4.family, AF_INET)
        XCTAssertEqual(IPEndpoint(parsing: "localhost:1")?.host, "127.0.0.1")

        for bad in ["::1:7813", "[::1:7813", "[]:7813", "[fe80::1%nosuch0]:7813", "[fe80::1%]:7813", "[10.0.0.1]:7813",
                    "[::1]:70000", "[::1]", "[fe80::1%aaaaaaaaaaaaaaaaaaaa]:1", "[zz::1]:1"] {
            XCTAssertNil(IPEndpoint(parsing: bad), bad)
        }
    }

    func testKernelAddressesRoundTripWithScope() throws {
        let address = IPEndpoint(host: "fe80::1234:5678", port: 4242, scopeID: 7)
        let back: IPEndpoint? = address.withSockaddr { sa, len in
            XCTAssertEqual(Int(len), MemoryLayout<sockaddr_in6>.size)
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(len))) }
            return IPEndpoint(storage: storage)
        }
        XCTAssertEqual(back, address)

        // An IPv4-mapped IPv6 peer is reported as plain IPv4.
        var mapped = sockaddr_in6()
        mapped.sin6_family = sa_family_t(AF_INET6)
        mapped.sin6_port = UInt16(99).bigEndian
        inet_pton(AF_INET6, "::ffff:10.1.2.3", &mapped.sin6_addr)
        XCTAssertEqual(IPEndpoint(mapped), IPEndpoint(host: "10.1.2.3", port: 99))
    }

    func testSettingsForIPv6() throws {
        let defaults = try MeshTestSupport.settings([:])
        XCTAssertTrue(defaults.ipv6)
        XCTAssertEqual(defaults.multicastGroup6, "ff02::5961:6f6b")

        let s = try MeshTestSupport.settings([
            "ipv6": .bool(false), "ipv6_multicast_group": .string("ff02::1:2"),
            "peers": .list([.string("[fe80::2%lo]:7813"), .string("[2001:db8::1]:7813"), .string("10.0.0.2:7813")]),
        ])
        XCTAssertFalse(s.ipv6)
        XCTAssertEqual(s.multicastGroup6, "ff02::1:2")
        XCTAssertEqual(s.peers.map(\.description), ["[fe80::2%lo]:7813", "[2001:db8::1]:7813", "10.0.0.2:7813"])

        func refused(_ values: [String: ConfigValue], mentioning key: String, _ text: String) {
            XCTAssertThrowsError(try MeshTestSupport.settings(values)) { error in
                let message = "\(error)"
                XCTAssertTrue(message.contains(key) && message.contains(text), message)
            }
        }
        refused(["ipv6_multicast_group": .string("ff05::1")], mentioning: "ipv6_multicast_group", "ff02::/16")
        refused(["ipv6_multicast_group": .string("239.1.2.3")], mentioning: "ipv6_multicast_group", "not an IPv6 link-local multicast")
        refused(["peers": .list([.string("[fe80::2]:7813")])], mentioning: "peers", "needs its interface")
        refused(["peers": .list([.string("[fe80::2%nosuch0]:7813")])], mentioning: "peers", "expected host:port")
        refused(["listen": .string("[::]:7813")], mentioning: "listen", "IPv6 listener takes the same port")
        refused(["ipv6": .string("maybe")], mentioning: "ipv6", "expected true or false")
    }

    func testInterfaceSelectionTakesLinkLocalOnlyInterfacesWhenIPv6IsOn() {
        let all = [
            NetworkInterface(name: "lo", index: 1, ipv4: "127.0.0.1", isLoopback: true, supportsMulticast: false),
            NetworkInterface(name: "eth0", index: 2, ipv4: "10.0.0.1", linkLocal6: "fe80::1"),
            NetworkInterface(name: "mesh0", index: 3, linkLocal6: "fe80::3"),
            NetworkInterface(name: "down0", index: 4, linkLocal6: "fe80::4", isUp: false),
        ]
        XCTAssertEqual(NetworkInterface.select(named: [], from: all, ipv6: true).usable.map(\.name), ["eth0", "mesh0"])
        XCTAssertEqual(NetworkInterface.select(named: [], from: all, ipv6: false).usable.map(\.name), ["eth0"])
        let named = NetworkInterface.select(named: ["mesh0", "down0", "gone0"], from: all, ipv6: false)
        XCTAssertEqual(named.usable, [])
        XCTAssertEqual(named.missing, ["mesh0 (no IPv4 address)", "down0 (missing or down)", "gone0 (missing or down)"])
        XCTAssertEqual(NetworkInterface.select(named: ["mesh0"], from: all, ipv6: true).usable.map(\.index), [3])
    }

    func testTheKernelsInterfacesIncludeLoopbackOnce() {
        let lo = NetworkInterface.current().filter { $0.name == "lo" }
        XCTAssertEqual(lo.count, 1, "one entry per interface, whatever its address count")
        XCTAssertEqual(lo.first?.ipv4, "127.0.0.1")
        XCTAssertEqual(lo.first?.isLoopback, true)
        XCTAssertNil(lo.first?.linkLocal6, "::1 is not link-local")
    }

    func testHubsLinkOverIPv6AndCarryFrames() throws {
        let alice = TestLinkIdentity(seed: 11), bob = TestLinkIdentity(seed: 12)
        let ra = LinkEventRecorder(), rb = LinkEventRecorder()
        let b = MeshTestSupport.engine(bob, try MeshTestSupport.loopback(), rb)
        try b.start()
        addTeardownBlock { b.stop() }
        let port = try XCTUnwrap(b.listenAddress?.port)
        XCTAssertEqual(b.snapshot.listen6, "[::]:\(port)", "the IPv6 listener takes the IPv4 listener's port")
        let a = MeshTestSupport.engine(alice, try MeshTestSupport.settings([
            "listen": .string("127.0.0.1:0"), "discovery": .bool(false), "peers": .list([.string("[::1]:\(port)")]),
        ]), ra)
        try a.start()
        addTeardownBlock { a.stop() }
        ra.wait("a link at A") { $0.ups.count == 1 }
        rb.wait("a link at B") { $0.ups.count == 1 }
        let up = try XCTUnwrap(ra.snapshot.ups.first)
        XCTAssertEqual(up.remote, "[::1]:\(port)")
        XCTAssertEqual(up.peerSigningKey, bob.signingKey)
        XCTAssertTrue(try XCTUnwrap(rb.snapshot.ups.first?.remote).hasPrefix("[::1]:"), "B accepted on its IPv6 listener")
        let frames = (0..<50).map { TLVRecord(.bundle, value: [UInt8](repeating: UInt8($0), count: 100 + $0)).encoded }
        for f in frames { try a.send(f, to: up.id) }
        rb.wait("50 frames at B") { $0.frames.count == 50 }
        XCTAssertEqual(rb.snapshot.frames.map(\.0), frames)
    }

    func testIPv6OffOpensNoIPv6Listener() throws {
        let r = LinkEventRecorder()
        let e = MeshTestSupport.engine(TestLinkIdentity(seed: 13), try MeshTestSupport.loopback(extra: ["ipv6": .bool(false)]), r)
        try e.start()
        addTeardownBlock { e.stop() }
        XCTAssertNil(e.snapshot.listen6)
        let port = try XCTUnwrap(e.listenAddress?.port)
        XCTAssertThrowsError(try RawPeer(port: port, host: "::1"), "nothing listens on [::1]:\(port)")
        XCTAssertNoThrow(try RawPeer(port: port))
    }
}

/// Beacons heard over IPv4 and IPv6 from one hub: the dial address does not flip with the
/// arrival order, and moves only when the current address went quiet. Beacons are sent by
/// unicast to the beacon port (the engine's beacon sockets take any datagram on it).
final class DualStackBeaconTests: XCTestCase {
    let hub = TestLinkIdentity(seed: 21)
    let neighbour = TestLinkIdentity(seed: 22)

    func beacon(timestampMs: Int64) throws -> [UInt8] {
        try Beacon(signingKey: neighbour.signingKey, kxKey: neighbour.kxKey, tcpPort: 4321, timestampMs: timestampMs)
            .encoded(sign: neighbour.sign)
    }

    func send(_ bytes: [UInt8], to host: String, port: UInt16) { MeshTestSupport.sendDatagram(bytes, to: host, port: port) }

    func engine(intervalS: Double, _ recorder: LinkEventRecorder) throws -> (MeshEngine, UInt16) {
        let port = MeshTestSupport.freePort()
        let settings = try MeshTestSupport.settings([
            "listen": .string("127.0.0.1:0"), "interfaces": .list([.string("lo")]), "beacon_port": .int(Int(port)),
            "beacon_interval_s": .double(intervalS), "keepalive_s": .double(intervalS * 2), "idle_timeout_s": .double(intervalS * 5),
        ])
        let e = MeshTestSupport.engine(hub, settings, recorder)
        try e.start()
        addTeardownBlock { e.stop() }
        return (e, port)
    }

    func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func testAHubHeardBothWaysKeepsItsAddressWhileItIsHeard() throws {
        let r = LinkEventRecorder()
        let (e, port) = try engine(intervalS: 600, r)
        let t = now()
        send(try beacon(timestampMs: t), to: "127.0.0.1", port: port)
        r.wait("the hub heard over IPv4") { $0.logs.contains { $0.contains("heard hub") && $0.contains("127.0.0.1:4321") } }
        // The same round's copy over IPv6, then a newer round that arrives over IPv6 first.
        send(try beacon(timestampMs: t), to: "::1", port: port)
        send(try beacon(timestampMs: t + 1), to: "::1", port: port)
        r.wait("three beacons counted") { _ in e.snapshot.counters.beaconsReceived == 3 }
        XCTAssertFalse(r.snapshot.logs.contains { $0.contains("now beacons from") }, "\(r.snapshot.logs)")
        XCTAssertEqual(e.snapshot.counters.beaconsBad, 0)
    }

    func testAHubMovesToItsOtherAddressWhenTheCurrentOneGoesQuiet() throws {
        let r = LinkEventRecorder()
        let (_, port) = try engine(intervalS: 0.1, r)
        send(try beacon(timestampMs: now()), to: "127.0.0.1", port: port)
        r.wait("the hub heard over IPv4") { $0.logs.contains { $0.contains("heard hub") && $0.contains("127.0.0.1:4321") } }
        // Two beacon intervals (0.2 s) without a beacon from 127.0.0.1: the next one, over IPv6, moves it.
        Thread.sleep(forTimeInterval: 0.4)
        send(try beacon(timestampMs: now()), to: "::1", port: port)
        r.wait("the hub moved to [::1]") { $0.logs.contains { $0.contains("now beacons from [::1]:4321") } }
    }
}
