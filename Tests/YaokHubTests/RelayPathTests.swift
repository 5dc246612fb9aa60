import Foundation
import XCTest
@testable import YaokHubCore
import YaokProcess
import YaokTesting

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

        let (alice, bob) = try MessagePathTests.initPair(dir)
        let relayAddress = relay.address

        // Alice (phone) attaches to the hub once, registering through it with the relay.
        _ = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--json", "--timeout", "3"])

        // Bob is on the internet, online at the relay; Alice sends from the field.
        let bobListen = BackgroundYaok(bob, ["listen", "--relay", relayAddress, "--relay-key", key, "--count", "1", "--json", "--timeout", "45"])
        let sent = try MessagePathTests.yaok(alice, ["send", "Bob", "from the field", "--hub", hubURL, "--relay-key", key, "--json", "--timeout", "20"])
        let id = try XCTUnwrap(sent.first { $0["event"] as? String == "queued" }?["id"] as? String)
        let bobGot = try XCTUnwrap(bobListen.events(), "bob's listen returned")
        XCTAssertTrue(bobGot.contains { $0["event"] as? String == "message" && $0["text"] as? String == "from the field" }, "\(bobGot)\n\(hub.log)")

        // Bob's delivery receipt travels relay → hub → Alice: it may already have reached her
        // while her send was still attached, or it comes with one of her next listens.
        func delivered(_ events: [[String: Any]]) -> Bool {
            events.contains { $0["event"] as? String == "delivered" && $0["id"] as? String == id }
        }
        var aliceListens: [[[String: Any]]] = [sent]
        do {
            if !delivered(sent) {
                try Wait.until(timeout: 30, "Alice's receipt") {
                    let events = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--json", "--timeout", "3"])
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
        let aliceListen = BackgroundYaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--count", "1", "--json", "--timeout", "45"])
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
}
