import Foundation
import Logging
import Synchronization
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokStore
import YaokWire
import enum YaokPluginKit.Hex
import YaokTesting
import RelayTestSupport

/// Delivery integrity at the relay, each attack written as an attacker would run it against a
/// relay with real UDP sockets and its real SQLCipher queue: the victim's message is delivered
/// exactly once, the attack is refused and counted.
final class RelayIntegrityTests: XCTestCase {
    var relay: RelayHarness!
    override func tearDown() { relay?.tearDown() }

    private func envelope(from sender: Identity, to recipient: Identity, text: String = "hello",
                          createdMs: Int64? = nil, ttlMs: Int64 = Envelope.defaultTTLMilliseconds, messageID: [UInt8]? = nil) throws -> Envelope {
        try Envelope.sealMessage(plaintext: Array(text.utf8), from: sender, toSigningKey: recipient.signingKey, recipientKXKey: recipient.kxKey,
                                 createdMs: createdMs ?? nowMs(), ttlMs: ttlMs, messageID: messageID)
    }

    private func bundle(_ e: Envelope) -> [UInt8] { YaokWire.Bundle(envelope: e).encoded }

    /// The refusal a SEND of `bytes` gets, or a failure if it was queued.
    private func refusal(sending bytes: [UInt8], via client: RelayClient, file: StaticString = #filePath, line: UInt = #line) -> RelayErrorNotice? {
        do {
            let q = try client.sendAndWait(bundle: bytes)
            XCTFail("queued (\(q.status)) instead of refused", file: file, line: line)
        } catch RelayProtocolError.refused(let notice) {
            return notice
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
        return nil
    }

    /// (a) ID squatting: Mallory reads Alice's message ID off the air and queues a bundle of
    /// her own (throwaway key) under it for Bob first. Alice's real message is still QUEUED as
    /// new (not "duplicate"), and Bob gets it exactly once.
    func testIDSquattingAtTheRelayDoesNotMakeTheRealMessageADuplicate() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate(), mallory = Identity.generate()
        let real = try envelope(from: alice, to: bob, text: "the real one")
        let squat = try envelope(from: mallory, to: bob, text: "squatter", messageID: real.messageID)
        XCTAssertEqual(squat.messageID, real.messageID)
        XCTAssertNotEqual(squat.bundleID, real.bundleID, "another sender: another bundle")

        let m = try relay.registeredClient(mallory)
        XCTAssertEqual(try m.sendAndWait(bundle: bundle(squat)).status, .queued)
        // Mallory also replays what she saw of Alice's bundle with her own hop header: the
        // same envelope, so it is the same bundle (and carries Alice's real message).
        let a = try relay.registeredClient(alice)
        let realQueued = try a.sendAndWait(bundle: bundle(real))
        XCTAssertEqual(realQueued.status, .queued, "the victim's bundle was taken for the squatter's")
        XCTAssertEqual(realQueued.bundleID, real.bundleID)
        let relayed = YaokWire.Bundle(hop: HopHeader(hopCount: 2, previousHop: mallory.userID), envelope: real).encoded
        XCTAssertEqual(try m.sendAndWait(bundle: relayed).status, .duplicate)
        XCTAssertEqual(relay.server.metricsSnapshot().sendsDuplicate, 1)
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 2)

