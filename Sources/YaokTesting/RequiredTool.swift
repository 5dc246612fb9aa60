import Foundation
import XCTest

/// A program a test needs that `.ci/run` installs. Outside CI a missing one skips the test
/// with how to install it; in CI (`YAOK_CI=1`) it fails the test, because there a skip would
/// hide a test that never ran.
public enum RequiredTool {
    /// A missing tool in CI.
    public struct Missing: Error, CustomStringConvertible {
        public var path, package: String
        public var description: String { "\(path) is missing in CI (YAOK_CI=1); .ci/run installs it: apt-get install \(package)" }
    }

    /// True in a CI run.
    public static var inCI: Bool { ProcessInfo.processInfo.environment["YAOK_CI"] == "1" }

    /// Returns when `path` is an executable; otherwise skips (or, in CI, fails) the test.
    public static func require(_ path: String, package: String) throws {
        guard !FileManager.default.isExecutableFile(atPath: path) else { return }
        if inCI { throw Missing(path: path, package: package) }
        throw XCTSkip("\(path) is not installed (apt-get install \(package))")
    }
}
