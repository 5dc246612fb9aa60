import XCTest
import YaokCrypto
import YaokReconcile
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting

/// The hub's table of recent receipt commitments: what it lets skip a signature check, and
/// its bound.
final class ReceiptCommitmentsTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    func message() throws -> (message: Envelope, proof: [UInt8]) {
        let m = try Envelope.sealMessage(plaintext: [1], from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                         createdMs: 1_767_225_600_000, ttlMs: 3_600_000)
        return (m, try XCTUnwrap(try m.decryptVerifiedWithProof(with: bob).deliveryProof))
    }

    func receipt(for m: Envelope, id: [UInt8], kind: Envelope.Kind = .deliveryReceipt, ttlMs: Int64 = 3_600_000) throws -> Envelope {
        try Envelope.receipt(kind: kind, for: m.messageID, originalSenderUserID: m.senderUserID, from: bob,
                             createdMs: m.createdMs + 1, ttlMs: ttlMs, messageID: id)
    }

    func testOnlyARecordedMessagesProofInADeliveryReceiptThatOutlivesItProves() throws {
        let table = ReceiptCommitments(capacity: 8)
        let (m, proof) = try message()
        XCTAssertFalse(table.proves(try receipt(for: m, id: proof)), "not recorded yet: its signature is checked")
        table.record(m)
        XCTAssertTrue(table.proves(try receipt(for: m, id: proof)))
        XCTAssertFalse(table.proves(try receipt(for: m, id: Random.bytes(16))))
        XCTAssertFalse(table.proves(try receipt(for: m, id: Array(m.receiptCommitment))), "the commitment is public; its preimage is not")
        XCTAssertFalse(table.proves(try receipt(for: m, id: proof, kind: .readReceipt)))
        XCTAssertFalse(table.proves(try receipt(for: m, id: proof, ttlMs: 1_000)), "expires before the message")
        let receiptAsMessage = try receipt(for: m, id: proof)
        table.record(receiptAsMessage)
        XCTAssertEqual(table.count, 1, "only messages are recorded")
    }

    func testTheOldestEntryMakesRoom() throws {
        let table = ReceiptCommitments(capacity: 3)
        let messages = try (0..<5).map { _ in try message() }
        for (m, _) in messages { table.record(m) }
        XCTAssertEqual(table.count, 3)
        XCTAssertEqual(try messages.map { table.proves(try receipt(for: $0.message, id: $0.proof)) }, [false, false, true, true, true])
        table.record(messages[4].message)   // again: no second entry, nothing evicted
        XCTAssertEqual(table.count, 3)
        XCTAssertTrue(table.proves(try receipt(for: messages[2].message, id: messages[2].proof)))
    }
}
