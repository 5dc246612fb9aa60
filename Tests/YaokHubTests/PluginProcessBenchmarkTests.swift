import Foundation
import Synchronization
import XCTest
import YaokPluginKit
@testable import YaokHubCore
@testable import YaokSupervision
import YaokTesting

/// What the process boundary costs (printed, never asserted): `send` round trips to a plugin in
/// its own process vs. the same plugin driven in this process, and the cold start of five plugin
/// processes. Docs/performance.md, "Plugin processes", reports the figures.
final class PluginProcessBenchmarkTests: XCTestCase {
    final class Sink: PluginCallbacks, Sendable {
        func log(level: Int32, _ message: String) {}
        func sign(_ message: [UInt8]) -> [UInt8]? { [UInt8](repeating: 0, count: 64) }
        func metric(kind: Int32, name: String, value: Double) {}
        func linkUp(_ link: LinkInfo) {}
        func linkDown(_ link: LinkID, reason: String?) {}
        func frame(_ frame: [UInt8], link: LinkID) {}
        func statusChanged() {}
    }

    final class Counter: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    func testBenchmarkSendAcrossTheProcessBoundary() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let path = try PluginIsolationTests.buildCrashy(into: dir)
        let config = #"{"path":"transports.bench","values":{"fault":{"line":1,"value":"none"}}}"#
        let n = 20_000

        let loaded = try XCTUnwrap(PluginLoader.load(path: path, existing: [:]).plugin)
        let sink = Sink()
        let direct = InProcessPlugin(plugin: loaded, callbacks: sink)
        try direct.create(instanceName: "bench", configJSON: config, signingKey: [UInt8](repeating: 1, count: 32), kxKey: [UInt8](repeating: 2, count: 32))
        try direct.start()
        defer { direct.stop(); direct.destroy() }

        let process = PluginProcess(pluginPath: path, sign: { _ in [UInt8](repeating: 0, count: 64) }, events: .init())
        let t0 = Date()
        _ = try process.spawn(memoryLimitMB: 1024)
        let spawnMs = Date().timeIntervalSince(t0) * 1000
        _ = try process.call(timeout: 5) { .create(request: $0, signingKey: [UInt8](repeating: 1, count: 32), kxKey: [UInt8](repeating: 2, count: 32), instance: "bench", configJSON: config) }
        _ = try process.call(timeout: 5) { .start(request: $0) }
        defer { process.close(grace: 1) }

        for size in [200, 1_500] {
            let frame = [UInt8](repeating: 7, count: size)
            var start = Date()
            for _ in 0..<n { _ = try? direct.send(frame, to: 1) }
            let inProcess = Date().timeIntervalSince(start) / Double(n) * 1e6
            // One frame at a time, waiting for the plugin's answer: the latency of a round trip.
            start = Date()
            for _ in 0..<n / 4 { _ = try process.call(timeout: 5) { .send(request: $0, link: 1, frame: frame) } }
            let roundTrip = Date().timeIntervalSince(start) / Double(n / 4) * 1e6
            // As the hub sends: pipelined, answers matched later (up to PluginProcess.postWindow waiting).
            start = Date()
            for _ in 0..<n { try process.sendFrame(frame, to: 1, timeout: 5) }
            let handedOver = Date().timeIntervalSince(start) / Double(n) * 1e6
            try Wait.until(timeout: 30, "every send answered") { process.unansweredSends == 0 }
            let pipelined = Date().timeIntervalSince(start) / Double(n) * 1e6
            print(String(format: "BENCH plugin send %5d B: in process %.2f µs; across the process boundary pipelined %.0f frames/s, "
                         + "the sender busy %.1f µs per frame (added %.1f µs); one waited-for round trip %.1f µs",
                         size, inProcess, 1e6 / pipelined, handedOver, handedOver - inProcess, roundTrip))
        }

        // Cold start: five plugin processes at once, each to its hello and a created instance.
        let start = Date()
        let group = DispatchGroup()
        let failures = Counter()
        var processes: [PluginProcess] = []
        for _ in 0..<5 {
            let p = PluginProcess(pluginPath: path, sign: { _ in [] }, events: .init())
            processes.append(p)
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                do {
                    _ = try p.spawn(memoryLimitMB: 1024)
                    _ = try p.call(timeout: 5) { .create(request: $0, signingKey: [UInt8](repeating: 1, count: 32), kxKey: [UInt8](repeating: 2, count: 32), instance: "bench", configJSON: config) }
                } catch { failures.add() }
            }
        }
        group.wait()
        let coldMs = Date().timeIntervalSince(start) * 1000
        for p in processes { p.close(grace: 1) }
        XCTAssertEqual(failures.value, 0)
        print(String(format: "BENCH plugin processes: one spawned to its hello in %.1f ms; five at once to created instances in %.1f ms", spawnMs, coldMs))
    }
}
