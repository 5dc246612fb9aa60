import Foundation
import XCTest
import YaokPluginKit
@testable import YaokTransportWiFiDirect
import YaokTesting

extension LinkEventRecorder {
    /// The group owner's link server callbacks, recorded (warnings marked as such).
    var serverEvents: SecureStreamEngine.Events {
        var e = SecureStreamEngine.Events()
        e.linkUp = { self.linkUp($0) }
        e.linkDown = { self.linkDown($0, $1) }
        e.frame = { self.frame($0, $1) }
        e.log = { level, m in self.log(level == .warning ? "warning: " + m : m) }
        return e
    }

    /// The transport's reporter, recorded.
    var reporter: WiFiDirectTransport.Reporter {
        var r = WiFiDirectTransport.Reporter()
        r.linkUp = { self.linkUp($0) }
        r.linkDown = { self.linkDown($0, $1) }
        r.frame = { self.frame($0, $1) }
        r.log = { m, _ in self.log(m) }
        return r
    }
}

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
