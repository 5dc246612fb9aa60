import XCTest
import YaokPluginKit
@testable import YaokMeshPlugin

final class MeshSettingsTests: XCTestCase {
    func testDefaults() throws {
        let s = try MeshTestSupport.settings([:])
        XCTAssertEqual(s.listen, IPEndpoint(host: "0.0.0.0", port: 7813))
        XCTAssertEqual(s.interfaces, [])
        XCTAssertEqual(s.peers, [])
        XCTAssertTrue(s.discovery)
        XCTAssertEqual(s.multicastGroup, "239.255.89.79")
        XCTAssertEqual(s.beaconPort, 7812)
        XCTAssertEqual(s.beaconIntervalMs, 5_000)
        XCTAssertEqual(s.maxSessions, 32)
        XCTAssertEqual(s.queueFrames, 1000)
        XCTAssertEqual(s.queueBytes, 16 << 20)
        XCTAssertEqual(s.cost, 20)
        XCTAssertEqual(s.keepaliveMs, 15_000)
        XCTAssertEqual(s.idleTimeoutMs, 60_000)
    }

    func testEveryKeyIsRead() throws {
        let s = try MeshTestSupport.settings([
            "interfaces": .list([.string("eth0"), .string("wlan0")]), "listen": .string("10.0.0.1:9000"),
            "peers": .list([.string("10.0.0.2:7813")]), "discovery": .bool(false), "multicast_group": .string("239.1.2.3"),
            "beacon_port": .int(9001), "beacon_interval_s": .double(0.5), "max_sessions": .int(4), "queue_frames": .int(5),
            "queue_mb": .int(2), "cost": .int(7), "keepalive_s": .int(2), "idle_timeout_s": .int(9), "max_frames_per_second": .int(100),
        ])
        XCTAssertEqual(s.interfaces, ["eth0", "wlan0"])
        XCTAssertEqual(s.listen.description, "10.0.0.1:9000")
        XCTAssertEqual(s.peers.map(\.description), ["10.0.0.2:7813"])
        XCTAssertFalse(s.discovery)
        XCTAssertEqual(s.multicastGroup, "239.1.2.3")
        XCTAssertEqual(s.beaconPort, 9001)
        XCTAssertEqual(s.beaconIntervalMs, 500)
        XCTAssertEqual(s.maxSessions, 4)
        XCTAssertEqual(s.queueFrames, 5)
        XCTAssertEqual(s.queueBytes, 2 << 20)
        XCTAssertEqual(s.cost, 7)
        XCTAssertEqual(s.keepaliveMs, 2_000)
        XCTAssertEqual(s.idleTimeoutMs, 9_000)
        XCTAssertEqual(s.maxFramesPerSecond, 100)
    }

    func assertError(_ values: [String: ConfigValue], key: String, contains text: String, line: UInt = #line) {
        XCTAssertThrowsError(try MeshTestSupport.settings(values), line: line) { error in
            guard let e = error as? ConfigError else { return XCTFail("not a ConfigError: \(error)", line: line) }
            XCTAssertEqual(e.keyPath, "transports.mesh.\(key)", line: line)
            XCTAssertNotNil(e.line, "the error names the line", line: line)
            XCTAssertTrue(e.message.contains(text), "\(e)", line: line)
        }
    }

    func testBadValuesNameTheKey() {
        assertError(["listne": .string("x")], key: "listne", contains: "unknown key")
        assertError(["listen": .string("10.0.0.1")], key: "listen", contains: "host:port")
        assertError(["peers": .list([.string("hub-b:7813")])], key: "peers", contains: "host:port")
        assertError(["peers": .string("10.0.0.2:7813")], key: "peers", contains: "list of strings")
        assertError(["multicast_group": .string("10.1.2.3")], key: "multicast_group", contains: "multicast")
        assertError(["beacon_port": .int(0)], key: "beacon_port", contains: "out of range")
        assertError(["max_sessions": .int(0)], key: "max_sessions", contains: "out of range")
        assertError(["interfaces": .list([.string("an-interface-name-too-long")])], key: "interfaces", contains: "interface name")
        assertError(["keepalive_s": .int(30), "idle_timeout_s": .int(20)], key: "idle_timeout_s", contains: "longer than keepalive_s")
        assertError(["discovery": .string("yes")], key: "discovery", contains: "true or false")
    }
}
