import HubTestSupport
import Foundation
import XCTest
import YaokPluginKit
@testable import YaokHubCore
@testable import YaokSupervision
import YaokTesting

/// Real `yaok-hub` processes with real sockets and real plugins.
final class HubProcessTests: XCTestCase {
    /// A UDP port that was free a moment ago on loopback.
    static func freePort() -> UInt16 { TestSupport.freePort(type: Int32(SOCK_DGRAM.rawValue)) }

    /// A hub config in `dir`; `extra` is appended under `transports:`. Test hubs link to each
    /// other (and to raw peers posing as hubs) over UDP, so its `peer_roles` allows both.
    static func config(dir: String, pluginDirs: [String], udpPort: UInt16?, peers: [UInt16] = [], extra: String = "",
                       udpPeerRoles: String = "[endpoint, hub]") -> String {
        var s = """
        hub:
          name: test-hub
          data_dir: \(dir)/data
          control_socket: \(dir)/control.sock
          plugin_dirs: [\(pluginDirs.map { "\"\($0)\"" }.joined(separator: ", "))]
          log_level: debug
        router:
          custody_timeout_s: 5
        transports:

        """
        if let udpPort {
            s += """
              udp:
                enabled: true
                listen: 127.0.0.1:\(udpPort)
                peers: [\(peers.map { "\"127.0.0.1:\($0)\"" }.joined(separator: ", "))]
                keepalive_s: 1
                peer_roles: \(udpPeerRoles)

            """
        }
        return s + extra
    }

    func makePluginDir(_ c: [(file: String, defines: [String])]) throws -> String {
        let dir = try TestSupport.pluginDirectory(self)
        for p in c { _ = try TestSupport.buildCPlugin(into: dir, name: p.file, defines: p.defines) }
        return dir
    }

