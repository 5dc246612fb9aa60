import XCTest
import YaokCrypto
import YaokPluginKit
@testable import YaokWire

/// Computes every test vector from the fixed inputs in ``Fixed``. ``VectorTests`` compares them with
/// the constants in ``Vectors`` (which Docs/protocol.md shows). To regenerate after a deliberate
/// format change: `YAOK_PRINT_VECTORS=1 swift test --filter VectorTests/testPrint`.
enum ComputedVectors {
    static func all() throws -> [(name: String, value: String)] {
        let message = try Fixed.message()
        let origin = Bundle(envelope: message)
        let forwarded = try origin.forwarded(by: Fixed.hub.userID, ageMs: nil)
        let receipt = try Envelope.receipt(kind: .deliveryReceipt, for: message.messageID,
                                           originalSenderUserID: message.senderUserID, from: Fixed.recipient,
                                           createdMs: Fixed.createdMs + 60_000, messageID: Fixed.receiptID)
        let committed = try Fixed.committedMessage()
        guard let proof = try committed.decryptVerifiedWithProof(with: Fixed.recipient).deliveryProof else {
            throw WireError.invalidArgument("the committed vector message commits to no proof")
        }
        let provenReceipt = try Envelope.receipt(kind: .deliveryReceipt, for: committed.messageID,
                                                 originalSenderUserID: committed.senderUserID, from: Fixed.recipient,
                                                 createdMs: Fixed.createdMs + 60_000, messageID: proof)
        let contact = try ContactCode.make(identity: Fixed.sender, name: "Amina")
        let ack = CustodyAck(bundleID: message.bundleID)
        let refusal = CustodyRefusal(bundleID: message.bundleID, reason: .expired)
        let summary = try BundleIDList(bundleIDs: [receipt.bundleID, message.bundleID])
        let attachment = try AttachmentAnnouncement.signed(by: Fixed.hub, timestampMs: Fixed.createdMs,
                                                           userIDs: [Fixed.sender.userID, Fixed.recipient.userID])
        let chunks = try Chunker.split(ack.frame, chunkSize: 12)
        // The sender's phone (initiator) links to the hub over a stream carrier with fixed ephemerals.
        let phone = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream,
                               ephemeralSecret: Fixed.linkInitiatorEphemeral)
        let hubSide = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream,
                                 ephemeralSecret: Fixed.linkResponderEphemeral)
        let hello = try phone.hello()
        guard case .send(let reply)? = try hubSide.receive(TLVRecord(parsing: hello)).first,
              case .send(let identityFrame)? = try phone.receive(TLVRecord(parsing: reply)).first else {
            throw SecureLinkError.unexpected("vector handshake did not produce its messages")
        }
        _ = try hubSide.receive(TLVRecord(parsing: identityFrame))
        let sealedAck = try hubSide.seal(ack.frame)
        return [
            ("senderSigningKey", Hex.encode(Fixed.sender.signingKey)),
            ("senderKXKey", Hex.encode(Fixed.sender.kxKey)),
            ("senderUserID", Hex.encode(Fixed.sender.userID)),
            ("senderFingerprint", Fixed.sender.fingerprint),
            ("recipientSigningKey", Hex.encode(Fixed.recipient.signingKey)),
            ("recipientKXKey", Hex.encode(Fixed.recipient.kxKey)),
            ("recipientUserID", Hex.encode(Fixed.recipient.userID)),
            ("hubSigningKey", Hex.encode(Fixed.hub.signingKey)),
            ("hubUserID", Hex.encode(Fixed.hub.userID)),
            ("ephemeralKXKey", Hex.encode(Fixed.ephemeral.publicKey)),
            ("messageEnvelope", Hex.encode(message.encoded)),
            ("originBundle", Hex.encode(origin.encoded)),
            ("forwardedBundleHopHeader", Hex.encode(forwarded.hop.encoded)),
            ("forwardedBundleHopHeaderV2", Hex.encode(try origin.forwarded(by: Fixed.hub.userID, ageMs: 90_061_000).hop.encoded)),
            ("deliveryReceipt", Hex.encode(receipt.encoded)),
            ("committedMessageEnvelope", Hex.encode(committed.encoded)),
            ("receiptCommitment", Hex.encode(Array(committed.receiptCommitment))),
            ("deliveryProof", Hex.encode(proof)),
            ("provenDeliveryReceipt", Hex.encode(provenReceipt.encoded)),
            ("messageBundleID", Hex.encode(message.bundleID)),
            ("receiptBundleID", Hex.encode(receipt.bundleID)),
            ("receiptAcknowledgedBundleID", Hex.encode(receipt.acknowledgedBundleID ?? [])),
            ("contactURI", contact.uri),
            ("custodyAckFrame", Hex.encode(ack.frame)),
            ("custodyRefusalFrame", Hex.encode(refusal.frame)),
            ("summaryFrame", Hex.encode(summary.frame())),
            ("custodyAcksFrame", Hex.encode(summary.frame(.custodyAcks))),
            ("custodyAcksAnnouncement", Hex.encode(try BundleIDList(bundleIDs: []).frame(.custodyAcks))),
            ("attachmentFrame", Hex.encode(attachment.frame)),
            ("clockFrame", Hex.encode(ClockFrame(source: .relay, timeMs: Fixed.createdMs).frame)),
            ("linkHelloFrame", Hex.encode(hello)),
            ("linkReplyFrame", Hex.encode(reply)),
            ("linkIdentityFrame", Hex.encode(identityFrame)),
            ("linkHandshakeHash", Hex.encode(phone.handshakeHash)),
            ("sealedCustodyAckFrame", Hex.encode(sealedAck)),
            ("chunk0", Hex.encode(chunks[0])),
            ("chunk1", Hex.encode(chunks[1])),
            ("chunk2", Hex.encode(chunks[2])),
        ]
    }
}
