import Foundation
import XCTest
@testable import YaokEndpoint
import YaokTesting
import YaokProcess

/// `yaok --hub p2p://…` without a radio: the address syntax, the errors a user sees before any
/// radio work (no control socket, a supplicant that cannot do P2P, no DHCP client), and the
/// small parsers the join relies on. The join itself runs in Tests/vmlab/wifi-test.sh.
final class P2PHubJoinTests: XCTestCase {
    func tempDir(_ name: String) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("yaok-p2p-test-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        return dir
    }

    func testAddressSyntax() throws {
        let plain = try P2PHubTarget.parse("p2p://wlan1")
        XCTAssertEqual(plain.interface, "wlan1")
        XCTAssertEqual(plain.controlDirectory, "/run/wpa_supplicant")
        XCTAssertNil(plain.pin)
        XCTAssertNil(plain.instance)
        XCTAssertEqual(plain.discoveryTimeout, 30)
        XCTAssertEqual(plain.controlCandidates, ["/run/wpa_supplicant/p2p-dev-wlan1", "/run/wpa_supplicant/wlan1"])
        XCTAssertEqual(plain.description, "p2p://wlan1")

        let full = try P2PHubTarget.parse("p2p://wlp2s0?ctrl=/run/wpa-phone/&pin=12345670&name=yaok-hub&timeout=45")
        XCTAssertEqual(full.interface, "wlp2s0")
        XCTAssertEqual(full.controlDirectory, "/run/wpa-phone")
        XCTAssertEqual(full.pin, "12345670")
        XCTAssertEqual(full.instance, "yaok-hub")
        XCTAssertEqual(full.discoveryTimeout, 45)
        XCTAssertEqual(full.controlCandidates.first, "/run/wpa-phone/p2p-dev-wlp2s0")
        XCTAssertEqual(full.description, "p2p://wlp2s0?ctrl=/run/wpa-phone&pin=…&name=yaok-hub&timeout=45", "the PIN is not shown")
        XCTAssertFalse(full.description.contains("12345670"))
    }

    func testBadAddressesAreSpecific() {
        let cases: [(String, String)] = [
            ("p2p://", "no interface after p2p://"),
            ("p2p://?pin=12345670", "no interface after p2p://"),
            ("p2p://wlan0/x", "is not a network interface name"),
            ("p2p://averyveryverylongname0", "is not a network interface name"),
            ("p2p://wlan0?pin=1234", "pin must be 8 digits"),
            ("p2p://wlan0?pin=1234567a", "pin must be 8 digits"),
            ("p2p://wlan0?ctrl=run/wpa", "ctrl must be the absolute path"),
            ("p2p://wlan0?timeout=0", "timeout must be 1-600 seconds"),
            ("p2p://wlan0?timeout=abc", "timeout must be 1-600 seconds"),
            ("p2p://wlan0?name=a.b", "name must be one DNS label"),
            ("p2p://wlan0?pin=12345670&pin=12345670", "pin given twice"),
            ("p2p://wlan0?mode=go", "unknown option mode (known: ctrl, pin, name, timeout)"),
            ("p2p://wlan0?pin", "\"pin\" is not key=value"),
            ("p2p://wlan0?", "\"\" is not key=value"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try P2PHubTarget.parse(text), text) { error in
                guard case .badAddress(let t, _)? = error as? P2PHubError else { return XCTFail("\(text): \(error)") }
                XCTAssertEqual(t, text.replacingOccurrences(of: "pin=[^&]+", with: "pin=…", options: .regularExpression), "the PIN masked")
                XCTAssertTrue("\(error)".contains(expected), "\(text): \(error)")
                XCTAssertFalse("\(error)".contains("1234"), "no PIN in errors")
            }
        }
    }

    func testOtherSchemesPassThrough() throws {
        XCTAssertEqual(try P2PHubJoin.hubAddress("tcp://192.168.49.1:7814"), .tcp(host: "192.168.49.1", port: 7814))
        XCTAssertThrowsError(try P2PHubJoin.hubAddress("tcp://nohost")) { XCTAssertEqual("\($0)", EndpointError.badHubAddress("tcp://nohost").description) }
    }

    func testNoControlSocketNamesThePaths() throws {
        let dir = try tempDir("noctrl")
        XCTAssertThrowsError(try P2PHubJoin.hubAddress("p2p://wlan7?ctrl=\(dir)")) { error in
            XCTAssertEqual(error as? P2PHubError, .noControlSocket(tried: ["\(dir)/p2p-dev-wlan7", "\(dir)/wlan7"]))
            let text = "\(error)"
            XCTAssertTrue(text.hasPrefix("no wpa_supplicant control socket at \(dir)/p2p-dev-wlan7 or \(dir)/wlan7"), text)
            XCTAssertTrue(text.contains("ctrl_interface=\(dir)"), text)
        }
    }

