import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import enum YaokPluginKit.Hex
import RelayTestSupport

final class RelayHandshakeAndRegistrationTests: XCTestCase {
    var relay: RelayHarness!

    override func setUpWithError() throws { relay = try RelayHarness() }
    override func tearDown() { relay.tearDown() }

    func testHandshakeWithPinnedKeyConnects() throws {
        let c = relay.client()
        try c.connect(timeout: 10)
        XCTAssertTrue(c.isConnected)
        XCTAssertEqual(relay.server.metricsSnapshot().handshakes, 1)
    }

    func testWrongPinnedKeyIsRefusedWithClearError() throws {
        let impostorPin = SigningKeyPair.generate().publicKey
        let c = relay.client(pin: impostorPin)
        XCTAssertThrowsError(try c.connect(timeout: 10)) { error in
            guard case RelayProtocolError.relayKeyMismatch(let expected, let got) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(expected, impostorPin)
            XCTAssertEqual(got, relay.identity.signingKey)
            let text = String(describing: error)
            XCTAssertEqual(text, "relay key mismatch: expected \(Hex.encode(impostorPin.prefix(4)))…, got \(Hex.encode(relay.identity.signingKey.prefix(4)))…")
        }
        XCTAssertFalse(c.isConnected)
    }

    func testRegistrationAcceptedAndRetransmitIsIdempotent() throws {
        let user = Identity.generate()
        let c = relay.client()
        try c.connect()
        let reg = try relay.registration(user, on: c)
        XCTAssertEqual(try c.registerAndWait([reg]).map(\.status), [.accepted])
        // The same registration again on the same session (a lost REGISTERED) is accepted again.
        XCTAssertEqual(try c.registerAndWait([reg]).map(\.status), [.accepted])
        XCTAssertEqual(try c.registerAndWait([reg]).first?.userID, user.userID)
    }

    func testForgedUnsignedReplayedAndStaleRegistrationsAreRefused() throws {
        let user = Identity.generate()
        let attacker = Identity.generate()
        let c = relay.client()
        try c.connect()

        // Forged: claims the user's key, signed by someone else.
        let channel = try XCTUnwrap(c.channelBinding)
        let forged = try Registration.make(kind: .owner, relaySigningKey: relay.identity.signingKey, userSigningKey: user.signingKey,
                                           timestampMs: nowMs(), binding: channel.bytes, untilMs: 0, sign: attacker.sign)
        // Unsigned: zero signature.
        let good = try relay.registration(user, on: c)
        let unsigned = Registration(kind: .owner, userSigningKey: user.signingKey, timestampMs: good.timestampMs, nonce: good.nonce,
                                    binding: channel.bytes, untilMs: 0, signature: [UInt8](repeating: 0, count: 64))
        // Signed for another relay.
        let otherRelay = try Registration.owner(user, relaySigningKey: SigningKeyPair.generate().publicKey, channel: channel, timestampMs: nowMs())
        // Stale: six minutes old; and six minutes in the future.
        let stale = try relay.registration(user, on: c, timestampMs: nowMs() - 6 * 60_000)
        let future = try relay.registration(user, on: c, timestampMs: nowMs() + 6 * 60_000)
        let results = try c.registerAndWait([forged, unsigned, otherRelay, stale, future])
        XCTAssertEqual(results.map(\.status), [.badSignature, .badSignature, .badSignature, .staleTimestamp, .staleTimestamp])

        // An owner registration accepted on one session is refused on another: it signs the
        // first session's channel binding.
        XCTAssertEqual(try c.registerAndWait([good]).map(\.status), [.accepted])
        let other = relay.client()
        try other.connect()
        XCTAssertEqual(try other.registerAndWait([good]).map(\.status), [.wrongChannel])
        XCTAssertEqual(relay.server.metricsSnapshot().registrationsRefused, 6)
    }

    func testUnregisteredSessionCannotSendOrPoll() throws {
        let c = relay.client()
        try c.connect()
        let bundle = try messageBundle(from: Identity.generate(), to: Identity.generate())
        XCTAssertThrowsError(try c.sendAndWait(bundle: bundle)) { error in
            guard case RelayProtocolError.refused(let notice) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(notice.code, .notRegistered)
        }
        let mark = c.currentSeq()
        try c.poll()
        let notice = try c.waitFor("ERROR", timeout: 5, after: mark) { event -> RelayErrorNotice? in
            if case .relayError(let n) = event { return n }
            return nil
        }
        XCTAssertEqual(notice.code, .notRegistered)
    }
}
