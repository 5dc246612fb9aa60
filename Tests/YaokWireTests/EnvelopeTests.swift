import XCTest
import YaokCrypto
@testable import YaokWire

final class EnvelopeTests: XCTestCase {
    func testMessageRoundTrip() throws {
        let alice = Identity.generate(), bob = Identity.generate()
        let text = Array("meet at the well at noon".utf8)
        let env = try Envelope.sealMessage(plaintext: text, from: alice, toUserID: bob.userID, recipientKXKey: bob.kxKey, createdMs: 1000)
        XCTAssertEqual(env.kind, .message)
        XCTAssertEqual(env.encoded.count, 172 + text.count + 16 + 64)
        XCTAssertEqual(env.expiresMs, 1000 + Envelope.defaultTTLMilliseconds)
        XCTAssertEqual(env.senderUserID, alice.userID)
        XCTAssertEqual(env.recipientUserID, bob.userID)
        XCTAssertEqual(env.refID, [UInt8](repeating: 0, count: 16))
        XCTAssertEqual(env.messageID[6] >> 4, 4)
        let parsed = try Envelope(parsing: env.encoded)
        XCTAssertEqual(parsed, env)
        XCTAssertEqual(parsed.ciphertext, env.ciphertext)
        XCTAssertTrue(parsed.verifySignature())
        XCTAssertEqual(try parsed.open(with: bob), text)
        XCTAssertThrowsWire(.wrongRecipient, try parsed.open(with: alice))
        XCTAssertThrowsWire(.wrongRecipient, try parsed.open(with: Identity.generate()))
        // The receiver's path: verify once, then decrypt without a second verification.
        XCTAssertEqual(try parsed.decryptVerified(with: bob), text)
        XCTAssertThrowsWire(.wrongRecipient, try parsed.decryptVerified(with: alice))
        // open(with:) still verifies: one flipped signature bit is refused.
        var forged = env.encoded
        forged[forged.count - 1] ^= 1
        XCTAssertThrowsWire(.badSignature, try Envelope(parsing: forged).open(with: bob))
        XCTAssertFalse(env.isExpired(atMs: 1000))
        XCTAssertTrue(env.isExpired(atMs: env.expiresMs))
    }

    func testEmptyAndMaximumPlaintext() throws {
        let a = Fixed.sender, b = Fixed.recipient
        for size in [0, 1, Envelope.maxPlaintextLength] {
            let pt = Random.bytes(size)
            let env = try Envelope.sealMessage(plaintext: pt, from: a, toSigningKey: b.signingKey, recipientKXKey: b.kxKey, createdMs: 5)
            XCTAssertEqual(try Envelope(parsing: env.encoded).open(with: b), pt)
        }
        XCTAssertThrowsWire(.plaintextTooLarge(size: 10241, limit: 10240),
                            try Envelope.sealMessage(plaintext: [UInt8](repeating: 0, count: 10241), from: a, toSigningKey: b.signingKey, recipientKXKey: b.kxKey, createdMs: 5))
        XCTAssertEqual(Envelope.maxEncodedLength, 172 + 10256 + 64)
    }

