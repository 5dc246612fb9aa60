import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
import YaokTesting

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
        let build = try TestSupport.run(swift, ["build", "--package-path", pkg, "--scratch-path", work + "/.build"], timeout: 600)
        XCTAssertEqual(build.status, 0, build.output)
        let built = work + "/.build/debug/libyaok-plugin-echo.so"
        XCTAssertTrue(FileManager.default.fileExists(atPath: built))

        let plugins = work + "/plugins"
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try FileManager.default.copyItem(atPath: built, toPath: plugins + "/libyaok-plugin-echo.so")
        try FileManager.default.copyItem(atPath: work + "/.build/debug/libyaok-plugin-swiftfault.so", toPath: plugins + "/libyaok-plugin-swiftfault.so")
        try FileManager.default.copyItem(atPath: TestSupport.product("libyaok-plugin-udp.so"), toPath: plugins + "/libyaok-plugin-udp.so")
        let dir = work + "/hub"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let udpPort = HubProcessTests.freePort(), trigger = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: udpPort,
                                            extra: "  echo:\n    enabled: true\n    greeting: bonjour\n"
                                                + "  swiftfault:\n    enabled: true\n    port: \(trigger)\n")
        let hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()
        try Wait.until(timeout: 10, "echo running") { try hub.transport("echo")?.status.state == .running }
        XCTAssertEqual(try hub.transport("echo")?.status.reason, "echo says bonjour")
        // Two Swift plugins, each with its own copy of the kit, side by side.
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)

        // A remote peer's datagram makes a Swift plugin call fatalError in its own thread: only
        // its process goes; it is restarted, the log says why, and UDP carries a message meanwhile.
        try Wait.until(timeout: 10, "swiftfault running") { try hub.transport("swiftfault")?.status.state == .running }
        let firstPID = try XCTUnwrap(hub.transport("swiftfault")?.pid)
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var to = IPEndpoint(host: "127.0.0.1", port: trigger).sockaddr
        _ = withUnsafePointer(to: &to) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, "boom", 4, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        try Wait.until(timeout: 20, "the trapped process replaced (log: \(hub.log.suffix(2000)))") {
            let t = try hub.transport("swiftfault")
            return (t?.restarts ?? 0) >= 1 && t?.pid != nil && t?.pid != firstPID
        }
        let lastExit = try XCTUnwrap(hub.transport("swiftfault")?.lastExit)
        XCTAssertTrue(["SIGILL", "SIGTRAP"].contains(lastExit), "a Swift trap ends the process with \(lastExit)")
        XCTAssertTrue(hub.log.contains("swiftfault: a frame this plugin cannot handle"), "its last words reach the hub log: \(hub.log.suffix(3000))")
        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: udpPort)
        let message = try seal("past a trapped plugin", from: alice, to: bob)
        try phone.send(message)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: message.bundleID)))
        XCTAssertEqual(try deliveries(of: message.bundleID, to: try RawPeer(identity: bob, role: .endpoint, hubPort: udpPort)), 1)
        XCTAssertEqual(try hub.transport("udp")?.restarts ?? 0, 0)
        XCTAssertEqual(try hub.transport("echo")?.restarts ?? 0, 0)
    }
}
