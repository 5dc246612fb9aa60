import Foundation
import XCTest
import YaokPluginKit
@testable import YaokWiFiDirectPlugin
import YaokTesting
@testable import YaokProcess

/// Config keys, and the transport's start paths that can be real on this machine.
final class TransportTests: XCTestCase {
    func testDefaultsAndBadKeys() throws {
        let s = try TestConfig.settings([:])
        XCTAssertEqual(s.interface, "wlan0")
        XCTAssertTrue(s.manageSupplicant)
        XCTAssertEqual(s.ctrlInterface, "/run/wpa_supplicant/p2p-dev-wlan0")
        XCTAssertEqual(s.groupAddress, "192.168.49.1")
        XCTAssertEqual(s.prefixLength, 24)
        XCTAssertEqual(s.port, 7814)
        XCTAssertEqual(s.cost, 5)
        XCTAssertEqual(s.frequency, 2437)
        XCTAssertEqual(s.wpsMethod, .pbc)
        XCTAssertEqual(s.readTimeoutMs, 60_000)
        XCTAssertEqual(s.dhcpRange.0, "192.168.49.10")
        XCTAssertEqual(s.dhcpRange.1, "192.168.49.250")
        XCTAssertEqual(s.netmask, "255.255.255.0")
        XCTAssertEqual(s.maxFramesPerSecond, 2000)
        XCTAssertEqual(s.rateLimitDisconnectMs, 5_000)
        XCTAssertEqual(try TestConfig.settings(["max_frames_per_second": .int(0)]).maxFramesPerSecond, 0, "0 turns the limit off")

        func error(_ values: [String: ConfigValue]) -> String {
            do { _ = try TestConfig.settings(values); return "no error" } catch { return "\(error)" }
        }
        XCTAssertEqual(error(["plugin": .string("wifidirect")]), "no error", "the host's plugin key is accepted")
        XCTAssertTrue(error(["prot": .int(1)]).hasPrefix("transports.wifi-direct.prot (line 20): unknown key"))
        XCTAssertEqual(error(["frequency": .int(2442)]), "transports.wifi-direct.frequency (line 20): 2442 MHz is not a 2.4 GHz social channel (2412, 2437 or 2462)")
        XCTAssertTrue(error(["wps_method": .string("pin")]).contains("8-digit wps_pin"))
        XCTAssertEqual(error(["wps_method": .string("pin"), "wps_pin": .string("12345670")]), "no error")
        XCTAssertTrue(error(["group_address": .string("192.168.49.1")]).contains("expected IPv4 address/prefix"))
        XCTAssertTrue(error(["interface": .string("wl an0")]).contains("not a network interface name"))
    }

    func transport(_ values: [String: ConfigValue], probe: (() throws -> RadioProbeResult)? = nil) throws -> (WiFiDirectTransport, LinkEventRecorder) {
        let r = LinkEventRecorder()
        let t = WiFiDirectTransport(settings: try TestConfig.settings(values), identity: TestLinkIdentity(seed: 1), events: r)
        if let probe { t.probe = probe }
        addTeardownBlock { t.stop() }
        return (t, r)
    }

    /// A stand-in radio (this machine has none) so the supplicant paths after the probe run for real.
    static let fakeRadio: @Sendable () throws -> RadioProbeResult = {
        RadioProbeResult(wiphys: [Wiphy(index: 0, name: "phy0", interfaceTypes: [.station, .p2pGO, .p2pClient], frequencies: [2412, 2437, 2462])])
    }

    func testStartOnThisMachineReportsTheRealRadioSituation() throws {
        let (t, _) = try transport(["runtime_dir": .string(TestConfig.tempDir("probe"))])
        guard (try? NL80211Probe.probe()) == nil else { throw XCTSkip("this machine has a P2P radio") }
        XCTAssertThrowsError(try t.start()) { error in
            guard case .unavailable(let why)? = error as? TransportError else { return XCTFail("\(error)") }
            XCTAssertEqual(t.status.reason, why)
        }
        XCTAssertEqual(t.status.state, .unavailable)
        if !FileManager.default.fileExists(atPath: "/sys/module/cfg80211") {
            XCTAssertEqual(t.status.reason, "no Wi-Fi: the kernel has no nl80211 family (no wireless driver loaded)")
        }
    }

    func testMissingSupplicantBinaryFailsWithThePath() throws {
        let (t, _) = try transport(["supplicant_path": .string("/nonexistent/wpa_supplicant"), "runtime_dir": .string(TestConfig.tempDir("nobin"))],
                                   probe: Self.fakeRadio)
        XCTAssertThrowsError(try t.start())
        XCTAssertEqual(t.status.state, .failed)
        XCTAssertTrue(t.status.reason.contains("/nonexistent/wpa_supplicant does not exist"), t.status.reason)
    }

