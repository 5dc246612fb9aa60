import Foundation
import XCTest

/// The one bounded wait of the tests: for state that has no event to wait on (a counter in
/// another process, a file another process writes), poll with a deadline — never a bare sleep.
public enum Wait {
    /// Polls `condition` every `interval` seconds until it holds or `timeout` passes; whether
    /// it held. A condition that throws counts as not yet.
    @discardableResult
    public static func poll(timeout: TimeInterval = 5, interval: TimeInterval = 0.02, _ condition: () throws -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if (try? condition()) == true { return true }
            Thread.sleep(forTimeInterval: interval)
        }
        return (try? condition()) == true
    }

    /// A wait that must succeed: polls like ``poll(timeout:interval:_:)``; on timeout the test
    /// fails naming `what`, and this throws so the test stops there. A condition that throws
    /// on the last try rethrows its own error.
    public static func until(timeout: TimeInterval, _ what: String, file: StaticString = #filePath, line: UInt = #line,
                             _ condition: () throws -> Bool) throws {
        if poll(timeout: timeout, condition) { return }
        if try condition() { return }
        XCTFail("timed out after \(timeout) s waiting for \(what)", file: file, line: line)
        throw TimedOut(what: what, seconds: timeout)
    }

    /// The error ``until(timeout:_:file:line:_:)`` throws.
    public struct TimedOut: Error, CustomStringConvertible {
        public var what: String
        public var seconds: TimeInterval
        public var description: String { "timed out after \(seconds) s waiting for \(what)" }
    }
}
