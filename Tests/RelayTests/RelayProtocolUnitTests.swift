import Foundation
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokWire
import enum YaokPluginKit.Hex
import RelayTestSupport

final class RelayProtocolUnitTests: XCTestCase {
    private func pair(sessionID: UInt64 = 7) throws -> (client: SecureSession, relay: SecureSession) {
        let c = EphemeralKX.generate(), r = EphemeralKX.generate()
        return (try SecureSession(side: .client, sessionID: sessionID, ours: c, theirs: r.publicKey),
                try SecureSession(side: .relay, sessionID: sessionID, ours: r, theirs: c.publicKey))
    }

    func testSealOpenBothDirectionsAndReflectionFails() throws {
        let (c, r) = try pair()
        let up = try RelayPacket(parsing: c.seal(.poll, [1, 2, 3]))
        XCTAssertEqual(try r.open(up), [1, 2, 3])
        let down = try RelayPacket(parsing: r.seal(.pong, [9]))
        XCTAssertEqual(try c.open(down), [9])
        // A packet reflected back to its sender does not open (direction keys differ).
        let (c2, _) = try pair()
        _ = c2
        XCTAssertThrowsError(try c.open(try RelayPacket(parsing: c.seal(.ping, [1])))) { XCTAssertEqual($0 as? RelayProtocolError, .authenticationFailed) }
    }

    func testReplayedAndTooOldCountersAreRejectedReorderingAccepted() throws {
        let (c, r) = try pair()
        var packets: [RelayPacket] = []
        for i in 0..<100 { packets.append(try RelayPacket(parsing: c.seal(.ping, [UInt8(i)]))) }
        XCTAssertEqual(try r.open(packets[5]), [5])
        XCTAssertThrowsError(try r.open(packets[5])) { XCTAssertEqual($0 as? RelayProtocolError, .replayed(counter: 6)) }
        XCTAssertEqual(try r.open(packets[2]), [2])            // reordered, inside the window
        XCTAssertEqual(try r.open(packets[99]), [99])
        XCTAssertThrowsError(try r.open(packets[10])) { XCTAssertEqual($0 as? RelayProtocolError, .replayed(counter: 11)) }   // 89 behind: outside the 64 window
        XCTAssertEqual(try r.open(packets[40]), [40])           // 59 behind: inside
        XCTAssertThrowsError(try r.open(packets[40]))
    }

    func testTamperedHeaderOrPayloadFailsAndDoesNotPoisonTheWindow() throws {
        let (c, r) = try pair()
        let good = try c.seal(.send, [1, 2, 3, 4])
        var flippedType = good
        flippedType[5] = RelayPacketType.ack.rawValue
        XCTAssertThrowsError(try r.open(RelayPacket(parsing: flippedType))) { XCTAssertEqual($0 as? RelayProtocolError, .authenticationFailed) }
        var flippedBody = good
        flippedBody[RelayPacket.headerLength] ^= 1
        XCTAssertThrowsError(try r.open(RelayPacket(parsing: flippedBody)))
        var otherSession = good
        otherSession[13] ^= 1
        XCTAssertThrowsError(try r.open(RelayPacket(parsing: otherSession))) { XCTAssertEqual($0 as? RelayProtocolError, .wrongSession) }
        // The forged copies did not consume the counter: the real packet still opens.
        XCTAssertEqual(try r.open(RelayPacket(parsing: good)), [1, 2, 3, 4])
    }

    func testImpostorRelayIsRefusedAndBadSignatureDetected() throws {
        let relay = Identity.generate(), impostor = Identity.generate()
        let clientKey = EphemeralKX.generate().publicKey
        let reply = HelloReply.make(sessionID: 5, clientKey: clientKey, relayEphemeralKey: EphemeralKX.generate().publicKey, relay: impostor)
        XCTAssertThrowsError(try reply.verify(pinnedKey: relay.signingKey, sessionID: 5, clientKey: clientKey)) { error in
            XCTAssertEqual(String(describing: error),
                           "relay key mismatch: expected \(Hex.encode(relay.signingKey.prefix(4)))…, got \(Hex.encode(impostor.signingKey.prefix(4)))…")
        }
        // The right key, but the signature was made for another HELLO or session.
        let genuine = HelloReply.make(sessionID: 5, clientKey: clientKey, relayEphemeralKey: EphemeralKX.generate().publicKey, relay: relay)
        XCTAssertNoThrow(try genuine.verify(pinnedKey: relay.signingKey, sessionID: 5, clientKey: clientKey))
        XCTAssertThrowsError(try genuine.verify(pinnedKey: relay.signingKey, sessionID: 6, clientKey: clientKey)) {
            XCTAssertEqual($0 as? RelayProtocolError, .badHandshakeSignature)
        }
        XCTAssertThrowsError(try genuine.verify(pinnedKey: relay.signingKey, sessionID: 5, clientKey: EphemeralKX.generate().publicKey))
    }

