import XCTest
import YaokPluginKit
@testable import YaokBLEPlugin
@testable import YaokBluetooth

final class BLEConfigTests: XCTestCase {
    private func section(_ values: [String: ConfigValue]) -> ConfigSection {
        var entries: [String: ConfigSection.Entry] = [:]
        for (i, (k, v)) in values.sorted(by: { $0.key < $1.key }).enumerated() {
            entries[k] = .init(line: 10 + i, value: v)
        }
        return ConfigSection(path: "transports.ble", line: 9, entries: entries)
    }

    func testDefaults() throws {
        let c = try BLEConfig(section: section(["enabled": .bool(true)]))
        XCTAssertEqual(c.adapter, "hci0")
        XCTAssertEqual(c.adapterIndex, 0)
        XCTAssertEqual(c.name, "yaok-hub")
        XCTAssertEqual(c.advertisingIntervalMs, 200)
        XCTAssertEqual(c.advertisingIntervalUnits, 320)   // 200 ms / 0.625 ms
        XCTAssertEqual(c.maxConnections, 10)
        XCTAssertEqual(c.mtu, 517)
        XCTAssertEqual(c.reassemblyTimeoutSeconds, 30)
        XCTAssertEqual(c, BLEConfig())
    }

    func testAllKeys() throws {
        let c = try BLEConfig(section: section([
            "plugin": .string("ble"), "adapter": .string("hci12"), "name": .string("camp-3"),
            "advertising_interval_ms": .int(1000), "max_connections": .int(3), "mtu": .int(185),
            "reassembly_timeout_s": .int(5),
        ]))
        XCTAssertEqual(c.adapterIndex, 12)
        XCTAssertEqual(c.name, "camp-3")
        XCTAssertEqual(c.advertisingIntervalUnits, 1600)
        XCTAssertEqual(c.maxConnections, 3)
        XCTAssertEqual(c.mtu, 185)
        XCTAssertEqual(c.reassemblyTimeoutSeconds, 5)
    }

    func testUnknownKeyNamesKeyAndLine() {
        XCTAssertThrowsError(try BLEConfig(section: section(["adaptor": .string("hci0")]))) { error in
            let e = error as? ConfigError
            XCTAssertEqual(e?.keyPath, "transports.ble.adaptor")
            XCTAssertEqual(e?.line, 10)
            XCTAssertTrue(e?.message.contains("unknown key") ?? false)
        }
    }

    func testBadValuesAreSpecific() {
        let cases: [(String, ConfigValue, String)] = [
            ("adapter", .string("bt0"), "HCI adapter name"),
            ("adapter", .string("hci"), "HCI adapter name"),
            ("adapter", .string("hci-1"), "HCI adapter name"),
            ("name", .string(""), "must not be empty"),
            ("name", .string(String(repeating: "x", count: 30)), "at most 29"),
            ("advertising_interval_ms", .int(10), "out of range"),
            ("max_connections", .int(0), "out of range"),
            ("mtu", .int(22), "out of range"),
            ("mtu", .int(600), "out of range"),
            ("mtu", .string("big"), "expected integer"),
            ("reassembly_timeout_s", .int(0), "out of range"),
        ]
        for (key, value, expected) in cases {
            XCTAssertThrowsError(try BLEConfig(section: section([key: value])), "\(key)=\(value)") { error in
                guard let e = error as? ConfigError else { return XCTFail("not a ConfigError: \(error)") }
                XCTAssertEqual(e.keyPath, "transports.ble.\(key)")
                XCTAssertTrue(e.message.contains(expected), "\(key): \(e.message)")
            }
        }
    }

    func testAdapterIndexParsing() {
        XCTAssertEqual(BluetoothKernel.adapterIndex("hci0"), 0)
        XCTAssertEqual(BluetoothKernel.adapterIndex("hci65535"), 65535)
        XCTAssertNil(BluetoothKernel.adapterIndex("hci65536"))
        XCTAssertNil(BluetoothKernel.adapterIndex("hci٣"))   // non-ASCII digit
        XCTAssertNil(BluetoothKernel.adapterIndex("HCI0"))
    }
}