    func testBuilderArgumentChecks() {
        let a = Fixed.sender, b = Fixed.recipient
        XCTAssertThrowsAnyWire(try Envelope.sealMessage(plaintext: [], from: a, toUserID: [1], recipientKXKey: b.kxKey, createdMs: 5))
        XCTAssertThrowsAnyWire(try Envelope.sealMessage(plaintext: [], from: a, toUserID: b.userID, recipientKXKey: [1], createdMs: 5))
        XCTAssertThrowsAnyWire(try Envelope.sealMessage(plaintext: [], from: a, toUserID: b.userID, recipientKXKey: b.kxKey, createdMs: 5, ttlMs: 0))
        XCTAssertThrowsAnyWire(try Envelope.sealMessage(plaintext: [], from: a, toUserID: b.userID, recipientKXKey: b.kxKey, createdMs: Int64.max))
        XCTAssertThrowsAnyWire(try Envelope.sealMessage(plaintext: [], from: a, toUserID: b.userID, recipientKXKey: b.kxKey, createdMs: -1))
        XCTAssertThrowsAnyWire(try Envelope.sealMessage(plaintext: [], from: a, toUserID: b.userID, recipientKXKey: b.kxKey, createdMs: 5, messageID: [1]))
        XCTAssertThrowsAnyWire(try Envelope.receipt(kind: .message, for: Fixed.messageID, originalSenderUserID: a.userID, from: b, createdMs: 5))
        // A small-order recipient key is refused rather than producing a guessable key.
        XCTAssertThrowsWire(.crypto(.weakPublicKey), try Envelope.sealMessage(plaintext: [], from: a, toUserID: b.userID, recipientKXKey: [UInt8](repeating: 0, count: 32), createdMs: 5))
    }

    func testReceipts() throws {
        let msg = try Fixed.message()
        for kind in [Envelope.Kind.deliveryReceipt, .readReceipt] {
            let r = try Envelope.receipt(kind: kind, for: msg.messageID, originalSenderUserID: msg.senderUserID,
                                         from: Fixed.recipient, createdMs: Fixed.createdMs + 1, ttlMs: 60_000)
            XCTAssertEqual(r.encoded.count, 236)
            XCTAssertEqual(r.kind, kind)
            XCTAssertEqual(r.refID, msg.messageID)
            XCTAssertEqual(r.recipientUserID, Fixed.sender.userID)
            XCTAssertEqual(r.senderUserID, Fixed.recipient.userID)
            XCTAssertEqual(r.expiresMs, Fixed.createdMs + 1 + 60_000)
            XCTAssertEqual(r.ciphertext, [])
            let parsed = try Envelope(parsing: r.encoded).verified()
            XCTAssertEqual(parsed, r)
            XCTAssertThrowsWire(.wrongKind(expected: "message", actual: kind.rawValue), try parsed.open(with: Fixed.sender))
        }
    }

    func testTruncatedAtEveryLength() throws {
        for env in [try Fixed.message(), try Envelope.receipt(kind: .deliveryReceipt, for: Fixed.messageID, originalSenderUserID: Fixed.sender.userID, from: Fixed.recipient, createdMs: 1)] {
            for n in 0..<env.encoded.count {
                XCTAssertThrowsAnyWire(try Envelope(parsing: Array(env.encoded.prefix(n))), "length \(n)")
            }
            XCTAssertThrowsAnyWire(try Envelope(parsing: env.encoded + [0]), "trailing byte")
        }
    }

