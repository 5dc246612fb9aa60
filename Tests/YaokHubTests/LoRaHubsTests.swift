import Foundation
import HubTestSupport
import XCTest
import YaokRNodeEmulator
import YaokTesting

/// Real hubs running the LoRa plugin against emulated RNodes (`yaok-rnode-sim`) on one
/// simulated channel: A and C out of each other's range, B between them (Plugins/LoRa/README.md).
final class LoRaHubsTests: XCTestCase {
    static func loraSection(device: String, extra: String = "") -> String {
        """
          lora:
            enabled: true
            device: \(device)
            spreading_factor: 7
            duty_cycle_percent: 10
            beacon_interval_s: 5
            keepalive_s: 15
            idle_timeout_s: 60
        \(extra)
        """
    }

    func startHub(_ sim: RNodeSimulator, device k: Int, udp: UInt16?, dir existing: String? = nil) throws -> HubProcess {
        let plugins = try TestSupport.pluginDirectory(self, plugins: ["udp", "lora"])
        let dir = try existing ?? TestSupport.temporaryDirectory(self)
        let hub = try HubProcess(dir: dir, config: HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: udp,
                                                                          extra: Self.loraSection(device: sim.path(k))),
                                 executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        return hub
    }

    /// The LoRa transport's status in one line, for failure messages.
    func loraState(_ hub: HubProcess) -> String {
        guard let s = try? hub.transport("lora")?.status else { return "(no status)" }
        return "\(s.state) links=\(s.links) " + s.details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }

    /// The hub's log lines about LoRa, the last few, for failure messages.
    func loraLog(_ hub: HubProcess) -> String {
        hub.log.split(separator: "\n").filter { $0.contains("lora") || $0.contains("LoRa") }.suffix(25).joined(separator: "\n")
    }

    func loraHubLinks(_ hub: HubProcess) -> Int {
        ((try? hub.status().router.links) ?? []).filter { $0.kind == "lora" && $0.role == "hub" }.count
    }

    /// Phones on A and C over UDP; mail and receipts cross A–B–C over the air at 5 % loss,
    /// after B was killed and restarted (A and C must take its new sessions): each message
    /// arrives once, each receipt comes back.
    func testMessagesAndReceiptsCrossTwoLoRaHopsThroughALossyChannelAfterTheMiddleHubRestarted() throws {
        let sim = try RNodeSimulator(["--devices", "3", "--range", "0-1,1-2", "--loss", "0.05", "--seed", "11"])
        defer { sim.finish() }
        let (udpA, udpC) = (HubProcessTests.freePort(), HubProcessTests.freePort())
        let a = try startHub(sim, device: 0, udp: udpA)
        var b = try startHub(sim, device: 1, udp: nil)
        let c = try startHub(sim, device: 2, udp: udpC)
        try Wait.until(timeout: 60, "A–B and B–C linked over LoRa (A: \(loraState(a)); B: \(loraState(b)); C: \(loraState(c)); B's log: \(loraLog(b)))") {
            loraHubLinks(a) == 1 && loraHubLinks(b) == 2 && loraHubLinks(c) == 1
        }
        XCTAssertEqual(try a.transport("lora")?.status.state, .running)
        XCTAssertNotNil(try a.transport("lora")?.status.details["duty_cycle_headroom_s"])

        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try MessagePathTests.initPair(dir)
        let urlA = "udp://127.0.0.1:\(udpA)", urlC = "udp://127.0.0.1:\(udpC)"
        var sent: [String: String] = [:]   // id → text
        func send(_ i: Int) throws {
            let text = "over the hills, message \(i)"
            let out = try MessagePathTests.yaok(alice, ["send", "Bob", text, "--hub", urlA, "--json", "--timeout", "20"])
            let id = try XCTUnwrap(out.first { $0["event"] as? String == "queued" }?["id"] as? String)
            XCTAssertTrue(out.contains { $0["event"] as? String == "handed_over" }, "\(out)")
            sent[id] = text
        }
        // B dies (power cut: no goodbye on the air) and comes back on its own store; A and C
        // still hold their sessions with the B that died, and must take the new one.
        b.signal(SIGKILL)
        _ = b.waitExit(timeout: 10)
        b = try startHub(sim, device: 1, udp: nil, dir: b.dir)
        try Wait.until(timeout: 90, "the restarted B linked with A and C again (A: \(loraState(a)); B: \(loraState(b)); C: \(loraState(c)); B's log: \(loraLog(b)))") {
            loraHubLinks(b) == 2
        }
        for i in 0..<6 { try send(i) }

        // Bob on C gets each message once.
        var got: [String: String] = [:]
        var events = 0
        let deadline = Date().addingTimeInterval(240)
        while got.count < sent.count && Date() < deadline {
            let out = try MessagePathTests.yaok(bob, ["listen", "--hub", urlC, "--json", "--count", String(sent.count - got.count), "--timeout", "60"],
                                                timeout: 90, expectSuccess: false)
            for m in out where m["event"] as? String == "message" {
                events += 1
                if let id = m["id"] as? String { got[id] = m["text"] as? String }
            }
        }
        XCTAssertEqual(got, sent, "every message arrived, unaltered (C: \(c.log.suffix(2000)))")
        XCTAssertEqual(events, sent.count, "no message arrived twice")

        // Alice on A learns of each delivery: the receipts crossed back.
        var delivered = Set<String>()
        let receiptDeadline = Date().addingTimeInterval(240)
        while delivered.count < sent.count && Date() < receiptDeadline {
            let out = try MessagePathTests.yaok(alice, ["listen", "--hub", urlA, "--json", "--timeout", "10"])
            for e in out where e["event"] as? String == "delivered" { if let id = e["id"] as? String { delivered.insert(id) } }
        }
        XCTAssertEqual(delivered, Set(sent.keys), "every receipt came back to Alice")
        let status = try XCTUnwrap(b.transport("lora")?.status)
        print("LoRa B after the run: \(status.details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")
    }

