import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokSupervision
import YaokTesting

/// Every transport runs in its own plugin process: faulty plugins (Tests/Fixtures/crash_plugin.c)
/// crash, hang, leak and flood next to a working UDP transport in a real hub, and the hub, its
/// UDP link and a message between two endpoints survive all of it.
final class PluginIsolationTests: XCTestCase {
    func testStartAndRestartBackoffIsOneSecondDoublingToAMinute() {
        XCTAssertEqual((1...8).map { TransportHost.backoffSeconds(failures: $0) }, [1, 2, 4, 8, 16, 32, 60, 60])
        XCTAssertEqual(TransportHost.backoffSeconds(failures: 10_000), TransportHost.maxBackoffSeconds)
    }

    /// Compiles the crash fixture into `dir` as `libyaok-plugin-<name>.so`.
    static func buildCrashy(into dir: String, file: String = "libyaok-plugin-crashy.so", version: String? = nil) throws -> String {
        let output = dir + "/" + file
        var source = try String(contentsOfFile: TestSupport.repoRoot + "/Tests/Fixtures/crash_plugin.c", encoding: .utf8)
        if let version { source = source.replacingOccurrences(of: ".version = \"1.0.0\"", with: ".version = \"\(version)\"") }
        let src = dir + "/crash_plugin_\(UUID().uuidString.prefix(6)).c"
        try source.write(toFile: src, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: src) }
        let include = TestSupport.repoRoot + "/Sources/PluginAPI/Sources/CYaokPlugin/include"
        let result = try TestSupport.run("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", include, "-o", output, src, "-lsodium", "-lpthread"])
        guard result.status == 0 else { throw NSError(domain: "cc", code: Int(result.status), userInfo: [NSLocalizedDescriptionKey: result.output]) }
        chmod(output, 0o755)
        return output
    }

    func crashySection(_ name: String, _ fault: String, extra: String = "") -> String {
        """
          \(name):
            enabled: true
            plugin: crashy
            fault: \(fault)
        \(extra.isEmpty ? "" : "    " + extra + "\n")
        """
    }

    func testFaultyPluginsCrashAndRestartWhileTheHubAndUDPKeepWorking() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let plugins = try TestSupport.pluginDirectory(self)
        _ = try Self.buildCrashy(into: plugins)
        let port = HubProcessTests.freePort()
        let trigger = HubProcessTests.freePort()
        // hang_send reports bob attached on its link, so the router sends bob's mail into its hanging send().
        let bobSeed = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let alice = Identity.generate(), bob = try Identity(ed25519Seed: bobSeed, x25519Secret: (0..<32).map { _ in UInt8.random(in: 0...255) })
        let faults: [(String, String, String)] = [
            ("hang_send", "hang_send", "peer_seed: \"\(Hex.encode(bobSeed))\""),
            ("segv_start", "segv_start", ""), ("abort_start", "abort_start", ""), ("segv_thread", "segv_thread", ""),
            ("exit_thread", "exit_thread", ""), ("memory_hog", "memory_hog", "memory_limit_mb: 256"),
            ("log_flood", "log_flood", ""), ("segv_datagram", "segv_datagram", "port: \(trigger)"), ("hang_status", "hang_status", ""),
        ]
        let extra = faults.map { crashySection($0.0, $0.1, extra: $0.2) }.joined()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port, extra: extra)
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()

        // A remote peer's datagram triggers the bug in segv_datagram once it listens.
        try Wait.until(timeout: 20, "segv_datagram listening") { try hub.transport("segv_datagram")?.status.state == .running }
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var to = IPEndpoint(host: "127.0.0.1", port: trigger).sockaddr
        _ = withUnsafePointer(to: &to) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, "boom", 4, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }

        // Meanwhile a message crosses the hub over UDP, exactly once.
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        let message = try seal("still here", from: alice, to: bob)
        try phone.send(message)
        _ = try phone.answer(for: message.bundleID)

        let expected: [String: String] = [
            "segv_start": "SIGSEGV", "abort_start": "SIGABRT", "segv_thread": "SIGSEGV", "exit_thread": "exit code 0",
            "memory_hog": "SIGABRT", "segv_datagram": "SIGSEGV", "hang_status": "killed: no answer to the heartbeat",
            "hang_send": "killed: send did not return within 2",
        ]
        var seen = ""
        do {
            try Wait.until(timeout: 60, "every faulty transport restarted with its reason") {
                let s = try hub.status().transports
                seen = s.map { "\($0.name): restarts \($0.restarts ?? 0), last \($0.lastExit ?? "-"), \($0.status.state) \($0.status.reason)" }.joined(separator: "\n")
                return expected.allSatisfy { name, exit in
                    guard let t = s.first(where: { $0.name == name }) else { return false }
                    return (t.restarts ?? 0) >= 1 && (t.lastExit ?? "").hasPrefix(exit)
                }
            }
        } catch {
            XCTFail("transports:\n\(seen)")
            throw error
        }
        let bobPeer = try RawPeer(identity: bob, role: .endpoint, hubPort: port)
        XCTAssertEqual(try deliveries(of: message.bundleID, to: bobPeer), 1, "the message crossed the hub while its plugins crashed")
        let udp = try XCTUnwrap(hub.transport("udp"))
        XCTAssertEqual(udp.status.state, .running)
        XCTAssertEqual(udp.restarts ?? 0, 0, "the UDP transport's process never went down")
        XCTAssertNotNil(udp.pid)
        XCTAssertNotEqual(udp.pid, hub.process.processIdentifier, "UDP runs in its own process")
        let flood = try XCTUnwrap(hub.transport("log_flood"))
        XCTAssertEqual(flood.restarts ?? 0, 0, "a noisy plugin is rate-limited, not restarted")
        try Wait.until(timeout: 20, "log lines dropped and counted") { hub.log.contains("log lines from the plugin dropped") }
        XCTAssertLessThan(hub.log.components(separatedBy: "crashy: flooding the log").count, 2_000, "the flood did not reach the log")
        XCTAssertTrue(hub.log.contains("crashy: out of memory"), "the last stderr lines of a crashed process are logged")

        // A plugin that crashes at every start ends failed, with the reason, and stays down.
        try Wait.until(timeout: 60, "segv_start gives up") {
            try hub.transport("segv_start")?.status.reason == "crashed 5 times in 60 s (last: SIGSEGV)"
        }
        let failed = try XCTUnwrap(hub.transport("segv_start"))
        XCTAssertEqual(failed.status.state, .failed)
        XCTAssertNil(failed.pid)
        XCTAssertNil(failed.nextRetryInSeconds)
        let text = try TestSupport.run(try TestSupport.product("yaok-hub"), ["status", "--config", hub.configPath]).output
        XCTAssertTrue(text.contains("crashed 5 times in 60 s (last: SIGSEGV)"), text)

        // SIGHUP gives it another chance: a new process, which crashes again.
        hub.signal(SIGHUP)
        try Wait.until(timeout: 20, "segv_start tried again after SIGHUP") {
            try hub.transport("segv_start")?.status.reason == "plugin process ended (SIGSEGV); restarting"
        }
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)
    }

    /// A plugin whose loading hangs must not keep the hub's start waiting on its probe for
    /// ever, nor its probe outlive a hub killed during its start: the probe gets 10 s and is
    /// killed, and it dies with the hub.
    func testAPluginWhoseLoadingHangsIsRefusedAndItsProbeDiesWithTheHub() throws {
        let plugins = try TestSupport.pluginDirectory(self)
        let hang = try TestSupport.buildCPlugin(into: plugins, name: "libyaok-plugin-hang.so", defines: ["HANG_ON_LOAD", "PLUGIN_KIND=\"hang\""])
        func probes() -> [Int32] {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { Int32($0) }.filter { pid in
                let cmdline = (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? ""
                return cmdline.contains("--probe") && cmdline.contains(hang)
            }
        }
        let dir = try TestSupport.temporaryDirectory(self)
        let hub = try HubProcess(dir: dir, config: HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: HubProcessTests.freePort()),
                                 executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady(timeout: 60)
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running, "the other plugins load")
        let listed = try TestSupport.run(try TestSupport.product("yaok-hub"), ["plugins", "--config", hub.configPath]).output
        XCTAssertTrue(listed.contains("loading it did not finish within 10 s"), listed)
        XCTAssertEqual(probes(), [], "the hung probe was killed")
        hub.stop()

        // A hub killed while its probe hangs: the probe goes with it.
        let dir2 = try TestSupport.temporaryDirectory(self)
        let killed = try HubProcess(dir: dir2, config: HubProcessTests.config(dir: dir2, pluginDirs: [plugins], udpPort: HubProcessTests.freePort()),
                                    executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { killed.stop() }
        try Wait.until(timeout: 10, "the hung probe running") { !probes().isEmpty }
        killed.signal(SIGKILL)
        try Wait.until(timeout: 5, "the probe gone with the hub") { probes().isEmpty }
    }

    /// A plugin process that answers its create request too late (a Pi under load, an emulated
    /// VM) is not a refusal: the hub tries again on the restart backoff by itself, with no
    /// SIGHUP, and the transport runs; the other transports start meanwhile.
    func testAPluginThatAnswersTooLateAtStartIsCreatedAgainByItself() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let plugins = try TestSupport.pluginDirectory(self)
        _ = try Self.buildCrashy(into: plugins)
        let marker = dir + "/slow-create-marker"
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: HubProcessTests.freePort(),
                                            extra: crashySection("slow", "slow_create", extra: "marker: \"\(marker)\""))
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady(timeout: 60)
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker), "the first create was the slow one")
        XCTAssertTrue(hub.log.contains("transport slow not started: the plugin process did not answer the create request within 10 s; trying again in 1 s"),
                      hub.log.suffix(3000).description)
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running, "the others started")
        try Wait.until(timeout: 30, "the slow transport running after a retry") { try hub.transport("slow")?.status.state == .running }
        XCTAssertTrue(hub.log.contains("transport slow: creating it again (attempt 2)"), hub.log.suffix(3000).description)
        XCTAssertFalse(hub.log.contains("reloaded"), "no reload was needed")
    }

    /// A section the plugin refuses on SIGHUP leaves the running instance (same process, same
    /// links) alone, and the log says why.
    func testABadSectionOnSIGHUPKeepsTheRunningInstance() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let plugins = try TestSupport.pluginDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port)
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        let alice = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        try Wait.until(timeout: 10, "the phone's link") { try hub.status().router.links.count == 1 }
        let pid = try XCTUnwrap(hub.transport("udp")?.pid)

        try config.replacingOccurrences(of: "keepalive_s: 1", with: "keepalive_s: 1\n    no_such_key: 5")
            .write(toFile: hub.configPath, atomically: true, encoding: .utf8)
        hub.signal(SIGHUP)
        try Wait.until(timeout: 20, "the refusal logged") { hub.log.contains("reload: keeping transport udp as it runs; its new section is refused") }
        XCTAssertTrue(hub.log.contains("no_such_key"), hub.log.suffix(2000).description)
        XCTAssertEqual(try hub.transport("udp")?.pid, pid, "the same process")
        XCTAssertEqual(try hub.status().router.links.count, 1, "the phone's link stayed up")
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)
        _ = phone
    }

    /// Each plugin process keeps only the capabilities its section grants (default by kind:
    /// none for UDP), in its effective and bounding sets, and cannot gain privileges by exec.
    func testAPluginProcessHasOnlyTheCapabilitiesItsSectionGrants() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let plugins = try TestSupport.pluginDirectory(self)
        _ = try Self.buildCrashy(into: plugins)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port,
                                            extra: crashySection("raw", "none", extra: "capabilities: [net_raw]"))
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        try Wait.until(timeout: 20, "raw running") { try hub.transport("raw")?.status.state == .running }
        func field(_ pid: Int32, _ name: String) throws -> UInt64 {
            let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix(name + ":") })
            return try XCTUnwrap(UInt64(line.split(separator: "\t").last.map(String.init) ?? "", radix: 16))
        }
        let udp = try XCTUnwrap(hub.transport("udp")?.pid)
        let raw = try XCTUnwrap(hub.transport("raw")?.pid)
        XCTAssertEqual(try field(udp, "CapEff"), 0, "UDP needs no capability")
        XCTAssertEqual(try field(udp, "CapPrm"), 0)
        XCTAssertEqual(try field(udp, "NoNewPrivs"), 1)
        let hubEff = try field(hub.process.processIdentifier, "CapEff")
        let netRaw: UInt64 = 1 << 13
        XCTAssertEqual(try field(raw, "CapEff") & ~netRaw, 0, "nothing but CAP_NET_RAW")
        XCTAssertEqual(try field(raw, "CapBnd") & ~netRaw, 0, "nothing else can be regained by exec")
        if hubEff & netRaw != 0 {
            XCTAssertEqual(try field(raw, "CapEff"), netRaw, "the granted capability is kept")
        }
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running, "UDP works without capabilities")
    }

    /// `cp` over a loaded plugin file can crash any process that has it mapped: only that plugin's
    /// process can notice, never the hub. Installing a new version by rename + SIGHUP runs it.
    func testOverwritingAPluginInPlaceCannotKillTheHubAndRenamePlusSIGHUPUpgrades() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let plugins = try TestSupport.pluginDirectory(self)
        let installed = try Self.buildCrashy(into: plugins)
        let staging = try TestSupport.temporaryDirectory(self)
        let v2 = try Self.buildCrashy(into: staging, version: "2.0.0")
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port, extra: crashySection("calm", "none"))
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        try Wait.until(timeout: 20, "calm running") { try hub.transport("calm")?.status.state == .running }
        let firstPID = try XCTUnwrap(hub.transport("calm")?.pid)

        // Overwrite in place, as `cp` does (same inode, new bytes).
        let bytes = try Data(contentsOf: URL(fileURLWithPath: v2))
        let handle = try XCTUnwrap(FileHandle(forWritingAtPath: installed))
        handle.truncateFile(atOffset: 0)
        handle.write(bytes)
        handle.closeFile()
        usleep(500_000)
        XCTAssertNotNil(try? hub.status(), "the hub survived the overwrite")
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)

        // The documented way: install to a temporary name, rename over, SIGHUP.
        let temp = plugins + "/.libyaok-plugin-crashy.so.new"
        try FileManager.default.copyItem(atPath: v2, toPath: temp)
        chmod(temp, 0o755)
        XCTAssertEqual(rename(temp, installed), 0)
        hub.signal(SIGHUP)
        try Wait.until(timeout: 20, "calm runs version 2.0.0 in a new process") {
            let t = try hub.transport("calm")
            return t?.pluginVersion == "2.0.0" && t?.status.state == .running && t?.pid != firstPID
        }
        struct Listing: Decodable { var plugins: [DiscoveredPlugin] }
        let listed = try JSONDecoder().decode(Listing.self, from: hub.client.request("plugins")).plugins
        XCTAssertEqual(listed.first { $0.kind == "crashy" }?.version, "2.0.0")
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)
    }
}