    func testStructuralErrors() throws {
        let env = try Fixed.message().encoded
        var b = env; b[0] = 2
        XCTAssertThrowsWire(.wrongVersion(what: "envelope", version: 2), try Envelope(parsing: b))
        b = env; b[1] = 4
        XCTAssertThrowsWire(.badKind(4), try Envelope(parsing: b))
        b = env; b[1] = 0
        XCTAssertThrowsWire(.badKind(0), try Envelope(parsing: b))
        // A message claiming a receipt kind must have no ciphertext.
        b = env; b[1] = 2
        XCTAssertThrowsAnyWire(try Envelope(parsing: b))
        // Ciphertext length below the tag, above the maximum, and inconsistent with the total.
        b = env; b[170] = 0; b[171] = 15
        XCTAssertThrowsAnyWire(try Envelope(parsing: b))
        b = env; b[170] = 0x28; b[171] = 0x11  // 10257
        XCTAssertThrowsAnyWire(try Envelope(parsing: b))
        b = env; b[171] &+= 1
        XCTAssertThrowsAnyWire(try Envelope(parsing: b))
        b = env; b[171] &-= 1
        XCTAssertThrowsAnyWire(try Envelope(parsing: b))
        // Message with a non-zero ref ID.
        b = env; b[100] = 1
        XCTAssertThrowsWire(.nonZeroField("refID (message)"), try Envelope(parsing: b))
        // Expiry before creation.
        b = env; for i in 90..<98 { b[i] = 0 }
        XCTAssertThrowsWire(.badTimestamp("expires before it was created"), try Envelope(parsing: b))
        // Created above Int64.max.
        b = env; b[82] = 0x80
        XCTAssertThrowsWire(.badTimestamp("above Int64.max"), try Envelope(parsing: b))
        // Oversized input is refused before anything else.
        XCTAssertThrowsWire(.oversized(what: "envelope", size: Envelope.maxEncodedLength + 1, limit: Envelope.maxEncodedLength),
                            try Envelope(parsing: [UInt8](repeating: 1, count: Envelope.maxEncodedLength + 1)))
        // Receipts with non-zero ephemeral key or nonce.
        let r = try Envelope.receipt(kind: .readReceipt, for: Fixed.messageID, originalSenderUserID: Fixed.sender.userID, from: Fixed.recipient, createdMs: 1).encoded
        b = r; b[120] = 1
        XCTAssertThrowsWire(.nonZeroField("ephemeral key (receipt)"), try Envelope(parsing: b))
        b = r; b[150] = 1
        XCTAssertThrowsWire(.nonZeroField("nonce (receipt)"), try Envelope(parsing: b))
        b = r; b[171] = 1
        XCTAssertThrowsAnyWire(try Envelope(parsing: b))
    }

    func testEveryBitFlipIsDetected() throws {
        for env in [try Fixed.message(), try Envelope.receipt(kind: .deliveryReceipt, for: Fixed.messageID, originalSenderUserID: Fixed.sender.userID, from: Fixed.recipient, createdMs: 1)] {
            for i in 0..<env.encoded.count {
                for bit in 0..<8 {
                    var b = env.encoded
                    b[i] ^= UInt8(1 << bit)
                    if let parsed = try? Envelope(parsing: b) {
                        XCTAssertFalse(parsed.verifySignature(), "flip at byte \(i) bit \(bit) went unnoticed")
                        XCTAssertThrowsAnyWire(try parsed.verified())
                        if parsed.kind == .message, parsed.recipientUserID == Fixed.recipient.userID {
                            XCTAssertThrowsWire(.badSignature, try parsed.open(with: Fixed.recipient))
                        }
                    }
                }
            }
        }
    }

    /// A sender who signs altered bytes still cannot get them decrypted: the AEAD covers the header.
    func testResignedTamperingFailsDecryption() throws {
        let env = try Fixed.message().encoded
        for index in [2, 60, 85, 94, 130, 160, 172, 180] {   // ID, recipient, created, expires, ephemeral, nonce, ciphertext, tag
            var b = Array(env.prefix(env.count - 64))
            b[index] ^= 0x01
            b += Fixed.sender.sign(b)
            guard let parsed = try? Envelope(parsing: b) else { continue }
            XCTAssertTrue(parsed.verifySignature())
            if index >= 50 && index < 82 {
                XCTAssertThrowsWire(.wrongRecipient, try parsed.open(with: Fixed.recipient), "byte \(index)")
            } else {
                XCTAssertThrowsWire(.decryptionFailed, try parsed.open(with: Fixed.recipient), "byte \(index)")
            }
        }
    }

    func testFixedVectorOpens() throws {
        let env = try Fixed.message()
        XCTAssertEqual(try env.open(with: Fixed.recipient), Fixed.plaintext)
        XCTAssertEqual(env.ephemeralKey, Fixed.ephemeral.publicKey)
        XCTAssertEqual(env.nonce, Fixed.nonce)
        XCTAssertEqual(env.messageID, Fixed.messageID)
    }

    // MARK: Receipt proofs (Docs/protocol.md, "Receipt proofs")