    /// A hub whose RNode is unplugged says so, keeps its mail, and links again when the device
    /// is back; a device that never answers, and one with old firmware, are reported as such.
    func testDeviceFaultsAreReportedAndTheHubKeepsItsMail() throws {
        let sim = try RNodeSimulator(["--devices", "4", "--silent", "2", "--firmware", "3=1.40"])
        defer { sim.finish() }
        let udpA = HubProcessTests.freePort()
        let a = try startHub(sim, device: 0, udp: udpA)
        let b = try startHub(sim, device: 1, udp: nil)
        try Wait.until(timeout: 60, "A and B linked over LoRa") { loraHubLinks(a) == 1 && loraHubLinks(b) == 1 }

        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, _) = try MessagePathTests.initPair(dir)
        try sim.command("unplug 0")
        try Wait.until(timeout: 20, "A says its RNode went away") {
            let s = try a.transport("lora")?.status
            return s?.state == .unavailable && s?.reason.contains("went away") == true
        }
        XCTAssertEqual(loraHubLinks(a), 0)
        let out = try MessagePathTests.yaok(alice, ["send", "Bob", "kept while the radio is gone", "--hub", "udp://127.0.0.1:\(udpA)", "--json", "--timeout", "20"])
        XCTAssertTrue(out.contains { $0["event"] as? String == "handed_over" }, "\(out)")
        try sim.command("garbage 1")
        try sim.command("plug 0")
        try Wait.until(timeout: 60, "A's RNode is back and the hubs linked again") {
            try a.transport("lora")?.status.state == .running && loraHubLinks(a) == 1
        }
        try Wait.until(timeout: 90, "the message kept at A reached B") { try b.status().router.queue.queued >= 1 }
        XCTAssertEqual(try b.transport("lora")?.status.state, .running, "line noise costs B nothing")

        let silent = try startHub(sim, device: 2, udp: nil)
        let old = try startHub(sim, device: 3, udp: nil)
        try Wait.until(timeout: 20, "the silent device and the old firmware are reported") {
            let s2 = try silent.transport("lora")?.status, s3 = try old.transport("lora")?.status
            return s2?.state == .unavailable && s2?.reason.contains("no RNode answers") == true
                && s3?.state == .unavailable && s3?.reason.contains("older than 1.52") == true
        }
        let missing = try TestSupport.temporaryDirectory(self)
        let plugins = try TestSupport.pluginDirectory(self, plugins: ["lora"])
        let nowhere = try HubProcess(dir: missing, config: HubProcessTests.config(dir: missing, pluginDirs: [plugins], udpPort: nil,
                                                                                  extra: Self.loraSection(device: missing + "/ttyACM0")),
                                     executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { nowhere.stop() }
        try Wait.until(timeout: 20, "a device path that does not exist is reported") {
            let s = try? nowhere.transport("lora")?.status
            return s?.state == .unavailable && s?.reason.contains("does not exist") == true
        }
    }
}
