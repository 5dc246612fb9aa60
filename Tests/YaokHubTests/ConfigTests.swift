import XCTest
import YaokPluginKit
@testable import YaokHubCore
@testable import YaokSupervision

final class ConfigTests: XCTestCase {
    func testEmbeddedDefaultMatchesConfigFileAndParses() throws {
        let file = try String(contentsOfFile: TestSupport.repoRoot + "/config/hub.yaml", encoding: .utf8)
        XCTAssertEqual(DefaultConfig.yaml.trimmingCharacters(in: .whitespacesAndNewlines),
                       file.trimmingCharacters(in: .whitespacesAndNewlines),
                       "config/hub.yaml and the embedded default must be the same text")
        let config = try DefaultConfig.load()
        XCTAssertEqual(config.router.policy, "epidemic")
        XCTAssertEqual(config.store.sizeCapBytes, 500_000_000)
        XCTAssertEqual(config.transport(named: "udp")?.enabled, true)
        XCTAssertEqual(config.transport(named: "wifi-direct")?.kind, "wifidirect")
        XCTAssertEqual(config.transport(named: "relay")?.enabled, false)
        // YAML 1.1 would read this as a base-60 integer.
        XCTAssertEqual(config.transport(named: "udp")?.section.value("listen"), .string("0.0.0.0:7811"))
    }

    func testWrongTypeNamesKeyPathAndLine() {
        let yaml = """
        hub:
          name: test
        router:
          hop_limit: lots
        """
        XCTAssertThrowsError(try HubConfig.parse(yaml: yaml, source: "t.yaml")) { error in
            let e = error as? ConfigError
            XCTAssertEqual(e?.keyPath, "router.hop_limit")
            XCTAssertEqual(e?.line, 4)
            XCTAssertTrue("\(error)".contains("expected an integer"), "\(error)")
        }
    }

    func testUnknownKeyIsRejectedWithLine() {
        let yaml = "hub:\n  name: x\n  colour: blue\n"
        XCTAssertThrowsError(try HubConfig.parse(yaml: yaml, source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "hub.colour")
            XCTAssertEqual((error as? ConfigError)?.line, 3)
        }
    }