    func testEveryConfiguredTransportHasATruthfulStateAndFailuresDoNotStopOthers() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try makePluginDir([("libyaok-plugin-flaky.so", ["PLUGIN_KIND=\"flaky\"", "FAIL_STARTS=2"]),
                                         ("libyaok-plugin-broken.so", ["PLUGIN_KIND=\"broken\"", "FAIL_STARTS=-1"]),
                                         ("libyaok-plugin-future.so", ["PLUGIN_KIND=\"future\"", "ABI_VERSION=999"])])
        let dir = try TestSupport.temporaryDirectory(self)
        let extra = """
          flaky:
            enabled: true
          broken:
            enabled: true
          picky:
            enabled: true
            plugin: broken
            reject_me: 1
          ghost:
            enabled: true
          future:
            enabled: true
          off:
            enabled: false
            plugin: flaky

        """
        let hub = try HubProcess(dir: dir, config: Self.config(dir: dir, pluginDirs: [plugins], udpPort: Self.freePort(), extra: extra), executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()

        // The throwing start is retried with backoff (1 s, 2 s) and then runs.
        try Wait.until(timeout: 20, "flaky to start after retries") { try hub.transport("flaky")?.status.state == .running }
        try Wait.until(timeout: 20, "broken to fail a second time") { try (hub.transport("broken")?.startFailures ?? 0) >= 2 }
        let status = try hub.status()
        // Honest, quiet logs: the ready line counts only what runs and names what does not; a start
        // failure is logged once until its reason changes.
        let log = try String(contentsOfFile: hub.logPath, encoding: .utf8)
        XCTAssertTrue(log.contains("ready: 1 of 6 transports running (udp); not running: flaky failed ("), log)
        XCTAssertTrue(log.contains("transport flaky (flaky) started in process") && log.contains("after 2 failed attempts"), log)
        let brokenErrors = log.split(separator: "\n").filter { $0.contains("transport broken failed to start") }
        XCTAssertEqual(brokenErrors.count, 1, "one error line for \(status.transports.first { $0.name == "broken" }?.startFailures ?? 0) failures with the same reason:\n\(log)")
        func t(_ name: String) -> TransportRuntimeStatus? { status.transports.first { $0.name == name } }
        XCTAssertEqual(t("udp")?.status.state, .running)
        XCTAssertEqual(t("broken")?.status.state, .failed)
        XCTAssertTrue(t("broken")?.status.reason.contains("simulated start failure") == true, "\(String(describing: t("broken")))")
        XCTAssertGreaterThanOrEqual(t("broken")?.startFailures ?? 0, 1)
        XCTAssertNotNil(t("broken")?.nextRetryInSeconds, "a failing transport shows when it retries")
        XCTAssertEqual(t("picky")?.status.state, .failed)
        XCTAssertTrue(t("picky")?.status.reason.contains("reject_me") == true)
        XCTAssertEqual(t("ghost")?.status.state, .failed)
        XCTAssertTrue(t("ghost")?.status.reason.contains("no plugin of kind \"ghost\"") == true)
        XCTAssertEqual(t("off")?.status.state, .stopped)
        XCTAssertEqual(t("off")?.enabled, false)
        // A refused plugin: status and check-config say why, not just "not found".
        XCTAssertEqual(t("future")?.status.state, .failed)
        XCTAssertTrue(t("future")?.status.reason.contains("was refused") == true && t("future")?.status.reason.contains("plugin has ABI version 999") == true,
                      "\(String(describing: t("future")?.status.reason))")
        let check = try TestSupport.run(hubExe, ["check-config", hub.configPath])
        XCTAssertNotEqual(check.status, 0)
        XCTAssertTrue(check.output.contains("plugin has ABI version 999, this hub has ABI version 1"), check.output)

        // The human status lists every transport.
        let text = try TestSupport.run(hubExe, ["status", "--socket", hub.socketPath])
        XCTAssertEqual(text.status, 0)
        for name in ["udp", "flaky", "broken", "picky", "ghost", "off"] { XCTAssertTrue(text.output.contains(name), text.output) }
        // In `status --json` a detail that is a number is a JSON number.
        let json = try TestSupport.run(hubExe, ["status", "--socket", hub.socketPath, "--json"])
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any])
        let udpDetails = try XCTUnwrap(((report["transports"] as? [[String: Any]])?.first { $0["name"] as? String == "udp" }?["status"] as? [String: Any])?["details"] as? [String: Any])
        XCTAssertTrue(udpDetails["sessions"] is NSNumber, "\(udpDetails)")
        XCTAssertTrue(udpDetails["listen"] is String, "\(udpDetails)")
        XCTAssertNoThrow(try JSONDecoder().decode(Hub.StatusReport.self, from: Data(json.output.utf8)), "and it still reads back")

        // `plugins` shows loaded plugins with ABI and path.
        let plugins_ = try TestSupport.run(hubExe, ["plugins", "--socket", hub.socketPath, "--json"])
        XCTAssertTrue(plugins_.output.contains("\"kind\" : \"flaky\""), plugins_.output)
        let identity = try TestSupport.run(hubExe, ["identity", "--socket", hub.socketPath])
        XCTAssertTrue(identity.output.contains("fingerprint"), identity.output)
    }

    func testTwoHubsLinkOverUDPAndSIGHUPTogglesATransportWithoutDroppingTheLink() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try makePluginDir([("libyaok-plugin-extra.so", ["PLUGIN_KIND=\"extra\""])])
        let dirA = try TestSupport.temporaryDirectory(self), dirB = try TestSupport.temporaryDirectory(self)
        let portA = Self.freePort(), portB = Self.freePort()
        let extraOff = "  extra:\n    enabled: false\n"
        let extraOn = "  extra:\n    enabled: true\n"
        let a = try HubProcess(dir: dirA, config: Self.config(dir: dirA, pluginDirs: [plugins], udpPort: portA, peers: [portB], extra: extraOff), executable: hubExe)
        let b = try HubProcess(dir: dirB, config: Self.config(dir: dirB, pluginDirs: [plugins], udpPort: portB, peers: [portA]), executable: hubExe)
        defer { a.stop(); b.stop() }
        try a.waitReady()
        try b.waitReady()

        try Wait.until(timeout: 20, "udp link up on both hubs") {
            try a.transport("udp")?.status.links == 1 && b.transport("udp")?.status.links == 1
        }
        let linkBefore = try XCTUnwrap(a.status().router.links.first)
        XCTAssertEqual(linkBefore.role, "hub")
        XCTAssertEqual(try a.transport("extra")?.status.state, .stopped)

        // Enable `extra` and reload: it starts; the UDP link is untouched.
        try Self.config(dir: dirA, pluginDirs: [plugins], udpPort: portA, peers: [portB], extra: extraOn).write(toFile: a.configPath, atomically: true, encoding: .utf8)
        a.signal(SIGHUP)
        try Wait.until(timeout: 10, "extra running after SIGHUP") { try a.transport("extra")?.status.state == .running }
        XCTAssertEqual(try a.status().router.links.first, linkBefore, "the unchanged transport kept its link")
        XCTAssertEqual(try a.transport("udp")?.status.links, 1)

        // A bad edit is refused and the running config stays.
        try "hub:\n  bogus_key: 1\n".write(toFile: a.configPath, atomically: true, encoding: .utf8)
        a.signal(SIGHUP)
        try Wait.until(timeout: 10, "reload error logged") { a.log.contains("keeping the running config") }
        XCTAssertTrue(a.log.contains("hub.bogus_key (line 2)"), a.log)
        XCTAssertEqual(try a.transport("extra")?.status.state, .running)

        // Disable it again.
        try Self.config(dir: dirA, pluginDirs: [plugins], udpPort: portA, peers: [portB], extra: extraOff).write(toFile: a.configPath, atomically: true, encoding: .utf8)
        a.signal(SIGHUP)
        try Wait.until(timeout: 10, "extra stopped after SIGHUP") { try a.transport("extra")?.status.state == .stopped }
        XCTAssertEqual(try a.status().router.links.first, linkBefore)

        // Frames really flow: keep-alives and offers were counted both ways.
        let udpA = try XCTUnwrap(a.transport("udp"))
        XCTAssertGreaterThan(udpA.status.framesIn, 0)
        XCTAssertGreaterThan(udpA.status.framesOut, 0)
    }

    func testSIGTERMStopsWithinFiveSeconds() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try makePluginDir([])
        let dir = try TestSupport.temporaryDirectory(self)
        let hub = try HubProcess(dir: dir, config: Self.config(dir: dir, pluginDirs: [plugins], udpPort: Self.freePort()), executable: hubExe)
        try hub.waitReady()
        let start = Date()
        hub.signal(SIGTERM)
        let status = hub.waitExit(timeout: 5)
        XCTAssertNotNil(status, "hub did not exit within 5 s of SIGTERM")
        XCTAssertEqual(status, 0)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5)
        XCTAssertFalse(FileManager.default.fileExists(atPath: hub.socketPath), "control socket removed on exit")
        XCTAssertTrue(hub.log.contains("hub stopped"))
    }

    /// systemd's stop (and Ctrl-C in a terminal) signals the hub and its plugin processes at
    /// once. The plugin processes leave their end to the hub, which stops each transport
    /// through its `stop` call (where BLE and Wi-Fi Direct tear down what they set up): none
    /// may die of the signal first and have to be killed.
    func testSIGTERMToTheWholeProcessGroupStillStopsEveryTransportThroughTheHub() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try makePluginDir([])
        let dir = try TestSupport.temporaryDirectory(self)
        let hub = try HubProcess(dir: dir, config: Self.config(dir: dir, pluginDirs: [plugins], udpPort: Self.freePort()), executable: hubExe)
        try hub.waitReady()
        let hubPID = hub.process.processIdentifier
        let children = Self.childPIDs(of: hubPID)
        XCTAssertFalse(children.isEmpty, "the transports run in plugin processes")
        for pid in [hubPID] + children { kill(pid, SIGTERM) }
        XCTAssertEqual(hub.waitExit(timeout: 10), 0, "hub did not exit cleanly within 10 s")
        XCTAssertTrue(hub.log.contains("hub stopped"))
        XCTAssertFalse(hub.log.contains("did not stop within"), "a plugin process died of the signal: \(hub.log)")
    }

    /// The processes whose parent is `pid` (from /proc/*/stat).
    static func childPIDs(of pid: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { name -> Int32? in
            guard let child = Int32(name), let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            // Fields after the command name: state, then the parent's PID.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && Int32(fields[1]) == pid ? child : nil
        }
    }

    func testBadConfigExits78AndCheckConfigNamesKeyAndLine() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let dir = try TestSupport.temporaryDirectory(self)
        let bad = dir + "/bad.yaml"
        try "hub:\n  name: x\nrouter:\n  hop_limit: many\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let run = try TestSupport.run(hubExe, ["run", "--config", bad], timeout: 30)
        XCTAssertEqual(run.status, 78)
        XCTAssertTrue(run.output.contains("router.hop_limit (line 4)"), run.output)
        let check = try TestSupport.run(hubExe, ["check-config", bad])
        XCTAssertEqual(check.status, 78)
        XCTAssertTrue(check.output.contains("router.hop_limit (line 4): expected an integer"), check.output)

        // A plugin's own section is checked by the plugin: a bad UDP listen address.
        let plugins = try makePluginDir([])
        let badPlugin = dir + "/badplugin.yaml"
        try Self.config(dir: dir, pluginDirs: [plugins], udpPort: nil, extra: "  udp:\n    enabled: true\n    listen: nowhere\n")
            .write(toFile: badPlugin, atomically: true, encoding: .utf8)
        let check2 = try TestSupport.run(hubExe, ["check-config", badPlugin])
        XCTAssertEqual(check2.status, 78)
        XCTAssertTrue(check2.output.contains("transports.udp.listen (line 12): \"nowhere\" has no port"), check2.output)
        // The address parser's own reason (not "expected IPv4 host:port" for a port of
        // 99999), and a typo gets the nearest key, with the keys the hub reads listed.
        for (section, says) in [("    listen: 0.0.0.0:99999\n", "the port must be a number from 0 to 65535"),
                                ("    listn: 0.0.0.0:7811\n", "unknown key; did you mean `listen`? known keys are: enabled, idle_timeout_s, keepalive_s, listen, max_sessions, peer_roles, peers, plugin")] {
            let file = dir + "/typo.yaml"
            try Self.config(dir: dir, pluginDirs: [plugins], udpPort: nil, extra: "  udp:\n    enabled: true\n" + section)
                .write(toFile: file, atomically: true, encoding: .utf8)
            let r = try TestSupport.run(hubExe, ["check-config", file])
            XCTAssertEqual(r.status, 78)
            XCTAssertTrue(r.output.contains(says), r.output)
        }
        let hostTypo = dir + "/hosttypo.yaml"
        try "hub:\n  name: x\nrouter:\n  custody_timout_s: 5\n".write(toFile: hostTypo, atomically: true, encoding: .utf8)
        let check4 = try TestSupport.run(hubExe, ["check-config", hostTypo])
        XCTAssertEqual(check4.status, 78)
        XCTAssertTrue(check4.output.contains("router.custody_timout_s (line 4): unknown key; did you mean `custody_timeout_s`?"), check4.output)
        // Every wrong host key is named in one run, in file order, each with its line.
        let several = dir + "/several.yaml"
        try "hub:\n  nmae: x\nrouter:\n  hop_limit: many\n  policy: flood\ntransports:\n  udp:\n    port: 1\n  mesh:\n    enabled: yes please\n"
            .write(toFile: several, atomically: true, encoding: .utf8)
        let checkAll = try TestSupport.run(hubExe, ["check-config", several])
        XCTAssertEqual(checkAll.status, 78)
        let said = checkAll.output.split(separator: "\n").map(String.init)
        let expected = ["hub.nmae (line 2): unknown key; did you mean `name`?", "router.hop_limit (line 4): expected an integer",
                        "router.policy (line 5): \"flood\" is not one of", "transports.udp.enabled (line 7): is required",
                        "transports.mesh.enabled (line 10): expected", "5 errors"]
        XCTAssertEqual(said.count, expected.count, checkAll.output)
        for (line, says) in zip(said, expected) { XCTAssertTrue(line.hasPrefix(several + ": ") && line.contains(says), "\(line) should say \(says)") }

        let good = dir + "/good.yaml"
        try Self.config(dir: dir, pluginDirs: [plugins], udpPort: 7000).write(toFile: good, atomically: true, encoding: .utf8)
        let check3 = try TestSupport.run(hubExe, ["check-config", good])
        XCTAssertEqual(check3.status, 0, check3.output)
        XCTAssertTrue(check3.output.contains("OK"))
        XCTAssertFalse(check3.output.contains("warning"), check3.output)

        // A console on the field Wi-Fi without TLS is valid, but its password would cross
        // the air in clear: check-config says so, naming the key and line.
        let open = dir + "/open-console.yaml"
        try "hub:\n  name: x\nconsole:\n  enabled: true\n  listen: 0.0.0.0:8480\n".write(toFile: open, atomically: true, encoding: .utf8)
        let check5 = try TestSupport.run(hubExe, ["check-config", "--skip-plugins", open])
        XCTAssertEqual(check5.status, 0, check5.output)
        XCTAssertTrue(check5.output.contains("warning: console.listen (line 5): 0.0.0.0:8480 without `tls: true`"), check5.output)
    }

    func testReadinessAndWatchdogOverNotifySocket() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try makePluginDir([])
        let dir = try TestSupport.temporaryDirectory(self)
        let notifyPath = dir + "/notify.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var addr = try ControlClient.address(notifyPath)
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        XCTAssertEqual(rc, 0)
        var tv = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let hub = try HubProcess(dir: dir, config: Self.config(dir: dir, pluginDirs: [plugins], udpPort: Self.freePort()), executable: hubExe,
                                 extraEnvironment: ["NOTIFY_SOCKET": notifyPath, "WATCHDOG_USEC": "400000"])
        defer { hub.stop() }
        var seen: [String] = []
        func receive() -> String? {
            var buf = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &buf, buf.count)
            return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self) : nil
        }
        while let m = receive() {
            seen.append(m)
            if seen.contains(where: { $0.contains("READY=1") }) && seen.contains(where: { $0.contains("WATCHDOG=1") }) { break }
        }
        XCTAssertTrue(seen.contains { $0.contains("READY=1") }, "\(seen)")
        XCTAssertTrue(seen.contains { $0.contains("WATCHDOG=1") }, "\(seen)")
        hub.signal(SIGTERM)
        var stopping = false
        while let m = receive() { if m.contains("STOPPING=1") { stopping = true; break } }
        XCTAssertTrue(stopping)
    }
}