    func testFragmentationRoundTripOutOfOrderWithDuplicates() throws {
        let message = (0..<10_527).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let parts = try Fragment.split(type: .send, message: message, fragmentID: 77)
        XCTAssertEqual(parts.count, 8)
        XCTAssertTrue(parts.allSatisfy { $0.0 == .fragment && $0.1.count <= SecureSession.maxPlaintextLength })
        var r = Reassembler()
        var result: (RelayPacketType, [UInt8])?
        for (_, p) in parts.reversed() {
            if let done = r.add(try Fragment(parsing: p), nowMs: 0) { result = done }
            // A duplicate of a fragment already held changes nothing.
            if p == parts[5].1 { XCTAssertNil(r.add(try Fragment(parsing: p), nowMs: 0)) }
        }
        XCTAssertEqual(result?.0, .send)
        XCTAssertEqual(result?.1, message)
        XCTAssertEqual(r.bufferedBytes, 0)
        // Small messages are not fragmented; too large ones are refused.
        XCTAssertEqual(try Fragment.split(type: .msg, message: [1, 2], fragmentID: 1).first?.0, .msg)
        XCTAssertThrowsError(try Fragment.split(type: .msg, message: [UInt8](repeating: 0, count: Fragment.maxMessageLength + 1), fragmentID: 1))
        // Found by the relay fuzz harness: a large message of type FRAGMENT was split into
        // fragments the receiver refuses. split refuses it, as the parser does.
        XCTAssertThrowsError(try Fragment.split(type: .fragment, message: [UInt8](repeating: 0, count: SecureSession.maxPlaintextLength + 1), fragmentID: 1))
    }

    func testReassemblyIsBoundedAndTimesOut() throws {
        var r = Reassembler(maxPartial: 2, timeoutMs: 1_000)
        let chunk = [UInt8](repeating: 1, count: 100)
        for id in 0..<5 as Range<UInt32> {
            XCTAssertNil(r.add(Fragment(fragmentID: id, index: 0, count: 3, innerType: .send, chunk: chunk), nowMs: Int64(id)))
        }
        XCTAssertLessThanOrEqual(r.bufferedBytes, 2 * 100)
        XCTAssertEqual(r.dropped, 3)
        _ = r.add(Fragment(fragmentID: 99, index: 0, count: 2, innerType: .send, chunk: chunk), nowMs: 5_000)
        XCTAssertEqual(r.bufferedBytes, 100, "older partial messages timed out")
        // An inconsistent fragment (other count) drops the message.
        XCTAssertNil(r.add(Fragment(fragmentID: 99, index: 1, count: 3, innerType: .send, chunk: chunk), nowMs: 5_001))
        XCTAssertEqual(r.bufferedBytes, 0)
        // Parsing refuses counts beyond the bound and indexes outside the count.
        var bad = Fragment(fragmentID: 1, index: 0, count: 2, innerType: .send, chunk: chunk).encoded
        bad[5] = UInt8(Fragment.maxCount + 1)
        XCTAssertThrowsError(try Fragment(parsing: bad))
        bad[5] = 2; bad[4] = 2
        XCTAssertThrowsError(try Fragment(parsing: bad))
        bad[4] = 0; bad[6] = RelayPacketType.hello.rawValue
        XCTAssertThrowsError(try Fragment(parsing: bad))
    }

