import XCTest
import YaokCrypto
@testable import YaokWire

final class ContactCodeTests: XCTestCase {
    func testRoundTrip() throws {
        let id = Identity.generate()
        let code = try ContactCode.make(identity: id, name: "  Amina Diallo \n")
        XCTAssertEqual(code.name, "Amina Diallo")
        XCTAssertTrue(code.uri.hasPrefix("yaok://contact?v=1&d="))
        XCTAssertFalse(code.uri.contains("="+"="))
        XCTAssertFalse(code.uri.contains("+") || code.uri.contains("/") && !code.uri.hasPrefix("yaok://"))
        let parsed = try ContactCode(parsing: code.uri)
        XCTAssertEqual(parsed, code)
        XCTAssertEqual(parsed.userID, id.userID)
        XCTAssertEqual(parsed.kxKey, id.kxKey)
        XCTAssertEqual(parsed.signingKey, id.signingKey)
        XCTAssertEqual(parsed.fingerprint, id.fingerprint)
        // Unicode names: 50 scalars of 4 UTF-8 bytes each fit.
        let emoji = String(repeating: "😀", count: 50)
        XCTAssertEqual(try ContactCode(parsing: ContactCode.make(identity: id, name: emoji).uri).name, emoji)
        XCTAssertEqual(try ContactCode(parsing: ContactCode.make(identity: id, name: "Zoë 山田").uri).name, "Zoë 山田")
        // Unknown parameters are ignored; order does not matter.
        let d = code.uri.components(separatedBy: "d=")[1]
        XCTAssertEqual(try ContactCode(parsing: "yaok://contact?d=\(d)&x=y&v=1"), code)
    }

    func testInvalidNames() {
        let id = Identity.generate()
        for bad in ["", " ", "A", " A ", String(repeating: "a", count: 51), "a\u{0}b", "tab\there", "new\nline",
                    "bell\u{7}", "del\u{7F}x", "ab\u{2028}cd", "evil\u{202E}cba"] {
            XCTAssertThrowsAnyWire(try ContactCode.make(identity: id, name: bad), "name \(bad.debugDescription)")
        }
        XCTAssertNoThrow(try ContactCode.make(identity: id, name: "Al"))
        XCTAssertNoThrow(try ContactCode.make(identity: id, name: String(repeating: "a", count: 50)))
    }

    private func uri(_ payload: [UInt8]) -> String { "yaok://contact?v=1&d=" + ContactCode.base64URLEncode(payload) }

    /// Builds a payload with arbitrary fields, correctly self-signed by `id` unless told otherwise.
    private func payload(id: Identity, version: UInt8 = 1, userID: [UInt8]? = nil, nameBytes: [UInt8], nameLength: Int? = nil) -> [UInt8] {
        var body: [UInt8] = [version] + (userID ?? id.userID) + [UInt8(nameLength ?? nameBytes.count)] + nameBytes + id.kxKey + id.signingKey
        body += id.sign(body)
        return body
    }

    func testMalformedPayloads() throws {
        let id = Fixed.sender
        let good = try ContactCode.make(identity: id, name: "Ya OK").payload
        XCTAssertEqual(try ContactCode(payload: good).name, "Ya OK")
        for n in 0..<good.count { XCTAssertThrowsAnyWire(try ContactCode(payload: Array(good.prefix(n))), "length \(n)") }
        XCTAssertThrowsAnyWire(try ContactCode(payload: good + [0]))
        XCTAssertThrowsWire(.wrongVersion(what: "contact code", version: 2), try ContactCode(payload: payload(id: id, version: 2, nameBytes: Array("Ya OK".utf8))))
        XCTAssertThrowsWire(.userIDMismatch, try ContactCode(payload: payload(id: id, userID: Fixed.recipient.userID, nameBytes: Array("Ya OK".utf8))))
        XCTAssertThrowsWire(.invalidName("not valid UTF-8"), try ContactCode(payload: payload(id: id, nameBytes: [0x41, 0xFF, 0x42])))
        XCTAssertThrowsWire(.invalidName("leading or trailing whitespace"), try ContactCode(payload: payload(id: id, nameBytes: Array(" Ya OK".utf8))))
        XCTAssertThrowsAnyWire(try ContactCode(payload: payload(id: id, nameBytes: Array("a\u{1}b".utf8))))
        XCTAssertThrowsAnyWire(try ContactCode(payload: payload(id: id, nameBytes: Array("Ya OK".utf8), nameLength: 200)))
        XCTAssertThrowsWire(.oversized(what: "contact code", size: 500, limit: ContactCode.maxPayloadLength),
                            try ContactCode(payload: [UInt8](repeating: 1, count: 500)))
        // Every bit flip fails (structure, user ID or signature).
        for i in 0..<good.count {
            for bit in 0..<8 {
                var b = good
                b[i] ^= UInt8(1 << bit)
                XCTAssertThrowsAnyWire(try ContactCode(payload: b), "byte \(i) bit \(bit)")
            }
        }
        // A signature by another key over the same body.
        var forged = Array(good.dropLast(64))
        forged += Fixed.recipient.sign(forged)
        XCTAssertThrowsWire(.badSignature, try ContactCode(payload: forged))
    }

    func testMalformedURIs() throws {
        let code = try ContactCode.make(identity: Fixed.sender, name: "Ya OK")
        let d = ContactCode.base64URLEncode(code.payload)
        XCTAssertEqual(try ContactCode(parsing: uri(code.payload)), code)
        for bad in ["", "yaok://contact", "yaok://contact?", "http://contact?v=1&d=\(d)", "YAOK://contact?v=1&d=\(d)",
                    "yaok://contact?d=\(d)", "yaok://contact?v=1", "yaok://contact?v=1&d=", "yaok://contact?v=1&d=\(d)&d=\(d)",
                    "yaok://contact?v=1&v=1&d=\(d)", "yaok://contact?v=1&d=\(d)=", "yaok://contact?v=1&d=\(d)==",
                    "yaok://contact?v=1&d=\(d.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/"))x",
                    "yaok://contact?v=1&d=\(d)!", "yaok://contact?v=1&d=\(d.dropLast())", "yaok://contact?v=1&d=\(d)A",
                    "yaok://contact?v=1&nonsense&d=\(d)", "yaok://contact?v=1&d=" + String(repeating: "A", count: 2000)] {
            XCTAssertThrowsAnyWire(try ContactCode(parsing: bad), bad)
        }
        XCTAssertThrowsWire(.wrongVersion(what: "contact code URI", version: 2), try ContactCode(parsing: "yaok://contact?v=2&d=\(d)"))
    }
}
