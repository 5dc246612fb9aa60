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

        let plugins = try TestSupport.pluginDirectory(self, plugins: ["udp", "relay"])
        let hubDir = dir + "/hub"
        try FileManager.default.createDirectory(atPath: hubDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let hubPort = HubProcessTests.freePort()
        let extra = relay.transportSection
        let hub = try HubProcess(dir: hubDir, config: HubProcessTests.config(dir: hubDir, pluginDirs: [plugins], udpPort: hubPort, extra: extra),
                                 executable: try TestSupport.product("yaok-hub"))
        defer { hub.stop() }
        try hub.waitReady()
        try Wait.until(timeout: 30, "relay link up at the hub (\(hub.log))") { try hub.transport("relay")?.status.links == 1 }

        let (alice, bob) = try MessagePathTests.initPair(dir)
        let hubURL = "udp://127.0.0.1:\(hubPort)"
        let relayAddress = relay.address

        // Alice (phone) attaches to the hub once, registering through it with the relay.
        _ = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--json", "--timeout", "3"])

        // Bob is on the internet, online at the relay; Alice sends from the field.
        let bobQueue = DispatchQueue(label: "bob")
        let bobDone = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var bobGot: [[String: Any]] = []
        bobQueue.async {
            bobGot = (try? MessagePathTests.yaok(bob, ["listen", "--relay", relayAddress, "--relay-key", key, "--count", "1", "--json", "--timeout", "45"])) ?? []
            bobDone.signal()
        }
        let sent = try MessagePathTests.yaok(alice, ["send", "Bob", "from the field", "--hub", hubURL, "--relay-key", key, "--json", "--timeout", "20"])
        let id = try XCTUnwrap(sent.first { $0["event"] as? String == "queued" }?["id"] as? String)
        XCTAssertEqual(bobDone.wait(timeout: .now() + 60), .success)
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
        let aliceQueue = DispatchQueue(label: "alice")
        let aliceDone = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var aliceGot: [[String: Any]] = []
        aliceQueue.async {
            aliceGot = (try? MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--count", "1", "--json", "--timeout", "45"])) ?? []
            aliceDone.signal()
        }
        let reply = try MessagePathTests.yaok(bob, ["send", "Alice", "from the internet", "--relay", relayAddress, "--relay-key", key, "--json", "--timeout", "20"])
        XCTAssertTrue(reply.contains { $0["event"] as? String == "handed_over" }, "\(reply)")
        XCTAssertEqual(aliceDone.wait(timeout: .now() + 60), .success)
        XCTAssertTrue(aliceGot.contains { $0["text"] as? String == "from the internet" }, "\(aliceGot)\n\(hub.log)")

        // Wrong pinned key: refused with a clear error.
        let wrong = String(repeating: "ab", count: 32)
        let impostor = try TestSupport.run(try TestSupport.product("yaok"), ["listen", "--home", bob, "--relay", relayAddress, "--relay-key", wrong, "--timeout", "5"])
        XCTAssertNotEqual(impostor.status, 0)
        XCTAssertTrue(impostor.output.contains("mismatch"), impostor.output)
    }
}
