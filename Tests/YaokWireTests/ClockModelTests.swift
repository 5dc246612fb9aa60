import XCTest
import YaokCrypto
import YaokPluginKit
@testable import YaokWire

/// The time model of Docs/protocol.md §2.2 and §3: hop header versions, the bundle's age, the
/// clock frame, and every lifetime rule against the attacks the threats table names.
final class ClockModelTests: XCTestCase {
    private let day: Int64 = 86_400_000
    private let t0: Int64 = 1_767_225_600_000

    private func envelope(createdMs: Int64, ttlMs: Int64 = 7 * 86_400_000) throws -> Envelope {
        try Envelope.sealMessage(plaintext: Array("ya ok".utf8), from: Fixed.sender, toSigningKey: Fixed.recipient.signingKey,
                                 recipientKXKey: Fixed.recipient.kxKey, createdMs: createdMs, ttlMs: ttlMs)
    }

    // MARK: Hop header

    func testBothVersionsParseAndEncodeAndNameTheSameBundle() throws {
        let e = try envelope(createdMs: t0)
        let v1 = Bundle(hop: .origin(), envelope: e)
        let v2 = v1.withAge(12_345)
        XCTAssertEqual(v1.encoded.count - e.encoded.count, HopHeader.lengthV1)
        XCTAssertEqual(v2.encoded.count - e.encoded.count, HopHeader.lengthV2)
        XCTAssertEqual(v2.encoded.first, 2)
        XCTAssertEqual(try Bundle(parsing: v1.encoded), v1)
        XCTAssertEqual(try Bundle(parsing: v2.encoded), v2)
        XCTAssertNil(try Bundle(parsing: v1.encoded).hop.ageMs)
        XCTAssertEqual(try Bundle(parsing: v2.encoded).hop.ageMs, 12_345)
        // Raw-byte readers skip the header by its version.
        XCTAssertEqual(BundleID.of(bundle: v1.encoded), e.bundleID)
        XCTAssertEqual(BundleID.of(bundle: v2.encoded), e.bundleID)
        XCTAssertTrue(Bundle.sameEnvelope(v1.encoded, v2.encoded))
        let other = Bundle(envelope: try envelope(createdMs: t0)).withAge(12_345)
        XCTAssertFalse(Bundle.sameEnvelope(v2.encoded, other.encoded))
    }

    func testUnknownVersionsAndTruncatedHeadersAreRefused() throws {
        let bytes = Bundle(envelope: try envelope(createdMs: t0)).withAge(1).encoded
        for v: UInt8 in [0, 3, 0xFF] {
            var b = bytes
            b[0] = v
            XCTAssertThrowsWire(.wrongVersion(what: "hop header", version: Int(v)), try Bundle(parsing: b))
            XCTAssertNil(BundleID.of(bundle: b))
        }
        XCTAssertThrowsAnyWire(try Bundle(parsing: Array(bytes.prefix(38))))
        XCTAssertThrowsAnyWire(try HopHeader(parsing: Array(bytes.prefix(38))), "a version-2 header needs its 4 age bytes")
    }

    func testForwardingSetsTheAgeOrLeavesItOut() throws {
        let b = Bundle(envelope: try envelope(createdMs: t0)).withAge(1_000)
        let on = try b.forwarded(by: Fixed.hub.userID, ageMs: 61_000)
        XCTAssertEqual(on.hop.ageMs, 61_000)
        XCTAssertEqual(on.hop.hopCount, 1)
        XCTAssertEqual(on.hop.previousHop, Fixed.hub.userID)
        let toOldPeer = try b.forwarded(by: Fixed.hub.userID, ageMs: nil)
        XCTAssertEqual(toOldPeer.encoded.first, 1, "a peer that never sent a clock frame gets version 1")
        XCTAssertEqual(HopHeader.clampedAge(-5), 0)
        XCTAssertEqual(HopHeader.clampedAge(Int64.max), UInt32.max)
    }

    // MARK: Clock frame

    func testClockFrameRoundTripsAndRefusesWhatItDoesNotKnow() throws {
        let f = ClockFrame(source: .hubs, timeMs: t0)
        XCTAssertEqual(try ClockFrame(parsing: f.encoded), f)
        XCTAssertEqual(f.encoded.count, ClockFrame.length)
        XCTAssertThrowsAnyWire(try ClockFrame(parsing: Array(f.encoded.prefix(9))))
        XCTAssertThrowsAnyWire(try ClockFrame(parsing: f.encoded + [0]))
        var wrongVersion = f.encoded
        wrongVersion[0] = 2
        XCTAssertThrowsAnyWire(try ClockFrame(parsing: wrongVersion))
        var unknownSource = f.encoded
        unknownSource[1] = 9
        XCTAssertThrowsAnyWire(try ClockFrame(parsing: unknownSource))
        var huge = f.encoded
        huge[2] = 0x80
        XCTAssertThrowsAnyWire(try ClockFrame(parsing: huge), "a time above 2^63-1")
        XCTAssertTrue(ClockFrame.Source.relay.makesTimeKnown)
        XCTAssertFalse(ClockFrame.Source.phones.makesTimeKnown, "phone keys are free: a vote never makes time known")
        XCTAssertFalse(ClockFrame.Source.none.makesTimeKnown)
    }

    // MARK: Lifetime rules (Docs/protocol.md §2.2 and the threats table)

    private let rules = EnvelopeLifetime()

