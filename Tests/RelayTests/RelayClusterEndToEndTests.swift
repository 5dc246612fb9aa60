import Foundation
import HubTestSupport
import XCTest
import YaokCrypto
import enum YaokPluginKit.Hex
import YaokTesting
import RelayTestSupport

/// A relay cluster end to end, all real processes on one database: PostgreSQL, two
/// `yaok-relay` nodes with one key, a `yaok-hub` whose relay plugin has both nodes, Alice (a
/// phone) behind the hub, Bob and Carol on the internet (`yaok --relay`) spread over the two
/// nodes. The node the hub (and Bob) use is killed (-9) while a batch flows through it.
final class RelayClusterEndToEndTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() {
        for c in cleanup.reversed() { c() }
        cleanup = []
    }

    private static let yaok = RelayProcess.productsDirectory + "/yaok"

    /// `yaok inbox --json` of `home`: (sender, text, id) per message.
    private func inbox(_ home: String, file: StaticString = #filePath, line: UInt = #line) throws -> [(from: String, text: String, id: String)] {
        let (rc, out) = try runTool(Self.yaok, ["inbox", "--home", home, "--json"])
        XCTAssertEqual(rc, 0, out, file: file, line: line)
        return out.split(separator: "\n").compactMap { l in
            guard let o = try? JSONSerialization.jsonObject(with: Data(l.utf8)) as? [String: Any],
                  let id = o["id"] as? String, let from = o["from"] as? String, let text = o["text"] as? String else { return nil }
            return (from, text, id)
        }
    }

    /// Checks that `home`'s inbox holds exactly `expected` (texts) from `sender`, each once.
    private func assertInbox(_ home: String, from sender: String, exactly expected: Set<String>,
                             file: StaticString = #filePath, line: UInt = #line) throws {
        let got = try inbox(home, file: file, line: line).filter { $0.from == sender }
        XCTAssertEqual(got.count, expected.count, "\(home): messages from \(sender) (a duplicate or a loss)", file: file, line: line)
        XCTAssertEqual(Set(got.map(\.id)).count, got.count, "\(home): one message ID twice", file: file, line: line)
        XCTAssertEqual(Set(got.map(\.text)).count, got.count, "\(home): one text twice", file: file, line: line)
        XCTAssertEqual(Set(got.map(\.text)), expected, "\(home): lost from \(sender): \(expected.subtracting(got.map(\.text)).sorted().prefix(5))",
                       file: file, line: line)
    }

    /// Waits (bounded) for `p` to end and checks it ended well; the status is read only after
    /// an exit (reading it from a running process traps).
    @discardableResult
    private func ended(_ p: ListenerProcess, within seconds: TimeInterval, _ what: String, extra: () -> String = { "" },
                       file: StaticString = #filePath, line: UInt = #line) -> Bool {
        guard p.exited(within: seconds) else {
            XCTFail("\(what) did not end within \(Int(seconds)) s:\n\(p.output().suffix(3000))\n\(extra())", file: file, line: line)
            return false
        }
        XCTAssertEqual(p.status, 0, "\(what):\n\(p.output().suffix(3000))\n\(extra())", file: file, line: line)
        return p.status == 0
    }

    private static func texts(_ prefix: String, _ count: Int) -> Set<String> {
        let width = String(count).count
        return Set((1...count).map { n in prefix + String(repeating: "0", count: width - String(n).count) + String(n) })
    }

    func testHubAndUsersFailOverWhenTheirNodeIsKilledMidBatch() throws {
        let yaok = Self.yaok
        guard FileManager.default.isExecutableFile(atPath: yaok) else { throw XCTSkip("yaok is not built") }
        // Short leases: what node 0 pushed but nobody acknowledged is offered again by node 1 soon.
        // Alice sends more than the default 100 messages an hour (counted across the nodes).
        let (pg, nodes) = try startRelayCluster(2, extra: ["--lease-seconds", "3", "--messages-per-hour", "10000"], cleanup: &cleanup)
        let (n0, n1) = (nodes[0], nodes[1])
        let a0 = "127.0.0.1:\(n0.port)", a1 = "127.0.0.1:\(n1.port)"
        let key = Hex.encode(n0.key)
        let dir = try makeTemporaryDirectory("yaok-relay-cluster-e2e-", cleanup: &cleanup)

        let hub = try RelayHub(dir: dir + "/hub", relayAddresses: [a0, a1], relayKey: n0.key)
        cleanup.append { hub.stop() }
        XCTAssertTrue(Wait.poll(timeout: 30) { n0.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, "the hub did not register on node 0:\n\(hub.log)")

        let homes = try initUsers(yaok, ["Alice", "Bob", "Carol"], in: dir)
        let (alice, bob, carol) = (homes[0], homes[1], homes[2])
        // 300: a batch of 100 once crossed node 0 whole between two polls of its metrics, so the
        // kill came after it. (Within the relay's 2,000 sends per hour per address, receipts included.)
        let batch = 300, toCarol = 20, fromBob = 30, fromCarol = 20

        // Bob on node 0 (then node 1), Carol on node 1 (then node 0): both listening.
        let bobListen = try ListenerProcess(yaok, ["listen", "--home", bob, "--count", "\(batch)", "--timeout", "150", "--relay", "\(a0),\(a1)", "--relay-key", key])
        cleanup.append { bobListen.kill() }
        XCTAssertTrue(Wait.poll(timeout: 15) { n0.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 2 }, "Bob did not register on node 0:\n\(bobListen.output())")
        let carolListen = try ListenerProcess(yaok, ["listen", "--home", carol, "--count", "\(toCarol)", "--timeout", "150", "--relay", "\(a1),\(a0)", "--relay-key", key])
        cleanup.append { carolListen.kill() }
        XCTAssertTrue(Wait.poll(timeout: 15) { n1.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, "Carol did not register on node 1:\n\(carolListen.output())")

        // Alice hands the hub a batch for Bob and waits for every delivery receipt.
        let atHub = ["--hub", hub.url, "--relay-key", key, "--trust-hub", try hub.signingKeyHex(), "--json"]
        let aliceSend = try ListenerProcess(yaok, ["send", "--home", alice, "Bob", "alice to bob {n}", "--repeat", "\(batch)", "--wait-delivered", "--timeout", "150"] + atHub)
        cleanup.append { aliceSend.kill() }
        // Mid-transfer: some of the batch reached node 0 (queued or pushed to Bob), not all.
        func throughNode0() -> Double { (n0.metric("yaok_relay_sends_pushed_total") ?? 0) + (n0.metric("yaok_relay_sends_queued_total") ?? 0) }
        XCTAssertTrue(Wait.poll(timeout: 60) { throughNode0() >= 5 }, "the batch did not start through node 0:\n\(aliceSend.output())\n\(hub.log)")
        let atKill = throughNode0()
        n0.kill9()
        let inQueue = try pg.sql("SELECT count(*) FROM relay_queue")
        print("relay cluster e2e: node 0 killed after taking \(Int(atKill)) of \(batch) messages; \(inQueue) in the shared queue")
        XCTAssertLessThan(atKill, Double(batch), "node 0 was killed after the batch, not during it")

        // Alice's batch: every receipt comes back (--wait-delivered exits 0 only then), through node 1 after the move.
        ended(aliceSend, within: 150, "Alice's send (every receipt)", extra: { "hub log:\n" + hub.log.suffix(3000) })
        ended(bobListen, within: 60, "Bob's listen (\(batch) messages)", extra: { "hub log:\n" + hub.log.suffix(3000) })
        XCTAssertTrue(bobListen.output().contains("relay failover: node 1 (\(a0)) stopped answering"), String(bobListen.output().suffix(2000)))

        // The hub moved to node 1 and says why.
        let status = try hub.statusText()
        XCTAssertEqual(status.0, 0, status.1)
        XCTAssertTrue(status.1.contains("registered with relay node 2 of 2 (\(a1)); last move: node 1 (\(a0)) stopped answering at"), status.1)

        // After the move: Alice → Carol through the hub (node 1), with receipts.
        let toC = try runTool(yaok, ["send", "--home", alice, "Carol", "alice to carol {n}", "--repeat", "\(toCarol)", "--wait-delivered", "--timeout", "60"] + atHub, timeout: 90)
        XCTAssertEqual(toC.0, 0, toC.1)
        ended(carolListen, within: 30, "Carol's listen (\(toCarol) messages)")

        // The other way: Bob (node 0 listed first, dead) and Carol send to Alice at the hub, with receipts.
        let aliceListen = try ListenerProcess(yaok, ["listen", "--home", alice, "--count", "\(fromBob + fromCarol)", "--timeout", "150"] + atHub)
        cleanup.append { aliceListen.kill() }
        let fromB = try runTool(yaok, ["send", "--home", bob, "Alice", "bob to alice {n}", "--repeat", "\(fromBob)", "--wait-delivered", "--timeout", "60",
                                       "--relay", "\(a0),\(a1)", "--relay-key", key, "--json"], timeout: 90)
        XCTAssertEqual(fromB.0, 0, fromB.1)
        let fromC = try runTool(yaok, ["send", "--home", carol, "Alice", "carol to alice {n}", "--repeat", "\(fromCarol)", "--wait-delivered", "--timeout", "60",
                                       "--relay", "\(a1),\(a0)", "--relay-key", key, "--json"], timeout: 90)
        XCTAssertEqual(fromC.0, 0, fromC.1)
        ended(aliceListen, within: 60, "Alice's listen (\(fromBob + fromCarol) messages)", extra: { "hub log:\n" + hub.log.suffix(3000) })

        // 0 lost, 0 duplicated at every recipient.
        try assertInbox(bob, from: "Alice", exactly: Self.texts("alice to bob ", batch))
        try assertInbox(carol, from: "Alice", exactly: Self.texts("alice to carol ", toCarol))
        try assertInbox(alice, from: "Bob", exactly: Self.texts("bob to alice ", fromBob))
        try assertInbox(alice, from: "Carol", exactly: Self.texts("carol to alice ", fromCarol))
        // The hub logged its move once.
        XCTAssertEqual(hub.log.components(separatedBy: "relay failover: node 1").count - 1, 1, hub.log)
    }
}