    /// A message commits to a delivery proof that its recipient finds by decrypting it; a
    /// delivery receipt revealing it proves delivery without a signature. Nothing an
    /// attacker sees or can make without the message key proves it.
    func testAMessageCommitsToAProofOnlyItsRecipientCanReveal() throws {
        let alice = Identity.generate(), bob = Identity.generate(), eve = Identity.generate()
        let now: Int64 = 1_767_225_600_000
        func seal(_ text: String, to: Identity) throws -> Envelope {
            try Envelope.sealMessage(plaintext: Array(text.utf8), from: alice, toSigningKey: to.signingKey,
                                     recipientKXKey: to.kxKey, createdMs: now, ttlMs: 3_600_000)
        }
        let m = try seal("the well at noon", to: bob)
        let (plaintext, proof) = try m.decryptVerifiedWithProof(with: bob)
        XCTAssertEqual(plaintext, Array("the well at noon".utf8))
        let d = try XCTUnwrap(proof, "a new sender's message commits to a proof")
        XCTAssertEqual(ReceiptChain.commitment(deliveryProof: d)[...], m.receiptCommitment)
        XCTAssertEqual(m.nonce.count, 24)
        XCTAssertThrowsWire(.wrongRecipient, try m.decryptVerifiedWithProof(with: eve))

        func receipt(_ kind: Envelope.Kind = .deliveryReceipt, for message: Envelope, id: [UInt8], from signer: Identity,
                     to addressee: [UInt8]? = nil, ttlMs: Int64 = Envelope.defaultTTLMilliseconds) throws -> Envelope {
            try Envelope.receipt(kind: kind, for: message.messageID, originalSenderUserID: addressee ?? message.senderUserID,
                                 from: signer, createdMs: now + 1_000, ttlMs: ttlMs, messageID: id)
        }
        XCTAssertTrue(try receipt(for: m, id: d, from: bob).provesDelivery(of: m))
        // The proof counts whoever signed: it is the proof, not the key, that only bob has.
        XCTAssertTrue(try receipt(for: m, id: d, from: eve).provesDelivery(of: m))

        // What does not prove it: the public commitment itself, a random ID, another
        // message's proof, the right proof for another message, in a read receipt, to
        // another addressee, or in a receipt that expires before the message.
        XCTAssertFalse(try receipt(for: m, id: Array(m.receiptCommitment), from: eve).provesDelivery(of: m))
        XCTAssertFalse(try receipt(for: m, id: Random.bytes(16), from: bob).provesDelivery(of: m))
        let other = try seal("the well at noon", to: bob)
        XCTAssertNotEqual(other.receiptCommitment, m.receiptCommitment, "the same text twice commits to two proofs")
        let otherProof = try XCTUnwrap(try other.decryptVerifiedWithProof(with: bob).deliveryProof)
        XCTAssertFalse(try receipt(for: m, id: otherProof, from: bob).provesDelivery(of: m))
        XCTAssertFalse(try receipt(for: other, id: d, from: bob).provesDelivery(of: other))
        XCTAssertFalse(try receipt(.readReceipt, for: m, id: d, from: bob).provesDelivery(of: m))
        XCTAssertFalse(try receipt(for: m, id: d, from: bob, to: eve.userID).provesDelivery(of: m))
        XCTAssertFalse(try receipt(for: m, id: d, from: bob, ttlMs: 1_000).provesDelivery(of: m))
        XCTAssertFalse(try receipt(for: m, id: d, from: bob).provesDelivery(of: try receipt(for: m, id: d, from: bob)),
                       "only a message has a commitment")
    }

    /// An older sender's nonce is random: its message commits to nothing, so the recipient
    /// answers with an ordinary receipt, and no receipt proves it without a signature.
    func testAMessageWithARandomNonceCommitsToNothing() throws {
        let alice = Identity.generate(), bob = Identity.generate()
        let m = try Envelope.sealMessage(plaintext: [1, 2, 3], from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                         createdMs: 1_000, nonce: SealedBox.randomNonce())
        let (plaintext, proof) = try m.decryptVerifiedWithProof(with: bob)
        XCTAssertEqual(plaintext, [1, 2, 3])
        XCTAssertNil(proof)
    }
}
