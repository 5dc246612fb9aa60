import Foundation
import XCTest
import YaokCrypto
import YaokEndpoint
import YaokStore
import YaokWire

/// Receipts at the sending endpoint: each kind counts once per item and only from the item's
/// recipient, with no list of seen IDs; and a store that kept such a list moves to the
/// outbox's receipt bits without losing what it knew.
final class EndpointReceiptTests: XCTestCase {
    var dir = ""
    var alice: Endpoint!
    var bob: Endpoint!
    var bobContact: Contact!

    override func setUpWithError() throws {
        dir = try TestSupport.temporaryDirectory(self)
        (alice, bob, bobContact) = try TestSupport.aliceAndBob(in: dir)
    }

    func receipt(_ kind: Envelope.Kind, for item: OutboxItem) throws -> [UInt8] {
        let e = try Envelope.receipt(kind: kind, for: item.messageID, originalSenderUserID: alice.identity.userID,
                                     from: bob.identity, createdMs: Endpoint.wallClock())
        return YaokWire.Bundle(envelope: e).encoded
    }

    func testEachReceiptKindCountsOnceAndNeverMovesAnItemBack() throws {
        let item = try alice.compose(to: bobContact, text: "tracked")
        let delivery = try receipt(.deliveryReceipt, for: item)
        XCTAssertEqual(alice.receive(bundle: delivery).0, .receipt(kind: .deliveryReceipt, for: item.messageID))
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .delivered)
        // The same receipt again, and another delivery receipt from the recipient: nothing new.
        guard case .duplicate = alice.receive(bundle: delivery).0 else { return XCTFail("the same receipt twice") }
        guard case .duplicate = alice.receive(bundle: try receipt(.deliveryReceipt, for: item)).0 else {
            return XCTFail("a second delivery receipt for the same item")
        }
        XCTAssertEqual(try alice.store.securityEvents().map(\.kind), [.duplicate, .duplicate])
        // A read receipt is a kind of its own: it moves the item on, once.
        let read = try receipt(.readReceipt, for: item)
        XCTAssertEqual(alice.receive(bundle: read).0, .receipt(kind: .readReceipt, for: item.messageID))
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .read)
        guard case .duplicate = alice.receive(bundle: read).0 else { return XCTFail("the same read receipt twice") }

        // Read first, delivery later: the late delivery receipt counts but does not move it back.
        let other = try alice.compose(to: bobContact, text: "read at once")
        XCTAssertEqual(alice.receive(bundle: try receipt(.readReceipt, for: other)).0, .receipt(kind: .readReceipt, for: other.messageID))
        XCTAssertEqual(alice.receive(bundle: try receipt(.deliveryReceipt, for: other)).0, .receipt(kind: .deliveryReceipt, for: other.messageID))
        XCTAssertEqual(try alice.store.outboxItem(other.messageID)?.state, .read)
    }

    /// The recipient's receipt, replayed after someone else's forged one, still counts: the
    /// forgery set no bit.
    func testAForgedReceiptMarksNothingForTheRealOne() throws {
        let item = try alice.compose(to: bobContact, text: "mine")
        let mallory = Identity.generate()
        try alice.addContact(uri: ContactCode.make(identity: mallory, name: "Mallory").uri)
        let forged = try Envelope.receipt(kind: .deliveryReceipt, for: item.messageID, originalSenderUserID: alice.identity.userID,
                                          from: mallory, createdMs: Endpoint.wallClock())
        for _ in 0..<2 {
            XCTAssertEqual(alice.receive(bundle: YaokWire.Bundle(envelope: forged).encoded).0.rejectionKind, .forgedReceipt)
        }
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .pending)
        XCTAssertEqual(alice.receive(bundle: try receipt(.deliveryReceipt, for: item)).0, .receipt(kind: .deliveryReceipt, for: item.messageID))
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .delivered)
    }

    /// Bob's delivery receipt reveals the proof alice's message committed to
    /// (Docs/protocol.md, "Receipt proofs"), and alice counts it by that proof: two hashes
    /// instead of an Ed25519 verification, so even with its signature broken. A receipt that
    /// does not reveal the proof still needs its signature.
    func testAReceiptRevealingItsMessagesProofCountsWithoutASignatureCheck() throws {
        let item = try alice.compose(to: bobContact, text: "proof, please")
        let message = try YaokWire.Bundle(parsing: item.bundle).envelope
        guard case .message = bob.receive(bundle: item.bundle).0 else { return XCTFail("bob's copy") }
        let stored = try XCTUnwrap(try bob.store.outbox(states: [.pending]).first { $0.kind == Envelope.Kind.deliveryReceipt.rawValue })
        let bobsReceipt = try YaokWire.Bundle(parsing: stored.bundle).envelope
        XCTAssertTrue(bobsReceipt.provesDelivery(of: message), "bob's receipt reveals the proof")
        XCTAssertTrue(bobsReceipt.verifySignature(), "and is signed, for hubs that check signatures")
        var broken = stored.bundle
        broken[broken.count - 1] ^= 1
        XCTAssertEqual(alice.receive(bundle: broken).0, .receipt(kind: .deliveryReceipt, for: item.messageID))
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .delivered)

        // Without the proof (a random receipt ID), a broken signature is refused as one.
        let other = try alice.compose(to: bobContact, text: "no proof")
        var forged = try receipt(.deliveryReceipt, for: other)
        forged[forged.count - 1] ^= 1
        XCTAssertEqual(alice.receive(bundle: forged).0.rejectionKind, .badSignature)
        XCTAssertEqual(try alice.store.outboxItem(other.messageID)?.state, .pending)
        // And the proof of one message does not count for another.
        let misdirected = try Envelope.receipt(kind: .deliveryReceipt, for: other.messageID, originalSenderUserID: alice.identity.userID,
                                               from: bob.identity, createdMs: Endpoint.wallClock(), messageID: bobsReceipt.messageID)
        XCTAssertFalse(misdirected.provesDelivery(of: try YaokWire.Bundle(parsing: other.bundle).envelope))
        var misdirectedBroken = YaokWire.Bundle(envelope: misdirected).encoded
        misdirectedBroken[misdirectedBroken.count - 1] ^= 1
        XCTAssertEqual(alice.receive(bundle: misdirectedBroken).0.rejectionKind, .badSignature)
    }

    /// A store written before the receipt bits: its outbox has no `receipts_seen` and a
    /// `seen_bundles` list names what arrived. Opened again, it keeps knowing both.
    func testAStoreWithASeenListMovesToReceiptBits() throws {
        let delivered = try alice.compose(to: bobContact, text: "delivered before the upgrade")
        let read = try alice.compose(to: bobContact, text: "read before the upgrade")
        let waiting = try alice.compose(to: bobContact, text: "no receipt yet")
        let deliveredReceipt = try receipt(.deliveryReceipt, for: delivered)
        let readReceipt = try receipt(.readReceipt, for: read)
        XCTAssertEqual(alice.receive(bundle: deliveredReceipt).0, .receipt(kind: .deliveryReceipt, for: delivered.messageID))
        XCTAssertEqual(alice.receive(bundle: readReceipt).0, .receipt(kind: .readReceipt, for: read.messageID))
        guard case .message = bob.receive(bundle: delivered.bundle).0 else { return XCTFail("bob's copy") }
        alice = nil
        bob = nil

        // Put both files in the seen-list shape that stores made by older hubs have.
        for home in [dir + "/alice", dir + "/bob"] {
            let db = try SQLCipherDatabase(path: home + "/endpoint.db", key: try DatabaseKey.load(keyFile: home + "/store.key"))
            try db.executeScript("""
                BEGIN;
                CREATE TABLE outbox_old (message_id BLOB PRIMARY KEY, recipient BLOB NOT NULL, kind INTEGER NOT NULL,
                    created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL, bundle BLOB NOT NULL, state TEXT NOT NULL);
                INSERT INTO outbox_old SELECT message_id, recipient, kind, created_ms, expires_ms, bundle, state FROM outbox;
                DROP TABLE outbox;
                ALTER TABLE outbox_old RENAME TO outbox;
                CREATE INDEX IF NOT EXISTS outbox_by_state ON outbox (state, created_ms);
                CREATE TABLE seen_bundles (bundle_id BLOB PRIMARY KEY, expires_ms INTEGER NOT NULL);
                INSERT INTO seen_bundles (bundle_id, expires_ms) SELECT bundle_id, 0 FROM inbox_messages;
                COMMIT;
                """, purpose: "writing the old shape")
            XCTAssertFalse(try db.query("PRAGMA table_info(outbox)").contains { $0[1].textValue == "receipts_seen" })
            db.close()
        }

        alice = try Endpoint.open(home: dir + "/alice")
        bob = try Endpoint.open(home: dir + "/bob")
        for home in [dir + "/alice", dir + "/bob"] {
            let db = try SQLCipherDatabase(path: home + "/endpoint.db", key: try DatabaseKey.load(keyFile: home + "/store.key"))
            XCTAssertEqual(try db.query("SELECT count(*) FROM sqlite_master WHERE name = 'seen_bundles'").first?.first?.int64Value, 0,
                           "the seen list is gone from \(home)")
            db.close()
        }
        // What arrived before is still known: the same receipts and message are duplicates.
        guard case .duplicate = alice.receive(bundle: deliveredReceipt).0 else { return XCTFail("old delivery receipt again") }
        guard case .duplicate = alice.receive(bundle: readReceipt).0 else { return XCTFail("old read receipt again") }
        guard case .duplicate = bob.receive(bundle: delivered.bundle).0 else { return XCTFail("old message again") }
        XCTAssertEqual(try bob.store.inbox().count, 1)
        // The item that had no receipt still takes one, and the states are as they were.
        XCTAssertEqual(alice.receive(bundle: try receipt(.deliveryReceipt, for: waiting)).0, .receipt(kind: .deliveryReceipt, for: waiting.messageID))
        XCTAssertEqual(try [delivered, read, waiting].map { try alice.store.outboxItem($0.messageID)?.state }, [.delivered, .read, .delivered])
    }
}