    /// Host-level keys of a transport section (the plugin never sees them): the plugin
    /// process's capabilities by kind (the kinds the in-tree plugins export) and memory bound.
    func testPluginProcessCapabilitiesAndMemoryLimitPerSection() throws {
        let yaml = """
        transports:
          udp:
            enabled: true
          ble:
            enabled: true
          wifi-direct:
            enabled: true
            plugin: wifidirect
          mesh:
            enabled: true
            capabilities: [net_raw]
            memory_limit_mb: 256

        """
        let c = try HubConfig.parse(yaml: yaml, source: "t")
        func section(_ n: String) throws -> HubConfig.TransportSection { try XCTUnwrap(c.transport(named: n)) }
        XCTAssertEqual(try section("udp").capabilities, [])
        XCTAssertEqual(try section("ble").capabilities, ["net_admin", "net_raw"])
        XCTAssertEqual(try section("wifi-direct").capabilities, ["net_admin", "net_bind_service", "net_raw", "setgid", "setuid", "kill"])
        XCTAssertEqual(try section("wifi-direct").capabilityMask, 1 << 5 | 1 << 6 | 1 << 7 | 1 << 10 | 1 << 12 | 1 << 13)
        XCTAssertEqual(try section("mesh").capabilities, ["net_raw"])
        XCTAssertEqual(try section("mesh").memoryLimitMB, 256)
        XCTAssertEqual(try section("udp").memoryLimitMB, 1024)
        XCTAssertNil(try section("mesh").section.value("capabilities"), "the plugin never sees host-level keys")
        XCTAssertNil(try section("mesh").section.value("memory_limit_mb"))
        XCTAssertThrowsError(try HubConfig.parse(yaml: "transports:\n  udp:\n    enabled: true\n    capabilities: [sys_admin]\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "transports.udp.capabilities")
            XCTAssertEqual((error as? ConfigError)?.line, 4)
            XCTAssertTrue("\(error)".contains("unknown capability"), "\(error)")
        }
        XCTAssertThrowsError(try HubConfig.parse(yaml: "transports:\n  udp:\n    enabled: true\n    memory_limit_mb: 10\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "transports.udp.memory_limit_mb")
        }
    }

    func testOutOfRangeAndBadChoice() {
        XCTAssertThrowsError(try HubConfig.parse(yaml: "router:\n  hop_limit: 999\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "router.hop_limit")
            XCTAssertTrue("\(error)".contains("out of range"))
        }
        XCTAssertThrowsError(try HubConfig.parse(yaml: "router:\n  policy: flood\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "router.policy")
            XCTAssertEqual((error as? ConfigError)?.line, 2)
        }
    }

    func testTransportSectionRequiresEnabled() {
        let yaml = "transports:\n  udp:\n    listen: 0.0.0.0:1\n"
        XCTAssertThrowsError(try HubConfig.parse(yaml: yaml, source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "transports.udp.enabled")
        }
    }

    func testYAMLSyntaxErrorHasLine() {
        let yaml = "hub:\n  name: [unclosed\n  x: y\n"
        XCTAssertThrowsError(try HubConfig.parse(yaml: yaml, source: "t")) { error in
            XCTAssertNotNil((error as? ConfigError)?.line, "\(error)")
            XCTAssertTrue("\(error)".contains("YAML syntax error"))
        }
    }

    func testTransportSectionIsFlattenedWithLinesAndTypes() throws {
        let yaml = """
        transports:
          udp:
            enabled: true
            listen: "127.0.0.1:7000"
            peers: [a, b]
            nested:
              depth: 3
              ratio: 0.5
        """
        let config = try HubConfig.parse(yaml: yaml, source: "t")
        let section = try XCTUnwrap(config.transport(named: "udp")).section
        XCTAssertEqual(section.value("listen"), .string("127.0.0.1:7000"))
        XCTAssertEqual(section.value("peers"), .list([.string("a"), .string("b")]))
        XCTAssertEqual(section.value("nested.depth"), .int(3))
        XCTAssertEqual(section.value("nested.ratio"), .double(0.5))
        XCTAssertEqual(section.line(of: "nested.depth"), 7)
        // The JSON that crosses the ABI decodes to the same section.
        XCTAssertEqual(try ConfigSection(json: section.json()), section)
        XCTAssertThrowsError(try section.int("listen", default: 1)) { error in
            XCTAssertEqual("\(error)", "transports.udp.listen (line 4): expected integer, got string \"127.0.0.1:7000\"")
        }
    }
}

/// `router.hub_trust` and friends, and the host-level `peer_roles` of a transport.
final class HubTrustConfigTests: XCTestCase {
    func testTrustKeysParseAndBadValuesNameKeyAndLine() throws {
        let key = String(repeating: "ab", count: 32)
        let c = try HubConfig.parse(yaml: "router:\n  hub_trust: network\n  network_key: \(key)\n  trusted_hubs: [\"\(key)\"]\n  hub_certificate: hub.cert\n", source: "t")
        XCTAssertEqual(c.router.hubTrust.mode, .network)
        XCTAssertEqual(c.router.hubTrust.networkKey, [UInt8](repeating: 0xab, count: 32))
        XCTAssertEqual(c.router.hubTrust.trustedHubs, [[UInt8](repeating: 0xab, count: 32)])
        XCTAssertEqual(c.router.hubTrust.certificateFile, "hub.cert")
        XCTAssertEqual(try HubConfig.parse(yaml: "hub:\n  name: x\n", source: "t").router.hubTrust.mode, .open, "absent: open, as before")
        XCTAssertEqual(try DefaultConfig.load().router.hubTrust.mode, .list, "the packaged default trusts no hub by default")

        // Every transport's config JSON carries the trusted keys (a session table may favour them).
        let withMesh = try HubConfig.parse(yaml: "router:\n  trusted_hubs: [\"\(key)\"]\ntransports:\n  mesh:\n    enabled: true\n", source: "t")
        let passed = try ConfigSection(json: try XCTUnwrap(withMesh.transport(named: "mesh")).section.json())
        XCTAssertEqual(passed.trustedHubKeys, [[UInt8](repeating: 0xab, count: 32)])
        XCTAssertEqual(passed.path, "transports.mesh")
        XCTAssertThrowsError(try ConfigSection(json: #"{"path":"transports.mesh","values":{},"trusted_hubs":["abc"]}"#)) {
            XCTAssertTrue("\($0)".contains("trusted hub key"), "\($0)")
        }

        let cases: [(String, String, Int)] = [
            ("router:\n  hub_trust: everyone\n", "router.hub_trust", 2),
            ("router:\n  hub_trust: network\n", "router.hub_trust", 2),
            ("router:\n  policy: epidemic\n  trusted_hubs: [\"abc\"]\n", "router.trusted_hubs", 3),
            ("router:\n  network_key: 1234\n", "router.network_key", 2),
            // 64 characters that Int(radix: 16) would half-accept ("+f" is 15): not hex digits.
            ("router:\n  network_key: \"\(String(repeating: "+f", count: 32))\"\n", "router.network_key", 2),
            ("transports:\n  udp:\n    enabled: true\n    peer_roles: [relay]\n", "transports.udp.peer_roles", 4),
            ("transports:\n  udp:\n    enabled: true\n    peer_roles: [phone]\n", "transports.udp.peer_roles", 4),
            ("transports:\n  udp:\n    enabled: true\n    peer_roles: []\n", "transports.udp.peer_roles", 4),
        ]
        for (yaml, path, line) in cases {
            XCTAssertThrowsError(try HubConfig.parse(yaml: yaml, source: "t"), yaml) { error in
                XCTAssertEqual((error as? ConfigError)?.keyPath, path, "\(error)")
                XCTAssertEqual((error as? ConfigError)?.line, line, "\(error)")
            }
        }
    }

    func testPeerRolesDefaultsAndTheKeyStaysOutOfThePluginSection() throws {
        let yaml = """
        transports:
          udp:
            enabled: true
            peer_roles: [endpoint, hub]
          ble:
            enabled: true
          mesh:
            enabled: true
          wifi-direct:
            enabled: true
            plugin: wifidirect
        """
        let c = try HubConfig.parse(yaml: yaml, source: "t")
        XCTAssertEqual(c.transport(named: "udp")?.peerRoles, [.endpoint, .hub])
        XCTAssertNil(c.transport(named: "udp")?.section.value("peer_roles"), "plugins reject keys they do not know")
        XCTAssertEqual(c.transport(named: "ble")?.peerRoles, [.endpoint])
        XCTAssertEqual(c.transport(named: "wifi-direct")?.peerRoles, [.endpoint])
        XCTAssertEqual(c.transport(named: "mesh")?.peerRoles, [.hub])
        let packaged = try DefaultConfig.load()
        XCTAssertEqual(packaged.transport(named: "udp")?.peerRoles, [.endpoint])
        XCTAssertEqual(packaged.transport(named: "mesh")?.peerRoles, [.hub])
    }

    /// Only a console reachable from the network without TLS is warned about: its password
    /// would cross the network in clear.
    func testAConsoleOnTheNetworkWithoutTLSIsWarnedAbout() throws {
        func warnings(_ console: String) throws -> [String] {
            try HubConfig.parse(yaml: "console:\n  enabled: true\n" + console, source: "t").warnings
        }
        let open = try warnings("  listen: 0.0.0.0:8480\n")
        XCTAssertEqual(open.count, 1)
        XCTAssertTrue(open.first?.hasPrefix("console.listen (line 3): 0.0.0.0:8480 without `tls: true`") == true, "\(open)")
        XCTAssertTrue(try warnings("  listen: 0.0.0.0:8480\n  tls: true\n").isEmpty)
        XCTAssertTrue(try warnings("  listen: 127.0.0.1:8480\n").isEmpty)
        XCTAssertTrue(try warnings("  listen: \"[::1]:8480\"\n").isEmpty)
        XCTAssertTrue(try warnings("").isEmpty, "the default listens on 127.0.0.1")
        XCTAssertTrue(try HubConfig.parse(yaml: "console:\n  enabled: false\n  listen: 0.0.0.0:8480\n", source: "t").warnings.isEmpty)
    }
}
