import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokRelayProtocol
import YaokWire
import YaokTesting
import RelayTestSupport

/// Failover in the clients: the relay client and `yaok` given several nodes of one relay (one
/// pinned key) move to another node when the one in use stops answering, skip a node that
/// cannot prove the pinned key, and neither drop nor re-send as new what the old node
/// acknowledged. The hub's relay plugin does the same in
/// Plugins/Relay/Tests/RelayPluginFailoverTests.swift.
///
/// The nodes here are real `yaok-relay` processes (``RelayProcess/failoverNodes(extra:cleanup:)``):
/// two share one signing key, each with its own SQLCipher store, and a third has another key.
final class RelayFailoverTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() { for c in cleanup.reversed() { c() } }

    private func tempDir() throws -> String { try makeTemporaryDirectory("yaok-relay-failover-", cleanup: &cleanup) }

    /// A node that never answers (a silent UDP port: no ICMP, no reply) is left after the
    /// handshake bound, and the client's session comes up on the next node.
    func testClientLeavesASilentNodeAndReportsTheChange() throws {
        let (_, node2, _) = try RelayProcess.failoverNodes(cleanup: &cleanup)
        let silent = try UDPSink()
        cleanup.append { silent.close() }
        var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: silent.port), relaySigningKey: node2.key)
        cfg.alternates = [RelayClient.Node(address: IPEndpoint(host: "127.0.0.1", port: UInt16(node2.port)))]
        cfg.failoverHandshakeMs = 1_000
        cfg.handshakeRetryMs = 200
        let client = RelayClient(configuration: cfg)
        defer { client.stop() }
        let start = Date()
        try client.connect(timeout: 10)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5)
        XCTAssertEqual(client.currentNode.index, 1)
        let change = try XCTUnwrap(client.lastNodeChange)
        XCTAssertEqual(change.from, 0)
        XCTAssertEqual(change.to, 1)
        XCTAssertTrue(change.reason.contains("no handshake verified against the pinned key in 1 s"), change.reason)
        XCTAssertGreaterThan(silent.received, 0, "the silent node was tried first")
    }

    /// A node that stops answering requests on a live session (every packet from it dropped
    /// on the way, no ICMP): after the silence bound the client leaves it, the SEND it was
    /// waiting on fails with a timeout (its owner sends it again), and the session comes up
    /// on the next node, where the re-send is queued.
    func testClientLeavesANodeThatStopsAnsweringRequests() throws {
        let (node1, node2, _) = try RelayProcess.failoverNodes(cleanup: &cleanup)
        let proxy = try UDPInterposer(relayPort: node1.port)
        cleanup.append { proxy.stop() }
        var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: UInt16(proxy.port)), relaySigningKey: node1.key)
        cfg.alternates = [RelayClient.Node(address: IPEndpoint(host: "127.0.0.1", port: UInt16(node2.port)))]
        cfg.failoverSilenceMs = 1_500
        cfg.handshakeRetryMs = 200
        let client = RelayClient(configuration: cfg)
        defer { client.stop() }
        let alice = Identity.generate(), bob = Identity.generate()
        let key = node1.key
        // Alice registers on every session, fresh for its channel (the node after a move too).
        client.registrationProvider = { channel in
            [try! Registration.owner(alice, relaySigningKey: key, channel: channel, timestampMs: Int64(Date().timeIntervalSince1970 * 1000))]
        }
        let registered = client.currentSeq()
        try client.connect(timeout: 10)
        XCTAssertEqual(client.currentNode.index, 0)
        _ = try client.waitFor("registered on node 1", timeout: 10, after: registered) { e -> Bool? in
            if case .registered(_, .accepted) = e { return true }
            return nil
        }

        proxy.dropFromRelay = { _ in true }
        let b = try messageBundle("waiting when node 1 fell silent", from: alice, to: bob)
        let id = try XCTUnwrap(BundleID.of(bundle: b))
        let mark = client.currentSeq()
        let silentFrom = Date()
        try client.send(bundle: b)
        let failed: RelayProtocolError = try client.waitFor("the SEND to fail", timeout: 10, after: mark) { e in
            if case .sendFailed(let sid, let error) = e, sid == id { return error }
            return nil
        }
        guard case .timeout = failed else { return XCTFail("expected a timeout, got \(failed)") }
        _ = try client.waitFor("connected to node 2", timeout: 10, after: mark) { e -> Bool? in
            if case .connected = e { return true }
            return nil
        }
        XCTAssertLessThan(Date().timeIntervalSince(silentFrom), 6)
        XCTAssertEqual(client.currentNode.index, 1)
        let change = try XCTUnwrap(client.lastNodeChange)
        XCTAssertEqual([change.from, change.to], [0, 1])
        XCTAssertTrue(change.reason.hasPrefix("no answer to requests for 1 s"), change.reason)
        XCTAssertEqual(try client.sendAndWait(bundle: b).status, .queued)
        XCTAssertEqual(node2.metric("yaok_relay_queued_messages"), 1)
    }

    /// `yaok` with `--relay node1,hostile --relay node2`: Bob listens on node 1 and gets the
    /// first message; node 1 is killed; he moves (skipping the wrong key) to node 2, says so,
    /// and gets the second message there. Alice, with the same list, sends the second message
    /// after the kill: it goes to node 2 once, and her first (handed over to node 1) is not
    /// sent again.
    func testYaokFailsOverAndDoesNotResendWhatNode1Took() throws {
        let yaok = RelayProcess.productsDirectory + "/yaok"
        guard FileManager.default.isExecutableFile(atPath: yaok) else { throw XCTSkip("yaok is not built") }
        let (node1, node2, hostile) = try RelayProcess.failoverNodes(cleanup: &cleanup)
        let (alice, bob) = try initAliceAndBob(yaok, in: try tempDir())
        let at = ["--relay", "127.0.0.1:\(node1.port),127.0.0.1:\(hostile.port)", "--relay", "127.0.0.1:\(node2.port)",
                  "--relay-key", Hex.encode(node1.key)]
        let listener = try ListenerProcess(yaok, ["listen", "--home", bob, "--count", "2", "--timeout", "90"] + at)
        cleanup.append { listener.kill() }
        XCTAssertTrue(Wait.poll(timeout: 15) { node1.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, "Bob did not register on node 1")

        let first = try runTool(yaok, ["send", "--home", alice, "Bob", "first, via node 1", "--json", "--timeout", "20"] + at, timeout: 60)
        XCTAssertEqual(first.0, 0, first.1)
        // Bob got it (pushed) and acknowledged it: node 1 holds nothing more for him.
        XCTAssertTrue(Wait.poll(timeout: 15) { node1.metric("yaok_relay_acks_total") ?? 0 >= 1 }, listener.output())

        node1.kill9()
        let second = try runTool(yaok, ["send", "--home", alice, "Bob", "second, after the failover", "--json", "--timeout", "30"] + at, timeout: 60)
        XCTAssertEqual(second.0, 0, second.1)
        // Only the second message reached node 2 (plus, perhaps, Bob's delivery receipt for the
        // first, which he had not handed over before node 1 died).
        XCTAssertTrue(second.1.contains("\"handed_over\""), second.1)
        XCTAssertEqual(second.1.components(separatedBy: "\"handed_over\"").count - 1, 1, "one item handed over:\n\(second.1)")

        XCTAssertTrue(listener.exited(within: 40), "Bob's listen did not end after two messages:\n\(listener.output())")
        let out = listener.output()
        XCTAssertEqual(listener.status, 0, out)
        XCTAssertEqual(out.components(separatedBy: "[Alice] first, via node 1").count - 1, 1, out)
        XCTAssertTrue(out.contains("[Alice] second, after the failover"), out)
        XCTAssertTrue(out.contains("relay failover: node 1 (127.0.0.1:\(node1.port)) stopped answering"), out)
        XCTAssertTrue(out.contains("relay key mismatch"), out)
        XCTAssertTrue(out.contains("connected to relay 127.0.0.1:\(node2.port)"), out)
        XCTAssertNil(hostile.metric("yaok_relay_registrations_accepted_total").flatMap { $0 > 0 ? $0 : nil })
    }

}

