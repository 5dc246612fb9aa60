import XCTest
import YaokCrypto
@testable import YaokLinkSecurity
import YaokPluginKit
@testable import YaokWire

/// Runs a handshake between two in-memory ends and returns what each learned of the other.
enum SecureLinkPair {
    static func establish(_ initiator: SecureLink, _ responder: SecureLink) throws -> (AuthenticatedPeer, AuthenticatedPeer) {
        var toResponder = [try initiator.hello()]
        var toInitiator: [[UInt8]] = []
        var a: AuthenticatedPeer?, b: AuthenticatedPeer?
        for _ in 0..<4 where a == nil || b == nil {
            for bytes in toResponder {
                for out in try responder.receive(TLVRecord(parsing: bytes)) {
                    if case .send(let r) = out { toInitiator.append(r) }
                    if case .established(let p) = out { b = p }
                }
            }
            toResponder = []
            for bytes in toInitiator {
                for out in try initiator.receive(TLVRecord(parsing: bytes)) {
                    if case .send(let r) = out { toResponder.append(r) }
                    if case .established(let p) = out { a = p }
                }
            }
            toInitiator = []
        }
        guard let a, let b else { throw SecureLinkError.unexpected("handshake did not complete") }
        return (a, b)
    }
}

final class SecureLinkTests: XCTestCase {
    /// The published Noise vector for Noise_NN_25519_ChaChaPoly_SHA256 (snow's vector file,
    /// the same vectors cacophony uses): our Noise core is the standard one, byte for byte.
    func testNoiseCoreMatchesThePublishedNNVector() throws {
        let prologue = Array("There is no right and wrong. There's only fun and boring.".utf8)
        var i = NoiseNN(isInitiator: true, prologue: prologue,
                        ephemeralSecret: hex("ba743ce40b65ad7ec0700dc2e57de4791022a8f42cd46517c6689c5c812b3b36"))
        var r = NoiseNN(isInitiator: false, prologue: prologue,
                        ephemeralSecret: hex("d5cb9c3d9df2b6263f292f59099680ab2b523cf02b43a4c534b1fa94f9a80ed8"))
        let payloads = [hex("d369dc8436b80ad2936b4179ef262a0d174c06e3d452de5f22a7ca0326baaac7"),
                        hex("87f4ce9acdcfe73e88f0d2b7e8b6009f07c5a42b3412909c1b7ce407a763ebd1"),
                        hex("bdc326451b8af9b6b82a2054643878d9eeaea4845c6b1e9ba616b2723c2ef272"),
                        hex("a783aa12cefa403d1dff9d6ac924f860a15d1ba21c2c4976f8fa88d76e590fef")]
        let m1 = try i.writeFirst(payload: payloads[0])
        XCTAssertEqual(Hex.encode(m1), "479a148ee78e18278f7716338574086a12bf8d90cc54c6c88ae6a4275dbd1478"
                       + "d369dc8436b80ad2936b4179ef262a0d174c06e3d452de5f22a7ca0326baaac7")
        XCTAssertEqual(try r.readFirst(m1), payloads[0])
        let m2 = try r.writeSecond { _ in payloads[1] }
        XCTAssertEqual(Hex.encode(m2), "5f1bc611a449717c2fc7c33a0f3976beae914c336d2a761c2f6e1ee2ab721f7c"
                       + "166608582f25b34bf5ebe478049971b64e5982d8b546b1cfa58fae828b7c8137562fdec5808f41fadeeee43013019277")
        XCTAssertEqual(try i.readSecond(m2).payload, payloads[1])
        XCTAssertEqual(i.handshakeHash, r.handshakeHash)
        var (iSend, _) = i.split()
        var (rSend, _) = r.split()
        XCTAssertEqual(Hex.encode(try iSend.encrypt(ad: [], payloads[2])),
                       "15f337bd32ddb96a17765a9499a4eb24b757d59c78d5366fdd56a2eab7eed11a0b6d4ed2947c0bf83d9d625ab90ee60b")
        XCTAssertEqual(Hex.encode(try rSend.encrypt(ad: [], payloads[3])),
                       "6b676682c308c230a602d1997ff9e94b815dbc497346a4144fc4290021a2dbfc bee618798a8eb5042562a637927d4e98"
                        .replacingOccurrences(of: " ", with: ""))
    }

