import Foundation
import XCTest
@testable import YaokHubCore

/// Builds Tests/OutOfTreePlugin (its own package, depending only on the plugin API
/// package) the way a third party would, and has a hub load it.
final class OutOfTreePluginTests: XCTestCase {
    func testOutOfTreePluginBuildsAndLoads() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let work = try TestSupport.temporaryDirectory(self)
        // Copy the package so the build does not write into the source tree, and point
        // it at the API package by absolute path.
        let pkg = work + "/echo"
        try FileManager.default.copyItem(atPath: TestSupport.repoRoot + "/Tests/OutOfTreePlugin", toPath: pkg)
        let manifest = try String(contentsOfFile: pkg + "/Package.swift", encoding: .utf8)
            .replacingOccurrences(of: "\"../../Sources/PluginAPI\"", with: "\"\(TestSupport.repoRoot)/Sources/PluginAPI\"")
        try manifest.write(toFile: pkg + "/Package.swift", atomically: true, encoding: .utf8)
        let swift = ProcessInfo.processInfo.environment["SWIFT_EXEC_PATH"] ?? "/opt/swift/usr/bin/swift"
        let build = try TestSupport.run(swift, ["build", "--package-path", pkg, "--scratch-path", work + "/.build", "--product", "yaok-plugin-echo"], timeout: 600)
        XCTAssertEqual(build.status, 0, build.output)
        let built = work + "/.build/debug/libyaok-plugin-echo.so"
        XCTAssertTrue(FileManager.default.fileExists(atPath: built))

        let plugins = work + "/plugins"
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try FileManager.default.copyItem(atPath: built, toPath: plugins + "/libyaok-plugin-echo.so")
        try FileManager.default.copyItem(atPath: TestSupport.product("libyaok-plugin-udp.so"), toPath: plugins + "/libyaok-plugin-udp.so")
        let dir = work + "/hub"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: HubProcessTests.freePort(),
                                            extra: "  echo:\n    enabled: true\n    greeting: bonjour\n")
        let hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()
        try TestSupport.waitUntil(timeout: 10, "echo running") { try hub.transport("echo")?.status.state == .running }
        XCTAssertEqual(try hub.transport("echo")?.status.reason, "echo says bonjour")
        // Two Swift plugins, each with its own copy of the kit, side by side.
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)
    }
}
