import Foundation
import Synchronization
import XCTest
import YaokPluginKit
@testable import YaokWiFiDirectPlugin
import YaokEndpoint
import YaokTesting
@testable import YaokWPA

/// The two halves of Tests/vmlab/wifi-test.sh, run inside the VM with mac80211_hwsim radios.
/// Skipped unless YAOK_WIFI_VM is `hub` or `phone`; files in YAOK_WIFI_VM_DIR coordinate them.
final class VMTests: XCTestCase {
    var role: String? { ProcessInfo.processInfo.environment["YAOK_WIFI_VM"] }
    var dir: String { ProcessInfo.processInfo.environment["YAOK_WIFI_VM_DIR"] ?? "/tmp" }

    func note(_ name: String, _ text: String) {
        XCTAssertTrue(FileManager.default.createFile(atPath: "\(dir)/\(name)", contents: Data((text + "\n").utf8)), "cannot write \(dir)/\(name)")
        print("VM \(name): \(text)")
    }

    func waitForFile(_ name: String, timeout: Double) -> Bool {
        Wait.poll(timeout: timeout, interval: 0.1) { FileManager.default.fileExists(atPath: "\(self.dir)/\(name)") }
    }

    func waitFor(_ what: String, timeout: Double, _ condition: () -> Bool) -> Bool {
        (try? Wait.until(timeout: timeout, what, condition)) != nil
    }

    /// The hub: the real plugin code on a hwsim radio; echoes every record back to its sender.
    func testHubSide() throws {
        try XCTSkipUnless(role == "hub", "runs only in the VM (YAOK_WIFI_VM=hub)")
        let r = LinkEventRecorder()
        let settings = try TestConfig.settings([
            "interface": .string(ProcessInfo.processInfo.environment["YAOK_WIFI_IF"] ?? "wlan0"),
            "runtime_dir": .string("\(dir)/hub-run"),
        ])
        let box = TransportBox()
        let t = WiFiDirectTransport(settings: settings, identity: TestLinkIdentity(seed: 1), events: HubEvents(recorder: r, box: box))
        box.transport.withLock { $0 = t }
        defer { t.stop() }
        try t.start()
        note("hub-probe", t.status.details["radios"] ?? "")
        guard waitFor("the group to come up", timeout: 60, { t.status.state == .running }) else { return }
        note("hub-group", "\(t.status.details["group_interface"] ?? "") \(t.status.details["go_device_address"] ?? "") \(t.status.reason)")
        guard waitForFile("phone-done", timeout: 180) else { return XCTFail("the phone never finished") }
        XCTAssertGreaterThanOrEqual(r.ups.count, 1, "a phone linked up")
        XCTAssertEqual(r.ups.first?.peerRole, .endpoint)
        XCTAssertGreaterThan(t.status.framesIn, 0)
        note("hub-links", "links_up=\(r.ups.count) frames_in=\(t.status.framesIn) stations=\(t.status.details["stations"] ?? "")")
        let firstSSID = t.status.details["group_ssid"] ?? ""
        // Tear the group down from outside; the plugin must re-form it.
        let iface = t.status.details["group_interface"] ?? ""
        let ctrl = t.status.details["ctrl_interface"] ?? ""
        let c = try WPAControlSocket(path: ctrl, localDirectory: "\(dir)/hub-run")
        try c.expectOK("P2P_GROUP_REMOVE \(iface)")
        c.close()
        XCTAssertTrue(waitFor("the group to be re-formed", timeout: 60) {
            t.status.state == .running && t.status.details["groups_formed"] == "2"
        })
        XCTAssertEqual(t.status.details["group_removals"], "1")
        XCTAssertEqual(t.status.details["group_ssid"], firstSSID, "the saved persistent group is re-invoked, same SSID")
        XCTAssertFalse(r.downs.isEmpty, "the phone's link went down")
        let queries = Int(t.status.details["service_queries"] ?? "") ?? 0
        XCTAssertGreaterThanOrEqual(queries, 1, "the phone's _yaok._tcp query reached the hub")
        note("hub-reformed", "\(t.status.details["group_interface"] ?? "") ssid \(firstSSID) -> \(t.status.details["group_ssid"] ?? "") groups_formed=\(t.status.details["groups_formed"] ?? "") service_queries=\(queries) \(t.status.reason)")

        // The managed supplicant is killed; stop() lands while the supervisor is starting a new one.
        func pid() -> Int32? { t.status.details["supplicant"].flatMap { Int32($0.replacingOccurrences(of: "managed pid ", with: "")) } }
        guard let old = pid() else { return XCTFail("no managed supplicant: \(t.status.details["supplicant"] ?? "")") }
        kill(old, SIGKILL)
        var restarting: Int32?
        _ = waitFor("a new supplicant", timeout: 30) {
            if let p = pid(), p != old { restarting = p; return true }
            return false
        }
        guard let restarting else { return }
        let phase = t.status.reason
        let t0 = Date()
        t.stop()
        let took = Date().timeIntervalSince(t0)
        XCTAssertLessThan(took, 2.0, "stop() during a supplicant restart took \(took) s")
        XCTAssertNotEqual(kill(restarting, 0), 0, "the supplicant being started was ended")
        XCTAssertEqual(t.status.state, .stopped)
        note("hub-stop", "stop() during a supplicant restart (pid \(old) killed, pid \(restarting) starting; \(phase)): \(String(format: "%.2f", took)) s, pid \(restarting) ended")
    }

