import Foundation
import XCTest
import YaokPluginKit
@testable import YaokTransportWiFiDirect

/// Collects transport/server events and waits on them with a timeout.
final class Recorder: @unchecked Sendable {
    private let condition = NSCondition()
    private(set) var ups: [LinkInfo] = []
    private(set) var downs: [(LinkID, String)] = []
    private(set) var frames: [([UInt8], LinkID)] = []
    private(set) var logs: [String] = []

    func record(_ change: (Recorder) -> Void) {
        condition.lock(); change(self); condition.broadcast(); condition.unlock()
    }
    func addUp(_ i: LinkInfo) { record { $0.ups.append(i) } }
    func addDown(_ id: LinkID, _ r: String) { record { $0.downs.append((id, r)) } }
    func addFrame(_ f: [UInt8], _ id: LinkID) { record { $0.frames.append((f, id)) } }
    func addLog(_ m: String) { record { $0.logs.append(m) } }

    var serverEvents: SecureStreamEngine.Events {
        var e = SecureStreamEngine.Events()
        e.linkUp = { self.addUp($0) }
        e.linkDown = { self.addDown($0, $1) }
        e.frame = { self.addFrame($0, $1) }
        e.log = { level, m in self.addLog(level == .warning ? "warning: " + m : m) }
        return e
    }

    var reporter: WiFiDirectTransport.Reporter {
        var r = WiFiDirectTransport.Reporter()
        r.linkUp = { self.addUp($0) }
        r.linkDown = { self.addDown($0, $1) }
        r.frame = { self.addFrame($0, $1) }
        r.log = { m, _ in self.addLog(m) }
        return r
    }

    @discardableResult
    func wait(_ what: String, timeout: TimeInterval = 10, file: StaticString = #filePath, line: UInt = #line,
              _ predicate: (Recorder) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock(); defer { condition.unlock() }
        while !predicate(self) {
            if !condition.wait(until: deadline) && !predicate(self) {
                XCTFail("timed out after \(timeout) s waiting for \(what); logs: \(logs.suffix(8))", file: file, line: line)
                return false
            }
        }
        return true
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
