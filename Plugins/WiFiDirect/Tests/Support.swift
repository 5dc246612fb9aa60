import Foundation
import XCTest
import YaokPluginKit
@testable import YaokTransportWiFiDirect

/// A stand-in identity for the handshake plumbing: NOT cryptography. Its "signature" is a
/// keyed hash anyone can compute; real Ed25519 runs through the host in the VM test.
struct TestIdentity: LinkIdentity {
    let signingKey: [UInt8]
    let kxKey: [UInt8]
    init(_ seed: UInt8) {
        signingKey = (0..<32).map { UInt8(truncatingIfNeeded: Int(seed) &* 7 &+ $0 &* 3) }
        kxKey = (0..<32).map { UInt8(truncatingIfNeeded: Int(seed) &* 5 &+ $0 &+ 1) }
    }
    static func tag(_ key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var h = [UInt64](repeating: 0x9e37_79b9_7f4a_7c15, count: 8)
        for (i, b) in (key + message).enumerated() {
            h[i % 8] = (h[i % 8] ^ UInt64(b)) &* 0x0000_0100_0000_01b3 &+ UInt64(i)
        }
        return h.flatMap { v in (0..<8).map { UInt8(truncatingIfNeeded: v >> ($0 * 8)) } }
    }
    func sign(_ message: [UInt8]) throws -> [UInt8] { Self.tag(signingKey, message) }
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool { signature == Self.tag(publicKey, message) }
    func randomBytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }
}

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
