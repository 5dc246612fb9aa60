import XCTest
import YaokCrypto
import YaokPluginKit
@testable import YaokWire

final class BundleTests: XCTestCase {
    func testRoundTripAndForwarding() throws {
        let bundle = Bundle(envelope: try Fixed.message())
        XCTAssertEqual(bundle.hop, HopHeader(hopCount: 0, hopLimit: 10, previousHop: [UInt8](repeating: 0, count: 32)))
        XCTAssertEqual(bundle.encoded.count, 35 + bundle.envelope.encoded.count)
        XCTAssertEqual(try Bundle(parsing: bundle.encoded), bundle)

        var b = bundle
        for hop in 1...10 {
            b = try b.forwarded(by: Fixed.hub.userID, ageMs: nil)
            XCTAssertEqual(Int(b.hop.hopCount), hop)
            XCTAssertEqual(b.hop.previousHop, Fixed.hub.userID)
            XCTAssertEqual(try Bundle(parsing: b.encoded), b)
            XCTAssertTrue(b.envelope.verifySignature(), "the hop header is outside the signature")
        }
        XCTAssertThrowsWire(.hopLimitReached(count: 11, limit: 10), try b.forwarded(by: Fixed.hub.userID, ageMs: nil))
        XCTAssertThrowsAnyWire(try bundle.forwarded(by: [1, 2], ageMs: nil))
        let zeroLimit = Bundle(hop: .origin(hopLimit: 0), envelope: bundle.envelope)
        XCTAssertThrowsWire(.hopLimitReached(count: 1, limit: 0), try zeroLimit.forwarded(by: Fixed.hub.userID, ageMs: nil))
    }

    /// A hub sends a stored bundle on by rewriting its header over the stored bytes: the same
    /// bytes as parsing the whole bundle and encoding it forwarded, and the same refusals.
    func testRewritingTheHopHeaderOfStoredBytesEqualsForwardingTheParsedBundle() throws {
        var b = Bundle(envelope: try Fixed.message())
        for hop in 1...10 {
            let age: UInt32? = hop % 2 == 0 ? UInt32(hop * 1_000) : nil
            let rewritten = try Bundle.rewritingHopHeader(of: b.encoded) { try $0.forwarded(by: Fixed.hub.userID, ageMs: age) }
            b = try b.forwarded(by: Fixed.hub.userID, ageMs: age)
            XCTAssertEqual(rewritten, b.encoded, "hop \(hop)")
        }
        XCTAssertThrowsWire(.hopLimitReached(count: 11, limit: 10),
                            try Bundle.rewritingHopHeader(of: b.encoded) { try $0.forwarded(by: Fixed.hub.userID, ageMs: nil) })
        let aged = try Bundle.rewritingHopHeader(of: b.encoded) { var h = $0; h.ageMs = 42; return h }
        XCTAssertEqual(aged, b.withAge(42).encoded)
        XCTAssertThrowsAnyWire(try Bundle.rewritingHopHeader(of: [9] + b.encoded.dropFirst()) { $0 }, "an unknown header version")
        XCTAssertThrowsAnyWire(try Bundle.rewritingHopHeader(of: Array(b.encoded.prefix(HopHeader.lengthV1))) { $0 }, "a header and nothing after it")
    }

    func testMalformedBundles() throws {
        let encoded = Bundle(envelope: try Fixed.message()).encoded
        for n in 0..<encoded.count {
            XCTAssertThrowsAnyWire(try Bundle(parsing: Array(encoded.prefix(n))), "length \(n)")
        }
        var b = encoded; b[0] = 0
        XCTAssertThrowsWire(.wrongVersion(what: "hop header", version: 0), try Bundle(parsing: b))
        b = encoded; b[1] = 11
        XCTAssertThrowsWire(.hopLimitReached(count: 11, limit: 10), try Bundle(parsing: b))
        b = encoded; b[35] = 9
        XCTAssertThrowsWire(.wrongVersion(what: "envelope", version: 9), try Bundle(parsing: b))
        XCTAssertThrowsAnyWire(try Bundle(parsing: encoded + [0]))
        XCTAssertThrowsWire(.oversized(what: "bundle", size: Bundle.maxEncodedLength + 1, limit: Bundle.maxEncodedLength),
                            try Bundle(parsing: [UInt8](repeating: 1, count: Bundle.maxEncodedLength + 1)))
    }