    func testFramesAreSealedAndRepliesRefused() throws {
        let phone = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        let hub = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        _ = try SecureLinkPair.establish(phone, hub)
        let ack = CustodyAck(bundleID: [UInt8](repeating: 7, count: 16)).frame
        let sealed = try hub.seal(ack)
        // Nothing of the frame is visible: the bundle ID does not appear in the sealed bytes.
        XCTAssertNil(Hex.encode(sealed).range(of: Hex.encode([UInt8](repeating: 7, count: 16))))
        XCTAssertEqual(try phone.receive(TLVRecord(parsing: sealed)), [.frame(ack)])
        // Replayed: refused.
        XCTAssertThrowsError(try phone.receive(TLVRecord(parsing: sealed))) { XCTAssertEqual($0 as? SecureLinkError, .replayed(counter: 0)) }
        // Reflected back to its sender (other direction's key): refused.
        XCTAssertThrowsError(try hub.receive(TLVRecord(parsing: try hub.seal(ack)))) { XCTAssertEqual($0 as? SecureLinkError, .decryptionFailed) }
        // Altered: refused.
        var altered = try hub.seal(ack)
        altered[altered.count - 20] ^= 1
        XCTAssertThrowsError(try phone.receive(TLVRecord(parsing: altered))) { XCTAssertEqual($0 as? SecureLinkError, .decryptionFailed) }
        // A frame in clear after the handshake (a spoofed custody ack or link close): refused.
        XCTAssertThrowsError(try phone.receive(TLVRecord(.linkClose, value: [])))
        XCTAssertThrowsError(try phone.receive(TLVRecord(parsing: ack)))
        // Reordering inside the window is fine; each counter once.
        let s3 = try hub.seal(ack), s4 = try hub.seal(ack)
        XCTAssertEqual(try phone.receive(TLVRecord(parsing: s4)), [.frame(ack)])
        XCTAssertEqual(try phone.receive(TLVRecord(parsing: s3)), [.frame(ack)])
    }

    /// A man in the middle that relays another session's reply or identity gets a refusal:
    /// every proof signs a hash of this session's two ephemeral keys.
    func testARelayedProofFailsInAnotherSession() throws {
        let victim = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        let hub = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        let attacker = SecureLink(identity: Fixed.recipient, role: .endpoint, isInitiator: true, channel: .stream)
        // The attacker opens its own session to the hub and gets the hub's reply ...
        let hubReply = try hub.receive(TLVRecord(parsing: attacker.hello()))
        guard case .send(let reply)? = hubReply.first else { return XCTFail("no reply") }
        // ... and passes it to the victim, whose hello had another ephemeral key.
        _ = try victim.hello()
        XCTAssertThrowsError(try victim.receive(TLVRecord(parsing: reply)))
        // The other way: the victim's identity frame sealed for session A is useless in session B.
        let a = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        let hubA = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        guard case .send(let replyA)? = try hubA.receive(TLVRecord(parsing: a.hello())).first,
              case .send(let identityA)? = try a.receive(TLVRecord(parsing: replyA)).first else { return XCTFail("no handshake") }
        let hubB = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        let b = SecureLink(identity: Fixed.recipient, role: .endpoint, isInitiator: true, channel: .stream)
        _ = try hubB.receive(TLVRecord(parsing: b.hello()))
        XCTAssertThrowsError(try hubB.receive(TLVRecord(parsing: identityA)))
        XCTAssertNil(hubB.peer)
    }

