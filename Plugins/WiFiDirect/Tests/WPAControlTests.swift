import Foundation
import XCTest
import YaokPluginKit
@testable import YaokWiFiDirectPlugin
@testable import YaokEndpoint
import YaokTesting
@testable import YaokWPA
@testable import YaokProcess

/// The control-interface client against a real wpa_supplicant (Debian's wpasupplicant). This
/// machine has no Wi-Fi, so the supplicant runs with only its global control socket (`-g`),
/// which needs no interface: real PING, real refusals, a real vanishing socket.
final class WPAControlTests: XCTestCase {
    static let binary = "/usr/sbin/wpa_supplicant"

    func startGlobalSupplicant(_ dir: String) throws -> ChildProcess {
        try RequiredTool.require(Self.binary, package: "wpasupplicant")
        let p = try ChildProcess(executable: Self.binary, arguments: ["-g", "\(dir)/global"], logPath: "\(dir)/wpa.log", hint: "")
        addTeardownBlock { p.stop() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: "\(dir)/global") {
            guard Date() < deadline, p.isRunning else { XCTFail("no global socket: \(p.logTail())"); break }
            usleep(20_000)
        }
        return p
    }

    func testRequestsRefusalsAndAVanishingSocket() throws {
        let dir = TestConfig.tempDir("ctrl")
        let p = try startGlobalSupplicant(dir)
        let c = try WPAControlSocket(path: "\(dir)/global", localDirectory: dir)
        XCTAssertEqual(try c.request("PING"), "PONG\n")
        // A command the global interface does not know: a typed error naming it.
        XCTAssertThrowsError(try c.checked("P2P_GROUP_ADD persistent freq=2437")) {
            XCTAssertEqual($0 as? WPAControlError, .unknownCommand("P2P_GROUP_ADD"))
        }
        // A command it knows but refuses.
        XCTAssertThrowsError(try c.expectOK("INTERFACE_REMOVE yaok-no-such-if")) { error in
            guard case .refused(let command, let reply)? = error as? WPAControlError else { return XCTFail("\(error)") }
            XCTAssertEqual(command, "INTERFACE_REMOVE")
            XCTAssertTrue(reply.hasPrefix("FAIL"), reply)
        }
        // Events: ATTACH works on a second socket.
        let events = try WPAControlSocket(path: "\(dir)/global", localDirectory: dir)
        try events.attach()
        XCTAssertNil(try events.receive(timeout: 0.2), "nothing happens on an idle supplicant")

        // The supplicant exits: requests on the open socket fail (not hang), a new socket names the missing path.
        p.stop()
        XCTAssertThrowsError(try c.request("PING", timeout: 1)) { error in
            switch error as? WPAControlError {
            case .unreachable?, .timeout?: break
            default: XCTFail("unexpected \(error)")
            }
        }
        XCTAssertThrowsError(try WPAControlSocket(path: "\(dir)/global", localDirectory: dir)) {
            XCTAssertEqual($0 as? WPAControlError, .socketMissing(path: "\(dir)/global"))
            XCTAssertTrue("\($0)".contains("does not exist"))
        }
        c.close()
        events.close()
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix("yaok-wpa-") }
        XCTAssertEqual(leftovers, [], "client sockets are removed on close")
    }

    /// A real supplicant with a saved persistent group (driver `none` on `lo`: no radio needed
    /// for the network list): the client list is emptied in memory and in the saved file.
    func testPersistentGroupClientListIsClearedAndSaved() throws {
        try RequiredTool.require(Self.binary, package: "wpasupplicant")
        let dir = TestConfig.tempDir("clients")
        let conf = "\(dir)/wpa.conf"
        try """
        ctrl_interface=\(dir)/ctrl
        update_config=1
        network={
        \tssid="DIRECT-ab"
        \tbssid=42:00:00:00:00:00
        \tpsk="passphrase-1"
        \tproto=RSN
        \tkey_mgmt=WPA-PSK
        \tpairwise=CCMP
        \tmode=3
        \tdisabled=2
        \tp2p_client_list=42:00:00:00:01:00
        }

        """.write(toFile: conf, atomically: true, encoding: .utf8)
        let p = try ChildProcess(executable: Self.binary, arguments: ["-D", "none", "-i", "lo", "-c", conf], logPath: "\(dir)/wpa.log", hint: "")
        addTeardownBlock { p.stop() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: "\(dir)/ctrl/lo") {
            guard Date() < deadline, p.isRunning else { throw XCTSkip("this wpa_supplicant cannot run with driver none: \(p.logTail())") }
            usleep(20_000)
        }
        let c = try WPAControlSocket(path: "\(dir)/ctrl/lo", localDirectory: dir)
        defer { c.close() }
        let id = try XCTUnwrap(WiFiDirectTransport.persistentGroupID(try c.request("LIST_NETWORKS"), ssid: "DIRECT-ab"))
        XCTAssertEqual(try c.request("GET_NETWORK \(id) p2p_client_list"), "42:00:00:00:01:00")
        try WiFiDirectTransport.clearClientList(network: id, control: c)
        XCTAssertEqual(try c.request("GET_NETWORK \(id) p2p_client_list"), "FAIL\n", "no clients left")
        let saved = try String(contentsOfFile: conf, encoding: .utf8)
        XCTAssertTrue(saved.contains("ssid=\"DIRECT-ab\""), "the group itself is kept")
        XCTAssertFalse(saved.contains("p2p_client_list"), saved)
    }

    /// The phone's join outcome from the supplicant's events.
    func testJoinEventsGiveTheGroupOrAFailure() throws {
        let started = try XCTUnwrap(WPAEvent(parsing: "<3>P2P-GROUP-STARTED p2p-wlan1-0 client ssid=\"DIRECT-4l\" freq=2437 psk=0123abcd go_dev_addr=42:00:00:00:00:00 [PERSISTENT]"))
        XCTAssertEqual(P2PGroupJoin.joined(started), .init(interface: "p2p-wlan1-0", ssid: "DIRECT-4l", goDeviceAddress: "42:00:00:00:00:00", frequency: 2437))
        let asOwner = try XCTUnwrap(WPAEvent(parsing: "<3>P2P-GROUP-STARTED p2p-wlan1-0 GO ssid=\"DIRECT-4l\" freq=2437"))
        XCTAssertNil(P2PGroupJoin.joined(asOwner), "a phone that became owner has not joined the hub")
        XCTAssertTrue(P2PGroupJoin.failures.contains("P2P-GROUP-FORMATION-FAILURE"))
        XCTAssertFalse(started.redacted.contains("0123abcd"), "the group's PSK never reaches an error message")
    }

    func testEventParsing() throws {
        let e = try XCTUnwrap(WPAEvent(parsing: "<3>P2P-GROUP-STARTED p2p-wlan0-0 GO ssid=\"DIRECT-ab hub\" freq=2437 passphrase=\"secret12\" go_dev_addr=02:00:00:00:01:00 [PERSISTENT]"))
        XCTAssertEqual(e.level, 3)
        XCTAssertEqual(e.name, "P2P-GROUP-STARTED")
        XCTAssertEqual(e.arguments, ["p2p-wlan0-0", "GO", "[PERSISTENT]"])
        XCTAssertEqual(e.fields["ssid"], "DIRECT-ab hub")
        XCTAssertEqual(e.fields["freq"], "2437")
        XCTAssertFalse(e.redacted.contains("secret12"), "passphrases never reach a log")
        let found = try XCTUnwrap(WPAEvent(parsing: "<3>P2P-DEVICE-FOUND 02:00:00:00:02:00 p2p_dev_addr=02:00:00:00:02:00 name='phone'"))
        XCTAssertEqual(found.fields["p2p_dev_addr"], "02:00:00:00:02:00")
        XCTAssertNil(WPAEvent(parsing: "OK\n"))
        XCTAssertNil(WPAEvent(parsing: "<x>FOO"))
        XCTAssertNil(WPAEvent(parsing: "<3>"))
    }

    func testSavedPersistentGroupIsFoundInListNetworks() {
        let reply = "network id / ssid / bssid / flags\n0\thome\tany\t[CURRENT]\n1\tDIRECT-NJ\t42:00:00:00:00:00\t[DISABLED][P2P-PERSISTENT]\n"
        XCTAssertEqual(WiFiDirectTransport.persistentGroupID(reply), 1)
        let two = reply + "2\tDIRECT-xy\t42:00:00:00:00:00\t[DISABLED][P2P-PERSISTENT]\n"
        XCTAssertEqual(WiFiDirectTransport.persistentGroupID(two, ssid: "DIRECT-xy"), 2)
        XCTAssertNil(WiFiDirectTransport.persistentGroupID(two, ssid: "DIRECT-zz"))
        XCTAssertNil(WiFiDirectTransport.persistentGroupID("network id / ssid / bssid / flags\n0\thome\tany\t\n"))
        XCTAssertNil(WiFiDirectTransport.persistentGroupID("FAIL\n"))
        XCTAssertNil(WiFiDirectTransport.persistentGroupID("x\nnot\ta\n"))
    }

    func testServiceAdvertisementUsesDNSWireFormat() {
        XCTAssertEqual(P2PService.ptrCommand(instance: "hub"), "P2P_SERVICE_ADD bonjour 055f79616f6bc00c000c01 03687562c027")
        XCTAssertEqual(P2PService.txtCommand(instance: "hub", port: 7814),
                       "P2P_SERVICE_ADD bonjour 03687562055f79616f6bc00c001001 09706f72743d37383134")
        // The phone's query TLVs: length (LE), protocol 1 (Bonjour), transaction id, the key.
        XCTAssertEqual(P2PService.ptrQueryHex, "0d000101055f79616f6bc00c000c01")
        XCTAssertEqual(P2PService.txtQueryHex(instance: "hub"), "11000102" + "03687562055f79616f6bc00c001001")
    }

    /// A response as the hub's wpa_supplicant sent it on mac80211_hwsim (from the VM test's log):
    /// PTR `_yaok._tcp` → `yaok-hub`; then a TXT answer and a "no such service" status.
    func testServiceDiscoveryResponsesAreParsed() throws {
        let ptr = "1900010100055f79616f6bc00c000c010879616f6b2d687562c027"
        let event = try XCTUnwrap(WPAEvent(parsing: "<3>P2P-SERV-DISC-RESP 42:00:00:00:00:00 1 \(ptr)"))
        let r = try P2PServiceResponse(event: event)
        XCTAssertEqual(r.peer, "42:00:00:00:00:00")
        XCTAssertEqual(r.instances, ["yaok-hub"])
        XCTAssertEqual(r.ports, [:])

        let txt = "2100010200" + "0879616f6b2d687562055f79616f6bc00c001001" + "09706f72743d37383134"
        let both = try P2PServiceResponse(peer: "x", tlvs: XCTUnwrap(Hex.decode(txt + "0300010302")))
        XCTAssertEqual(both.ports, ["yaok-hub": 7814])
        XCTAssertEqual(both.failures, [3: 2], "transaction 3: requested information not available")

        // Other services (the hostap examples' AFP PTR) are not Ya OK hubs.
        let afp = try P2PServiceResponse(peer: "x", tlvs: XCTUnwrap(Hex.decode("1e000101000b5f6166706f766572746370c00c000c01074578616d706c65c027")))
        XCTAssertEqual(afp.instances, [])

        XCTAssertThrowsError(try P2PServiceResponse(peer: "x", tlvs: [0x19, 0x00, 0x01, 0x01, 0x00, 0x05])) {
            XCTAssertEqual($0 as? P2PServiceResponse.ParseError, .truncated(offset: 0))
        }
        XCTAssertThrowsError(try P2PServiceResponse(event: WPAEvent(level: 2, name: "P2P-DEVICE-FOUND")))
        XCTAssertThrowsError(try P2PServiceResponse(event: WPAEvent(level: 2, name: "P2P-SERV-DISC-RESP", arguments: ["a", "1", "zz"]))) {
            XCTAssertEqual($0 as? P2PServiceResponse.ParseError, .badHex)
        }
        // Random bytes: a typed error or a result, never a trap.
        for _ in 0..<3_000 {
            let bytes = (0..<Int.random(in: 0...48)).map { _ in UInt8.random(in: 0...255) }
            _ = try? P2PServiceResponse(peer: "x", tlvs: [UInt8(bytes.count), 0, 1, 1, 0] + bytes)
            _ = try? P2PServiceResponse(peer: "x", tlvs: bytes)
        }
    }
}