    /// A real wpa_supplicant on `lo` with driver `none` has a control socket but no P2P: the
    /// join stops at the first P2P command with the supplicant's refusal, and leaves no
    /// client socket behind.
    func testASupplicantWithoutP2PIsRefusedByName() throws {
        let binary = "/usr/sbin/wpa_supplicant"
        try RequiredTool.require(binary, package: "wpasupplicant")
        let dir = try tempDir("nop2p")
        try "ctrl_interface=\(dir)/ctrl\n".write(toFile: "\(dir)/wpa.conf", atomically: true, encoding: .utf8)
        let p = try ChildProcess(executable: binary, arguments: ["-D", "none", "-i", "lo", "-c", "\(dir)/wpa.conf"], logPath: "\(dir)/wpa.log", hint: "")
        addTeardownBlock { p.stop() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: "\(dir)/ctrl/lo") {
            guard Date() < deadline, p.isRunning else { throw XCTSkip("this wpa_supplicant cannot run with driver none: \(p.logTail())") }
            usleep(20_000)
        }
        var lines: [String] = []
        XCTAssertThrowsError(try P2PHubJoin.join(P2PHubTarget.parse("p2p://lo?ctrl=\(dir)/ctrl&timeout=2"), log: { lines.append($0) })) { error in
            guard case .supplicant(let why)? = error as? P2PHubError else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("P2P_SERV_DISC_REQ"), why)
            XCTAssertTrue("\(error)".hasPrefix("wpa_supplicant: "), "\(error)")
        }
        XCTAssertEqual(lines.first, "p2p: asking for _yaok._tcp through \(dir)/ctrl/lo", "the P2P Device socket is absent, the interface's is used")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: "\(dir)/ctrl").filter { $0 != "lo" }
        XCTAssertEqual(leftovers, [], "our client sockets are gone")
    }

    func testDHCPClientSearch() throws {
        let empty = try tempDir("nodhcp")
        XCTAssertNil(DHCPClient.find(in: [empty]))
        let text = P2PHubError.noDHCPClient(interface: "p2p-wlan1-0", lookedIn: [empty]).description
        XCTAssertEqual(text, "no DHCP client found (looked for dhclient, udhcpc, busybox udhcpc, dhcpcd in \(empty)) and the group interface p2p-wlan1-0 has no IPv4 address; install one (e.g. Debian's busybox or isc-dhcp-client)")

        let bin = try tempDir("dhcpbin")
        func tool(_ name: String, _ body: String = "exit 0") throws {
            XCTAssertTrue(FileManager.default.createFile(atPath: "\(bin)/\(name)", contents: Data("#!/bin/sh\n\(body)\n".utf8), attributes: [.posixPermissions: 0o755]))
        }
        // A busybox without the udhcpc applet is not a DHCP client.
        try tool("busybox", "echo ls; echo cat")
        XCTAssertNil(DHCPClient.find(in: [empty, bin]))
        try tool("busybox", "echo ls; echo udhcpc")
        XCTAssertEqual(DHCPClient.find(in: [empty, bin]), DHCPClient(kind: .busybox, path: "\(bin)/busybox"))
        try tool("dhcpcd")
        XCTAssertEqual(DHCPClient.find(in: [bin])?.kind, .busybox, "busybox udhcpc before dhcpcd")
        try tool("udhcpc")
        XCTAssertEqual(DHCPClient.find(in: [bin])?.kind, .udhcpc)
        try tool("dhclient")
        XCTAssertEqual(DHCPClient.find(in: [empty, bin]), DHCPClient(kind: .dhclient, path: "\(bin)/dhclient"))
    }

    /// A DHCP client that gets no lease: the error names the client and the interface.
    func testDHCPFailureNamesTheClient() throws {
        let bin = try tempDir("dhcpfail")
        XCTAssertTrue(FileManager.default.createFile(atPath: "\(bin)/udhcpc", contents: Data("#!/bin/sh\necho 'udhcpc: no lease, failing' >&2\nexit 1\n".utf8),
                                                    attributes: [.posixPermissions: 0o755]))
        XCTAssertThrowsError(try P2PHubJoin.lease("p2p-wlan1-0", client: DHCPClient(kind: .udhcpc, path: "\(bin)/udhcpc"), local: bin)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.hasPrefix("\(bin)/udhcpc got no DHCP lease on p2p-wlan1-0: "), text)
            XCTAssertTrue(text.contains("no lease, failing"), text)
        }
    }

    func testSmallParsers() {
        XCTAssertEqual(P2PHubJoin.keyValues("wpa_state=COMPLETED\nssid=DIRECT-ab yaok\nmode=P2P client\nnoise\n"),
                       ["wpa_state": "COMPLETED", "ssid": "DIRECT-ab yaok", "mode": "P2P client"])
        let leases = """
        lease {
          interface "p2p-wlan1-0";
          fixed-address 192.168.49.23;
          option subnet-mask 255.255.255.0;
          option dhcp-server-identifier 192.168.49.1;
        }
        lease {
          option dhcp-server-identifier 10.0.0.1;
        }
        """
        XCTAssertEqual(P2PHubJoin.dhclientServer(leases), "10.0.0.1", "the newest lease")
        XCTAssertNil(P2PHubJoin.dhclientServer("option dhcp-server-identifier nonsense;"))
        XCTAssertEqual(P2PHubJoin.firstHost("192.168.49.23", prefix: 24), "192.168.49.1")
        XCTAssertEqual(P2PHubJoin.firstHost("10.1.2.200", prefix: 25), "10.1.2.129")
        XCTAssertEqual(P2PHubJoin.firstHost("garbage", prefix: 24), "192.168.49.1")
        let lo = P2PHubJoin.ipv4(of: "lo")
        XCTAssertEqual(lo?.address, "127.0.0.1")
        XCTAssertEqual(lo?.prefix, 8)
        XCTAssertNil(P2PHubJoin.ipv4(of: "yaok-no-such-if"))
        XCTAssertTrue(P2PHubJoin.waitUp("lo", timeout: 1))
        XCTAssertFalse(P2PHubJoin.waitUp("yaok-no-such-if", timeout: 0.3))
    }
}