    func testParsersNeverCrashOnRandomInput() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...300, using: &rng)
            var bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if n >= 6 && Bool.random() { bytes.replaceSubrange(0..<6, with: RelayPacket.magic + [1, RelayPacketType.allCases.randomElement()!.rawValue]) }
            _ = try? RelayPacket(parsing: bytes)
            _ = try? RegisterRequest(parsing: bytes)
            _ = try? RegisteredResult(parsing: bytes)
            _ = try? QueuedNotice(parsing: bytes)
            _ = try? AckList(parsing: bytes)
            _ = try? RelayErrorNotice(parsing: bytes)
            _ = try? Fragment(parsing: bytes)
            _ = try? HelloReply(parsing: bytes)
            _ = try? PollDone(parsing: bytes)
        }
        XCTAssertThrowsError(try RelayPacket(parsing: [UInt8](repeating: 0, count: 1473))) {
            XCTAssertEqual($0 as? RelayProtocolError, .oversized(what: "datagram", size: 1473, limit: 1472))
        }
    }

    func testMessageRoundTrips() throws {
        let user = Identity.generate()
        let reg = try Registration.owner(user, relaySigningKey: Identity.generate().signingKey, channel: ChannelBinding(bytes: Random.bytes(32)), timestampMs: 123)
        let carried = try Registration.carried(by: user, relaySigningKey: Identity.generate().signingKey, collector: Identity.generate().signingKey,
                                               timestampMs: 123, untilMs: 456)
        XCTAssertEqual(try Registration(parsing: carried.encoded), carried)
        XCTAssertEqual(carried.encoded.count, Registration.length)
        XCTAssertEqual(try Registration(parsing: reg.encoded), reg)
        XCTAssertEqual(try RegisterRequest(parsing: RegisterRequest([reg, reg]).encoded), RegisterRequest([reg, reg]))
        let res = RegisteredResult([(user.userID, .replayed)])
        XCTAssertEqual(try RegisteredResult(parsing: res.encoded), res)
        let q = QueuedNotice(bundleID: [UInt8](repeating: 3, count: 16), status: .pushed)
        XCTAssertEqual(try QueuedNotice(parsing: q.encoded), q)
        let e = RelayErrorNotice(code: .rateLimited, reference: q.bundleID, retryAfterMs: 1500, text: "slow down")
        XCTAssertEqual(try RelayErrorNotice(parsing: e.encoded), e)
        XCTAssertEqual(e.description, "relay refused: rate limited: slow down (retry in 2 s)")
        XCTAssertThrowsError(try RegisterRequest(parsing: [0]))
        XCTAssertThrowsError(try AckList(parsing: [65] + [UInt8](repeating: 0, count: 65 * 16)))
    }

    /// The bundle ID read from a bundle's bytes (what clients key pending SENDs by and what the
    /// relay's ERROR references) is the envelope's own; too short → nil, never a crash.
    func testBundleIDReadFromBytesIsTheEnvelopes() throws {
        let alice = Identity.generate(), bob = Identity.generate()
        let bundle = try messageBundle(from: alice, to: bob)
        let envelope = try YaokWire.Bundle(parsing: bundle).envelope
        XCTAssertEqual(BundleID.of(bundle: bundle), envelope.bundleID)
        XCTAssertEqual(envelope.bundleID, BundleID.of(senderUserID: alice.userID, messageID: envelope.messageID))
        // Another hop header, same envelope: same bundle ID.
        var forwarded = bundle
        forwarded[1] = 3
        XCTAssertEqual(BundleID.of(bundle: forwarded), envelope.bundleID)
        XCTAssertNil(BundleID.of(bundle: Array(bundle.prefix(84))))
        XCTAssertNotNil(BundleID.of(bundle: Array(bundle.prefix(85))))
        XCTAssertNil(BundleID.of(bundle: []))
    }

    /// Idle polling doubles from 1 s to 30 s and starts over after traffic.
    func testPollPacingDoublesWhileIdleAndStartsOverOnTraffic() {
        var pacing = RelayPollPacing()
        XCTAssertEqual((0..<8).map { _ in pacing.nextIdleInterval() }, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000])
        pacing.traffic()
        XCTAssertEqual(pacing.nextIdleInterval(), 1_000)
        XCTAssertEqual(pacing.nextIdleInterval(), 2_000)
        var odd = RelayPollPacing()
        odd.initialIntervalMs = 0
        odd.maxIntervalMs = Int64.max
        for _ in 0..<100 { XCTAssertGreaterThan(odd.nextIdleInterval(), 0) }
        XCTAssertEqual(odd.nextIdleInterval(), Int64.max)
    }

    func testVectorsMatchTheDocument() throws {
        let v = try RelayVectorInputs.compute()
        if ProcessInfo.processInfo.environment["YAOK_PRINT_VECTORS"] == "1" {
            for (k, value) in v.sorted(by: { $0.key < $1.key }) { print("\(k) = \(value)") }
        }
        let doc = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Docs/relay-protocol.md").path, encoding: .utf8)
        let flat = doc.replacingOccurrences(of: "\n", with: "").replacingOccurrences(of: " ", with: "")
        for (name, hex) in v {
            XCTAssertTrue(flat.contains(hex), "Docs/relay-protocol.md lacks the \(name) vector \(hex)")
        }
        // And the relay side opens the client's sealed PING.
        let relayEph = try EphemeralKX(secretKey: RelayVectorInputs.relayEphemeralSecret)
        let clientEph = try EphemeralKX(secretKey: RelayVectorInputs.clientEphemeralSecret)
        let relay = try SecureSession(side: .relay, sessionID: RelayVectorInputs.sessionID, ours: relayEph, theirs: clientEph.publicKey)
        let ping = try RelayPacket(parsing: Hex.decode(v["ping_counter_1"]!)!)
        XCTAssertEqual(try relay.open(ping), [0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0x00])
        for name in ["registration_owner", "registration_carried"] {
            let reg = try Registration(parsing: Hex.decode(v[name]!)!)
            XCTAssertTrue(reg.verifySignature(relaySigningKey: try RelayVectorInputs.relay().signingKey), name)
        }
        let owner = try Registration(parsing: Hex.decode(v["registration_owner"]!)!)
        XCTAssertEqual(owner.binding, try RelayVectorInputs.channel().bytes)
        let carried = try Registration(parsing: Hex.decode(v["registration_carried"]!)!)
        XCTAssertEqual(carried.collectorSigningKey, try RelayVectorInputs.hub().signingKey)
        XCTAssertLessThanOrEqual(Hex.decode(v["cookie_reply"]!)!.count, Hex.decode(v["hello"]!)!.count)
    }
}
