import XCTest
import YaokCrypto
@testable import YaokWire
import enum YaokPluginKit.Hex

/// Deterministic identities and values shared by the tests and the vectors in Docs/protocol.md.
enum Fixed {
    static let sender = try! Identity(ed25519Seed: [UInt8](repeating: 0x01, count: 32),
                                      x25519Secret: [UInt8](repeating: 0x02, count: 32))
    static let recipient = try! Identity(ed25519Seed: [UInt8](repeating: 0x03, count: 32),
                                         x25519Secret: [UInt8](repeating: 0x04, count: 32))
    static let hub = try! Identity(ed25519Seed: [UInt8](repeating: 0x05, count: 32),
                                   x25519Secret: [UInt8](repeating: 0x06, count: 32))
    static let ephemeral = try! KXKeyPair(secretKey: [UInt8](repeating: 0x07, count: 32))
    static let nonce = [UInt8](repeating: 0x08, count: 24)
    static let messageID: [UInt8] = hex("0f1e2d3c4b5a49788796a5b4c3d2e1f0")
    static let receiptID: [UInt8] = hex("a0a1a2a3a4a5468788898a8b8c8d8e8f")
    static let createdMs: Int64 = 1_767_225_600_000 // 2026-01-01T00:00:00Z
    static let plaintext = Array("Ya OK!".utf8)
    /// Link handshake ephemeral secrets (initiator, responder).
    static let linkInitiatorEphemeral = [UInt8](repeating: 0x0a, count: 32)
    static let linkResponderEphemeral = [UInt8](repeating: 0x0b, count: 32)

    static func message() throws -> Envelope {
        try Envelope.sealMessage(plaintext: plaintext, from: sender, toSigningKey: recipient.signingKey,
                                 recipientKXKey: recipient.kxKey, createdMs: createdMs,
                                 messageID: messageID, ephemeral: ephemeral, nonce: nonce)
    }

    /// The same message from a sender that commits to a receipt proof: its nonce is the
    /// commitment and 8 bytes of 0x08.
    static func committedMessage() throws -> Envelope {
        try Envelope.sealMessage(plaintext: plaintext, from: sender, toSigningKey: recipient.signingKey,
                                 recipientKXKey: recipient.kxKey, createdMs: createdMs,
                                 messageID: messageID, ephemeral: ephemeral, nonceTail: [UInt8](repeating: 0x08, count: 8))
    }
}

func hex(_ s: String) -> [UInt8] {
    guard let bytes = Hex.decode(s.filter { !$0.isWhitespace }) else { fatalError("bad hex in test: \(s)") }
    return bytes
}

/// Asserts that `body` throws exactly `expected`.
func XCTAssertThrowsWire<T>(_ expected: WireError, _ body: @autoclosure () throws -> T, _ message: String = "",
                           file: StaticString = #filePath, line: UInt = #line) {
    do {
        _ = try body()
        XCTFail("expected \(expected), nothing thrown \(message)", file: file, line: line)
    } catch let error as WireError {
        XCTAssertEqual(error, expected, message, file: file, line: line)
    } catch {
        XCTFail("expected \(expected), got \(error)", file: file, line: line)
    }
}

/// Asserts that `body` throws some WireError (for corpora where the exact case varies).
func XCTAssertThrowsAnyWire<T>(_ body: @autoclosure () throws -> T, _ message: String = "",
                              file: StaticString = #filePath, line: UInt = #line) {
    do {
        _ = try body()
        XCTFail("expected a WireError, nothing thrown \(message)", file: file, line: line)
    } catch is WireError {
    } catch {
        XCTFail("expected a WireError, got \(error) \(message)", file: file, line: line)
    }
}