    func testBundleFrameIsATLVRecord() throws {
        let bundle = Bundle(envelope: try Fixed.message())
        let record = try TLVRecord(parsing: bundle.frame)
        XCTAssertEqual(record.type, FrameType.bundle.rawValue)
        XCTAssertEqual(try Bundle(parsing: record.value), bundle)
    }
}

final class HostFrameTests: XCTestCase {
    func testCustodyAck() throws {
        let ack = CustodyAck(bundleID: Fixed.messageID)
        XCTAssertEqual(try CustodyAck(parsing: ack.encoded), ack)
        XCTAssertEqual(try TLVRecord(parsing: ack.frame), TLVRecord(.custodyAck, value: Fixed.messageID))
        for n in [0, 15, 17] { XCTAssertThrowsAnyWire(try CustodyAck(parsing: [UInt8](repeating: 0, count: n))) }
    }

    func testCustodyRefusal() throws {
        for reason in CustodyRefusal.Reason.allCases {
            let r = CustodyRefusal(bundleID: Fixed.messageID, reason: reason)
            XCTAssertEqual(r.encoded.count, 17)
            XCTAssertEqual(try CustodyRefusal(parsing: r.encoded), r)
        }
        XCTAssertEqual(CustodyRefusal.Reason.allCases.map(\.rawValue), [1, 2, 3, 4, 5, 6, 7, 8])
        XCTAssertThrowsWire(.unknownReason(0), try CustodyRefusal(parsing: Fixed.messageID + [0]))
        XCTAssertThrowsWire(.unknownReason(9), try CustodyRefusal(parsing: Fixed.messageID + [9]))
        for n in [0, 16, 18, 20, 22] { XCTAssertThrowsAnyWire(try CustodyRefusal(parsing: [UInt8](repeating: 1, count: n))) }
        // With the relay's retry hint: 4 more bytes, seconds, big-endian.
        let hinted = CustodyRefusal(bundleID: Fixed.messageID, reason: .rateLimited, retryAfterS: 3_301)
        XCTAssertEqual(hinted.encoded, Fixed.messageID + [6, 0, 0, 0x0c, 0xe5])
        XCTAssertEqual(try CustodyRefusal(parsing: hinted.encoded), hinted)
        XCTAssertNil(try CustodyRefusal(parsing: Fixed.messageID + [6]).retryAfterS)
    }

