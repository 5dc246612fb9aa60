import Foundation
import XCTest
import YaokCrypto
import YaokEndpoint
import YaokWire

/// The endpoint's own checks, independent of any hub: every rejection is specific and
/// recorded without content, and nothing rejected reaches the inbox.
final class EndpointSecurityTests: XCTestCase {
    var alice: Endpoint!
    var bob: Endpoint!
    var bobContact: Contact!

    override func setUpWithError() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        (alice, bob, bobContact) = try TestSupport.aliceAndBob(in: dir)
    }

    func bundle(_ text: String, created: Int64? = nil) throws -> [UInt8] {
        let e = try Envelope.sealMessage(plaintext: Array(text.utf8), from: alice.identity, toSigningKey: bobContact.signingKey,
                                         recipientKXKey: bobContact.kxKey, createdMs: created ?? Endpoint.wallClock())
        return YaokWire.Bundle(envelope: e).encoded
    }

    func testGoodMessageIsStoredAndQueuesADeliveryReceipt() throws {
        let (incoming, answer) = bob.receive(bundle: try bundle("hi Bob"))
        guard case .message(let m) = incoming else { return XCTFail("\(incoming)") }
        XCTAssertEqual(m.text, "hi Bob")
        XCTAssertEqual(answer, .custody(BundleID.of(senderUserID: m.senderUserID, messageID: m.messageID)), "custody names the bundle ID")
        XCTAssertEqual(try bob.store.inbox().count, 1)
        let receipts = try bob.store.outbox(states: [.pending]).filter { $0.kind == Envelope.Kind.deliveryReceipt.rawValue }
        XCTAssertEqual(receipts.count, 1, "a delivery receipt waits in the outbox")

        // The receipt, given to Alice, marks her message delivered.
        let item = try alice.compose(to: bobContact, text: "tracked")
        let (_, _) = bob.receive(bundle: item.bundle)
        let receipt = try XCTUnwrap(try bob.store.outbox(states: [.pending]).last { $0.kind == Envelope.Kind.deliveryReceipt.rawValue })
        let (r, _) = alice.receive(bundle: receipt.bundle)
        XCTAssertEqual(r, .receipt(kind: .deliveryReceipt, for: item.messageID))
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .delivered)
    }

    func testTamperedDuplicateReplayedAndMisaddressedAreRejected() throws {
        var tampered = try bundle("tamper")
        tampered[HopHeader.lengthV1 + Envelope.ciphertextOffset] ^= 0x80
        XCTAssertEqual(bob.receive(bundle: tampered).0.rejectionKind, .badSignature)

        let once = try bundle("only once")
        guard case .message = bob.receive(bundle: once).0 else { return XCTFail("first copy accepted") }
        guard case .duplicate = bob.receive(bundle: once).0 else { return XCTFail("second copy is a duplicate") }

        // More than a lifetime ahead of our clock (a sender's clock may lead it by 7 days).
        let future = try bundle("from the future", created: Endpoint.wallClock() + 8 * 86_400_000)
        XCTAssertEqual(bob.receive(bundle: future).0.rejectionKind, .replay)

        // Addressed to Alice, handed to Bob.
        let toAlice = try Envelope.sealMessage(plaintext: Array("x".utf8), from: bob.identity, toSigningKey: alice.identity.signingKey,
                                               recipientKXKey: alice.identity.kxKey, createdMs: Endpoint.wallClock())
        XCTAssertEqual(bob.receive(bundle: YaokWire.Bundle(envelope: toAlice).encoded).0.rejectionKind, .wrongRecipient)

        // A stranger.
        let mallory = Identity.generate()
        let spam = try Envelope.sealMessage(plaintext: Array("SPAM-CONTENT".utf8), from: mallory, toSigningKey: bob.identity.signingKey,
                                            recipientKXKey: bob.identity.kxKey, createdMs: Endpoint.wallClock())
        XCTAssertEqual(bob.receive(bundle: YaokWire.Bundle(envelope: spam).encoded).0.rejectionKind, .nonContact)

        // A receipt for Alice's message forged by someone who is not its recipient.
        let item = try alice.compose(to: bobContact, text: "mine")
        try alice.addContact(uri: ContactCode.make(identity: mallory, name: "Mallory").uri)
        let forged = try Envelope.receipt(kind: .deliveryReceipt, for: item.messageID, originalSenderUserID: alice.identity.userID,
                                          from: mallory, createdMs: Endpoint.wallClock())
        XCTAssertEqual(alice.receive(bundle: YaokWire.Bundle(envelope: forged).encoded).0.rejectionKind, .forgedReceipt)
        XCTAssertEqual(try alice.store.outboxItem(item.messageID)?.state, .pending)

        XCTAssertEqual(try bob.store.inbox().map(\.text), ["only once"])
        let kinds = try bob.store.securityEvents().map(\.kind)
        XCTAssertEqual(kinds, [.badSignature, .duplicate, .replay, .wrongRecipient, .nonContact])
        // Events hold no content: nothing of the spam text is in the rows.
        XCTAssertFalse(try bob.store.securityEvents().description.contains("SPAM-CONTENT"))
    }
}

extension EndpointSecurityTests {
    /// A stranger's bundle under a contact's message ID, delivered first, does not mark that ID
    /// "seen": if it did, the contact's real message would be dropped as a duplicate.
    func testAStrangersBundleUnderAContactsMessageIDDoesNotSuppressIt() throws {
        let id = Random.uuidV4()
        let mallory = Identity.generate()
        let squat = try Envelope.sealMessage(plaintext: Array("junk".utf8), from: mallory, toSigningKey: bob.identity.signingKey,
                                             recipientKXKey: bob.identity.kxKey, createdMs: Endpoint.wallClock(), messageID: id)
        XCTAssertEqual(bob.receive(bundle: YaokWire.Bundle(envelope: squat).encoded).0.rejectionKind, .nonContact)
        let real = try Envelope.sealMessage(plaintext: Array("the real one".utf8), from: alice.identity, toSigningKey: bobContact.signingKey,
                                            recipientKXKey: bobContact.kxKey, createdMs: Endpoint.wallClock(), messageID: id)
        let (incoming, answer) = bob.receive(bundle: YaokWire.Bundle(envelope: real).encoded)
        guard case .message(let m) = incoming else { return XCTFail("the real message was \(incoming)") }
        XCTAssertEqual(m.text, "the real one")
        XCTAssertEqual(answer, .custody(real.bundleID))
        // The same envelope again is a duplicate; a lifetime over 7 days is refused.
        guard case .duplicate = bob.receive(bundle: YaokWire.Bundle(envelope: real).encoded).0 else { return XCTFail("second copy") }
        let immortal = try Envelope.sealMessage(plaintext: Array("forever".utf8), from: alice.identity, toSigningKey: bobContact.signingKey,
                                                recipientKXKey: bobContact.kxKey, createdMs: Endpoint.wallClock(), ttlMs: 1 << 62)
        XCTAssertEqual(bob.receive(bundle: YaokWire.Bundle(envelope: immortal).encoded).1, .refuse(immortal.bundleID, .badLifetime))
        XCTAssertEqual(try bob.store.inbox().map(\.text), ["the real one"])
    }
}

extension Endpoint.Incoming {
    var rejectionKind: SecurityEvent.Kind? {
        if case .rejected(let kind, _) = self { return kind }
        return nil
    }
}