    func testAbsentControlSocketIsNamed() throws {
        let dir = TestConfig.tempDir("nosock")
        let (t, _) = try transport(["manage_supplicant": .bool(false), "ctrl_interface": .string("\(dir)/p2p-dev-wlan9"), "runtime_dir": .string(dir)],
                                   probe: Self.fakeRadio)
        XCTAssertThrowsError(try t.start())
        XCTAssertEqual(t.status.state, .failed)
        XCTAssertEqual(t.status.reason, "wpa_supplicant control socket \(dir)/p2p-dev-wlan9 does not exist (is wpa_supplicant running with that ctrl_interface?)")
    }

    /// A real supplicant without P2P on that socket (its global interface): the group request is
    /// refused and the transport says which command.
    func testASupplicantThatRefusesTheGroupFailsStart() throws {
        let dir = TestConfig.tempDir("refuse")
        try RequiredTool.require(WPAControlTests.binary, package: "wpasupplicant")
        let p = try ChildProcess(executable: WPAControlTests.binary, arguments: ["-g", "\(dir)/global"], logPath: "\(dir)/wpa.log", hint: "")
        defer { p.stop() }
        Wait.poll(timeout: 10) { FileManager.default.fileExists(atPath: "\(dir)/global") }
        let (t, r) = try transport(["manage_supplicant": .bool(false), "ctrl_interface": .string("\(dir)/global"), "runtime_dir": .string(dir)],
                                   probe: Self.fakeRadio)
        XCTAssertThrowsError(try t.start())
        XCTAssertEqual(t.status.state, .failed)
        XCTAssertEqual(t.status.reason, "wpa_supplicant does not know the command P2P_GROUP_ADD (built without P2P?)")
        XCTAssertTrue(r.logs.contains { $0.contains("cannot advertise _yaok._tcp") })
    }

    /// stop() lands while the supervisor is restarting a lost managed supplicant (the new one
    /// has not opened its control socket yet): it returns within 2 s, ends the new supplicant,
    /// and reports stopped. The real wpa_supplicant cannot run P2P without a radio, so the
    /// managed binary here is a stand-in speaking the control protocol (PING, OK to the rest);
    /// the VM test does the same with the real one on hwsim.
    func testStopDuringASupplicantRestartIsBoundedAndLeavesNoHelper() throws {
        try RequiredTool.require("/usr/bin/python3", package: "python3")
        let dir = TestConfig.tempDir("restart")
        let standIn = "\(dir)/stand-in-supplicant"
        try Self.standInSupplicant.write(toFile: standIn, atomically: true, encoding: .utf8)
        chmod(standIn, 0o755)
        let (t, r) = try transport(["supplicant_path": .string(standIn), "runtime_dir": .string(dir), "dhcp": .bool(false)],
                                   probe: Self.fakeRadio)
        try t.start()
        XCTAssertEqual(t.status.state, .starting, t.status.reason) // group requested; no radio, so none starts
        func pid() -> Int32? { t.status.details["supplicant"].flatMap { Int32($0.replacingOccurrences(of: "managed pid ", with: "")) } }
        let first = try XCTUnwrap(pid())
        // The next start hangs before it creates its control socket.
        XCTAssertTrue(FileManager.default.createFile(atPath: "\(dir)/slow-start", contents: nil))
        kill(first, SIGKILL)
        r.wait("the loss noticed", timeout: 5) { $0.logs.contains { $0.contains("lost wpa_supplicant") } }
        var second: Int32?
        Wait.poll(timeout: 15) {
            if let p = pid(), p != first { second = p }
            return second != nil
        }
        let restarting = try XCTUnwrap(second, "the supervisor starts a new supplicant within 15 s")
        XCTAssertEqual(kill(restarting, 0), 0, "the restart is in progress")
        let t0 = Date()
        t.stop()
        let took = Date().timeIntervalSince(t0)
        XCTAssertLessThan(took, 2.0, "stop() took \(took) s")
        XCTAssertEqual(t.status.state, .stopped)
        XCTAssertEqual(t.status.details["supplicant"], "managed, not running")
        XCTAssertNotEqual(kill(restarting, 0), 0, "the supplicant being started was ended")
        XCTAssertEqual(errno, ESRCH)
    }