    func testSummaryVector() throws {
        let ids = (0..<50).map { _ in Random.uuidV4() }
        let sv = try BundleIDList(bundleIDs: ids + ids.prefix(10))
        XCTAssertEqual(sv.bundleIDs.count, 50)
        XCTAssertEqual(sv.bundleIDs, ids.sorted { $0.lexicographicallyPrecedes($1) })
        XCTAssertEqual(sv.encoded.count, 2 + 50 * 16)
        XCTAssertEqual(try BundleIDList(parsing: sv.encoded), sv)
        XCTAssertEqual(try BundleIDList(parsing: [0, 0]).bundleIDs.count, 0)
        XCTAssertEqual(try TLVRecord(parsing: sv.frame(.request)).type, RoutingFrameType.request.rawValue)

        // Unsorted or duplicate IDs on the wire.
        var unsorted = sv.encoded
        unsorted.replaceSubrange(2..<18, with: sv.bundleIDs[1])
        XCTAssertThrowsWire(.notSortedUnique, try BundleIDList(parsing: unsorted))
        // Truncation and count mismatch.
        for n in 0..<sv.encoded.count { XCTAssertThrowsAnyWire(try BundleIDList(parsing: Array(sv.encoded.prefix(n)))) }
        XCTAssertThrowsAnyWire(try BundleIDList(parsing: sv.encoded + [0]))
        // The count is checked before anything is allocated.
        XCTAssertThrowsWire(.tooMany(what: "bundle IDs", count: 4001, limit: 4000), try BundleIDList(parsing: [0x0F, 0xA1]))
        XCTAssertThrowsWire(.tooMany(what: "bundle IDs", count: 65535, limit: 4000), try BundleIDList(parsing: [0xFF, 0xFF]))
        // At most 4000 on encode.
        XCTAssertThrowsAnyWire(try BundleIDList(bundleIDs: (0..<4001).map { i in [UInt8(i >> 8), UInt8(i & 0xFF)] + [UInt8](repeating: 0, count: 14) }))
        XCTAssertNoThrow(try BundleIDList(bundleIDs: (0..<4000).map { i in [UInt8(i >> 8), UInt8(i & 0xFF)] + [UInt8](repeating: 0, count: 14) }))
        XCTAssertThrowsAnyWire(try BundleIDList(bundleIDs: [[1, 2, 3]]))
    }

    func testAttachmentAnnouncement() throws {
        let users = [Fixed.sender.userID, Fixed.recipient.userID]
        let a = try AttachmentAnnouncement.signed(by: Fixed.hub, timestampMs: Fixed.createdMs, userIDs: users)
        XCTAssertEqual(a.encoded.count, 32 + 8 + 2 + 64 + 64)
        XCTAssertTrue(a.verifySignature())
        let parsed = try AttachmentAnnouncement(parsing: a.encoded).verified()
        XCTAssertEqual(parsed, a)
        XCTAssertEqual(parsed.userIDs, users)
        XCTAssertEqual(parsed.hubUserID, Fixed.hub.userID)

        // Every bit flip is either a parse error or a bad signature.
        for i in 0..<a.encoded.count {
            for bit in 0..<8 {
                var b = a.encoded
                b[i] ^= UInt8(1 << bit)
                if let p = try? AttachmentAnnouncement(parsing: b) { XCTAssertFalse(p.verifySignature(), "byte \(i) bit \(bit)") }
            }
        }
        for n in 0..<a.encoded.count { XCTAssertThrowsAnyWire(try AttachmentAnnouncement(parsing: Array(a.encoded.prefix(n)))) }
        var tooMany = [UInt8](repeating: 0, count: 40) + [0x01, 0xF5]   // 501
        tooMany += [UInt8](repeating: 0, count: 64)
        XCTAssertThrowsWire(.tooMany(what: "user IDs", count: 501, limit: 500), try AttachmentAnnouncement(parsing: tooMany))
        XCTAssertThrowsAnyWire(try AttachmentAnnouncement.signed(by: Fixed.hub, timestampMs: 1, userIDs: Array(repeating: Fixed.hub.userID, count: 501)))
        XCTAssertThrowsAnyWire(try AttachmentAnnouncement.signed(by: Fixed.hub, timestampMs: 1, userIDs: [[1]]))
        let empty = try AttachmentAnnouncement.signed(by: Fixed.hub, timestampMs: 1, userIDs: [])
        XCTAssertEqual(try AttachmentAnnouncement(parsing: empty.encoded).verified(), empty)
    }

    func testIdentityRunsTheSecureLink() throws {
        let a = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        let b = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        let (pa, pb) = try SecureLinkPair.establish(a, b)
        XCTAssertEqual(pa.signingKey, Fixed.hub.signingKey)
        XCTAssertEqual(pb.kxKey, Fixed.sender.kxKey)
        XCTAssertEqual(pb.role, .endpoint)
    }
}
