import XCTest
@testable import YaokMeshPlugin
import YaokTesting

final class BeaconTests: XCTestCase {
    let identity = TestLinkIdentity(seed: 7)
    let now: Int64 = 1_795_000_000_000

    func beacon(port: UInt16 = 7813, at ts: Int64? = nil) -> Beacon {
        Beacon(signingKey: identity.signingKey, kxKey: identity.kxKey, tcpPort: port, timestampMs: ts ?? now)
    }

    func verify(_ sig: [UInt8], _ msg: [UInt8], _ key: [UInt8]) -> Bool { identity.verify(signature: sig, of: msg, by: key) }

    func testByteLayoutMatchesTheDocumentedOffsets() throws {
        let bytes = try beacon(port: 0x1E85, at: 0x0102_0304_0506_0708).encoded(sign: identity.sign)
        XCTAssertEqual(bytes.count, 143)
        XCTAssertEqual(Array(bytes[0..<4]), Array("YKMB".utf8))
        XCTAssertEqual(bytes[4], 1)
        XCTAssertEqual(Array(bytes[5..<37]), identity.signingKey)
        XCTAssertEqual(Array(bytes[37..<69]), identity.kxKey)
        XCTAssertEqual(Array(bytes[69..<71]), [0x1E, 0x85])
        XCTAssertEqual(Array(bytes[71..<79]), [1, 2, 3, 4, 5, 6, 7, 8])
        XCTAssertEqual(Array(bytes[79...]), try identity.sign(Array(bytes[0..<79])), "the signature covers every byte before it")
    }

    func testRoundTrip() throws {
        let b = beacon()
        let parsed = try Beacon.parse(try b.encoded(sign: identity.sign), nowMs: now + 1_000, verify: verify)
        XCTAssertEqual(parsed, b)
    }

    func testEveryRefusalIsSpecific() throws {
        let good = try beacon().encoded(sign: identity.sign)
        XCTAssertThrowsError(try Beacon.parse(Array(good.dropLast()), nowMs: now, verify: verify)) {
            XCTAssertEqual($0 as? BeaconError, .wrongLength(142))
        }
        var magic = good
        magic[0] = UInt8(ascii: "X")
        XCTAssertThrowsError(try Beacon.parse(magic, nowMs: now, verify: verify)) { XCTAssertEqual($0 as? BeaconError, .badMagic) }
        var version = good
        version[4] = 2
        XCTAssertThrowsError(try Beacon.parse(version, nowMs: now, verify: verify)) { XCTAssertEqual($0 as? BeaconError, .unsupportedVersion(2)) }
        var tampered = good
        tampered[70] ^= 1 // the port: signed, so the signature no longer matches
        XCTAssertThrowsError(try Beacon.parse(tampered, nowMs: now, verify: verify)) { XCTAssertEqual($0 as? BeaconError, .badSignature) }
        let zero = try beacon(port: 0).encoded(sign: identity.sign)
        XCTAssertThrowsError(try Beacon.parse(zero, nowMs: now, verify: verify)) { XCTAssertEqual($0 as? BeaconError, .zeroPort) }
    }

    func testTimestampsMoreThanSevenDaysAwayAreStaleEitherWay() throws {
        let old = try beacon(at: now - Beacon.maxClockSkewMs - 1).encoded(sign: identity.sign)
        XCTAssertThrowsError(try Beacon.parse(old, nowMs: now, verify: verify)) {
            XCTAssertEqual($0 as? BeaconError, .stale(skewMs: -Beacon.maxClockSkewMs - 1))
        }
        let future = try beacon(at: now + Beacon.maxClockSkewMs + 1).encoded(sign: identity.sign)
        XCTAssertThrowsError(try Beacon.parse(future, nowMs: now, verify: verify))
        // A hub whose clock is three days off is still heard.
        XCTAssertNoThrow(try Beacon.parse(try beacon(at: now - 3 * 86_400_000).encoded(sign: identity.sign), nowMs: now, verify: verify))
        let extreme = try beacon(at: .min).encoded(sign: identity.sign)
        XCTAssertThrowsError(try Beacon.parse(extreme, nowMs: now, verify: verify), "no overflow trap on extreme timestamps")
    }

    func testStaleBeaconsAreRefusedBeforeAnySignatureCheck() throws {
        let old = try beacon(at: now - Beacon.maxClockSkewMs - 3_600_000).encoded(sign: identity.sign)
        var verified = false
        XCTAssertThrowsError(try Beacon.parse(old, nowMs: now) { _, _, _ in verified = true; return true })
        XCTAssertFalse(verified)
    }

    func testRandomInputNeverTraps() {
        var rng = SystemRandomNumberGenerator()
        for i in 0..<5_000 {
            let count = i % 3 == 0 ? 143 : Int.random(in: 0...300, using: &rng)
            var bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if i % 2 == 0 && count >= 5 { bytes.replaceSubrange(0..<5, with: Array("YKMB".utf8) + [1]) }
            XCTAssertThrowsError(try Beacon.parse(bytes, nowMs: now, verify: verify))
        }
    }
}
