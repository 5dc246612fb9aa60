import Foundation
import XCTest
@testable import YaokHubCore
import YaokCrypto
import YaokEndpoint
import YaokPluginKit
import YaokProcess
import YaokRelayProtocol
import YaokTesting
import YaokWire

/// A phone attached to a hub reaches an internet user through the relay, and back, with
/// delivery receipts: real yaok-hub, yaok-relay and yaok processes on loopback.
final class RelayPathTests: XCTestCase {
    func testPhoneAtHubAndInternetUserExchangeThroughTheRelay() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let relay = try RelayChild(in: dir)
        defer { relay.stop() }
        let key = relay.key

        let (hub, hubURL) = try relay.startHub(self, dir: dir)
        defer { hub.stop() }
        // Alice pins this hub: only a hub she trusts may collect her internet mail.
        let hubKey = try hub.signingKeyHex()

        let (alice, bob) = try MessagePathTests.initPair(dir)
        let relayAddress = relay.address

        // Alice (phone) attaches to the hub once, registering through it with the relay.
        _ = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--json", "--timeout", "3"])

        // Bob is on the internet, online at the relay; Alice sends from the field.
        let bobListen = BackgroundYaok(bob, ["listen", "--relay", relayAddress, "--relay-key", key, "--count", "1", "--json", "--timeout", "45"])
        let sent = try MessagePathTests.yaok(alice, ["send", "Bob", "from the field", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--json", "--timeout", "20"])
        let id = try XCTUnwrap(sent.first { $0["event"] as? String == "queued" }?["id"] as? String)
        let bobGot = try XCTUnwrap(bobListen.events(), "bob's listen returned")
        XCTAssertTrue(bobGot.contains { $0["event"] as? String == "message" && $0["text"] as? String == "from the field" }, "\(bobGot)\n\(hub.log)")
        // Status names the relay link by the key the operator pinned.
        let relayLinks = try hub.status().router.links.filter { $0.role == "relay" }
        XCTAssertEqual(relayLinks.map(\.peer), [String(key.prefix(8))], "\(relayLinks)")

        // Bob's delivery receipt travels relay → hub → Alice: it may already have reached her
        // while her send was still attached, or it comes with one of her next listens.
        func delivered(_ events: [[String: Any]]) -> Bool {
            events.contains { $0["event"] as? String == "delivered" && $0["id"] as? String == id }
        }
        var aliceListens: [[[String: Any]]] = [sent]
        do {
            if !delivered(sent) {
                try Wait.until(timeout: 30, "Alice's receipt") {
                    let events = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--json", "--timeout", "3"])
                    aliceListens.append(events)
                    return delivered(events)
                }
            }
        } catch {
            // Failed once in CI under load; what each side saw, for the next time.
            let relayText = relay.log
            // The short lines last: CI shows the end of a failed test's output.
            print("hub log:\n\(hub.log)\nrelay log:\n\(relayText)")
            print("bob (relay) saw: \(bobGot)\nalice's listens: \(aliceListens)\nhub status: \((try? hub.status().router.counters).map { "\($0)" } ?? "-")")
            throw error
        }

        // And back: Bob (internet) writes to Alice (field), who is attached to the hub.
        let aliceListen = BackgroundYaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--count", "1", "--json", "--timeout", "45"])
        let reply = try MessagePathTests.yaok(bob, ["send", "Alice", "from the internet", "--relay", relayAddress, "--relay-key", key, "--json", "--timeout", "20"])
        XCTAssertTrue(reply.contains { $0["event"] as? String == "handed_over" }, "\(reply)")
        let aliceGot = try XCTUnwrap(aliceListen.events(), "alice's listen returned")
        XCTAssertTrue(aliceGot.contains { $0["text"] as? String == "from the internet" }, "\(aliceGot)\n\(hub.log)")

        // Wrong pinned key: refused with a clear error.
        let wrong = String(repeating: "ab", count: 32)
        let impostor = try TestSupport.run(try TestSupport.product("yaok"), ["listen", "--home", bob, "--relay", relayAddress, "--relay-key", wrong, "--timeout", "5"])
        XCTAssertNotEqual(impostor.status, 0)
        XCTAssertTrue(impostor.output.contains("mismatch"), impostor.output)
    }

    /// The attack: a phone hands the hub relay registrations for throwaway keys
    /// it never proved on its link, or naming another hub, so the hub would fill its session
    /// at the relay with them. The hub carries only the link's own user's registration naming
    /// itself; the others are refused and counted, and the real one still brings the phone
    /// its internet mail.
    func testAPhoneHasOnlyItsOwnRegistrationCarried() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let relay = try RelayChild(in: dir)
        defer { relay.stop() }
        let (hub, hubURL) = try relay.startHub(self, dir: dir)
        defer { hub.stop() }
        let (alice, bob) = try MessagePathTests.initPair(dir)
        let aliceIdentity = try IdentityFile.loadOrCreate(path: alice + "/identity.key")
        let port = try XCTUnwrap(UInt16(hubURL.split(separator: ":").last ?? ""))
        let phone = try RawPeer(identity: aliceIdentity, role: .endpoint, hubPort: port)
        let relayKey = try XCTUnwrap(Hex.decode(relay.key)), hubKey = phone.hubKey
        XCTAssertEqual(hubKey.count, 32)
        func registration(of user: Identity, collector: [UInt8]) throws -> TLVRecord {
            let t = WallClock.nowMilliseconds()
            let r = try Registration.carried(by: user, relaySigningKey: relayKey, collector: collector, timestampMs: t, untilMs: t + 3_600_000)
            return TLVRecord(.registration, value: r.encoded)
        }
        for _ in 1...20 { try phone.send(registration(of: Identity.generate(), collector: hubKey)) }
        try phone.send(registration(of: aliceIdentity, collector: Identity.generate().signingKey))
        try phone.send(TLVRecord(.registration, value: Random.bytes(161)))
        try Wait.until(timeout: 10, "the hub refused the registrations not its phone's own") {
            try hub.status().router.counters.registrationsRefused == 22
        }
        // Alice's own registration, naming this hub: Bob's internet mail reaches her, once.
        try phone.send(registration(of: aliceIdentity, collector: hubKey))
        let sent = try MessagePathTests.yaok(bob, ["send", "Alice", "through the relay", "--relay", relay.address, "--relay-key", relay.key, "--json", "--timeout", "20"])
        XCTAssertTrue(sent.contains { $0["event"] as? String == "handed_over" }, "\(sent)")
        try Wait.until(timeout: 30, "Bob's message at Alice's phone (hub log: \(hub.log))") { !phone.receivedEnvelopes.isEmpty }
        let got = phone.receivedEnvelopes
        XCTAssertEqual(got.count, 1)
        XCTAssertEqual(String(decoding: try got[0].open(with: aliceIdentity), as: UTF8.self).contains("through the relay"), true)
        XCTAssertEqual(try hub.status().router.counters.registrationsRefused, 22, "Alice's own was carried")
    }
}
