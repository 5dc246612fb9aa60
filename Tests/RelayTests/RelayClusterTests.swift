import Foundation
import Logging
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokWire
import enum YaokPluginKit.Hex
import YaokTesting
import struct YaokPluginKit.IPEndpoint
import RelayTestSupport

/// Several `yaok-relay` processes (real processes, built binaries) sharing one real PostgreSQL
/// server (``PostgresTestServer``) and one relay key. Users connect to the node the test picks;
/// moving a user to another node is done by the test (client failover is the relay plugin's and
/// `yaok`'s job).
final class RelayClusterTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() {
        for c in cleanup.reversed() { c() }
        cleanup = []
    }

    /// PostgreSQL, one relay identity, and `count` nodes (``startRelayCluster``).
    private func cluster(_ count: Int = 2, extra: [String] = []) throws -> (pg: PostgresTestServer, nodes: [RelayProcess]) {
        try startRelayCluster(count, extra: extra, cleanup: &cleanup)
    }

    private func client(_ node: RelayProcess) -> RelayClient { client(port: node.port, key: node.key) }

    private func client(port: Int, key: [UInt8]) -> RelayClient {
        var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: UInt16(port)), relaySigningKey: key)
        cfg.handshakeRetryMs = 200
        cfg.maxHandshakeRetryMs = 1_000
        cfg.requestRetryMs = 1_000
        let c = RelayClient(configuration: cfg)
        cleanup.append { c.stop() }
        return c
    }

    /// A client connected to `node` with `user` registered.
    private func registered(_ user: Identity, on node: RelayProcess, file: StaticString = #filePath, line: UInt = #line) throws -> RelayClient {
        try registered(user, port: node.port, key: node.key, file: file, line: line)
    }

    private func registered(_ user: Identity, port: Int, key: [UInt8], file: StaticString = #filePath, line: UInt = #line) throws -> RelayClient {
        let c = client(port: port, key: key)
        try c.connect(timeout: 10)
        let channel = try XCTUnwrap(c.channelBinding)
        let reg = try Registration.owner(user, relaySigningKey: key, channel: channel, timestampMs: nowMs())
        XCTAssertEqual(try c.registerAndWait([reg]).map(\.status), [.accepted], file: file, line: line)
        return c
    }

    private func queued(_ pg: PostgresTestServer) -> Int { Int((try? pg.sql("SELECT count(*) FROM relay_queue")) ?? "") ?? -1 }

    /// Alice on node 0, Bob on node 1: each message is queued on one node and pushed by the
    /// other (LISTEN/NOTIFY, no poll), both ways; ACKs on the receiving node delete from the
    /// shared queue. Cross-node push latency is printed, not asserted against a target.
    func testTwoNodesCarryMessagesBothWaysWithCrossNodePush() throws {
        let (pg, nodes) = try cluster()
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try registered(alice, on: nodes[0])
        let b = try registered(bob, on: nodes[1])
        // A third listener on the channel sees what every node sees: a node tag and a hash.
        let observer = try RelayPostgresStore(configuration: RelayPostgresConfiguration(url: pg.url, environment: [:]), logger: Logger(label: "test"))
        cleanup.append { observer.close() }
        let heard = NSLock()
        nonisolated(unsafe) var keys: [String] = []
        observer.startListening(onKeys: { k in heard.withLock { keys += k } }, onReconnect: {})
        XCTAssertTrue(Wait.poll { observer.isListening })
        var latencies: [Double] = []
        for (from, to, sender, recipient, rounds) in [(a, b, alice, bob, 20), (b, a, bob, alice, 20)] {
            for _ in 0..<rounds {
                let bundle = try messageBundle(from: sender, to: recipient)
                let mark = to.currentSeq()
                let t0 = Date()
                // QUEUED, not PUSHED: the recipient has no session on the sender's node.
                XCTAssertEqual(try from.sendAndWait(bundle: bundle).status, .queued)
                let got = try to.nextMessage(after: mark, timeout: 5)
                latencies.append(Date().timeIntervalSince(t0) * 1000)
                XCTAssertEqual(got.bundle, bundle)
                try to.ack([got.bundleID])
            }
        }
        XCTAssertTrue(Wait.poll(timeout: 10) { self.queued(pg) == 0 }, "ACKs on the receiving node did not empty the shared queue: \(queued(pg))")
        XCTAssertTrue(Wait.poll { heard.withLock { Set(keys) } == [RelayPostgresStore.notifyKey(for: bob.userID), RelayPostgresStore.notifyKey(for: alice.userID)] },
                      "notifications: \(heard.withLock { Set(keys) })")
        for k in heard.withLock({ keys }) {
            XCTAssertFalse(Hex.encode(bob.userID).contains(k) || Hex.encode(alice.userID).contains(k), "a notification carries part of a user ID in clear")
        }
        let sorted = latencies.sorted()
        print(String(format: "relay cluster: send on one node → push from the other, %d messages: p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                     sorted.count, sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)], sorted.last ?? 0))
    }

    /// On the shared store, a copy of a delivered message reaching the other node later
    /// (a hub's retry, a node resumed after a freeze) is a duplicate there too: not
    /// queued, not pushed again, and not counted against the sender's hourly budget.
    func testADeliveredMessageSentAgainToTheOtherNodeIsADuplicate() throws {
        let (pg, nodes) = try cluster(extra: ["--messages-per-hour", "2"])
        let alice = Identity.generate(), bob = Identity.generate()
        let a0 = try registered(alice, on: nodes[0]), a1 = try registered(alice, on: nodes[1])
        let b = try registered(bob, on: nodes[1])
        let bundle = try messageBundle(from: alice, to: bob)
        let mark = b.currentSeq()
        XCTAssertEqual(try a0.sendAndWait(bundle: bundle).status, .queued)
        let got = try b.nextMessage(after: mark, timeout: 5)
        try b.ack([got.bundleID])
        XCTAssertTrue(Wait.poll(timeout: 10) { self.queued(pg) == 0 })
        let mark2 = b.currentSeq()
        for node in [a1, a0, a1] { XCTAssertEqual(try node.sendAndWait(bundle: bundle).status, .duplicate) }
        XCTAssertEqual(queued(pg), 0)
        XCTAssertNil(try? b.nextMessage(after: mark2, timeout: 0.5), "pushed again")
        XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_delivered"), "1")
        // One new message still fits in the hour's two: the copies were not charged.
        XCTAssertEqual(try a1.sendAndWait(bundle: messageBundle(from: alice, to: bob)).status, .pushed)
    }

    /// Real `yaok` users on different nodes: Bob listens on node 1, Alice sends through node 0
    /// and waits for Bob's delivery receipt, which travels node 1 → PostgreSQL → node 0.
    func testYaokUsersOnDifferentNodesGetDeliveryReceipts() throws {
        let yaok = RelayProcess.productsDirectory + "/yaok"
        guard FileManager.default.isExecutableFile(atPath: yaok) else { throw XCTSkip("yaok is not built") }
        let (_, nodes) = try cluster()
        let dir = try makeTemporaryDirectory("yaok-relay-cluster-users-", cleanup: &cleanup)
        let (alice, bob) = try initAliceAndBob(yaok, in: dir)
        let key = Hex.encode(nodes[0].key)
        let listener = try ListenerProcess(yaok, ["listen", "--home", bob, "--count", "1", "--timeout", "60",
                                                  "--relay", "127.0.0.1:\(nodes[1].port)", "--relay-key", key])
        cleanup.append { listener.kill() }
        XCTAssertTrue(Wait.poll(timeout: 15) { nodes[1].metric("yaok_relay_registrations_accepted_total") ?? 0 >= 1 }, "Bob did not register on node 1")
        let sent = try runTool(yaok, ["send", "--home", alice, "Bob", "hello across the cluster", "--wait-delivered", "--json", "--timeout", "30",
                                      "--relay", "127.0.0.1:\(nodes[0].port)", "--relay-key", key], timeout: 60)
        XCTAssertEqual(sent.0, 0, sent.1)
        XCTAssertTrue(sent.1.contains("\"delivered\""), "no delivery receipt came back through the other node: \(sent.1)")
        XCTAssertTrue(listener.exited(within: 20), "Bob's listen did not end after one message")
        XCTAssertTrue(listener.output().contains("hello across the cluster"), listener.output())
    }

    /// Bob's node dies (SIGKILL) holding leases on messages pushed but not yet acknowledged.
    /// Bob reconnects to the other node: once the leases run out, that node delivers exactly
    /// the unacknowledged ones — none lost, none twice, none of the acknowledged again.
    func testKilledNodesLeasesExpireAndTheOtherNodeDeliversEverythingOnce() throws {
        let (pg, nodes) = try cluster(extra: ["--lease-seconds", "2"])
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try registered(alice, on: nodes[1])
        let b0 = try registered(bob, on: nodes[0])
        let mark = b0.currentSeq()
        var sent: Set<[UInt8]> = []
        for _ in 0..<10 {
            let bundle = try messageBundle(from: alice, to: bob)
            XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .queued)
            sent.insert(try XCTUnwrap(BundleID.of(bundle: bundle)))
        }
        let first = try b0.nextMessages(10, after: mark, timeout: 10)
        XCTAssertEqual(Set(first.map(\.bundleID)), sent)
        let acked = Set(first.prefix(4).map(\.bundleID))
        try b0.ack(Array(acked))
        XCTAssertTrue(Wait.poll(timeout: 10) { self.queued(pg) == 6 }, "the 4 ACKs did not reach the database: \(queued(pg)) queued")
        XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_queue WHERE lease_until_ms > (extract(epoch from now()) * 1000)::bigint"), "6",
                       "node 0 should hold leases on the 6 unacknowledged messages")

        kill(nodes[0].process.processIdentifier, SIGKILL)
        nodes[0].process.waitUntilExit()

        let b1 = client(nodes[1])
        try b1.connect(timeout: 10)
        let mark1 = b1.currentSeq()
        let reg = try Registration.owner(bob, relaySigningKey: nodes[1].key, channel: XCTUnwrap(b1.channelBinding), timestampMs: nowMs())
        XCTAssertEqual(try b1.registerAndWait([reg]).map(\.status), [.accepted])
        // No poll: node 1 notices the expired leases by itself and pushes.
        let again = try b1.nextMessages(6, after: mark1, timeout: 15)
        let ids = again.map(\.bundleID)
        XCTAssertEqual(Set(ids).count, 6, "a message was delivered twice")
        XCTAssertEqual(Set(ids), sent.subtracting(acked), "lost or re-delivered acknowledged messages")
        try b1.ack(ids)
        XCTAssertTrue(Wait.poll(timeout: 10) { self.queued(pg) == 0 })
        // Nothing more comes, also after another lease period (no event marks "nothing"; the bound is the assertion).
        XCTAssertThrowsError(try b1.nextMessage(after: b1.currentSeq(), timeout: 3), "a message came a second time")
    }

    /// Mallory, registered as herself on the other node, can neither take Bob's queued
    /// message (poll) nor delete it (ACK of its bundle ID); Bob still gets it there.
    func testAnotherUserOnTheOtherNodeCannotLeaseOrAckSomeoneElsesMessage() throws {
        let (pg, nodes) = try cluster()
        let alice = Identity.generate(), bob = Identity.generate(), mallory = Identity.generate()
        let a = try registered(alice, on: nodes[0])
        let bundle = try messageBundle(from: alice, to: bob)
        let id = try XCTUnwrap(BundleID.of(bundle: bundle))
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .queued)
        let m = try registered(mallory, on: nodes[1])
        XCTAssertEqual(try m.pollAndWait().count, 0, "Mallory's poll returned someone else's mail")
        try m.ack([id])
        _ = try m.pollAndWait()   // the ACK was handled before this poll's answer (one session, in order)
        XCTAssertEqual(queued(pg), 1, "Mallory's ACK deleted Bob's message")
        XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_queue WHERE lease_until_ms > 0"), "0", "Mallory's session leased Bob's message")
        let b = client(nodes[1])
        try b.connect(timeout: 10)
        let mark = b.currentSeq()
        XCTAssertEqual(try b.registerAndWait([Registration.owner(bob, relaySigningKey: nodes[1].key, channel: XCTUnwrap(b.channelBinding), timestampMs: nowMs())])
            .map(\.status), [.accepted])
        XCTAssertEqual(try b.nextMessage(after: mark, timeout: 5).bundle, bundle)
    }

    /// A phone's registration carried by its hub on node 0 is refused as a replay when
    /// presented on node 1 (the replay cache is shared), while a fresh one is accepted there.
    func testRegistrationReplayedToTheOtherNodeIsRefused() throws {
        let (pg, nodes) = try cluster()
        let key = nodes[0].key
        let hub = Identity.generate(), phone = Identity.generate()
        let h0 = try registered(hub, on: nodes[0])
        let t = nowMs()
        let carried = try Registration.carried(by: phone, relaySigningKey: key, collector: hub.signingKey, timestampMs: t, untilMs: t + 3_600_000)
        XCTAssertEqual(try h0.registerAndWait([carried]).map(\.status), [.accepted])
        let h1 = try registered(hub, on: nodes[1])
        XCTAssertEqual(try h1.registerAndWait([carried]).map(\.status), [.replayed], "node 1 accepted a registration already used on node 0")
        let fresh = try Registration.carried(by: phone, relaySigningKey: key, collector: hub.signingKey, timestampMs: nowMs(), untilMs: nowMs() + 3_600_000)
        XCTAssertEqual(try h1.registerAndWait([fresh]).map(\.status), [.accepted])
        XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_nonces"), "4", "two owner and two carried registrations recorded, the replay not")
        XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_attachments"), "1")
    }

    /// PostgreSQL restarts while the cluster is idle: both nodes reconnect (the engine's
    /// connection at its next use, the LISTEN connection with backoff) and carry messages again.
    func testDatabaseRestartWhileIdleNodesReconnectAndServe() throws {
        let (pg, nodes) = try cluster()
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try registered(alice, on: nodes[0])
        let b = try registered(bob, on: nodes[1])
        let before = try messageBundle(from: alice, to: bob)
        var mark = b.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: before).status, .queued)
        XCTAssertEqual(try b.nextMessage(after: mark, timeout: 5).bundle, before)

        try pg.stop()
        try pg.start()

        let after = try messageBundle(from: alice, to: bob)
        mark = b.currentSeq()
        let t0 = Date()
        XCTAssertEqual(try a.sendAndWait(bundle: after, timeout: 20).status, .queued, "node 0 did not queue after the restart")
        XCTAssertEqual(try b.nextMessage(after: mark, timeout: 15).bundle, after, "node 1 did not push after the restart")
        print(String(format: "relay cluster: first message after a database restart arrived in %.0f ms", Date().timeIntervalSince(t0) * 1000))
        // And the other way, through the reconnected engine connection of node 1.
        let back = try messageBundle(from: bob, to: alice)
        mark = a.currentSeq()
        XCTAssertEqual(try b.sendAndWait(bundle: back, timeout: 20).status, .queued)
        XCTAssertEqual(try a.nextMessage(after: mark, timeout: 15).bundle, back)
    }

    /// The nodes' LISTEN connections are cut (PostgreSQL stays up) and a message is queued
    /// at once: its notification may be lost, and the node re-offers its users' queues when
    /// its LISTEN connection is back, so Bob still gets it without polling.
    func testNotificationsLostWhileListenReconnectsAreRecovered() throws {
        let (pg, nodes) = try cluster()
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try registered(alice, on: nodes[0])
        let b = try registered(bob, on: nodes[1])
        let cut = try pg.sql("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %') t")
        XCTAssertEqual(cut, "2", "one LISTEN connection per node")
        let bundle = try messageBundle(from: alice, to: bob)
        let mark = b.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .queued)
        XCTAssertEqual(try b.nextMessage(after: mark, timeout: 10).bundle, bundle)
        XCTAssertTrue(Wait.poll(timeout: 10) { (try? pg.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")) == "2" },
                      "the nodes did not LISTEN again")
    }

    /// Two in-process nodes with a per-recipient queue limit of 2: Bob's queue is full on
    /// node 0; he drains it through node 1; node 0 accepts for him again at once (it re-reads
    /// the shared counts before refusing) instead of after its minute's refresh.
    func testQueueLimitSeesAcknowledgementsMadeOnTheOtherNode() throws {
        let pg = try PostgresTestServer()
        cleanup.append { pg.tearDown() }
        var limits = RelayLimits()
        limits.maxQueuedPerUser = 2
        let identity = Identity.generate()
        var logger = Logger(label: "relay-cluster-test")
        logger.logLevel = .warning
        var ports: [Int] = []
        for _ in 0..<2 {
            let store = try RelayPostgresStore(configuration: RelayPostgresConfiguration(url: pg.url, environment: [:]), logger: logger)
            let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger, now: { nowMs() })
            let server = RelayServer(engine: engine, configuration: .init(host: "127.0.0.1", port: 0), logger: logger)
            try server.start()
            // The first tick makes the minute's expiry sweep (which re-reads the counts too);
            // done now, the next one is a minute away, after this test.
            server.withEngine { $0.tick() }
            cleanup.append { server.stop(); store.close() }
            ports.append(server.localAddress?.port ?? 0)
        }
        let key = identity.signingKey
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try registered(alice, port: ports[0], key: key)
        for _ in 0..<2 { XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob)).status, .queued) }
        XCTAssertThrowsError(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob))) { error in
            XCTAssertTrue("\(error)".contains("queued messages"), "\(error)")
        }
        let b = client(port: ports[1], key: key)
        try b.connect(timeout: 10)
        let mark = b.currentSeq()
        XCTAssertEqual(try b.registerAndWait([Registration.owner(bob, relaySigningKey: key, channel: XCTUnwrap(b.channelBinding), timestampMs: nowMs())])
            .map(\.status), [.accepted])
        try b.ack(try b.nextMessages(2, after: mark, timeout: 10).map(\.bundleID))
        XCTAssertTrue(Wait.poll(timeout: 10) { self.queued(pg) == 0 })
        Thread.sleep(forTimeInterval: 1.1)   // the re-read is at most once a second; node 0 did one at the refusal
        XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob)).status, .queued, "node 0 still counted the messages Bob acknowledged on node 1")
    }

    /// A stopped node stops LISTENing before its engine queue drains, and its closed store
    /// refuses late calls with an error: a late call that reconnected on the event loop close()
    /// had shut down would have its connect's promise dropped by NIO, which crashes a debug build.
    func testAStoppedNodeStopsListeningAndItsClosedStoreRefusesLateCalls() throws {
        let pg = try PostgresTestServer()
        cleanup.append { pg.tearDown() }
        var logger = Logger(label: "relay-cluster-test")
        logger.logLevel = .warning
        let store = try RelayPostgresStore(configuration: RelayPostgresConfiguration(url: pg.url, environment: [:]), logger: logger)
        let engine = try RelayEngine(identity: Identity.generate(), store: store, limits: RelayLimits(), logger: logger, now: { nowMs() })
        let server = RelayServer(engine: engine, configuration: .init(host: "127.0.0.1", port: 0), logger: logger)
        try server.start()
        XCTAssertTrue(Wait.poll(timeout: 10) { store.isListening })
        server.stop()
        XCTAssertFalse(store.isListening, "the LISTEN connection outlived the node")
        XCTAssertEqual(try store.appliedSchemaVersion(), RelayPostgresStore.schemaVersion, "the store stays usable until it is closed")
        store.close()
        XCTAssertThrowsError(try store.appliedSchemaVersion()) { error in
            XCTAssertEqual(error as? RelayPostgresError, .closed, "\(error)")
        }
        server.withEngine { $0.tick() }   // the engine's timer work on a closed store: errors, no crash
        store.close()                      // twice is harmless
    }

    /// Store configuration errors name what is wrong, and no password travels in the URL.
    func testPostgresURLAndPasswordFileErrorsAreSpecific() throws {
        func reason(_ url: String, file: String? = nil) -> String {
            do { _ = try RelayPostgresConfiguration(url: url, passwordFile: file, environment: [:]); return "accepted" } catch { return "\(error)" }
        }
        XCTAssertTrue(reason("mysql://u@h/db").contains("scheme must be postgres://"))
        XCTAssertTrue(reason("postgres://u:secret@h/db").contains("contains a password"))
        XCTAssertFalse(reason("postgres://u:secret@h/db").contains("secret"))
        XCTAssertTrue(reason("postgres://h/db").contains("names no user"))
        XCTAssertTrue(reason("postgres://u@h").contains("names no database"))
        XCTAssertTrue(reason("postgres://u@h/db?sslmode=prefer").contains("sslmode= must be require or disable"))
        XCTAssertTrue(reason("postgres://u@h/db?colour=blue").contains("unknown parameter colour"))
        XCTAssertTrue(reason("postgres://u@/db?host=relative").contains("absolute socket directory"))

        let tcp = try RelayPostgresConfiguration(url: "postgres://relay@db.example:6543/yaok", environment: [:])
        XCTAssertEqual(tcp.endpoint, .tcp(host: "db.example", port: 6543))
        XCTAssertEqual(tcp.tls, .require, "TCP defaults to TLS")
        let unix = try RelayPostgresConfiguration(url: "postgres://relay@/yaok?host=/run/postgresql", environment: [:])
        XCTAssertEqual(unix.endpoint, .unixSocket(path: "/run/postgresql/.s.PGSQL.5432"))

        var cleanupDir: [() -> Void] = []
        defer { for c in cleanupDir { c() } }
        let dir = try makeTemporaryDirectory("yaok-relay-pgpass-", cleanup: &cleanupDir)
        let file = dir + "/pg-password"
        try "s3cret-pw\n".write(toFile: file, atomically: false, encoding: .utf8)
        XCTAssertEqual(chmod(file, 0o644), 0)
        let loose = reason("postgres://relay@/yaok?host=/run/postgresql", file: file)
        XCTAssertTrue(loose.contains("chmod 600"), loose)
        XCTAssertEqual(chmod(file, 0o600), 0)
        let ok = try RelayPostgresConfiguration(url: "postgres://relay@/yaok?host=/run/postgresql", passwordFile: file, environment: [:])
        XCTAssertEqual(ok.password, "s3cret-pw")
        XCTAssertFalse("\(ok)".contains("s3cret"), "the description must not carry the password")
        // A systemd credential wins over the file.
        let creds = dir + "/creds"
        try FileManager.default.createDirectory(atPath: creds, withIntermediateDirectories: true)
        try "from-credential".write(toFile: creds + "/" + RelayPostgresConfiguration.passwordCredential, atomically: false, encoding: .utf8)
        let viaCredential = try RelayPostgresConfiguration(url: "postgres://relay@/yaok?host=/run/postgresql", passwordFile: file,
                                                           environment: ["CREDENTIALS_DIRECTORY": creds])
        XCTAssertEqual(viaCredential.password, "from-credential")

        // A refused connection names the socket it tried.
        let missing = try RelayPostgresConfiguration(url: "postgres://relay@/yaok?host=\(dir)", environment: [:])
        XCTAssertThrowsError(try RelayPostgresStore(configuration: missing, logger: Logger(label: "test"))) { error in
            XCTAssertTrue("\(error)".contains("cannot connect to PostgreSQL at \(dir)/.s.PGSQL.5432"), "\(error)")
        }
    }

    /// A cluster node does not invent a relay key: without the shared identity it refuses to start.
    func testClusterNodeWithoutTheSharedIdentityRefusesToStart() throws {
        let dir = try makeTemporaryDirectory("yaok-relay-noid-", cleanup: &cleanup)
        let r = try runTool(RelayProcess.binary, ["run", "--data-dir", dir, "--listen", "127.0.0.1:0",
                                                  "--store", "postgres://relay@/yaok?host=\(dir)"], timeout: 30)
        XCTAssertNotEqual(r.0, 0)
        XCTAssertTrue(r.1.contains("no relay identity at \(dir)/relay.identity"), r.1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/relay.identity"))
    }
}
