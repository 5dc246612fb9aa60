import Foundation
import Synchronization
import XCTest
import YaokCrypto
import YaokRelayProtocol
import enum YaokPluginKit.Hex
import YaokTesting
import RelayTestSupport

/// `yaok listen --relay` for an internet user with nothing queued: real `yaok` processes
/// against a real `yaok-relay` on loopback. A listener that polls again as soon as each poll
/// is answered makes ~1,300 polls in 3.7 s, so the relay's per-address limit drops one; and a
/// lost datagram must not end the session (after ~3 s, with "timed out waiting for
/// NO_MESSAGES").
final class RelayListenTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() { for c in cleanup.reversed() { c() } }

    private func tempDir() throws -> String { try makeTemporaryDirectory("yaok-relay-listen-", cleanup: &cleanup) }

    private var yaok: String { RelayProcess.productsDirectory + "/yaok" }

    /// A relay process, and Alice and Bob (contacts of each other) in a fresh directory.
    private func relayAndUsers() throws -> (relay: RelayProcess, alice: String, bob: String) {
        guard FileManager.default.isExecutableFile(atPath: yaok) else { throw XCTSkip("yaok is not built") }
        let dir = try tempDir()
        let relay = try RelayProcess(dataDir: dir + "/relay")
        cleanup.append { relay.stop() }
        let (alice, bob) = try initAliceAndBob(yaok, in: dir)
        return (relay, alice, bob)
    }

    /// Starts `yaok listen` for `home` in the background; its output is read when it ends.
    private func startListener(_ args: [String]) throws -> ListenerProcess {
        let p = try ListenerProcess(yaok, args)
        cleanup.append { p.kill() }
        return p
    }

    /// Bob listens at the relay with nothing queued for longer than the ~3 s after which an
    /// unpaced listener fails, and polls only a handful of times; a message Alice sends later
    /// is pushed to him, printed, and his delivery receipt comes back through the relay:
    /// Alice's outbox says delivered.
    func testIdleInternetListenerWaitsThenReceivesALaterMessageAndTheReceiptReturns() throws {
        let (relay, alice, bob) = try relayAndUsers()
        let at = ["--relay", "127.0.0.1:\(relay.port)", "--relay-key", Hex.encode(relay.key)]
        let listener = try startListener(["listen", "--home", bob, "--count", "1", "--timeout", "60"] + at)
        XCTAssertTrue(Wait.poll(timeout: 15) { relay.metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, "Bob did not register")

        // Idle for 5 s, past the ~3 s at which an unpaced listener fails. The exit is the event
        // waited for; not seeing it within the bound is the assertion.
        XCTAssertFalse(listener.exited(within: 5), "listen ended while idle:\n\(listener.output())")
        let idlePolls = relay.metric("yaok_relay_polls_total") ?? .infinity
        // Paced at 1, 2, 4 s…: about 4 in 5 s (an unpaced loop makes ~1,300 in 3.7 s).
        XCTAssertLessThanOrEqual(idlePolls, 8, "an idle listener polled \(idlePolls) times in 5 s")
        XCTAssertEqual(relay.metric("yaok_relay_dropped_total{reason=\"rate_limited\"}"), 0)

        // Alice sends now and waits for Bob's delivery receipt, both through the relay.
        let sent = try runTool(yaok, ["send", "--home", alice, "Bob", "hello, later", "--wait-delivered", "--json", "--timeout", "30"] + at,
                               timeout: 60)
        XCTAssertEqual(sent.0, 0, sent.1)
        XCTAssertTrue(sent.1.contains("\"delivered\""), sent.1)

        XCTAssertTrue(listener.exited(within: 20), "Bob's listen did not end after one message")
        let out = listener.output()
        XCTAssertEqual(listener.status, 0, out)
        XCTAssertTrue(out.contains("[Alice] hello, later"), out)
        // The relay path names the relay, not a hub.
        XCTAssertTrue(out.contains("connected to relay 127.0.0.1:\(relay.port)"), out)
        XCTAssertFalse(out.contains("hub"), out)
        XCTAssertFalse(out.contains("timed out"), out)

        let outbox = try runTool(yaok, ["outbox", "--home", alice, "--json"])
        XCTAssertTrue(outbox.1.contains("\"state\":\"delivered\""), outbox.1)
        // The message and the receipt were each delivered once and acknowledged.
        XCTAssertTrue(Wait.poll(timeout: 10) { relay.metric("yaok_relay_acks_total") ?? 0 >= 2 })
        XCTAssertEqual(relay.metric("yaok_relay_queued_messages"), 0)
    }

    /// Lost datagrams do not end `listen`: the first two NO_MESSAGES answers are dropped on
    /// the way (as a lossy path would), the listener tries those polls again and keeps
    /// waiting, and a later message still arrives.
    func testLostPollAnswersDoNotEndListen() throws {
        let (relay, alice, bob) = try relayAndUsers()
        let proxy = try UDPInterposer(relayPort: relay.port)
        cleanup.append { proxy.stop() }
        final class Dropped: Sendable { let n = Mutex(0) }
        let dropped = Dropped()
        proxy.dropFromRelay = { packet in
            guard packet.type == .noMessages else { return false }
            return dropped.n.withLock { n -> Bool in
                guard n < 2 else { return false }
                n += 1
                return true
            }
        }
        let key = ["--relay-key", Hex.encode(relay.key)]
        let listener = try startListener(["listen", "--home", bob, "--count", "1", "--timeout", "60", "--relay", "127.0.0.1:\(proxy.port)"] + key)
        XCTAssertTrue(Wait.poll(timeout: 20) { dropped.n.withLock { $0 } == 2 }, "the listener did not poll twice:\n\(listener.output())")
        // Each lost answer is retried after its 2 s answer timeout and a 1 s pause: still
        // listening well past both, not giving up at the first.
        XCTAssertFalse(listener.exited(within: 4), "listen ended after lost datagrams:\n\(listener.output())")
        let polls = proxy.packetsFromClient { $0.type == .poll }
        XCTAssertGreaterThanOrEqual(polls, 3, "the lost polls were tried again")

        let sent = try runTool(yaok, ["send", "--home", alice, "Bob", "through the loss", "--relay", "127.0.0.1:\(relay.port)",
                                      "--json", "--timeout", "30"] + key, timeout: 60)
        XCTAssertEqual(sent.0, 0, sent.1)
        XCTAssertTrue(listener.exited(within: 20), "Bob's listen did not end after one message")
        let out = listener.output()
        XCTAssertEqual(listener.status, 0, out)
        XCTAssertTrue(out.contains("[Alice] through the loss"), out)
    }
}

