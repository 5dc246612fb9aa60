import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
@testable import YaokWire

final class VectorTests: XCTestCase {
    func testPrint() throws {
        guard ProcessInfo.processInfo.environment["YAOK_PRINT_VECTORS"] != nil else { return }
        for (name, value) in try ComputedVectors.all() { print("    static let \(name) = \"\(value)\"") }
    }
}

extension VectorTests {
    private static let docURL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Docs/protocol.md")

    /// Each vector's expected value, by name.
    private static func expected() -> [String: String] {
        [
            "senderSigningKey": Vectors.senderSigningKey, "senderKXKey": Vectors.senderKXKey,
            "senderUserID": Vectors.senderUserID, "senderFingerprint": Vectors.senderFingerprint,
            "recipientSigningKey": Vectors.recipientSigningKey, "recipientKXKey": Vectors.recipientKXKey,
            "recipientUserID": Vectors.recipientUserID, "hubSigningKey": Vectors.hubSigningKey,
            "hubUserID": Vectors.hubUserID, "ephemeralKXKey": Vectors.ephemeralKXKey,
            "messageEnvelope": Vectors.messageEnvelope, "originBundle": Vectors.originBundle,
            "forwardedBundleHopHeader": Vectors.forwardedBundleHopHeader,
            "forwardedBundleHopHeaderV2": Vectors.forwardedBundleHopHeaderV2, "clockFrame": Vectors.clockFrame, "deliveryReceipt": Vectors.deliveryReceipt,
            "committedMessageEnvelope": Vectors.committedMessageEnvelope, "receiptCommitment": Vectors.receiptCommitment,
            "deliveryProof": Vectors.deliveryProof, "provenDeliveryReceipt": Vectors.provenDeliveryReceipt,
            "messageBundleID": Vectors.messageBundleID, "receiptBundleID": Vectors.receiptBundleID,
            "receiptAcknowledgedBundleID": Vectors.receiptAcknowledgedBundleID,
            "contactURI": Vectors.contactURI, "custodyAckFrame": Vectors.custodyAckFrame,
            "custodyRefusalFrame": Vectors.custodyRefusalFrame, "summaryFrame": Vectors.summaryFrame,
            "custodyAcksFrame": Vectors.custodyAcksFrame, "custodyAcksAnnouncement": Vectors.custodyAcksAnnouncement,
            "attachmentFrame": Vectors.attachmentFrame,
            "linkHelloFrame": Vectors.linkHelloFrame, "linkReplyFrame": Vectors.linkReplyFrame,
            "linkIdentityFrame": Vectors.linkIdentityFrame, "linkHandshakeHash": Vectors.linkHandshakeHash,
            "sealedCustodyAckFrame": Vectors.sealedCustodyAckFrame,
            "chunk0": Vectors.chunk0, "chunk1": Vectors.chunk1, "chunk2": Vectors.chunk2,
        ]
    }

    func testCodeReproducesEveryVector() throws {
        let computed = try ComputedVectors.all()
        let expected = Self.expected()
        XCTAssertEqual(Set(computed.map(\.name)), Set(expected.keys))
        for (name, value) in computed {
            XCTAssertEqual(value, expected[name], "vector \(name)")
        }
    }

    func testVectorsParseVerifyAndOpen() throws {
        let message = try Envelope(parsing: hex(Vectors.messageEnvelope)).verified()
        XCTAssertEqual(try message.open(with: Fixed.recipient), Fixed.plaintext)
        let bundle = try Bundle(parsing: hex(Vectors.originBundle))
        XCTAssertEqual(bundle.envelope, message)
        let receipt = try Envelope(parsing: hex(Vectors.deliveryReceipt)).verified()
        XCTAssertEqual(receipt.refID, message.messageID)
        XCTAssertFalse(receipt.provesDelivery(of: message), "a message with a random nonce commits to nothing")
        let committed = try Envelope(parsing: hex(Vectors.committedMessageEnvelope)).verified()
        XCTAssertEqual(try committed.open(with: Fixed.recipient), Fixed.plaintext)
        let proven = try Envelope(parsing: hex(Vectors.provenDeliveryReceipt)).verified()
        XCTAssertEqual(proven.messageID, hex(Vectors.deliveryProof))
        XCTAssertTrue(proven.provesDelivery(of: committed))
        let contact = try ContactCode(parsing: Vectors.contactURI)
        XCTAssertEqual(contact.name, "Amina")
        XCTAssertEqual(contact.signingKey, Fixed.sender.signingKey)
        let attachment = try TLVRecord(parsing: hex(Vectors.attachmentFrame))
        XCTAssertTrue(try AttachmentAnnouncement(parsing: attachment.value).verifySignature())
        var r = ChunkReassembler()
        XCTAssertNil(try r.add(hex(Vectors.chunk0), now: 0))
        XCTAssertNil(try r.add(hex(Vectors.chunk2), now: 0))
        XCTAssertEqual(try r.add(hex(Vectors.chunk1), now: 0), hex(Vectors.custodyAckFrame))
    }

    /// Docs/protocol.md shows every vector (hex may be wrapped across lines).
    func testDocShowsEveryVector() throws {
        let doc = try String(contentsOf: Self.docURL, encoding: .utf8)
        let compact = doc.filter { !$0.isWhitespace && $0 != "|" }
        for (name, value) in Self.expected() {
            if name == "senderFingerprint" || name == "contactURI" {
                XCTAssertTrue(doc.contains(value), "Docs/protocol.md does not show vector \(name)")
            } else {
                XCTAssertTrue(compact.contains(value), "Docs/protocol.md does not show vector \(name)")
            }
        }
    }

    /// The doc's frame-type registry lists every link ``FrameType`` of the kit and every
    /// ``RoutingFrameType``, and the two share no byte.
    func testDocListsEveryFrameType() throws {
        let doc = try String(contentsOf: Self.docURL, encoding: .utf8)
        let named = FrameType.allCases.map { ($0.rawValue, "\($0)") } + RoutingFrameType.allCases.map { ($0.rawValue, "\($0)") }
        for (code, name) in named {
            let hexCode = String(code, radix: 16)
            let row = "| 0x" + (hexCode.count == 1 ? "0" : "") + hexCode + " | \(name) |"
            XCTAssertTrue(doc.contains(row), "Docs/protocol.md lacks the registry row \(row)")
        }
        XCTAssertTrue(Set(FrameType.allCases.map(\.rawValue)).isDisjoint(with: RoutingFrameType.allCases.map(\.rawValue)),
                      "a byte named by both the link and routing")
        for code in UInt8.min...UInt8.max {
            switch HostFrameType(code) {
            case .link(let t): XCTAssertEqual(t.rawValue, code)
            case .routing(let t): XCTAssertEqual(t.rawValue, code)
            case .unknown(let b): XCTAssertEqual(b, code); XCTAssertFalse(named.contains { $0.0 == code })
            }
        }
    }
}
