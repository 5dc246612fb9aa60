import XCTest
import YaokPluginKit
@testable import YaokHubCore

final class ConfigEditorTests: XCTestCase {
    let yaml = """
    # top comment
    hub:
      name: t   # the name
    transports:
      # UDP for phones
      udp:
        enabled: true    # keep me
        listen: 127.0.0.1:7811
      relay:
        enabled: false
    """

    func testTogglingChangesOneValueAndKeepsComments() throws {
        let (text, config) = try ConfigEditor.settingTransport("udp", enabled: false, in: yaml, source: "t.yaml")
        XCTAssertEqual(config.transport(named: "udp")?.enabled, false)
        let before = yaml.components(separatedBy: "\n"), after = text.components(separatedBy: "\n")
        XCTAssertEqual(before.count, after.count)
        let changed = zip(before, after).filter { $0 != $1 }
        XCTAssertEqual(changed.count, 1)
        XCTAssertEqual(changed.first?.1, "    enabled: false    # keep me")
    }

    func testBrokenFileIsRefusedWithKeyAndLine() {
        let broken = yaml.replacingOccurrences(of: "name: t   # the name", with: "colour: red")
        XCTAssertThrowsError(try ConfigEditor.settingTransport("udp", enabled: false, in: broken, source: "t.yaml")) { error in
            guard case ConfigEditor.EditError.invalid(let e) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(e.keyPath, "hub.colour")
            XCTAssertEqual(e.line, 3)
        }
    }

    func testUnknownTransportAndFlowStyleAreRefused() {
        XCTAssertThrowsError(try ConfigEditor.settingTransport("ble", enabled: true, in: yaml, source: "t"))
        let flow = "transports:\n  udp: {enabled: true, listen: 127.0.0.1:1}\n"
        XCTAssertThrowsError(try ConfigEditor.settingTransport("udp", enabled: false, in: flow, source: "t")) { error in
            XCTAssertTrue("\(error)".contains("edit the file by hand"), "\(error)")
        }
    }

    func testFileIsReplacedAtomicallyKeepingItsModeAndPluginCheckCanRefuse() throws {
        let path = NSTemporaryDirectory() + "editor-\(UUID().uuidString).yaml"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try yaml.write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, 0o640)
        XCTAssertThrowsError(try ConfigEditor.setTransport("relay", enabled: true, path: path) { _ in ["transports.relay.address (line 10): is required"] }) { error in
            XCTAssertTrue("\(error)".contains("line 10"))
        }
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), yaml, "a refused edit changes nothing")
        _ = try ConfigEditor.setTransport("udp", enabled: false, path: path) { _ in [] }
        XCTAssertTrue(try String(contentsOfFile: path, encoding: .utf8).contains("enabled: false    # keep me"))
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int, 0o640)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).filter { $0.contains(".console-") && $0.hasSuffix(".tmp") }
        XCTAssertTrue(leftovers.isEmpty, "\(leftovers)")
    }

    func testConsoleSectionKeysAndErrors() throws {
        let c = try HubConfig.parse(yaml: "console:\n  enabled: true\n  listen: 0.0.0.0:9000\n  session_minutes: 5\n", source: "t")
        XCTAssertEqual(c.console, .init(enabled: true, listen: "0.0.0.0:9000", passwordFile: "console.pass", sessionMinutes: 5))
        XCTAssertEqual(try DefaultConfig.load().console.enabled, false, "off in the embedded default")
        XCTAssertEqual(try DefaultConfig.load().console.listen, "127.0.0.1:8480")
        XCTAssertThrowsError(try HubConfig.parse(yaml: "console:\n  enabled: true\n  colour: red\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "console.colour")
            XCTAssertEqual((error as? ConfigError)?.line, 3)
        }
        XCTAssertThrowsError(try HubConfig.parse(yaml: "console:\n  listen: nowhere\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "console.listen")
            XCTAssertEqual((error as? ConfigError)?.line, 2)
        }
        XCTAssertThrowsError(try HubConfig.parse(yaml: "console:\n  enabled: yes\n", source: "t"))
        // TLS: off by default, files inside data_dir unless named; a bad value names key and line.
        XCTAssertEqual(try DefaultConfig.load().console.tls, false)
        let tls = try HubConfig.parse(yaml: "console:\n  tls: true\n  tls_certificate: /etc/ssl/hub.pem\n", source: "t")
        XCTAssertEqual(tls.console.tls, true)
        XCTAssertEqual(tls.console.tlsCertificate, "/etc/ssl/hub.pem")
        XCTAssertEqual(tls.console.tlsKey, "console-tls.key")
        XCTAssertThrowsError(try HubConfig.parse(yaml: "console:\n  enabled: true\n  tls: sometimes\n", source: "t")) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "console.tls")
            XCTAssertEqual((error as? ConfigError)?.line, 3)
        }
    }
}
