import Foundation
import Synchronization
import XCTest
import YaokPluginKit
@testable import YaokHubCore
@testable import YaokSupervision
import YaokTesting

/// Sends the router holds for one pass over its queue reach the plugin process in one message
/// (`sends`, Docs/plugin-protocol.md), in order, each still answered on its own; nothing held
/// is lost or answered twice. The crash fixture refuses every send ("link N is not up"), so
/// every frame comes back through `sendFailed` and shows what the plugin was given, in order.
final class PluginProcessHeldSendsTests: XCTestCase {
    final class Refusals: Sendable {
        private let frames = Mutex<[[UInt8]]>([])
        func add(_ f: [UInt8]) { frames.withLock { $0.append(f) } }
        var all: [[UInt8]] { frames.withLock { $0 } }
    }

    func start(_ refusals: Refusals) throws -> PluginProcess {
        let dir = try TestSupport.temporaryDirectory(self)
        let path = try PluginIsolationTests.buildCrashy(into: dir)
        let config = #"{"path":"transports.held","values":{"fault":{"line":1,"value":"none"}}}"#
        var events = PluginProcess.Events()
        events.sendFailed = { frame, _, result, _ in if result == .failed { refusals.add(frame) } }
        let process = PluginProcess(pluginPath: path, sign: { _ in [UInt8](repeating: 0, count: 64) }, events: events)
        _ = try process.spawn(memoryLimitMB: 1024)
        _ = try process.call(timeout: 5) { .create(request: $0, signingKey: [UInt8](repeating: 1, count: 32), kxKey: [UInt8](repeating: 2, count: 32), instance: "held", configJSON: config) }
        _ = try process.call(timeout: 5) { .start(request: $0) }
        return process
    }

    func testHeldSendsWaitForTheFlushAndArriveInOrderEachAnswered() throws {
        let refusals = Refusals()
        let process = try start(refusals)
        defer { process.close(grace: 1) }
        let frames = (0..<20).map { i in [UInt8](repeating: UInt8(i), count: 100 + i) }
        for f in frames { XCTAssertTrue(try process.sendFrame(f, to: 7, timeout: 5, held: true)) }
        XCTAssertEqual(process.heldSendCount, 20, "nothing is written before the flush")
        XCTAssertEqual(process.unansweredSends, 20, "held sends take their room in the window")
        // The send watchdog (TransportHost: kill after 2 s unanswered) times written sends
        // only: a long pass in the router must not get the plugin killed for frames it never saw.
        XCTAssertEqual(process.oldestSendWait, 0)
        process.flushHeldSends()
        XCTAssertEqual(process.heldSendCount, 0)
        try Wait.until(timeout: 10, "every held send answered") { process.unansweredSends == 0 }
        XCTAssertEqual(refusals.all, frames, "each frame reached the plugin once, in the order sent")

        // A frame sent without holding goes after the held ones, never ahead of them.
        let later = (0..<3).map { i in [UInt8](repeating: 0xA0 + UInt8(i), count: 50) }
        XCTAssertTrue(try process.sendFrame(later[0], to: 7, timeout: 5, held: true))
        XCTAssertTrue(try process.sendFrame(later[1], to: 7, timeout: 5, held: true))
        XCTAssertFalse(try process.sendFrame(later[2], to: 7, timeout: 5))
        try Wait.until(timeout: 10, "the later sends answered") { process.unansweredSends == 0 }
        XCTAssertEqual(Array(refusals.all.dropFirst(20)), later)
    }

    func testALongPassIsWrittenInPiecesNotHeldToTheEnd() throws {
        let refusals = Refusals()
        let process = try start(refusals)
        defer { process.close(grace: 1) }
        let n = PluginProcess.heldSendsFlushCount + 5
        for i in 0..<n { try process.sendFrame([UInt8(i)], to: 7, timeout: 5, held: true) }
        XCTAssertEqual(process.heldSendCount, 5, "the first \(PluginProcess.heldSendsFlushCount) went as soon as that many waited")
        try Wait.until(timeout: 10, "the first piece answered") { refusals.all.count == PluginProcess.heldSendsFlushCount }
        process.flushHeldSends()
        try Wait.until(timeout: 10, "the rest answered") { process.unansweredSends == 0 }
        XCTAssertEqual(refusals.all, (0..<n).map { [UInt8($0)] })

        // Big frames: held up to about 60 KB, never one message over the protocol's bound.
        let big = [UInt8](repeating: 9, count: 20_000)
        for _ in 0..<3 { try process.sendFrame(big, to: 7, timeout: 5, held: true) }
        XCTAssertEqual(process.heldSendCount, 3, "three 20 KB frames stay under 60 KB")
        try process.sendFrame(big, to: 7, timeout: 5, held: true)
        XCTAssertEqual(process.heldSendCount, 0, "a fourth passes 60 KB: written at once")
        try Wait.until(timeout: 10, "the big ones answered") { process.unansweredSends == 0 }
        XCTAssertEqual(refusals.all.count, n + 4)
    }

    /// A process that ends with sends held: they are dropped with it (its links go down, so
    /// the router routes those bundles elsewhere), the room they took is given back, and a
    /// later flush writes nothing.
    func testSendsHeldWhenTheProcessDiesAreDroppedWithItAndFreeTheirRoom() throws {
        let refusals = Refusals()
        let process = try start(refusals)
        for i in 0..<10 { try process.sendFrame([UInt8(i)], to: 7, timeout: 5, held: true) }
        XCTAssertEqual(process.unansweredSends, 10)
        process.kill()
        try Wait.until(timeout: 10, "the process is reaped") { !process.isRunning }
        XCTAssertEqual(process.heldSendCount, 0)
        XCTAssertEqual(process.unansweredSends, 0)
        process.flushHeldSends()
        XCTAssertEqual(refusals.all, [], "nothing held reached the dead process or came back twice")
        XCTAssertThrowsError(try process.sendFrame([1], to: 7, timeout: 1, held: true))
    }
}
