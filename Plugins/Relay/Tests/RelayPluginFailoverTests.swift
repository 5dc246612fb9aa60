import Foundation
import HubTestSupport
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokRelayProtocol
import YaokWire
import YaokTesting
import RelayTestSupport

/// The relay plugin's failover: given several nodes of one relay (one pinned key), the built
/// `libyaok-plugin-relay.so` (driven through the C ABI by ``PluginTestHost``, and inside a real
/// `yaok-hub`) moves to another node when the one in use stops answering, skips a node that
/// cannot prove the pinned key, and neither drops nor re-sends as new what the old node
/// acknowledged. The relay client's and `yaok`'s failover are in
/// Tests/RelayTests/RelayFailoverTests.swift.
///
/// The nodes here are real `yaok-relay` processes (``RelayProcess/failoverNodes(extra:cleanup:)``):
/// two share one signing key, each with its own SQLCipher store (what node 1 queued is not
/// visible on node 2, which makes any re-send of it there countable), and a third has another key.
final class RelayPluginFailoverTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() { for c in cleanup.reversed() { c() } }

    private func tempDir() throws -> String { try makeTemporaryDirectory("yaok-relay-failover-", cleanup: &cleanup) }

    func testPluginConfigForSeveralNodes() throws {
        let key = String(repeating: "ab", count: 32)
        // A list of nodes, UDP and wss:// mixed, one TLS pin for every wss:// node.
        XCTAssertNil(try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": ["127.0.0.1:7900", "wss://127.0.0.1:7443", "[::1]:7901"],
                                                    "relay_key": key, "tls_spki_sha256": key, "failover_after_s": 3]))
        // One pin per wss:// node, in order.
        XCTAssertNil(try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": ["wss://a.example:7443", "127.0.0.1:7900", "wss://b.example:7443"],
                                                    "relay_key": key, "tls_spki_sha256": [key, String(repeating: "cd", count: 32)]]))
        let both = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "address": "127.0.0.1:7900", "addresses": ["127.0.0.1:7901"], "relay_key": key])
        XCTAssertTrue(both?.contains("transports.relay.addresses") == true && both?.contains("not both") == true, both ?? "")
        let bad = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": ["127.0.0.1:7900", "nowhere"], "relay_key": key])
        XCTAssertTrue(bad?.contains("transports.relay.addresses") == true && bad?.contains("item 2") == true && bad?.contains("line") == true, bad ?? "")
        let empty = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": [String](), "relay_key": key])
        XCTAssertTrue(empty?.contains("transports.relay.addresses") == true, empty ?? "")
        let notList = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": "127.0.0.1:7900", "relay_key": key])
        XCTAssertTrue(notList?.contains("list of strings") == true, notList ?? "")
        let pins = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": ["wss://a.example:7443", "wss://b.example:7443", "wss://c.example:7443"],
                                                  "relay_key": key, "tls_spki_sha256": [key, key]])
        XCTAssertTrue(pins?.contains("transports.relay.tls_spki_sha256") == true && pins?.contains("2 pins for 3") == true, pins ?? "")
        let range = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "addresses": ["127.0.0.1:7900"], "relay_key": key, "failover_after_s": 1])
        XCTAssertTrue(range?.contains("transports.relay.failover_after_s") == true, range ?? "")
    }

    /// The plugin on nodes [1, hostile, 2]: link up on node 1, a bundle acknowledged there;
    /// kill -9 node 1; the next send finds it gone, the hostile relay's handshake fails the pin
    /// and is skipped, the link comes up on node 2 (same pinned key) within the bound, status
    /// names node 3 of 3 and why; the un-acknowledged bundle goes to node 2 once (its re-send
    /// is a duplicate there), the acknowledged one never; the recipient gets exactly that.
    func testPluginMovesToTheNextNodeAfterKill9AndSkipsAWrongKey() throws {
        let (node1, node2, hostile) = try RelayProcess.failoverNodes(cleanup: &cleanup)
        let host = try PluginTestHost(plugin: "relay")
        XCTAssertNil(host.create(config: ["enabled": true, "relay_key": Hex.encode(node1.key), "poll_interval_s": 1, "failover_after_s": 2,
                                          "addresses": ["127.0.0.1:\(node1.port)", "127.0.0.1:\(hostile.port)", "127.0.0.1:\(node2.port)"]]))
        let m0 = host.mark
        try host.start()
        let link1: UInt64 = try host.wait("link up on node 1", after: m0) { e in
            if case .linkUp(let id, 3, let key, _) = e, key == node1.key { return id }
            return nil
        }
        var details = host.statusJSON()["details"] as? [String: String] ?? [:]
        XCTAssertEqual(details["node"], "1 of 3")
        XCTAssertEqual(details["address"], "127.0.0.1:\(node1.port)")
        XCTAssertNil(details["last_node_change"])

        let alice = Identity.generate(), bob = Identity.generate()
        let acked = try messageBundle("acknowledged by node 1", from: alice, to: bob)
        func custodyAck(_ b: [UInt8], on link: UInt64) throws -> [UInt8] {
            let m = host.mark
            XCTAssertNil(host.send(TLVRecord(.bundle, value: b).encoded, link: link))
            return try host.wait("custody ack", after: m) { e in
                if case .frame(let l, let bytes) = e, l == link, let r = try? TLVRecord(parsing: bytes), r.type == RoutingFrameType.custodyAck.rawValue { return r.value }
                return nil
            }
        }
        XCTAssertEqual(try custodyAck(acked, on: link1), BundleID.of(bundle: acked))
        XCTAssertEqual(node1.metric("yaok_relay_queued_messages"), 1)

        // Node 1 dies without a word. The next SEND meets ICMP port unreachable.
        node1.kill9()
        let killedAt = Date()
        let later = try messageBundle("sent after node 1 died", from: alice, to: bob)
        let m1 = host.mark
        _ = host.send(TLVRecord(.bundle, value: later).encoded, link: link1)
        let downReason: String = try host.wait("link down", after: m1) { e in
            if case .linkDown(let id, let reason) = e, id == link1 { return reason }
            return nil
        }
        XCTAssertTrue(downReason.contains("unreachable"), downReason)
        // Bound: detection at once, 2 s on the hostile node, a handshake on node 2.
        let link2: UInt64 = try host.wait("link up on node 2", after: m1, timeout: 15) { e in
            if case .linkUp(let id, 3, let key, _) = e { XCTAssertEqual(key, node1.key); return id }
            return nil
        }
        let took = Date().timeIntervalSince(killedAt)
        XCTAssertLessThan(took, 10, "failover took \(took) s")
        XCTAssertNotEqual(link2, link1)
        // No link ever came up with the hostile relay, and it got no registration from the hub.
        XCTAssertNil(hostile.metric("yaok_relay_registrations_accepted_total").flatMap { $0 > 0 ? $0 : nil })
        XCTAssertEqual(node2.metric("yaok_relay_registrations_accepted_total"), 1, "the hub registered on node 2")

        let status = host.statusJSON()
        details = status["details"] as? [String: String] ?? [:]
        XCTAssertEqual(status["state"] as? String, "running")
        XCTAssertEqual(details["node"], "3 of 3")
        XCTAssertEqual(details["address"], "127.0.0.1:\(node2.port)")
        XCTAssertEqual(details["node_changes"], "2", "node 1 → hostile → node 2")
        let change = details["last_node_change"] ?? ""
        XCTAssertTrue(change.hasPrefix("node 2 (127.0.0.1:\(hostile.port)) stopped answering at 20"), change)
        XCTAssertTrue(change.contains("relay key mismatch") && change.hasSuffix("now node 3 (127.0.0.1:\(node2.port))"), change)
        // The reason (what `yaok-hub status` prints) names the node in use and why it is that one.
        let reason = status["reason"] as? String ?? ""
        XCTAssertTrue(reason.hasPrefix("registered with relay node 3 of 3 (127.0.0.1:\(node2.port)); last move: node 2"), reason)
        XCTAssertTrue(reason.contains("relay key mismatch"), reason)

        // The host re-sends what the relay never acknowledged (as the router does after a link
        // goes down); the acknowledged bundle is not sent again. A second re-send of the same
        // bundle is a duplicate at the relay (deduplicated by bundle ID), not a second message.
        XCTAssertEqual(try custodyAck(later, on: link2), BundleID.of(bundle: later))
        XCTAssertEqual(try custodyAck(later, on: link2), BundleID.of(bundle: later))
        XCTAssertEqual(node2.metric("yaok_relay_sends_queued_total"), 1)
        XCTAssertEqual(node2.metric("yaok_relay_sends_duplicate_total"), 1)
        XCTAssertEqual(node2.metric("yaok_relay_queued_messages"), 1)

        // Bob, on node 2, gets exactly the bundle sent after the move.
        var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: UInt16(node2.port)), relaySigningKey: node2.key)
        cfg.handshakeRetryMs = 200
        let bobClient = RelayClient(configuration: cfg)
        defer { bobClient.stop() }
        try bobClient.connect()
        let mark = bobClient.currentSeq()   // registering brings what waits (pushed): wait from here
        XCTAssertEqual(try bobClient.registerAndWait([Registration.owner(bob, relaySigningKey: node2.key, channel: XCTUnwrap(bobClient.channelBinding),
                                                                        timestampMs: Int64(Date().timeIntervalSince1970 * 1000))]).map(\.status), [.accepted])
        let got = try bobClient.nextMessage(after: mark, timeout: 10)
        XCTAssertEqual(got.bundleID, BundleID.of(bundle: later))
        try bobClient.ack([got.bundleID])
        XCTAssertTrue(Wait.poll(timeout: 10) { node2.metric("yaok_relay_queued_messages") == 0 }, "node 2 held nothing else for Bob")
        XCTAssertEqual(try bobClient.pollAndWait().count, 0)
    }

    /// Over WebSocket/TLS: two `wss://` nodes with one certificate key (one pin for both).
    /// Node 1 is killed (-9): its TCP connection closes, the link goes down at once (no send
    /// needed) and comes up on node 2, whose URL the status shows.
    func testPluginFailsOverBetweenWebSocketNodes() throws {
        let tls = try TLSFixture.make()
        cleanup.append { tls.remove() }
        let (node1, node2, _) = try RelayProcess.failoverNodes(extra: ["--wss-listen", "127.0.0.1:0", "--tls-cert", tls.certificate, "--tls-key", tls.key], cleanup: &cleanup)
        XCTAssertEqual(node1.tlsPin, node2.tlsPin)
        let url1 = "wss://127.0.0.1:\(node1.wssPort)", url2 = "wss://127.0.0.1:\(node2.wssPort)"
        let host = try PluginTestHost(plugin: "relay")
        XCTAssertNil(host.create(config: ["enabled": true, "relay_key": Hex.encode(node1.key), "tls_spki_sha256": Hex.encode(node1.tlsPin),
                                          "failover_after_s": 2, "addresses": [url1, url2]]))
        let m0 = host.mark
        try host.start()
        let link1: UInt64 = try host.wait("link up on node 1", after: m0) { e in
            if case .linkUp(let id, 3, _, _) = e { return id }
            return nil
        }
        XCTAssertEqual((host.statusJSON()["details"] as? [String: String])?["transport"], url1 + "/yaok-relay")

        let m1 = host.mark
        node1.kill9()
        _ = try host.wait("link down", after: m1) { e -> Bool? in
            if case .linkDown(let id, _) = e, id == link1 { return true }
            return nil
        }
        let link2: UInt64 = try host.wait("link up on node 2", after: m1, timeout: 15) { e in
            if case .linkUp(let id, 3, let key, _) = e { XCTAssertEqual(key, node2.key); return id }
            return nil
        }
        XCTAssertNotEqual(link2, link1)
        let details = host.statusJSON()["details"] as? [String: String] ?? [:]
        XCTAssertEqual(details["node"], "2 of 2")
        XCTAssertEqual(details["transport"], url2 + "/yaok-relay")
        XCTAssertTrue(details["last_node_change"]?.hasPrefix("node 1 (\(url1)/yaok-relay) stopped answering at") == true, "\(details)")
        XCTAssertEqual(node2.metric("yaok_relay_registrations_accepted_total"), 1)
    }

    /// The "done when", with real processes: a `yaok-hub` whose relay plugin has
    /// `addresses: [node 1, node 2]` in its YAML, Alice at the hub, Bob on the internet with
    /// `yaok listen --relay node1,node2`. The first message goes hub → node 1 → Bob; node 1 is
    /// killed (-9); the second message, handed to the hub afterwards, makes the hub's relay link
    /// fail over to node 2 and reaches Bob there. Bob gets each message once (the one node 1
    /// acknowledged is not sent again); `yaok-hub status` names node 2 and why; the hub logs
    /// the move once.
    func testHubFailsOverToNode2WithNothingLostOrDuplicated() throws {
        let yaok = RelayProcess.productsDirectory + "/yaok", hubExe = RelayProcess.productsDirectory + "/yaok-hub"
        for exe in [yaok, hubExe] where !FileManager.default.isExecutableFile(atPath: exe) { throw XCTSkip("\(exe) is not built") }
        let (node1, node2, _) = try RelayProcess.failoverNodes(cleanup: &cleanup)
        let hubDir = try tempDir()
        let hub = try RelayHub(dir: hubDir, relayAddresses: ["127.0.0.1:\(node1.port)", "127.0.0.1:\(node2.port)"], relayKey: node1.key)
        cleanup.append { hub.stop() }
        let hubLog = { hub.log }
        XCTAssertTrue(Wait.poll(timeout: 30) { node1.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, hubLog())

        let (alice, bob) = try initAliceAndBob(yaok, in: hubDir)
        let bobAt = ["--relay", "127.0.0.1:\(node1.port),127.0.0.1:\(node2.port)", "--relay-key", Hex.encode(node1.key)]
        let listener = try ListenerProcess(yaok, ["listen", "--home", bob, "--count", "2", "--timeout", "90"] + bobAt)
        cleanup.append { listener.kill() }
        XCTAssertTrue(Wait.poll(timeout: 15) { node1.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 2 }, "Bob did not register on node 1")

        let atHub = ["--hub", hub.url, "--json", "--timeout", "20"]
        let first = try runTool(yaok, ["send", "--home", alice, "Bob", "first, via node 1"] + atHub, timeout: 60)
        XCTAssertEqual(first.0, 0, first.1)
        // Node 1 took it from the hub and Bob acknowledged it there.
        XCTAssertTrue(Wait.poll(timeout: 20) { node1.metric("yaok_relay_acks_total") ?? 0 >= 1 }, listener.output() + hubLog())

        node1.kill9()
        let second = try runTool(yaok, ["send", "--home", alice, "Bob", "second, via node 2"] + atHub, timeout: 60)
        XCTAssertEqual(second.0, 0, second.1)

        XCTAssertTrue(listener.exited(within: 45), "Bob's listen did not end after two messages:\n\(listener.output())\nhub log:\n\(hubLog())")
        let out = listener.output()
        XCTAssertEqual(listener.status, 0, out)
        XCTAssertEqual(out.components(separatedBy: "[Alice] first, via node 1").count - 1, 1, out)
        XCTAssertEqual(out.components(separatedBy: "[Alice] second, via node 2").count - 1, 1, out)
        XCTAssertFalse(out.contains("duplicate"), out)

        let status = try hub.statusText()
        XCTAssertEqual(status.0, 0, status.1)
        XCTAssertTrue(status.1.contains("registered with relay node 2 of 2 (127.0.0.1:\(node2.port)); last move: node 1 (127.0.0.1:\(node1.port)) stopped answering at"), status.1)
        let log = hubLog()
        XCTAssertEqual(log.components(separatedBy: "relay failover: node 1").count - 1, 1, log)
        // Logged by address and error text only: neither Alice's nor Bob's user ID appears.
        for home in [alice, bob] {
            let id = Hex.encode(try XCTUnwrap(IdentityFile.load(path: home + "/identity.key")).userID)
            XCTAssertFalse(log.contains(id), "a full user ID in the hub log")
        }
    }
}
