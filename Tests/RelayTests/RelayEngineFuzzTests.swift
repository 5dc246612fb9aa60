import Foundation
import Logging
import NIOCore
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokStore
import enum YaokPluginKit.Hex
import RelayTestSupport

/// Drives the engine directly (no sockets) with authenticated garbage: every sealed type
/// with random payloads, random fragments. The engine must neither crash nor grow without bound.
final class RelayEngineFuzzTests: XCTestCase {
    func testAuthenticatedGarbageNeverCrashesAndBuffersStayBounded() throws {
        let dir = NSTemporaryDirectory() + "yaok-relay-fuzz-" + Hex.encode(Random.bytes(6))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (identity, store) = try RelayServer.openDataDirectory(dir)
        defer { store.database.close() }
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        var limits = RelayLimits()
        limits.packetsPerSecondPerIP = 1_000_000
        limits.maxReassemblyBytes = 64 * 1024
        let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger, now: { nowMs() })
        let from = try SocketAddress(ipAddress: "192.0.2.1", port: 4000)

        // Handshake by hand.
        let eph = EphemeralKX.generate()
        let hello = try RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: eph.publicKey).encoded).encoded()
        let replyBytes = try XCTUnwrap(engine.handle(hello, from: from).first?.bytes)
        let replyPacket = try RelayPacket(parsing: replyBytes)
        let reply = try HelloReply(parsing: replyPacket.payload)
        try reply.verify(pinnedKey: identity.signingKey, sessionID: replyPacket.sessionID, clientKey: eph.publicKey)
        let session = try SecureSession(side: .client, sessionID: replyPacket.sessionID, ours: eph, theirs: reply.relayEphemeralKey)

        // Register a user so SEND/POLL/ACK paths run too.
        let user = Identity.generate()
        let channel = ChannelBinding(sessionID: replyPacket.sessionID, clientKey: eph.publicKey, relayEphemeralKey: reply.relayEphemeralKey)
        let reg = try Registration.owner(user, relaySigningKey: identity.signingKey, channel: channel, timestampMs: nowMs())
        _ = engine.handle(try session.seal(.register, RegisterRequest([reg]).encoded), from: from)

        let sealedTypes = RelayPacketType.allCases.filter(\.isSealed)
        for i in 0..<20_000 {
            let type = sealedTypes.randomElement()!
            var payload = Random.bytes(Int.random(in: 0...600))
            if type == .fragment, payload.count >= 7 {
                payload[4] = UInt8.random(in: 0...3)
                payload[5] = UInt8.random(in: 2...9)
                payload[6] = [RelayPacketType.send, .ack, .register, .poll].randomElement()!.rawValue
            }
            if type == .ack, i % 3 == 0 { payload = [1] + Random.bytes(16) }
            _ = engine.handle(try session.seal(type, payload), from: from)
            XCTAssertLessThanOrEqual(engine.reassemblyBufferedBytes, limits.maxReassemblyBytes)
        }
        let m = engine.metricsSnapshot()
        XCTAssertEqual(m.droppedUnauthenticated, 0, "every packet was authentic: the garbage reached the parsers")
        XCTAssertEqual(m.droppedReplayed, 0)
        XCTAssertGreaterThan(m.droppedMalformed + m.fragmentsDropped, 1_000)
        // Still serving: a PING is answered.
        let out = engine.handle(try session.seal(.ping, [1, 2, 3, 4, 5, 6, 7, 8]), from: from)
        let pong = try RelayPacket(parsing: XCTUnwrap(out.first?.bytes))
        XCTAssertEqual(pong.type, .pong)
        // The PING's payload, then the relay's clock (Docs/relay-protocol.md §4, "The relay's time").
        let answer = try session.open(pong)
        XCTAssertEqual(Array(answer.prefix(8)), [1, 2, 3, 4, 5, 6, 7, 8])
        XCTAssertEqual(answer.count, 16)
        XCTAssertEqual(engine.queuedCount(for: user.userID), 0)
    }
}
