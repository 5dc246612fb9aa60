import XCTest
import Glibc
import YaokPluginKit
@testable import YaokTransportBLE

/// An identity with real randomness that can sign nothing: enough for the session paths that
/// end before a signature is checked. (The full handshake runs in Tests/vmlab/ble-test.sh.)
private struct UnsigningIdentity: LinkIdentity {
    let signingKey = [UInt8](repeating: 1, count: 32)
    let kxKey = [UInt8](repeating: 2, count: 32)
    struct CannotSign: Error {}
    func sign(_ message: [UInt8]) throws -> [UInt8] { throw CannotSign() }
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool { false }
    func randomBytes(_ count: Int) -> [UInt8] {
        var rng = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }
}

final class BLELinkSessionTests: XCTestCase {
    private func session() -> BLELinkSession {
        BLELinkSession(id: 7, remote: "00:AA:01:01:00:01", identity: UnsigningIdentity(), clock: { 0 },
                       reassemblyTimeoutNanoseconds: 1_000_000_000)
    }

    func testSubscribeSendsOneChallenge() throws {
        let s = session()
        let out = s.notificationsEnabled()
        XCTAssertEqual(out.framesToSend.count, 1)
        let record = try TLVRecord(parsing: out.framesToSend[0])
        XCTAssertEqual(FrameType(rawValue: record.type), .linkChallenge)
        XCTAssertEqual(record.value.count, 32)
        XCTAssertEqual(s.state, .handshaking)
        XCTAssertTrue(s.notificationsEnabled().framesToSend.isEmpty, "a second subscribe must not re-challenge")
    }

    func testMalformedProofDropsTheLink() throws {
        let s = session()
        _ = s.notificationsEnabled()
        let proof = TLVRecord(.linkProof, value: [UInt8](repeating: 0, count: 10)).encoded
        let chunks = try Chunker.split(proof, chunkSize: 20)
        var out = BLELinkSession.Output()
        for c in chunks { out = s.received(chunk: c, now: 0) }
        XCTAssertNotNil(out.drop)
        XCTAssertTrue(out.drop?.contains("proof must be") ?? false, out.drop ?? "")
        XCTAssertNil(out.authenticated)
        XCTAssertNotEqual(s.state, .up)
    }

    func testDataBeforeHandshakeIsRefused() throws {
        let s = session()
        _ = s.notificationsEnabled()
        let data = TLVRecord(type: 0x10, value: [1, 2, 3]).encoded
        let out = s.received(chunk: try Chunker.split(data, chunkSize: 20)[0], now: 0)
        XCTAssertTrue(out.framesReceived.isEmpty)
        XCTAssertNotNil(out.drop)
    }

    func testBadChunkDropsTheLink() {
        let out = session().received(chunk: [0, 5], now: 0)
        XCTAssertTrue(out.drop?.contains("shorter than its 4-byte header") ?? false, out.drop ?? "")
    }

    func testCentralThatNeverAuthenticatesIsOverdue() {
        let s = BLELinkSession(id: 1, remote: "x", identity: UnsigningIdentity(), clock: { 0 },
                               reassemblyTimeoutNanoseconds: 1_000_000_000, connectedAt: 10_000_000_000)
        XCTAssertNil(s.overdue(now: 39_000_000_000, handshakeTimeoutNanoseconds: 30_000_000_000))
        XCTAssertEqual(s.overdue(now: 41_000_000_000, handshakeTimeoutNanoseconds: 30_000_000_000),
                       "no completed link handshake within 30 s")
        _ = s.notificationsEnabled()
        XCTAssertNotNil(s.overdue(now: 41_000_000_000, handshakeTimeoutNanoseconds: 30_000_000_000))
        s.close()
        XCTAssertNil(s.overdue(now: 41_000_000_000, handshakeTimeoutNanoseconds: 30_000_000_000), "closed sessions are not dropped twice")
    }

    func testPartialFrameExpires() throws {
        let s = session()
        let chunks = try Chunker.split([UInt8](repeating: 3, count: 50), chunkSize: 20)
        XCTAssertNil(s.received(chunk: chunks[0], now: 0).drop)
        XCTAssertFalse(s.expire(now: 500_000_000))
        XCTAssertTrue(s.expire(now: 2_000_000_000))
    }
}