    func testAForgedIdentityIsRefused() throws {
        // An initiator that signs with another key than the one it presents.
        struct Liar: LinkIdentity {
            var signingKey: [UInt8] { Fixed.hub.signingKey }
            var kxKey: [UInt8] { Fixed.hub.kxKey }
            func sign(_ message: [UInt8]) throws -> [UInt8] { Fixed.recipient.sign(message) }
            func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
                Fixed.recipient.verify(signature: signature, of: message, by: publicKey)
            }
            func randomBytes(_ count: Int) -> [UInt8] { Random.bytes(count) }
        }
        let liar = SecureLink(identity: Liar(), role: .hub, isInitiator: true, channel: .stream)
        let hub = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        guard case .send(let reply)? = try hub.receive(TLVRecord(parsing: liar.hello())).first,
              case .send(let identity)? = try liar.receive(TLVRecord(parsing: reply)).first else { return XCTFail("no reply or identity") }
        // The identity opened under the session's key but does not verify: the hub answers
        // with a sealed refusal (Docs/protocol.md §5, "The handshake's outcome") and ends the session.
        let answer = try hub.receive(TLVRecord(parsing: identity))
        guard answer.count == 2, case .send(let refusal) = answer[0], case .refused(let why) = answer[1] else { return XCTFail("\(answer)") }
        XCTAssertEqual(why, "identity refused: the peer's identity signature does not verify for this session")
        XCTAssertFalse(hub.isEstablished)
        XCTAssertEqual(hub.state, .refused)
        XCTAssertThrowsError(try hub.seal(TLVRecord(.ping, value: []).encoded), "nothing more is sealed in a refused session")
        XCTAssertLessThan(refusal.count, identity.count, "the refusal is smaller than what provoked it")
        XCTAssertEqual(try liar.receive(TLVRecord(parsing: refusal)),
                       [.refused("the peer refused the link (identity refused): your identity does not verify: the peer's identity signature does not verify for this session")])
        XCTAssertEqual(liar.state, .refused)
    }

    /// The responder's explicit answer: an initiator learns it was accepted, or why not, from
    /// a frame only this session's responder can seal.
    func testTheResponderSaysWhetherItTookTheInitiator() throws {
        let phone = SecureLink(identity: Fixed.recipient, role: .endpoint, isInitiator: true, channel: .stream)
        let hub = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        _ = try SecureLinkPair.establish(phone, hub)
        XCTAssertFalse(phone.accepted, "a responder that predates the outcome says nothing; nothing waits for it")
        XCTAssertEqual(try phone.receive(TLVRecord(parsing: hub.accept())), [])
        XCTAssertTrue(phone.accepted)
        XCTAssertThrowsError(try phone.accept(), "only a responder answers")

        // A refusal after the handshake (the hub's table is full): the phone learns why; the
        // reason is cut to 96 bytes, so the sealed answer stays smaller than an identity record.
        let phone2 = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        let hub2 = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        _ = try SecureLinkPair.establish(phone2, hub2)
        let full = try hub2.refuse(.noRoom, String(repeating: "é", count: 100))
        XCTAssertEqual(full.count, SecureLink.overhead + TLVRecord.headerLength + 1 + 96)
        XCTAssertLessThan(full.count, SecureLink.overhead + TLVRecord.headerLength + SecureLink.identityLength)
        XCTAssertEqual(try phone2.receive(TLVRecord(parsing: full)), [.refused("the peer refused the link (no room): " + String(repeating: "é", count: 48))])
        XCTAssertThrowsError(try hub2.seal(TLVRecord(.ping, value: []).encoded))

        // Forged ones: in clear it is refused like any clear record after the handshake; sealed
        // for another session it fails authentication. Neither ends the phone's session.
        XCTAssertThrowsError(try phone.receive(TLVRecord(.linkOutcome, value: [3] + Array("full".utf8))))
        let phone3 = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        let hub3 = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        _ = try SecureLinkPair.establish(phone3, hub3)
        _ = try hub3.accept()
        let otherSessions = try hub3.refuse(.noRoom, "full")   // counter 1, unseen by `phone`
        XCTAssertThrowsError(try phone.receive(TLVRecord(parsing: otherSessions))) { XCTAssertEqual($0 as? SecureLinkError, .decryptionFailed) }
        XCTAssertEqual(phone.state, .established)
    }

    func testLinkOutcomeLayout() throws {
        XCTAssertEqual(LinkOutcome.accepted.encoded, [0])
        XCTAssertEqual(LinkOutcome.refused(.role, "mesh takes hubs").encoded, [2] + Array("mesh takes hubs".utf8))
        XCTAssertEqual(try LinkOutcome(parsing: [9] + Array("later".utf8)), .refused(LinkOutcome.Refusal(rawValue: 9), "later"),
                       "a code this side does not know is still a refusal, kept as it came")
        XCTAssertEqual("\(LinkOutcome.Refusal(rawValue: 9))", "refusal 9")
        // Cut at the first character that does not fit, never after skipping one.
        XCTAssertEqual("ab😀c".utf8Prefix(maxBytes: 5), "ab")
        XCTAssertEqual("ab😀c".utf8Prefix(maxBytes: 6), "ab😀")
        XCTAssertThrowsError(try LinkOutcome(parsing: []))
        XCTAssertThrowsError(try LinkOutcome(parsing: [0, 0x41]), "accepted carries no reason")
        XCTAssertThrowsError(try LinkOutcome(parsing: [1] + [UInt8](repeating: 0x41, count: 97)), "longer than 96 bytes of reason")
    }

    func testDatagramCookieRoundAmplifiesNothing() throws {
        let cookies = LinkCookies(clock: { 1_000_000 })
        let client = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .datagram)
        let hello = try client.hello()
        XCTAssertGreaterThanOrEqual(hello.count, SecureLink.replyLength + 3, "a datagram hello is padded to the reply's size")
        let address: [UInt8] = [127, 0, 0, 1, 0x1e, 0x83]
        guard case .reply(let cookieRecord) = cookies.admit(try TLVRecord(parsing: hello), from: address) else { return XCTFail("no cookie") }
        XCTAssertLessThanOrEqual(cookieRecord.count, hello.count)
        // A minimal unpadded hello (49 bytes) still gets at most its own size back.
        let minimal = TLVRecord(.linkHello, value: Array(hello[3..<(3 + SecureLink.helloMinimumLength)]))
        guard case .reply(let r2) = cookies.admit(minimal, from: address) else { return XCTFail("no cookie") }
        XCTAssertLessThanOrEqual(r2.count, minimal.encoded.count)
        guard case .send(let withCookie)? = try client.receive(TLVRecord(parsing: cookieRecord)).first else { return XCTFail("no retry") }
        XCTAssertEqual(cookies.admit(try TLVRecord(parsing: withCookie), from: address), .admit)
        // From another address the cookie is worthless.
        if case .admit = cookies.admit(try TLVRecord(parsing: withCookie), from: [10, 0, 0, 9, 0x1e, 0x83]) { XCTFail("cookie accepted from another address") }
        // A cookie-bearing hello that is not padded is dropped: the reply would be larger.
        var short = try TLVRecord(parsing: withCookie)
        short.value = Array(short.value.prefix(SecureLink.helloMinimumLength))
        if case .admit = cookies.admit(short, from: address) { XCTFail("unpadded hello admitted") }
    }

    /// Attack 8 of the third security review, cookies: a blind spoofer cannot see the hello, so
    /// it cannot make a cookie that echoes its ephemeral key. Our hellos ask for the echo (first
    /// padding byte); a cookie with a wrong echo is refused, and of cookies without one (from a
    /// responder that does not echo, or a spoofer) the initiator acts on one per hello, so 100
    /// forgeries draw one datagram, not 100. The responder's own echoed cookie still works.
    func testForgedCookiesDrawAtMostOneHelloAndTheEchoedCookieWins() throws {
        let cookies = LinkCookies(clock: { 1_000_000 })
        let address: [UInt8] = [127, 0, 0, 1, 0x1e, 0x83]
        let phone = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .datagram)
        let hello = try TLVRecord(parsing: try phone.hello())
        XCTAssertEqual(hello.value[SecureLink.helloMinimumLength], SecureLink.helloFlagEcho, "the hello asks for an echo")
        guard case .reply(let cookieRecord) = cookies.admit(hello, from: address) else { return XCTFail("no cookie") }
        let cookie = try TLVRecord(parsing: cookieRecord)
        XCTAssertEqual(cookie.value.count, LinkCookies.cookieLength + LinkCookies.echoLength)
        XCTAssertEqual(Array(cookie.value.suffix(LinkCookies.echoLength)), Array(phone.ephemeralKey.prefix(LinkCookies.echoLength)))
        XCTAssertLessThanOrEqual(cookieRecord.count, hello.encoded.count, "the echo amplifies nothing")

        var hellos = 0
        for _ in 0..<100 {
            let unechoed = TLVRecord(.linkCookie, value: (0..<LinkCookies.cookieLength).map { _ in UInt8.random(in: 0...255) })
            let wrongEcho = TLVRecord(.linkCookie, value: (0..<(LinkCookies.cookieLength + LinkCookies.echoLength)).map { _ in UInt8.random(in: 0...255) })
            for forged in [unechoed, wrongEcho] {
                if let out = try? phone.receive(forged) { hellos += out.count }
            }
        }
        XCTAssertEqual(hellos, 1, "200 forged cookies drew one hello")
        guard case .send(let withCookie)? = try phone.receive(cookie).first else { return XCTFail("the echoed cookie was refused") }
        XCTAssertEqual(cookies.admit(try TLVRecord(parsing: withCookie), from: address), .admit)
        // A hello that does not ask (an older initiator) gets the cookie alone, as it expects.
        var plain = hello
        plain.value[SecureLink.helloMinimumLength] = 0
        guard case .reply(let oldStyle) = cookies.admit(plain, from: address) else { return XCTFail("no cookie") }
        XCTAssertEqual(try TLVRecord(parsing: oldStyle).value.count, LinkCookies.cookieLength)
    }

    /// Clear records anyone can send in the responder's name — a reply that does not verify,
    /// a version refusal listing our own version or another one, a cookie of the wrong size —
    /// are refused and leave the initiator exactly where it was: the real reply still
    /// completes the handshake (attack 8 of the third security review).
    func testForgedClearRecordsLeaveTheInitiatorWaitingForTheRealReply() throws {
        let phone = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .datagram)
        let hub = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .datagram)
        guard case .send(let reply)? = try hub.receive(TLVRecord(parsing: try phone.hello())).first else { return XCTFail("no reply") }
        // A reply made by another responder for another hello: a valid Noise message, wrong keys.
        let other = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .datagram)
        let stranger = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .datagram)
        guard case .send(let otherReply)? = try other.receive(TLVRecord(parsing: try stranger.hello())).first else { return XCTFail("no reply") }
        let forgeries: [TLVRecord] = [
            try TLVRecord(parsing: otherReply),
            TLVRecord(.linkReply, value: [UInt8](repeating: 0x5A, count: SecureLink.replyLength)),
            TLVRecord(.linkVersion, value: [SecureLink.version]),
            TLVRecord(.linkVersion, value: [1]),
            TLVRecord(.linkCookie, value: [1, 2, 3]),
        ]
        for f in forgeries {
            XCTAssertThrowsError(try phone.receive(f), "type 0x\(String(f.type, radix: 16))")
            XCTAssertEqual(phone.state, .awaitingReply)
        }
        XCTAssertEqual(phone.versionsClaimed, [1], "remembered, to be reported if no reply comes")
        let outputs = try phone.receive(TLVRecord(parsing: reply))
        XCTAssertTrue(outputs.contains { if case .established = $0 { return true } else { return false } }, "the real reply still completes it")
        guard case .send(let identity)? = outputs.first else { return XCTFail("no identity frame") }
        XCTAssertTrue(try hub.receive(TLVRecord(parsing: identity)).contains { if case .established = $0 { return true } else { return false } })
    }

    func testOldAndFuturePeersAreRefusedClearly() throws {
        let hub = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
        XCTAssertThrowsError(try hub.receive(TLVRecord(type: 0x10, value: [UInt8](repeating: 9, count: 32)))) {
            XCTAssertEqual($0 as? SecureLinkError, .retiredVersion)
            XCTAssertTrue("\($0)".contains("link version 1"))
        }
        var future = [UInt8](repeating: 0, count: 49)
        future[0] = 3
        XCTAssertThrowsError(try hub.receive(TLVRecord(.linkHello, value: future))) { XCTAssertEqual($0 as? SecureLinkError, .unsupportedVersion(peer: [3])) }
        let cookies = LinkCookies(clock: { 0 })
        XCTAssertEqual(cookies.admit(TLVRecord(.linkHello, value: future), from: [1]), .reply(SecureLink.versionRecord()))
        let phone = SecureLink(identity: Fixed.sender, role: .endpoint, isInitiator: true, channel: .stream)
        _ = try phone.hello()
        XCTAssertThrowsError(try phone.receive(TLVRecord(.linkVersion, value: [3]))) {
            XCTAssertTrue("\($0)".contains("speaks 2"), "\($0)")
        }
        XCTAssertEqual(phone.versionsClaimed, [3])
        // Garbage of every length never crashes a responder.
        for n in 0..<200 {
            let s = SecureLink(identity: Fixed.hub, role: .hub, isInitiator: false, channel: .stream)
            _ = try? s.receive(TLVRecord(.linkHello, value: [2] + [UInt8](repeating: UInt8(n % 256), count: n)))
            _ = try? s.receive(TLVRecord(.sealed, value: [UInt8](repeating: 1, count: n)))
        }
    }

    func testReplayWindow() {
        var w = ReplayWindow()
        XCTAssertTrue(w.accepts(0)); w.mark(0)
        XCTAssertFalse(w.accepts(0))
        w.mark(5000)
        XCTAssertFalse(w.accepts(5000 - ReplayWindow.size))
        XCTAssertTrue(w.accepts(5000 - ReplayWindow.size + 1))
        w.mark(4999)
        XCTAssertFalse(w.accepts(4999))
        XCTAssertTrue(w.accepts(4998))
        w.mark(5001)
        XCTAssertFalse(w.accepts(5000))
    }
}