    func testAnImmortalEnvelopeIsRefusedWhateverTheClock() throws {
        var e = try envelope(createdMs: t0)
        e = try Envelope.sealMessage(plaintext: [1], from: Fixed.sender, toSigningKey: Fixed.recipient.signingKey,
                                     recipientKXKey: Fixed.recipient.kxKey, createdMs: t0, ttlMs: Int64(1) << 62)
        for t in [nil, t0, t0 - 30 * day] as [Int64?] {
            XCTAssertThrowsError(try rules.judge(e, claimedAgeMs: 0, trueTimeMs: t)) {
                guard case .lifetimeTooLong? = $0 as? EnvelopeLifetime.Violation else { return XCTFail("\($0)") }
            }
        }
    }

    func testWithoutTrueTimeTheAgeDecidesAndNothingLivesPastTheMaximumAtOneNode() throws {
        // A hub two days behind, or thirty days ahead, that knows no true time: it judges by age.
        let e = try envelope(createdMs: t0)
        XCTAssertEqual(try rules.judge(e, claimedAgeMs: 0, trueTimeMs: nil).remainingMs, 7 * day)
        XCTAssertEqual(try rules.judge(e, claimedAgeMs: UInt32(day), trueTimeMs: nil).remainingMs, 6 * day)
        XCTAssertThrowsError(try rules.judge(e, claimedAgeMs: UInt32(7 * day), trueTimeMs: nil), "an age of a whole lifetime is expired")
        XCTAssertThrowsError(try rules.judge(e, claimedAgeMs: UInt32.max, trueTimeMs: nil))
        // Dated 30 days ahead (a lie, or a phone's wrong clock): at most one lifetime here, no more.
        let ahead = try envelope(createdMs: t0 + 30 * day)
        XCTAssertEqual(try rules.judge(ahead, claimedAgeMs: 0, trueTimeMs: nil).remainingMs, 7 * day)
        // A version-1 header gives no age: taken as new, still at most one lifetime.
        XCTAssertEqual(try rules.judge(e, claimedAgeMs: nil, trueTimeMs: nil).remainingMs, 7 * day)
    }

    func testWithTrueTimeAReplayPastItsExpiryOrAFarFutureDateIsRefused() throws {
        let now = t0 + 10 * day
        // Captured a week and a half ago, replayed with its age reset: its expiry has passed.
        let old = try envelope(createdMs: t0)
        XCTAssertThrowsError(try rules.judge(old, claimedAgeMs: 0, trueTimeMs: now)) { XCTAssertEqual($0 as? EnvelopeLifetime.Violation, .expired(expiresMs: old.expiresMs)) }
        // Six and a half days old, age claimed 0: it keeps only what its expiry leaves.
        let aging = try envelope(createdMs: now - 6 * day - day / 2)
        XCTAssertEqual(try rules.judge(aging, claimedAgeMs: 0, trueTimeMs: now).remainingMs, day / 2)
        // Dated more than a lifetime ahead: refused; three days ahead (a phone's clock): taken.
        let far = try envelope(createdMs: now + 7 * day + 1)
        XCTAssertThrowsError(try rules.judge(far, claimedAgeMs: 0, trueTimeMs: now)) {
            guard case .createdInFuture? = $0 as? EnvelopeLifetime.Violation else { return XCTFail("\($0)") }
        }
        let phoneAhead = try envelope(createdMs: now + 3 * day)
        XCTAssertEqual(try rules.judge(phoneAhead, claimedAgeMs: 0, trueTimeMs: now).remainingMs, 7 * day)
        // A phone three days behind: its message is judged by its expiry, four days left.
        let phoneBehind = try envelope(createdMs: now - 3 * day)
        XCTAssertEqual(try rules.judge(phoneBehind, claimedAgeMs: 0, trueTimeMs: now).remainingMs, 4 * day)
        // A version-1 header: age = T − created.
        XCTAssertEqual(try rules.judge(phoneBehind, claimedAgeMs: nil, trueTimeMs: now).ageMs, 3 * day)
        XCTAssertEqual(try rules.judge(phoneAhead, claimedAgeMs: nil, trueTimeMs: now).ageMs, 0)
    }

    func testTheRemainingLifeIsAlwaysPositiveAndAtMostTheMaximum() throws {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let created = t0 + Int64.random(in: -60 * day...60 * day, using: &rng)
            let e = try envelope(createdMs: created, ttlMs: Int64.random(in: 0...8 * day, using: &rng))
            let age: UInt32? = Bool.random(using: &rng) ? nil : UInt32.random(in: 0...UInt32.max, using: &rng)
            let t: Int64? = Bool.random(using: &rng) ? nil : t0 + Int64.random(in: -60 * day...60 * day, using: &rng)
            guard let j = try? rules.judge(e, claimedAgeMs: age, trueTimeMs: t) else { continue }
            XCTAssertGreaterThan(j.remainingMs, 0)
            XCTAssertLessThanOrEqual(j.remainingMs, EnvelopeLifetime.protocolMaxTTLMs)
            if let t { XCTAssertLessThanOrEqual(t + j.remainingMs, e.expiresMs, "never past its expiry where true time is known") }
        }
    }

    func testADeploymentsLowerMaximumBoundsTheAgeRuleToo() throws {
        let oneHour = EnvelopeLifetime(maxTTLMs: 3_600_000)
        XCTAssertThrowsError(try oneHour.judge(try envelope(createdMs: t0), claimedAgeMs: 0, trueTimeMs: nil))
        let short = try envelope(createdMs: t0, ttlMs: 3_600_000)
        XCTAssertEqual(try oneHour.judge(short, claimedAgeMs: 600_000, trueTimeMs: nil).remainingMs, 3_000_000)
    }
}