        // Bob comes online: both bundles are pushed, Alice's once.
        let b = relay.client()
        try b.connect()
        let mark = b.currentSeq()
        XCTAssertEqual(try b.registerAndWait([relay.registration(bob, on: b)]).map(\.status), [.accepted])
        let got = try b.nextMessages(2, after: mark, timeout: 5)
        XCTAssertEqual(Set(got.map(\.bundleID)), [real.bundleID, squat.bundleID])
        XCTAssertEqual(got.filter { $0.bundle == bundle(real) }.count, 1)
        let delivered = try XCTUnwrap(got.first { $0.bundleID == real.bundleID })
        XCTAssertEqual(try YaokWire.Bundle(parsing: delivered.bundle).envelope.open(with: bob), Array("the real one".utf8))
        // Bob's acknowledgement of the real one deletes exactly that one.
        try b.ack([real.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: bob.userID) } == 1 })
        XCTAssertFalse(try relay.store.contains(real.bundleID))
        XCTAssertTrue(try relay.store.contains(squat.bundleID))
        XCTAssertEqual(try b.pollAndWait().filter { $0.bundleID == real.bundleID }.count, 0, "offered again after its ACK")
    }

    /// (b) Conflict: a sender signs two different envelopes with one message ID. The second is
    /// refused with `conflict`, counted, and the first stays queued and is delivered once.
    func testSecondEnvelopeUnderOneBundleIDIsRefusedAsConflict() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate()
        let first = try envelope(from: alice, to: bob, text: "first")
        let second = try envelope(from: alice, to: bob, text: "second", messageID: first.messageID)
        XCTAssertEqual(first.bundleID, second.bundleID)
        let a = try relay.registeredClient(alice)
        XCTAssertEqual(try a.sendAndWait(bundle: bundle(first)).status, .queued)
        let notice = try XCTUnwrap(refusal(sending: bundle(second), via: a))
        XCTAssertEqual(notice.code, .conflict)
        XCTAssertEqual(notice.reference, first.bundleID)
        XCTAssertTrue(notice.text.contains("different envelope"), notice.text)
        let metrics = relay.server.metricsSnapshot()
        XCTAssertEqual(metrics.sendsRefused["conflict"], 1)
        XCTAssertEqual(metrics.sendsDuplicate, 0)
        XCTAssertTrue(relay.server.metricsText().contains("yaok_relay_sends_refused_total{reason=\"conflict\"} 1"))
        // The first is untouched: same bytes, delivered once.
        XCTAssertEqual(try relay.store.bundle(first.bundleID), bundle(first))
        let b = relay.client()
        try b.connect()
        let mark = b.currentSeq()
        XCTAssertEqual(try b.registerAndWait([relay.registration(bob, on: b)]).map(\.status), [.accepted])
        let got = try b.nextMessage(after: mark, timeout: 5)
        XCTAssertEqual(got.bundle, bundle(first))
        XCTAssertEqual(try b.pollAndWait().count, 0, "leased, and nothing else queued")
        // A retransmission of the first is still just a duplicate.
        XCTAssertEqual(try a.sendAndWait(bundle: bundle(first)).status, .duplicate)
    }

    /// A node resumed after a freeze processes the copies a hub sent it meanwhile. Queued
    /// again, delivered messages would reach the user twice and charge the sender for each
    /// (8 such copies get her real 93rd message refused). A delivered bundle ID is remembered
    /// until its expiry: a copy is a duplicate, not queued and not charged; and a send over
    /// the limit is refused without using up budget.
    func testADeliveredMessageSentAgainIsADuplicateAndChargesNothing() throws {
        var limits = RelayLimits()
        limits.messagesPerHour = 3
        relay = try RelayHarness(limits: limits)
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let b = try relay.registeredClient(bob)
        let first = try bundle(envelope(from: alice, to: bob, text: "first"))
        let mark = b.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: first).status, .pushed)
        let got = try b.nextMessage(after: mark, timeout: 5)
        try b.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: bob.userID) } == 0 })
        // The stale copies come in after the ACK: duplicates, nothing queued, nothing pushed.
        let mark2 = b.currentSeq()
        for _ in 0..<5 { XCTAssertEqual(try a.sendAndWait(bundle: first).status, .duplicate) }
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 0)
        XCTAssertNil(try? b.nextMessage(after: mark2, timeout: 0.5), "the delivered message was not pushed again")
        // The copies used no budget: two more new messages fit in the hour's three.
        // (Bob is still online: they are pushed.)
        for text in ["second", "third"] {
            XCTAssertEqual(try a.sendAndWait(bundle: bundle(envelope(from: alice, to: bob, text: text))).status, .pushed)
        }
        let fourth = try bundle(envelope(from: alice, to: bob, text: "fourth"))
        XCTAssertEqual(refusal(sending: fourth, via: a)?.code, .rateLimited)
        XCTAssertEqual(relay.server.metricsSnapshot().sendsDuplicate, 5)
        // Delivered stays delivered across a restart (it is in the database).
        try relay.restart()
        let a2 = try relay.registeredClient(alice)
        XCTAssertEqual(try a2.sendAndWait(bundle: first).status, .duplicate)
        XCTAssertFalse(try relay.store.contains(got.bundleID), "the delivered message is not queued again")
    }

    /// The relay judges a bundle by its age (a version-2 hop header's) as well as by its clock,
    /// and queues it with a version-1 header, which every client reads (Docs/relay-protocol.md §4).
    func testTheRelayJudgesByAgeAndQueuesAVersionOneHeader() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let spent = try envelope(from: alice, to: bob, ttlMs: 3_600_000)
        let refused = try XCTUnwrap(refusal(sending: YaokWire.Bundle(envelope: spent).withAge(3_600_000).encoded, via: a))
        XCTAssertEqual(refused.code, .expired, "an age of its whole lifetime, whatever its dates say")
        let young = try envelope(from: alice, to: bob, ttlMs: 3_600_000)
        XCTAssertEqual(try a.sendAndWait(bundle: YaokWire.Bundle(envelope: young).withAge(1_800_000).encoded).status, .queued)
        XCTAssertEqual(try relay.store.bundle(young.bundleID), bundle(young), "queued with a version-1 header")
        XCTAssertEqual(try a.sendAndWait(bundle: YaokWire.Bundle(envelope: young).withAge(60_000).encoded).status, .duplicate,
                       "the same envelope under another hop header is a duplicate")
    }

    /// (c) Immortal and future-dated junk from throwaway keys is refused with its own reason
    /// and counted; a normal message beside it is queued and delivered once.
    func testImmortalAndFutureDatedEnvelopesAreRefusedWithTheirReasons() throws {
        relay = try RelayHarness()
        let bob = Identity.generate(), alice = Identity.generate()
        let junk = Identity.generate()
        let j = try relay.registeredClient(junk)
        let immortal = try envelope(from: junk, to: bob, ttlMs: 1 << 62)
        let tooLong = try XCTUnwrap(refusal(sending: bundle(immortal), via: j))
        XCTAssertEqual(tooLong.code, .lifetimeTooLong)
        XCTAssertEqual(tooLong.reference, immortal.bundleID)
        XCTAssertTrue(tooLong.text.contains("at most 604800 s"), tooLong.text)
        // A week and a millisecond is already too long.
        let justOver = try envelope(from: junk, to: bob, ttlMs: Envelope.defaultTTLMilliseconds + 1)
        XCTAssertEqual(refusal(sending: bundle(justOver), via: j)?.code, .lifetimeTooLong)
        // More than a lifetime ahead of the relay's clock (a sender's clock may lead by 7 days).
        let future = try envelope(from: junk, to: bob, createdMs: nowMs() + 8 * 86_400_000, ttlMs: 3_600_000)
        let ahead = try XCTUnwrap(refusal(sending: bundle(future), via: j))
        XCTAssertEqual(ahead.code, .createdInFuture)
        XCTAssertTrue(ahead.text.contains("in the future") && ahead.text.contains("lead by 604800 s"), ahead.text)
        // Within the allowance (a phone's clock three days ahead) is fine.
        let slightlyAhead = try envelope(from: junk, to: bob, createdMs: nowMs() + 3 * 86_400_000, ttlMs: 3_600_000)
        XCTAssertEqual(try j.sendAndWait(bundle: bundle(slightlyAhead)).status, .queued)
        let metrics = relay.server.metricsSnapshot()
        XCTAssertEqual(metrics.sendsRefused["lifetime_too_long"], 2)
        XCTAssertEqual(metrics.sendsRefused["created_in_future"], 1)
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 1)

        let a = try relay.registeredClient(alice)
        let real = try envelope(from: alice, to: bob, text: "real")
        XCTAssertEqual(try a.sendAndWait(bundle: bundle(real)).status, .queued)
        let b = relay.client()
        try b.connect()
        let mark = b.currentSeq()
        XCTAssertEqual(try b.registerAndWait([relay.registration(bob, on: b)]).map(\.status), [.accepted])
        let got = try b.nextMessages(2, after: mark, timeout: 5)
        XCTAssertEqual(got.filter { $0.bundleID == real.bundleID }.count, 1)
        XCTAssertFalse(got.contains { [immortal.bundleID, justOver.bundleID, future.bundleID].contains($0.bundleID) })
    }

    /// The operator may lower the maximum lifetime, never raise it above the protocol's 7 days.
    func testMaximumLifetimeIsConfigurableDownOnly() throws {
        var limits = RelayLimits()
        limits.maxTTLMs = 24 * 3_600_000
        relay = try RelayHarness(limits: limits)
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let week = try envelope(from: alice, to: bob)
        let notice = try XCTUnwrap(refusal(sending: bundle(week), via: a))
        XCTAssertEqual(notice.code, .lifetimeTooLong)
        XCTAssertTrue(notice.text.contains("at most 86400 s"), notice.text)
        XCTAssertEqual(try a.sendAndWait(bundle: bundle(envelope(from: alice, to: bob, ttlMs: 24 * 3_600_000))).status, .queued)

        var high = RelayLimits()
        high.maxTTLMs = Int64.max
        XCTAssertEqual(high.lifetime.maxTTLMs, EnvelopeLifetime.protocolMaxTTLMs)
        let cli = try runTool(RelayProcess.binary, ["run", "--data-dir", relay.dir + "-cli", "--max-ttl-hours", "169"])
        XCTAssertNotEqual(cli.0, 0)
        XCTAssertTrue(cli.1.contains("--max-ttl-hours must be 1 to 168"), cli.1)
        let skew = try runTool(RelayProcess.binary, ["run", "--data-dir", relay.dir + "-cli", "--clock-skew-seconds", "700000"])
        XCTAssertNotEqual(skew.0, 0)
        XCTAssertTrue(skew.1.contains("--clock-skew-seconds must be 0 to 604800"), skew.1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: relay.dir + "-cli"), "refused before touching the data directory")
    }

    /// (d) Upgrading: a queue written by the old schema (keyed by message ID) is re-keyed by
    /// bundle ID when the new relay opens it; a row whose bundle does not parse is dropped
    /// with a log line; the queued message is still delivered, once, and its ACK deletes it.
    func testOldSchemaQueueIsRekeyedAndStillDelivered() throws {
        let dir = NSTemporaryDirectory() + "yaok-relay-migrate-" + Hex.encode(Random.bytes(6))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        let alice = Identity.generate(), bob = Identity.generate(), carol = Identity.generate()
        let forBob = try envelope(from: alice, to: bob, text: "queued before the upgrade")
        let forCarol = try envelope(from: alice, to: carol, text: "also queued")
        let t = nowMs()
        do {
            // The relay before bundle IDs: its schema, verbatim, at version 1.
            let db = try SQLCipherDatabase(path: dir + "/relay.db",
                                           key: DatabaseKey.load(credentialName: "yaok-relay-db-key", keyFile: dir + "/relay.db.key"))
            try db.migrate(component: "relay", [Migration(version: 1, script: """
                CREATE TABLE relay_queue (
                    message_id BLOB PRIMARY KEY,
                    recipient BLOB NOT NULL,
                    sender BLOB NOT NULL,
                    bundle BLOB NOT NULL,
                    queued_ms INTEGER NOT NULL,
                    expires_ms INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX relay_queue_recipient ON relay_queue (recipient, queued_ms);
                CREATE INDEX relay_queue_expiry ON relay_queue (expires_ms);
                CREATE TABLE relay_attachments (
                    user_id BLOB PRIMARY KEY,
                    owner BLOB NOT NULL,
                    expires_ms INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE TABLE relay_nonces (
                    nonce_key BLOB PRIMARY KEY,
                    expires_ms INTEGER NOT NULL
                ) WITHOUT ROWID;
                """)])
            let insert = "INSERT INTO relay_queue (message_id, recipient, sender, bundle, queued_ms, expires_ms) VALUES (?, ?, ?, ?, ?, ?)"
            for e in [forBob, forCarol] {
                try db.execute(insert, [.blob(e.messageID), .blob(e.recipientUserID), .blob(e.senderUserID), .blob(bundle(e)),
                                        .integer(t), .integer(e.expiresMs)])
            }
            // A row the new relay cannot read: its bundle is cut short.
            let broken = [UInt8](repeating: 0xB7, count: 16)
            try db.execute(insert, [.blob(broken), .blob(bob.userID), .blob(alice.userID), .blob(Array(bundle(forBob).prefix(100))),
                                    .integer(t), .integer(t + 3_600_000)])
            // A phone attachment made from a v1 (bearer) registration: forgotten by the upgrade.
            try db.execute("INSERT INTO relay_attachments (user_id, owner, expires_ms) VALUES (?, ?, ?)",
                           [.blob(carol.userID), .blob(alice.userID), .integer(t + 3_600_000)])
            db.close()
        }

        // Opening it with the new store migrates it (and says what it dropped).
        let log = LogCapture()
        let (_, store) = try RelayServer.openDataDirectory(dir, logger: Logger(label: "migration-test") { _ in log })
        XCTAssertEqual(try store.database.schemaVersion(component: "relay"), 4)
        XCTAssertTrue(try store.attachments(nowMs: t).isEmpty, "attachments from v1 registrations survive the upgrade")
        XCTAssertEqual(try store.countsByRecipient(), [bob.userID: 1, carol.userID: 1])
        XCTAssertEqual(try store.bundle(forBob.bundleID), bundle(forBob))
        XCTAssertTrue(try store.contains(forCarol.bundleID))
        XCTAssertFalse(try store.contains(forBob.messageID), "still keyed by message ID")
        let lines = log.lines
        XCTAssertTrue(lines.contains { $0.contains("dropped queued row b7b7b7b7") && $0.contains("does not parse") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("re-keyed 2 queued bundles by bundle ID, dropped 1") }, "\(lines)")
        XCTAssertTrue(lines.contains { $0.contains("forgot 1 phone attachments made from v1 registrations") }, "\(lines)")
        XCTAssertFalse(lines.joined().contains(Hex.encode(bob.userID)), "a full ID in the log")
        store.database.close()

        // The upgraded relay delivers what was queued, once.
        relay = try RelayHarness(dir: dir)
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 1)
        let b = relay.client()
        try b.connect()
        let mark = b.currentSeq()
        XCTAssertEqual(try b.registerAndWait([relay.registration(bob, on: b)]).map(\.status), [.accepted])
        let got = try b.nextMessage(after: mark, timeout: 5)
        XCTAssertEqual(got.bundleID, forBob.bundleID)
        XCTAssertEqual(try YaokWire.Bundle(parsing: got.bundle).envelope.open(with: bob), Array("queued before the upgrade".utf8))
        try b.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: bob.userID) } == 0 })
        // The same envelope sent again after the upgrade is a new bundle for an empty queue,
        // and a conflicting one under Carol's queued bundle ID is refused: dedupe works on
        // migrated rows.
        let a = try relay.registeredClient(alice)
        let clash = try envelope(from: alice, to: carol, text: "clash", messageID: forCarol.messageID)
        XCTAssertEqual(refusal(sending: bundle(clash), via: a)?.code, .conflict)
        XCTAssertEqual(try a.sendAndWait(bundle: bundle(forCarol)).status, .duplicate)
    }
}

/// Collects log lines (message text with level) for assertions.
final class LogCapture: LogHandler, Sendable {
    private struct State {
        var collected: [String] = []
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
    }
    private let state = Mutex(State())

    var metadata: Logger.Metadata {
        get { state.withLock { $0.metadata } }
        set { state.withLock { $0.metadata = newValue } }
    }
    var logLevel: Logger.Level {
        get { state.withLock { $0.logLevel } }
        set { state.withLock { $0.logLevel = newValue } }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { state.withLock { $0.metadata[key] } }
        set { state.withLock { $0.metadata[key] = newValue } }
    }

    func log(event: LogEvent) {
        state.withLock { $0.collected.append("\(event.level): \(event.message)") }
    }

    var lines: [String] { state.withLock { $0.collected } }
}
