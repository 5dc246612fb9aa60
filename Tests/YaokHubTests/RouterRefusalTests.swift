import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokTransportUDP
import YaokWire
@testable import YaokHubCore
import YaokTesting

/// Bad bundles from the network get a specific custody refusal, are counted, and harm nothing.
final class RouterRefusalTests: XCTestCase {
    func testFrameAdmissionIsABucketOfOneSecondAndABacklogPerLink() {
        let a = FrameAdmission(framesPerSecond: 5)
        let key = LinkKey(transport: "udp", link: 1)
        XCTAssertEqual((0..<6).map { _ in a.admit(key) }, [.admitted, .admitted, .admitted, .admitted, .admitted, .rateLimited])
        XCTAssertEqual(a.admit(LinkKey(transport: "udp", link: 2)), .admitted, "each link has its own bucket")
        Thread.sleep(forTimeInterval: 0.25)
        XCTAssertEqual(a.admit(key), .admitted, "a token comes back in 200 ms at 5/s")

        let fast = FrameAdmission(framesPerSecond: 100_000)
        for _ in 0..<FrameAdmission.maxBacklog { XCTAssertEqual(fast.admit(key), .admitted) }
        XCTAssertEqual(fast.admit(key), .backlogFull)
        fast.done(key)
        XCTAssertEqual(fast.admit(key), .admitted)
        // A full backlog of bundles leaves room for the answers and offers that move them.
        for _ in 0..<FrameAdmission.maxBacklog { XCTAssertEqual(fast.admit(key, .other), .admitted) }
        XCTAssertEqual(fast.admit(key, .other), .backlogFull)
        XCTAssertEqual(fast.admit(key, .bundle), .backlogFull)
        fast.done(key, .other)
        XCTAssertEqual(fast.admit(key, .other), .admitted)
        XCTAssertEqual(fast.admit(key, .bundle), .backlogFull, "an answer taken off the queue frees no room for a bundle")
        XCTAssertEqual(a.dropped.rateLimited, 1)
        XCTAssertEqual(fast.dropped.backlogFull, 4)
        XCTAssertEqual(fast.dropped.backlogFullOther, 1)
    }

    func testRefusalsAreSpecificAndCounted() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5\n  sender_envelopes_per_minute: 3")
        let hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()

        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        func seal(_ text: String, created: Int64 = Clock.nowMilliseconds(), ttl: Int64 = 3_600_000) throws -> Envelope {
            try Envelope.sealMessage(plaintext: Array(text.utf8), from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                     createdMs: created, ttlMs: ttl)
        }
        func reason(_ r: TLVRecord) -> CustodyRefusal.Reason? {
            r.type == FrameType.custodyRefused.rawValue ? (try? CustodyRefusal(parsing: r.value))?.reason : nil
        }

        // A good one is taken into custody.
        let good = try seal("fine")
        try phone.send(TLVRecord(.bundle, value: YaokWire.Bundle(envelope: good).encoded))
        XCTAssertEqual(try phone.answer(for: good.bundleID).type, FrameType.custodyAck.rawValue)

        // Tampered: one ciphertext byte flipped after signing.
        var tampered = YaokWire.Bundle(envelope: try seal("tamper me")).encoded
        tampered[HopHeader.lengthV1 + Envelope.ciphertextOffset + 3] ^= 0x01
        let tamperedID = BundleID.of(senderUserID: alice.userID, messageID: Array(tampered[(HopHeader.lengthV1 + 2)..<(HopHeader.lengthV1 + 18)]))
        try phone.send(TLVRecord(.bundle, value: tampered))
        XCTAssertEqual(reason(try phone.answer(for: tamperedID)), .badSignature)

        // Expired: created two hours ago with a one-hour lifetime, and its hop header says so (a
        // hub that knows no true time judges by the age; Docs/protocol.md §2.2).
        let expired = try seal("old", created: Clock.nowMilliseconds() - 7_200_000)
        try phone.send(TLVRecord(.bundle, value: YaokWire.Bundle(hop: .origin(ageMs: 7_200_000), envelope: expired).encoded))
        XCTAssertEqual(reason(try phone.answer(for: expired.bundleID)), .expired)

        // Malformed: a valid-looking prefix, truncated.
        let truncated = Array(YaokWire.Bundle(envelope: try seal("cut")).encoded.prefix(120))
        try phone.send(TLVRecord(.bundle, value: truncated))
        XCTAssertEqual(reason(try phone.answer(for: BundleID.of(senderUserID: alice.userID,
                                                                messageID: Array(truncated[(HopHeader.lengthV1 + 2)..<(HopHeader.lengthV1 + 18)])))), .malformed)

        // Over the hop limit, from a hub (endpoints' hop headers are re-stamped by the hub).
        let neighbour = try RawPeer(identity: Identity.generate(), role: .hub, hubPort: port)
        let far = try seal("far")
        let overLimit = YaokWire.Bundle(hop: HopHeader(hopCount: 11, hopLimit: 10, previousHop: [UInt8](repeating: 7, count: 32)), envelope: far)
        try neighbour.send(TLVRecord(.bundle, value: overLimit.encoded))
        XCTAssertEqual(reason(try neighbour.answer(for: far.bundleID)), .hopLimit)

        // Rate limit: this sender key has used its 3 per minute (good, tampered and expired
        // never reached the limiter: verify first, then expiry, then rate).
        var limited: CustodyRefusal.Reason?
        for i in 0..<4 {
            let e = try seal("burst \(i)")
            try phone.send(TLVRecord(.bundle, value: YaokWire.Bundle(envelope: e).encoded))
            if let r = reason(try phone.answer(for: e.bundleID)) { limited = r }
        }
        XCTAssertEqual(limited, .rateLimited)

        // Garbage frames are counted and the hub carries on.
        try phone.send(TLVRecord(type: 0x7f, value: [1, 2, 3]))
        let c = try hub.status().router.counters
        XCTAssertEqual(c.refusedSignature, 1)
        XCTAssertEqual(c.refusedExpired, 1)
        XCTAssertGreaterThanOrEqual(c.refusedMalformed, 1)
        XCTAssertEqual(c.refusedHopLimit, 1)
        XCTAssertGreaterThanOrEqual(c.refusedRateLimited, 1)
        try Wait.until(timeout: 5, "unknown frame counted") { try hub.status().router.counters.unknownFrames == 1 }
        XCTAssertEqual(try hub.transport("udp")?.status.state, .running)
        // Only the good bundles were stored.
        let q = try hub.status().router.queue
        XCTAssertEqual(q.queued + q.inFlight + q.handedOver, 1 + 2)
    }
}
