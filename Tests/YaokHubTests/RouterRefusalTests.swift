import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
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

    /// On an in-memory router (``RouterHarness``): each bad bundle gets its own custody refusal.
    func testRefusalsAreSpecificAndCounted() throws {
        var settings = Router.Settings()
        settings.senderEnvelopesPerMinute = 3
        let h = try RouterHarness(self, settings: settings)
        let alice = Identity.generate(), bob = Identity.generate()
        let phone = h.attach(alice, as: .endpoint)
        func seal(_ text: String, created: Int64 = WallClock.nowMilliseconds(), ttl: Int64 = 3_600_000) throws -> Envelope {
            try Envelope.sealMessage(plaintext: Array(text.utf8), from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                     createdMs: created, ttlMs: ttl)
        }
        func reason(_ id: [UInt8], on link: LinkID) -> CustodyRefusal.Reason? {
            h.frames(.custodyRefused, on: link).compactMap { try? CustodyRefusal(parsing: $0.value) }.first { $0.bundleID == id }?.reason
        }

        // A good one is taken into custody.
        let good = try seal("fine")
        h.receive(good, on: phone)
        XCTAssertEqual(h.acknowledged(on: phone), [good.bundleID])

        // Tampered: one ciphertext byte flipped after signing.
        var tampered = YaokWire.Bundle(envelope: try seal("tamper me")).encoded
        tampered[HopHeader.lengthV1 + Envelope.ciphertextOffset + 3] ^= 0x01
        let tamperedID = BundleID.of(senderUserID: alice.userID, messageID: Array(tampered[(HopHeader.lengthV1 + 2)..<(HopHeader.lengthV1 + 18)]))
        h.receive(TLVRecord(.bundle, value: tampered), on: phone)
        XCTAssertEqual(reason(tamperedID, on: phone), .badSignature)

        // Expired: created two hours ago with a one-hour lifetime, and its hop header says so (a
        // hub that knows no true time judges by the age; Docs/protocol.md §2.2).
        let expired = try seal("old", created: WallClock.nowMilliseconds() - 7_200_000)
        h.receive(TLVRecord(.bundle, value: YaokWire.Bundle(hop: .origin(ageMs: 7_200_000), envelope: expired).encoded), on: phone)
        XCTAssertEqual(reason(expired.bundleID, on: phone), .expired)

        // Malformed: a valid-looking prefix, truncated.
        let truncated = Array(YaokWire.Bundle(envelope: try seal("cut")).encoded.prefix(120))
        h.receive(TLVRecord(.bundle, value: truncated), on: phone)
        XCTAssertEqual(reason(BundleID.of(senderUserID: alice.userID, messageID: Array(truncated[(HopHeader.lengthV1 + 2)..<(HopHeader.lengthV1 + 18)])), on: phone),
                       .malformed)

        // Over the hop limit, from a hub (endpoints' hop headers are re-stamped by the hub).
        let neighbour = h.attach(Identity.generate(), as: .hub)
        let far = try seal("far")
        let overLimit = YaokWire.Bundle(hop: HopHeader(hopCount: 11, hopLimit: 10, previousHop: [UInt8](repeating: 7, count: 32)), envelope: far)
        h.receive(TLVRecord(.bundle, value: overLimit.encoded), on: neighbour)
        XCTAssertEqual(reason(far.bundleID, on: neighbour), .hopLimit)

        // Rate limit: 3 per minute for this sender key, the good one among them (tampered and
        // expired never reached the limiter: verify first, then expiry, then rate).
        let burst = try (0..<4).map { try seal("burst \($0)") }
        for e in burst { h.receive(e, on: phone) }
        XCTAssertEqual(burst.map { reason($0.bundleID, on: phone) }, [nil, nil, .rateLimited, .rateLimited])

        // Garbage frames are counted and the router carries on.
        h.receive(TLVRecord(type: 0x7f, value: [1, 2, 3]), on: phone)
        let status = h.router.statusSnapshot()
        let c = status.counters
        XCTAssertEqual(c.refusedSignature, 1)
        XCTAssertEqual(c.refusedExpired, 1)
        XCTAssertGreaterThanOrEqual(c.refusedMalformed, 1)
        XCTAssertEqual(c.refusedHopLimit, 1)
        XCTAssertEqual(c.refusedRateLimited, 2)
        XCTAssertEqual(c.unknownFrames, 1)
        // Only the good bundles were stored.
        XCTAssertEqual(status.queue.queued + status.queue.inFlight + status.queue.handedOver, 1 + 2)
    }
}
