import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokTesting
import YaokWire

/// A phone's relay registration (0x07) gets an answer, and a phone learns whether its hub has a
/// relay and which (Docs/protocol.md, registrationAnswer and relay). A real hub, a real relay,
/// `yaok` as the phone.
final class RegistrationAnswerTests: XCTestCase {

    func testEveryRegistrationGetsAnAnswerAndThePhoneLearnsTheHubsRelay() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let relay = try RelayChild(in: dir)
        defer { relay.stop() }
        let (hub, url) = try relay.startHub(self, dir: dir)
        defer { hub.stop() }
        let hubKey = try hub.signingKeyHex()
        let alice = dir + "/alice"
        _ = try MessagePathTests.yaok(alice, ["init", "--name", "Alice"])
        func listen(_ relayKey: String, clock: String? = nil) throws -> [[String: Any]] {
            try FieldClockTests.yaok(alice, ["listen", "--hub", url, "--relay-key", relayKey, "--trust-hub", hubKey, "--json", "--timeout", "4"], clockOffset: clock)
        }

        // The relay's key: the hub says it is linked to it, and the relay accepted, until an hour on.
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var out = try listen(relay.key)
        XCTAssertEqual(FieldClockTests.events(out, "hub_relay").first?["state"] as? String, "linked", "\(out)")
        XCTAssertEqual(FieldClockTests.events(out, "hub_relay").first?["relay_key"] as? String, relay.key)
        let accepted = try XCTUnwrap(FieldClockTests.events(out, "relay_registration").first, "\(out)")
        XCTAssertEqual(accepted["status"] as? Int, 0, "\(accepted)")
        let until = try XCTUnwrap(accepted["until_ms"] as? Int64 ?? (accepted["until_ms"] as? Int).map(Int64.init))
        XCTAssertEqual(Double(until - now), 3_600_000, accuracy: 120_000, "collected for an hour")

        // Signed for another relay: the hub answers at once, naming its own relay's key prefix.
        let other = String(repeating: "ab", count: 32)
        out = try listen(other)
        let wrong = try XCTUnwrap(FieldClockTests.events(out, "relay_registration").first, "\(out)")
        XCTAssertEqual(wrong["status"] as? Int, 19)
        XCTAssertTrue((wrong["reason"] as? String)?.contains(String(relay.key.prefix(8))) == true, "\(wrong)")
        // In words, for a person: what is wrong and what it costs.
        let words = try TestSupport.run(try TestSupport.product("yaok"), ["listen", "--home", alice, "--hub", url, "--relay-key", other,
                                                                          "--trust-hub", hubKey, "--timeout", "3"]).output
        XCTAssertTrue(words.contains("this hub's relay is \(relay.key.prefix(8)), not the abababab you pinned"), words)
        XCTAssertTrue(words.contains("relay registration: not carried: signed for another relay"), words)

        // A phone whose clock is an hour ahead: the relay refuses the timestamp and the phone hears why.
        out = try listen(relay.key, clock: "+1h")
        let stale = try XCTUnwrap(FieldClockTests.events(out, "relay_registration").first, "\(out)")
        XCTAssertEqual(stale["status"] as? Int, 2, "\(stale)")
        XCTAssertTrue((stale["meaning"] as? String)?.contains("clock") == true, "\(stale)")

        // The relay goes away: the hub says its relay is not reachable and keeps the registration.
        relay.stop()
        try Wait.until(timeout: 20, "the hub's relay link down") { try hub.transport("relay")?.status.links == 0 }
        out = try listen(relay.key)
        XCTAssertEqual(FieldClockTests.events(out, "hub_relay").first?["state"] as? String, "configured", "\(out)")
        XCTAssertEqual(FieldClockTests.events(out, "relay_registration").first?["status"] as? Int, 17, "\(out)")
    }

    func testAHubWithoutARelaySaysSo() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let hub = try HubProcess(dir: dir, config: HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port),
                                 executable: try TestSupport.product("yaok-hub"))
        defer { hub.stop() }
        try hub.waitReady()
        let url = "udp://127.0.0.1:\(port)"
        let hubKey = try hub.signingKeyHex()
        let home = try TestSupport.temporaryDirectory(self) + "/bob"
        _ = try MessagePathTests.yaok(home, ["init", "--name", "Bob"])
        let out = try MessagePathTests.yaok(home, ["listen", "--hub", url, "--relay-key", String(repeating: "cd", count: 32),
                                                   "--trust-hub", hubKey, "--json", "--timeout", "3"])
        XCTAssertEqual(FieldClockTests.events(out, "hub_relay").first?["state"] as? String, "none", "\(out)")
        XCTAssertEqual(FieldClockTests.events(out, "relay_registration").first?["status"] as? Int, 16, "\(out)")
    }
}

extension RegistrationAnswerTests {
    /// A phone cannot make the hub tell another phone its registration was accepted (or
    /// refused): a registrationAnswer is taken only from the relay link, and a phone's is
    /// dropped and counted.
    func testAPhoneCannotForgeAnAnswerForAnother() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        let mallory = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let before = try s.hub.status().router.counters.refusedMalformed
        let forged = RegistrationAnswer(status: RegistrationAnswer.accepted, userID: Identity.userID(forSigningKey: s.bob.signingKey),
                                        relayKey: [UInt8](repeating: 7, count: 32), untilMs: Int64.max)
        try mallory.send(TLVRecord(.registrationAnswer, value: forged.encoded))
        try Wait.until(timeout: 10, "the forged answer dropped and counted") { try s.hub.status().router.counters.refusedMalformed == before + 1 }
        let answersToBob = bob.lock.withLock { bob.frames.filter { $0.type == RoutingFrameType.registrationAnswer.rawValue } }
        XCTAssertTrue(answersToBob.isEmpty, "Bob never hears Mallory's answer")
    }
}
