import Foundation
import XCTest
import YaokPluginKit
@testable import YaokWiFiDirectPlugin
import YaokTesting

enum TestConfig {
    static func section(_ values: [String: ConfigValue]) -> ConfigSection {
        var entries: [String: ConfigSection.Entry] = [:]
        for (i, (k, v)) in values.sorted(by: { $0.key < $1.key }).enumerated() { entries[k] = .init(line: 20 + i, value: v) }
        return ConfigSection(path: "transports.wifi-direct", line: 19, entries: entries)
    }
    static func settings(_ values: [String: ConfigValue]) throws -> WiFiDirectSettings {
        try WiFiDirectSettings(config: section(values))
    }
    static func tempDir(_ name: String) -> String {
        let path = "/tmp/yaok-wifi-test-\(getpid())-\(name)"
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}