    /// The phone finds the hub by service before joining, through its own wpa_supplicant: a
    /// broadcast `_yaok._tcp` PTR query answered by the group owner, then a TXT query to that
    /// hub for its port; with YAOK_WIFI_JOIN=pbc it then joins that hub's group (P2PGroupJoin).
    func testPhoneDiscovery() throws {
        try XCTSkipUnless(role == "phone-discovery", "runs only in the VM (YAOK_WIFI_VM=phone-discovery)")
        let env = ProcessInfo.processInfo.environment
        let ctrl = env["YAOK_WIFI_PHONE_CTRL"] ?? "/run/wpa-phone/p2p-dev-wlan1"
        let t0 = Date()
        let ptr = try P2PServiceDiscovery.query(controlPath: ctrl, localDirectory: dir, timeout: 60)
        let ptrSeconds = Date().timeIntervalSince(t0)
        XCTAssertEqual(ptr.instances, ["yaok-hub"])
        if let hubDevice = env["YAOK_WIFI_HUB_DEV"] { XCTAssertEqual(ptr.peer.lowercased(), hubDevice.lowercased(), "the hub answered") }
        let instance = try XCTUnwrap(ptr.instances.first)
        let txt = try P2PServiceDiscovery.query(controlPath: ctrl, localDirectory: dir, peer: ptr.peer,
                                                queryHex: P2PService.txtQueryHex(instance: instance), timeout: 60) {
            $0.peer == ptr.peer && $0.ports[instance] != nil
        }
        XCTAssertEqual(txt.ports[instance], 7814)
        let total = Date().timeIntervalSince(t0)
        if env["YAOK_WIFI_JOIN"] == "pbc" {
            // Then join the group that answered, with push-button, as a Linux phone would.
            let joined = try P2PGroupJoin.join(controlPath: ctrl, localDirectory: dir, hub: ptr.peer, timeout: 60)
            XCTAssertEqual(joined.goDeviceAddress.lowercased(), ptr.peer.lowercased())
            XCTAssertTrue(joined.ssid.hasPrefix("DIRECT-"), joined.ssid)
            note("phone-joined", "\(joined.interface) \(joined.ssid) \(joined.frequency ?? 0) MHz after \(String(format: "%.1f", Date().timeIntervalSince(t0))) s")
        }
        note("phone-sd", "\(ptr.peer) answered _yaok._tcp: instance \(instance) after \(String(format: "%.1f", ptrSeconds)) s, port \(txt.ports[instance] ?? 0) after \(String(format: "%.1f", total)) s")
    }

    /// The phone: in its own network namespace, joined to the group by the script; links to
    /// the hub over TCP, exchanges records, and times a 1 MB stream (reported, not asserted).
    func testPhoneSide() throws {
        try XCTSkipUnless(role == "phone", "runs only in the VM (YAOK_WIFI_VM=phone)")
        let host = ProcessInfo.processInfo.environment["YAOK_WIFI_HUB"] ?? "192.168.49.1"
        let client = try SecureStreamClient(to: IPEndpoint.resolve(host: host, port: 7814), identity: TestLinkIdentity(seed: 2))
        XCTAssertEqual(client.peer.signingKey, TestLinkIdentity(seed: 1).signingKey)
        let hello = TLVRecord(.bundle, value: Array("hello over wi-fi direct".utf8)).encoded
        try client.send(hello)
        XCTAssertEqual(try client.receive(timeout: 10), hello, "the hub echoed the record")
        let frame = TLVRecord(.bundle, value: [UInt8](repeating: 0x5a, count: 1021)).encoded
        let t0 = Date()
        for _ in 0..<1024 { try client.send(frame) }
        var echoed = 0
        while echoed < 1024, let f = try client.receive(timeout: 30) {
            XCTAssertEqual(f, frame)
            echoed += 1
        }
        let seconds = Date().timeIntervalSince(t0)
        XCTAssertEqual(echoed, 1024)
        note("phone-bench", String(format: "1 MB of 1 KB TLV records to the hub and echoed back over the P2P group: %.2f s (%.2f Mbit/s each way)", seconds, 8.0 / seconds))
        client.close()
        note("phone-done", "ok")
    }
}

/// The hub's transport, for its own frame callback (set after the callback is made).
final class TransportBox: Sendable {
    let transport = Mutex<WiFiDirectTransport?>(nil)
}

/// The VM hub's events: recorded, log lines printed as they come, every frame echoed back.
struct HubEvents: LinkEvents {
    let recorder: LinkEventRecorder
    let box: TransportBox

    func linkUp(_ link: LinkInfo) { recorder.linkUp(link) }
    func linkDown(_ id: LinkID, reason: String?) { recorder.linkDown(id, reason: reason) }
    func frameReceived(_ frame: [UInt8], on link: LinkID) {
        recorder.frameReceived(frame, on: link)
        try? box.transport.withLock { $0 }?.send(frame, to: link) // echo
    }
    func statusChanged() { recorder.statusChanged() }
    func log(_ level: LogLevel, _ message: String) {
        recorder.log(level, message)
        print("HUB \(level >= .warning ? "warning" : "info"): \(message)")
        fflush(nil)  // every output stream: the VM script reads this line as it comes
    }
}
