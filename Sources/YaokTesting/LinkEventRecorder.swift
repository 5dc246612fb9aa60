import Foundation
import XCTest
import YaokPluginKit

/// Records what a transport or a link engine reports — links up and down, frames, log lines —
/// and lets a test wait for a condition on them: on a condition variable, never a sleep, with
/// a timeout that fails the test naming what it waited for. It is ``LinkEvents``: pass it to an
/// engine's or a transport's `init` as its events.
// @unchecked: `state` is read and written only under `condition`.
public final class LinkEventRecorder: LinkEvents, @unchecked Sendable {
    public struct State {
        public var ups: [LinkInfo] = []
        public var downs: [(LinkID, String)] = []
        public var frames: [([UInt8], LinkID)] = []
        /// Log lines in order; warnings and errors as `warning: <message>`.
        public var logs: [String] = []
        /// Status changes reported.
        public var statusChanges = 0
    }
    private let condition = NSCondition()
    private var state = State()

    public init() {}

    public func linkUp(_ link: LinkInfo) { update { $0.ups.append(link) } }
    /// Records the reason, or "" without one.
    public func linkDown(_ id: LinkID, reason: String?) { update { $0.downs.append((id, reason ?? "")) } }
    public func frameReceived(_ frame: [UInt8], on link: LinkID) { update { $0.frames.append((frame, link)) } }
    public func statusChanged() { update { $0.statusChanges += 1 } }
    public func log(_ level: LogLevel, _ message: String) {
        update { $0.logs.append(level >= .warning ? "warning: " + message : message) }
    }

    private func update(_ change: (inout State) -> Void) {
        condition.lock()
        change(&state)
        condition.broadcast()
        condition.unlock()
    }

    /// Everything so far.
    public var snapshot: State {
        condition.lock()
        defer { condition.unlock() }
        return state
    }
    public var ups: [LinkInfo] { snapshot.ups }
    public var downs: [(LinkID, String)] { snapshot.downs }
    public var frames: [([UInt8], LinkID)] { snapshot.frames }
    public var logs: [String] { snapshot.logs }

    /// Waits until `predicate` holds; fails the test (and returns false) after `timeout`
    /// seconds, with the last log lines.
    @discardableResult
    public func wait(_ what: String, timeout: TimeInterval = 10, file: StaticString = #filePath, line: UInt = #line,
                     _ predicate: (State) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate(state) {
            if !condition.wait(until: deadline) {
                if predicate(state) { return true }
                XCTFail("timed out after \(timeout) s waiting for \(what); logs: \(state.logs.suffix(10))", file: file, line: line)
                return false
            }
        }
        return true
    }
}
