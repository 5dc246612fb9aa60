import Foundation
import HubTestSupport
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokWire
import enum YaokPluginKit.Hex
import YaokTesting
import struct YaokPluginKit.IPEndpoint
import RelayTestSupport

/// Real processes end to end: a `yaok` endpoint hands a message to a `yaok-hub` over UDP;
/// the hub's relay transport (the built plugin) carries it to a `yaok-relay`, which pushes it
/// to the recipient connected to the relay from the internet side (`RelayUserSession`).
final class RelayHubEndToEndTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() { for c in cleanup.reversed() { c() } }

    private func tempDir() throws -> String { try makeTemporaryDirectory("yaok-relay-e2e-", cleanup: &cleanup) }

    private func product(_ name: String) throws -> String {
        let path = RelayProcess.productsDirectory + "/" + name
        guard FileManager.default.fileExists(atPath: path) else { throw XCTSkip("\(name) is not built") }
        return path
    }

    /// Runs a command to completion (bounded), returning status and combined output.
    private func run(_ exe: String, _ args: [String], timeout: TimeInterval = 60) throws -> (Int32, String) {
        try runTool(exe, args, timeout: timeout)
    }

    struct Setup {
        let relay: RelayProcess
        let hub: RelayHub
        var hubDir: String { hub.dir }
        var udpPort: UInt16 { hub.udpPort }
        var log: () -> String { { hub.log } }
    }

    /// A relay process and a hub process with the udp and relay plugins, its relay link up;
    /// with `webSocket`, the relay also listens for WebSocket/TLS 1.3 and the hub's relay
    /// transport uses `wss://` with the certificate's SPKI pinned.
    private func startRelayAndHub(webSocket: Bool = false, relayArguments: [String] = []) throws -> Setup {
        let relayDir = try tempDir()
        var extra: [String] = relayArguments
        if webSocket {
            let tls = try TLSFixture.make()
            cleanup.append { tls.remove() }
            extra = ["--wss-listen", "127.0.0.1:0", "--tls-cert", tls.certificate, "--tls-key", tls.key]
        }
        let relay = try RelayProcess(dataDir: relayDir + "/relay", extra: extra)
        cleanup.append { relay.stop() }
        let relayAddress = webSocket
            ? "address: wss://127.0.0.1:\(relay.wssPort)\ntls_spki_sha256: \(Hex.encode(relay.tlsPin))"
            : "address: 127.0.0.1:\(relay.port)"
        let hub = try RelayHub(dir: try tempDir(), relay: relayAddress, relayKey: relay.key, name: "relay-e2e")
        cleanup.append { hub.stop() }

        // The hub registers itself with the relay once its relay link is up.
        XCTAssertTrue(Wait.poll(timeout: 30) { relay.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, hub.log)
        return Setup(relay: relay, hub: hub)
    }

    func testEndpointToHubToRelayToInternetUser() throws {
        let yaok = try product("yaok"), hubExe = try product("yaok-hub")
        let setup = try startRelayAndHub()
        let (relay, hubDir, udpPort, hubLog) = (setup.relay, setup.hubDir, setup.udpPort, setup.log)

        // Alice (a phone-like endpoint at the hub) and Bob (on the internet, at the relay).
        let alice = hubDir + "/alice", bob = hubDir + "/bob"
        XCTAssertEqual(try run(yaok, ["init", "--home", alice, "--name", "Alice"]).0, 0)
        XCTAssertEqual(try run(yaok, ["init", "--home", bob, "--name", "Bob"]).0, 0)
        let bobCode = try run(yaok, ["qr", "--home", bob]).1.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try run(yaok, ["contacts", "add", "--home", alice, bobCode]).0, 0)
        let bobIdentity = try XCTUnwrap(IdentityFile.load(path: bob + "/identity.key"))
        let bobAtRelay = RelayUserSession(identity: bobIdentity, relay: IPEndpoint(host: "127.0.0.1", port: UInt16(relay.port)), relayKey: relay.key)
        cleanup.append { bobAtRelay.close() }
        try bobAtRelay.open()

        let sent = try run(yaok, ["send", "--home", alice, "Bob", "hello over the uplink", "--hub", "udp://127.0.0.1:\(udpPort)", "--json", "--timeout", "20"])
        XCTAssertEqual(sent.0, 0, sent.1)

        // The hub forwards it to the relay, which pushes it to Bob at once.
        var received: [YaokWire.Bundle] = []
        let deadline = Date().addingTimeInterval(30)
        while received.isEmpty && Date() < deadline { received = try bobAtRelay.receive(timeout: 5) }
        let bundle = try XCTUnwrap(received.first, "nothing reached Bob; hub log:\n\(hubLog())")
        XCTAssertGreaterThanOrEqual(bundle.hop.hopCount, 1, "the hub forwarded it")
        let plaintext = try bundle.envelope.open(with: bobIdentity)
        XCTAssertTrue(String(decoding: plaintext, as: UTF8.self).contains("hello over the uplink"))
        try bobAtRelay.acknowledge([bundle.envelope.bundleID])
        XCTAssertTrue(Wait.poll(timeout: 10) { relay.metric("yaok_relay_acks_total") == 1 })
        XCTAssertEqual(relay.metric("yaok_relay_sends_pushed_total"), 1)
        // The hub's relay link is up in its status.
        let status = try run(hubExe, ["status", "--socket", hubDir + "/control.sock", "--json"])
        XCTAssertTrue(status.1.contains("\"relay\""), status.1)
    }

    /// Internet → phone: Bob sends through the relay directly (`yaok --relay`); Alice is at the
    /// hub and asked it to register her with the relay (`--relay-key`, host frame 0x07); the
    /// relay pushes Bob's message to the hub, which delivers it to Alice.
    func testInternetUserToRelayToHubToEndpoint() throws {
        let yaok = try product("yaok")
        let setup = try startRelayAndHub()
        let relayArgs = ["--relay-key", Hex.encode(setup.relay.key)]
        let (alice, bob) = try initAliceAndBob(yaok, in: setup.hubDir)

        // Bob, on the internet, hands the message to the relay; Alice is not reachable yet.
        let sent = try run(yaok, ["send", "--home", bob, "Alice", "hello from the internet",
                                  "--relay", "127.0.0.1:\(setup.relay.port)", "--json", "--timeout", "20"] + relayArgs)
        XCTAssertEqual(sent.0, 0, sent.1)
        XCTAssertEqual(setup.relay.metric("yaok_relay_sends_queued_total"), 1, sent.1)

        // Alice attaches to the hub and registers through it: the queued message comes down.
        // (She pins the hub: only a hub she trusts may collect her internet mail.)
        let got = try run(yaok, ["listen", "--home", alice, "--hub", "udp://127.0.0.1:\(setup.udpPort)", "--count", "1",
                                 "--trust-hub", try setup.hub.signingKeyHex(), "--json", "--timeout", "30"] + relayArgs, timeout: 60)
        XCTAssertEqual(got.0, 0, got.1 + "\nhub log:\n" + setup.log())
        XCTAssertTrue(got.1.contains("hello from the internet"), got.1 + "\nhub log:\n" + setup.log())
        // The relay deleted it only after the hub's store took custody.
        XCTAssertTrue(Wait.poll(timeout: 10) { setup.relay.metric("yaok_relay_acks_total") ?? 0 >= 1 })
    }

    /// Over WebSocket/TLS on both sides: Alice (at the hub) sends to Bob, who is on the
    /// internet and talks to the relay over `wss://` (`yaok listen --relay wss://…`); Bob's
    /// delivery receipt comes back through the relay and the hub to Alice.
    func testOverWebSocketPhoneToInternetUserWithDeliveryReceipt() throws {
        let yaok = try product("yaok"), hubExe = try product("yaok-hub")
        let setup = try startRelayAndHub(webSocket: true)
        XCTAssertEqual(setup.relay.tlsPin.count, 32)
        let key = ["--relay-key", Hex.encode(setup.relay.key)]
        let (alice, bob) = try initAliceAndBob(yaok, in: setup.hubDir)
        let wss = ["--relay", "wss://127.0.0.1:\(setup.relay.wssPort)", "--relay-tls-pin", Hex.encode(setup.relay.tlsPin)] + key

        // A wrong TLS pin is refused with a clear error before any relay packet is sent.
        var wrongPin = setup.relay.tlsPin
        wrongPin[31] ^= 1
        let refused = try run(yaok, ["listen", "--home", bob, "--relay", "wss://127.0.0.1:\(setup.relay.wssPort)",
                                     "--relay-tls-pin", Hex.encode(wrongPin), "--count", "1", "--timeout", "5"] + key)
        XCTAssertNotEqual(refused.0, 0)
        XCTAssertTrue(refused.1.contains("relay TLS certificate pin mismatch"), refused.1)

        // Bob listens at the relay over wss (a background process) ...
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: yaok)
        listener.arguments = ["listen", "--home", bob, "--count", "1", "--json", "--timeout", "60"] + wss
        let out = Pipe()
        listener.standardOutput = out
        listener.standardError = out
        let exited = DispatchSemaphore(value: 0)
        listener.terminationHandler = { _ in exited.signal() }
        try listener.run()
        cleanup.append { if listener.isRunning { listener.terminate() } }
        XCTAssertTrue(Wait.poll(timeout: 20) { setup.relay.metric("yaok_relay_websocket_upgraded_total") ?? 0 >= 2 }, "Bob did not connect over wss")

        // ... and Alice, at the hub (registered with the relay through it), waits for his receipt.
        let sent = try run(yaok, ["send", "--home", alice, "Bob", "hello over wss", "--hub", "udp://127.0.0.1:\(setup.udpPort)",
                                  "--trust-hub", try setup.hub.signingKeyHex(), "--wait-delivered", "--json", "--timeout", "45"] + key, timeout: 90)
        XCTAssertEqual(exited.wait(timeout: .now() + 30), .success)
        let bobOutput = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(listener.terminationStatus, 0, bobOutput)
        XCTAssertTrue(bobOutput.contains("hello over wss"), bobOutput)
        XCTAssertEqual(sent.0, 0, sent.1 + "\nhub log:\n" + setup.log())
        XCTAssertTrue(sent.1.contains("deliver"), sent.1)
        XCTAssertTrue(Wait.poll(timeout: 10) { setup.relay.metric("yaok_relay_acks_total") ?? 0 >= 2 }, "message and receipt acknowledged")
        XCTAssertGreaterThanOrEqual(setup.relay.metric("yaok_relay_websocket_failed_total") ?? 0, 1, "the wrong-pin attempt")
        let status = try run(hubExe, ["status", "--socket", setup.hubDir + "/control.sock", "--json"])
        XCTAssertTrue(status.1.replacingOccurrences(of: "\\/", with: "/").contains("wss://127.0.0.1:\(setup.relay.wssPort)/yaok-relay"), status.1)
    }

    /// A message the relay refused for its sender's hourly limit (retry hint about an hour)
    /// is not offered again every second, forever (109 refusals in 2 minutes on a paid
    /// uplink): the relay's hint travels with the refusal and the router waits for it: one
    /// refusal, then quiet.
    func testARateLimitedMessageWaitsForTheRelaysHint() throws {
        let yaok = try product("yaok")
        let setup = try startRelayAndHub(relayArguments: ["--messages-per-hour", "2"])
        let (alice, _) = try initAliceAndBob(yaok, in: setup.hubDir)
        for n in 1...3 {
            let sent = try run(yaok, ["send", "--home", alice, "Bob", "message \(n)", "--hub", setup.hub.url, "--json", "--timeout", "20"])
            XCTAssertEqual(sent.0, 0, sent.1)
        }
        let refused = "yaok_relay_sends_refused_total{reason=\"rate_limited\"}"
        XCTAssertTrue(Wait.poll(timeout: 20) { setup.relay.metric(refused) == 1 }, "the third was refused: \(setup.log())")
        XCTAssertEqual(setup.relay.metric("yaok_relay_sends_queued_total"), 2)
        // The router ticks every second; before, each tick offered it again. Watch 8 of them.
        let watchUntil = Date().addingTimeInterval(8)
        while Date() < watchUntil {
            XCTAssertEqual(setup.relay.metric(refused), 1, "offered again before the relay's retry time")
            Thread.sleep(forTimeInterval: 0.5)
        }
        XCTAssertEqual(setup.log().components(separatedBy: "refused custody of").count - 1, 1, setup.log())
    }
}