    /// stop() lands while the supervisor is setting up a group that has just started (here, in
    /// a slow `ip addr add`): stop returns within 2 s, and the supervisor, which finishes that
    /// step after stop has returned, installs nothing: no dnsmasq left running, no TCP listener,
    /// state stays stopped. Stand-ins for the supplicant (it announces the group), `ip` and dnsmasq.
    func testStopWhileAGroupIsBeingSetUpLeavesNothingBehind() throws {
        try RequiredTool.require("/usr/bin/python3", package: "python3")
        let dir = TestConfig.tempDir("late-group")
        let supplicant = "\(dir)/stand-in-supplicant", ip = "\(dir)/stand-in-ip", dnsmasq = "\(dir)/stand-in-dnsmasq"
        try Self.standInSupplicant.write(toFile: supplicant, atomically: true, encoding: .utf8)
        // `ip addr add` takes 2 s (longer than stop waits for the supervisor); `ip link set` is quick.
        try """
        #!/bin/sh
        if [ "$1" = addr ]; then touch "\(dir)/ip-called"; sleep 2; touch "\(dir)/ip-done"; fi
        exit 0
        """.write(toFile: ip, atomically: true, encoding: .utf8)
        try "#!/bin/sh\nexec sleep 60\n".write(toFile: dnsmasq, atomically: true, encoding: .utf8)
        for path in [supplicant, ip, dnsmasq] { chmod(path, 0o755) }
        XCTAssertTrue(FileManager.default.createFile(atPath: "\(dir)/announce-group", contents: nil))
        let port = Loopback.freePort()
        let (t, r) = try transport(["supplicant_path": .string(supplicant), "ip_path": .string(ip), "dnsmasq_path": .string(dnsmasq),
                                    "runtime_dir": .string(dir), "group_address": .string("127.0.0.1/8"), "port": .int(Int(port))],
                                   probe: Self.fakeRadio)
        try t.start()
        XCTAssertTrue(Wait.poll(timeout: 10) { FileManager.default.fileExists(atPath: "\(dir)/ip-called") },
                      "the supervisor sets up the announced group: \(r.logs)")
        let t0 = Date()
        t.stop()
        let took = Date().timeIntervalSince(t0)
        XCTAssertLessThan(took, 2.0, "stop() took \(took) s")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/ip-done"), "stop returned while the supervisor was still in ip")
        XCTAssertTrue(t.waitForSupervisor(timeout: 10), "the supervisor ends after stop")
        XCTAssertTrue(FileManager.default.fileExists(atPath: "\(dir)/ip-done"))
        if let text = try? String(contentsOfFile: "\(dir)/dnsmasq.pid", encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            XCTAssertTrue(Wait.poll(timeout: 3) { kill(pid, 0) != 0 }, "a dnsmasq started after stop is still running")
        }
        XCTAssertEqual(t.status.details["listen"], "", "a link server was installed after stop")
        XCTAssertEqual(t.status.details["dhcp"], "not running")
        XCTAssertEqual(t.status.state, .stopped, t.status.reason)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        let connected = IPEndpoint(host: "127.0.0.1", port: port).withSockaddr { connect(fd, $0, $1) } == 0
        XCTAssertFalse(connected, "something listens on the group port after stop")
    }

    /// Answers wpa_supplicant's control protocol on `<ctrl_interface>/p2p-dev-<if>`: PONG to
    /// PING, an empty network list, OK to anything else. Sleeps first when `slow-start` exists.
    /// When `announce-group` exists, a P2P_GROUP_ADD is followed by P2P-GROUP-STARTED (as owner)
    /// to the sockets that sent ATTACH.
    static let standInSupplicant = """
    #!/usr/bin/python3
    import os, socket, sys, time
    conf = sys.argv[sys.argv.index("-c") + 1]
    iface = sys.argv[sys.argv.index("-i") + 1]
    ctrl = [l.split("=", 1)[1].strip() for l in open(conf) if l.startswith("ctrl_interface=")][0]
    if os.path.exists(os.path.join(os.path.dirname(conf), "slow-start")):
        time.sleep(60)
    announce = os.path.exists(os.path.join(os.path.dirname(conf), "announce-group"))
    os.makedirs(ctrl, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(os.path.join(ctrl, "p2p-dev-" + iface))
    monitors = set()
    while True:
        data, peer = s.recvfrom(4096)
        cmd = data.decode(errors="replace")
        reply = "PONG\\n" if cmd == "PING" else ("network id / ssid / bssid / flags\\n" if cmd == "LIST_NETWORKS" else "OK\\n")
        try:
            s.sendto(reply.encode(), peer)
            if cmd == "ATTACH":
                monitors.add(peer)
            if cmd.startswith("P2P_GROUP_ADD") and announce:
                for m in monitors:
                    s.sendto(b'<3>P2P-GROUP-STARTED p2p-' + iface.encode() + b'-0 GO ssid="DIRECT-yk" freq=2437 go_dev_addr=02:00:00:00:01:00', m)
        except OSError:
            pass
    """

    /// A helper left running by a hub that died is ended at the next start, but only when the
    /// pid file still names a process with the expected command.
    func testStaleHelperIsEndedOnlyWhenItIsTheRightProgram() throws {
        let dir = TestConfig.tempDir("stale")
        let sleeper = try ChildProcess(executable: "/usr/bin/sleep", arguments: ["30"], logPath: "\(dir)/sleep.log", hint: "")
        defer { sleeper.stop() }
        sleeper.writePIDFile("\(dir)/a.pid")
        XCTAssertNil(ChildProcess.endStale(pidFile: "\(dir)/a.pid", command: "wpa_supplicant"), "not the named program: left alone")
        XCTAssertTrue(sleeper.isRunning)
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/a.pid"), "the stale pid file is removed either way")
        sleeper.writePIDFile("\(dir)/b.pid")
        XCTAssertEqual(ChildProcess.endStale(pidFile: "\(dir)/b.pid", command: "sleep"), sleeper.pid)
        Wait.poll(timeout: 5) { !sleeper.isRunning }
        XCTAssertFalse(sleeper.isRunning)
        XCTAssertNil(ChildProcess.endStale(pidFile: "\(dir)/missing.pid", command: "sleep"))
    }
}
