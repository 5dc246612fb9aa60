import XCTest
import Glibc
import YaokPluginKit
@testable import YaokBLEPlugin
@testable import YaokBluetooth
import YaokTesting

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
    /// Feeds `frame` to the session as RX chunks; returns the last output.
    private func deliver(_ frame: [UInt8], to s: BLELinkSession) throws -> BLELinkSession.Output {
        var out = BLELinkSession.Output()
        for c in try Chunker.split(frame, chunkSize: 20) { out = s.received(chunk: c, now: 0) }
        return out
    }

    /// Runs `phone`'s side of the secure link handshake against the session; returns the hub's last output.
    private func handshake(_ phone: SecureLink, with s: BLELinkSession) throws -> BLELinkSession.Output {
        var last = try deliver(phone.hello(), to: s)
        var queue = last.framesToSend
        while let frame = queue.first {
            queue.removeFirst()
            for case .send(let reply) in try phone.receive(TLVRecord(parsing: frame)) {
                last = try deliver(reply, to: s)
                queue += last.framesToSend
            }
        }
        return last
    }

    private func phone(_ seed: UInt8) -> SecureLink {
        SecureLink(identity: TestLinkIdentity(seed: seed), role: .endpoint, isInitiator: true, channel: .stream)
    }

    func testReconnectOverTheSameATTChannelRestartsTheHandshake() throws {
        let s = BLELinkSession(id: 3, remote: "x", identity: TestLinkIdentity(seed: 1),
                               reassemblyTimeoutNanoseconds: 1_000_000_000)
        XCTAssertTrue(s.notificationsEnabled().framesToSend.isEmpty, "the hub notifies nothing before the phone's hello")
        let first = phone(2)
        let up = try handshake(first, with: s)
        XCTAssertEqual(up.authenticated?.signingKey, TestLinkIdentity(seed: 2).signingKey)
        XCTAssertFalse(up.restarted)
        XCTAssertEqual(s.state, .up)
        XCTAssertTrue(first.isEstablished)
        let data = TLVRecord(type: 0x01, value: [1, 2, 3]).encoded
        XCTAssertEqual(try deliver(first.seal(data), to: s).framesReceived, [data])
        // The same data in clear is refused: after the handshake only sealed frames count.
        XCTAssertNotNil(try deliver(data, to: s).drop)

        // A second phone process on the same LE link: subscribing again changes nothing, its
        // hello restarts the handshake (old link down, new identity brings it up).
        let s2 = BLELinkSession(id: 4, remote: "x", identity: TestLinkIdentity(seed: 1),
                                reassemblyTimeoutNanoseconds: 1_000_000_000)
        _ = try handshake(phone(2), with: s2)
        XCTAssertTrue(s2.notificationsEnabled().framesToSend.isEmpty)
        let second = phone(4)
        let restart = try deliver(second.hello(), to: s2)
        XCTAssertTrue(restart.restarted)
        XCTAssertNil(restart.authenticated)
        XCTAssertTrue(restart.framesReceived.isEmpty, "a hello is not data")
        XCTAssertEqual(restart.framesToSend.map { try? TLVRecord(parsing: $0).type }, [FrameType.linkReply.rawValue])
        XCTAssertEqual(s2.state, .handshaking)
        var last = BLELinkSession.Output()
        for case .send(let reply) in try second.receive(TLVRecord(parsing: restart.framesToSend[0])) { last = try deliver(reply, to: s2) }
        XCTAssertEqual(last.authenticated?.signingKey, TestLinkIdentity(seed: 4).signingKey)
        XCTAssertEqual(s2.state, .up)
        XCTAssertTrue(second.isEstablished)
    }

    private func session() -> BLELinkSession {
        BLELinkSession(id: 7, remote: "00:AA:01:01:00:01", identity: UnsigningIdentity(),
                       reassemblyTimeoutNanoseconds: 1_000_000_000)
    }

    /// The hub notifies nothing until the phone, subscribed and acknowledged, sends its hello:
    /// a stack that ignores notifications until its subscription is confirmed (Google's Bumble
    /// is one) misses anything notified before the hub answers the CCCD write.
    /// The hub answers the phone's identity (Docs/protocol.md §5, "The handshake's outcome"):
    /// accepted once the link is up; a role this link does not take is refused, with the
    /// reason, in the same output that drops the link, so the phone never waits for a timeout.
    func testThePhoneLearnsWhetherTheHubTookIt() throws {
        let s = BLELinkSession(id: 5, remote: "x", identity: TestLinkIdentity(seed: 1), reassemblyTimeoutNanoseconds: 1_000_000_000)
        let taken = phone(2)
        let up = try handshake(taken, with: s)
        XCTAssertNotNil(up.authenticated)
        XCTAssertEqual(up.framesToSend.count, 1, "the sealed answer")
        XCTAssertTrue(taken.accepted)

        let hubsOnly = BLELinkSession(id: 6, remote: "x", identity: TestLinkIdentity(seed: 1),
                                      reassemblyTimeoutNanoseconds: 1_000_000_000, acceptedRoles: [.hub])
        let refusedPhone = phone(3)
        guard case .send(let identity)? = try refusedPhone.receive(TLVRecord(parsing: deliver(refusedPhone.hello(), to: hubsOnly).framesToSend[0])).first else {
            return XCTFail("no identity")
        }
        let out = try deliver(identity, to: hubsOnly)
        XCTAssertNil(out.authenticated)
        XCTAssertEqual(out.drop, "the central proved role endpoint, which this link does not accept")
        XCTAssertEqual(out.framesToSend.count, 1)
        XCTAssertEqual(try refusedPhone.receive(TLVRecord(parsing: out.framesToSend[0])),
                       [.refused("the peer refused the link (role not admitted): this BLE transport takes role hub only")])
    }

    func testSubscribeSendsNothing() throws {
        let s = session()
        XCTAssertTrue(s.notificationsEnabled().framesToSend.isEmpty)
        XCTAssertEqual(s.state, .handshaking)
        XCTAssertTrue(s.notificationsEnabled().framesToSend.isEmpty)
    }

    func testAVersionOnePeerIsRefusedWithAReason() throws {
        let s = session()
        _ = s.notificationsEnabled()
        let challenge = TLVRecord(type: 0x10, value: [UInt8](repeating: 0, count: 32)).encoded
        var out = BLELinkSession.Output()
        for c in try Chunker.split(challenge, chunkSize: 20) { out = s.received(chunk: c, now: 0) }
        XCTAssertTrue(out.drop?.contains("link version 1") ?? false, out.drop ?? "")
        XCTAssertEqual(out.framesToSend, [SecureLink.versionRecord()], "it is told the version we speak before the drop")
        XCTAssertNil(out.authenticated)
        XCTAssertNotEqual(s.state, .up)
    }

    func testDataBeforeHandshakeIsRefused() throws {
        let s = session()
        _ = s.notificationsEnabled()
        let data = TLVRecord(type: 0x01, value: [1, 2, 3]).encoded
        let out = s.received(chunk: try Chunker.split(data, chunkSize: 20)[0], now: 0)
        XCTAssertTrue(out.framesReceived.isEmpty)
        XCTAssertNotNil(out.drop)
    }

    func testBadChunkDropsTheLink() {
        let out = session().received(chunk: [0, 5], now: 0)
        XCTAssertTrue(out.drop?.contains("shorter than its 4-byte header") ?? false, out.drop ?? "")
    }

    func testCentralThatNeverAuthenticatesIsOverdue() {
        let s = BLELinkSession(id: 1, remote: "x", identity: UnsigningIdentity(),
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
