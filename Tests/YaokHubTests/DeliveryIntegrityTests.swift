import Foundation
import Synchronization
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// The attacks of Docs/protocol.md "Threats and answers", each run against a real hub
/// process by an attacker with no keys but its own throwaway ones. Every test asserts that
/// the victim's message arrives exactly once and that the attack is refused and counted.
final class DeliveryIntegrityTests: XCTestCase {
    // MARK: 1. Forged receipts

    func testForgedReceiptFromAThrowawayKeySuppressesNothing() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let mallory = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port, host: "127.0.0.2")
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let victim = try seal("meet at noon", from: s.alice, to: s.bob)

        // The attacker saw the message ID on the air and signs a "delivery receipt" for it.
        let throwaway = Identity.generate()
        let forged = try Envelope.receipt(kind: .deliveryReceipt, for: victim.messageID, originalSenderUserID: s.alice.userID,
                                          from: throwaway, createdMs: WallClock.nowMilliseconds())
        try mallory.send(forged)
        XCTAssertNil(RawPeer.refusal(try mallory.answer(for: forged.bundleID)), "a receipt is carried like any bundle")
        // The round-1 variant: an expiry of 2^62 ms, meant to pin a tombstone for ever.
        let immortal = try Envelope.receipt(kind: .deliveryReceipt, for: victim.messageID, originalSenderUserID: s.alice.userID,
                                            from: throwaway, createdMs: WallClock.nowMilliseconds(), ttlMs: 1 << 62)
        try mallory.send(immortal)
        XCTAssertEqual(RawPeer.refusal(try mallory.answer(for: immortal.bundleID)), .badLifetime)

        // The real message is taken into custody, not acknowledged as a duplicate.
        try phone.send(victim)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: victim.bundleID)))
        var status = try s.hub.status().router
        XCTAssertEqual(status.counters.duplicates, 0)
        XCTAssertEqual(status.counters.alreadyDelivered, 0)
        XCTAssertEqual(status.counters.receiptsUnverified, 1)
        XCTAssertEqual(status.counters.refusedLifetime, 1)
        XCTAssertEqual(status.queue.delivered, 0)

        // A receipt forged after the message is queued changes nothing either.
        let late = try Envelope.receipt(kind: .deliveryReceipt, for: victim.messageID, originalSenderUserID: s.alice.userID,
                                        from: Identity.generate(), createdMs: WallClock.nowMilliseconds())
        try mallory.send(late)
        _ = try mallory.answer(for: late.bundleID)
        status = try s.hub.status().router
        XCTAssertEqual(status.counters.receiptsUnverified, 2)
        XCTAssertEqual(status.queue.delivered, 0)

        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        XCTAssertEqual(try deliveries(of: victim.bundleID, to: bob), 1, "the victim's message arrives exactly once")
        XCTAssertEqual(try bob.receivedEnvelopes.first { $0.bundleID == victim.bundleID }?.open(with: s.bob), Array("meet at noon".utf8))

        // Bob's own receipt does end the hub's custody.
        let real = try Envelope.receipt(kind: .deliveryReceipt, for: victim.messageID, originalSenderUserID: s.alice.userID,
                                        from: s.bob, createdMs: WallClock.nowMilliseconds())
        try bob.send(real)
        _ = try bob.answer(for: real.bundleID)
        try Wait.until(timeout: 10, "the message marked delivered") { try s.hub.status().router.queue.delivered == 1 }
    }

    // MARK: 1b. Receipt proofs

    /// A delivery receipt that reveals the proof its message committed to ends the hub's
    /// custody without a signature check (Docs/protocol.md, "Receipt proofs"). Whoever saw
    /// the proof (an on-path hub) can send a re-dated copy with a broken signature first; the
    /// real receipt then takes its place instead of being refused as a conflict, so the copy
    /// that reaches the sender is one every hub and endpoint accepts. Without the proof, a
    /// broken signature is refused.
    func testAReceiptRevealingItsProofCountsAndABrokenCopyGivesWayToTheRealOne() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        // Anybody may hand a bundle to a hub; mallory carries alice's message in, so alice is
        // not attached when the receipts arrive.
        let mallory = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port, host: "127.0.0.2")
        let message = try seal("prove it", from: s.alice, to: s.bob)
        try mallory.send(message)
        XCTAssertNil(RawPeer.refusal(try mallory.answer(for: message.bundleID)))
        let proof = try XCTUnwrap(try message.decryptVerifiedWithProof(with: s.bob).deliveryProof)

        func receipt(id: [UInt8], createdMs: Int64, breakSignature: Bool) throws -> (envelope: Envelope, bundle: [UInt8]) {
            let e = try Envelope.receipt(kind: .deliveryReceipt, for: message.messageID, originalSenderUserID: s.alice.userID,
                                         from: s.bob, createdMs: createdMs, messageID: id)
            var bytes = YaokWire.Bundle(envelope: e).encoded
            if breakSignature { bytes[bytes.count - 1] ^= 1 }
            return (e, bytes)
        }
        let now = WallClock.nowMilliseconds()
        // Without the proof, a broken signature is a bad signature.
        let guessed = try receipt(id: Random.bytes(16), createdMs: now, breakSignature: true)
        try mallory.send(TLVRecord(.bundle, value: guessed.bundle))
        XCTAssertEqual(RawPeer.refusal(try mallory.answer(for: guessed.envelope.bundleID)), .badSignature)
        XCTAssertEqual(try s.hub.status().router.queue.delivered, 0)

        // With it, a re-dated copy whose signature is broken is taken, and ends custody.
        let real = try receipt(id: proof, createdMs: now, breakSignature: false)
        let copy = try receipt(id: proof, createdMs: now + 1_000, breakSignature: true)
        XCTAssertEqual(copy.envelope.bundleID, real.envelope.bundleID)
        XCTAssertNotEqual(copy.bundle, real.bundle)
        try mallory.send(TLVRecord(.bundle, value: copy.bundle))
        XCTAssertNil(RawPeer.refusal(try mallory.answer(for: real.envelope.bundleID)))
        var c = try s.hub.status().router
        XCTAssertEqual(c.counters.receiptsProven, 1)
        XCTAssertEqual(c.counters.refusedSignature, 1, "only the guessed one")
        XCTAssertEqual(c.queue.delivered, 1, "the message is delivered")

        // Bob's real receipt replaces the copy, and is acknowledged, not refused as a conflict.
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        try bob.send(TLVRecord(.bundle, value: real.bundle))
        XCTAssertNil(RawPeer.refusal(try bob.answer(for: real.envelope.bundleID)))
        c = try s.hub.status().router
        XCTAssertEqual(c.counters.receiptsReplaced, 1)
        XCTAssertEqual(c.counters.refusedConflict, 0)
        // The broken copy again is now the conflict.
        try mallory.send(TLVRecord(.bundle, value: copy.bundle))
        try Wait.until(timeout: 10, "the broken copy refused as a conflict") {
            mallory.frames(.custodyRefused).contains { RawPeer.refusal($0) == .conflict }
        }

        // Alice gets the real receipt, and bob never gets the message.
        let alice = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        try Wait.until(timeout: 20, "alice's receipt") { alice.receivedEnvelopes.contains { $0.bundleID == real.envelope.bundleID } }
        XCTAssertEqual(Set(alice.receivedEnvelopes.filter { $0.bundleID == real.envelope.bundleID }.map(\.encoded)), [real.envelope.encoded],
                       "every copy alice got is the real one")
        XCTAssertFalse(bob.receivedEnvelopes.contains { $0.bundleID == message.bundleID })
    }

    // MARK: 2. ID squatting

    func testMessageIDSquattingAndConflictingContent() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let mallory = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port, host: "127.0.0.2")
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let id = Random.uuidV4()
        // The attacker gets its own bundle under the victim's message ID in first.
        let squat = try seal("junk", from: Identity.generate(), to: s.bob, messageID: id)
        try mallory.send(squat)
        XCTAssertNil(RawPeer.refusal(try mallory.answer(for: squat.bundleID)))
        let victim = try seal("the real one", from: s.alice, to: s.bob, messageID: id)
        XCTAssertNotEqual(victim.bundleID, squat.bundleID)
        try phone.send(victim)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: victim.bundleID)))
        XCTAssertEqual(try s.hub.status().router.counters.duplicates, 0, "the real message is not a 'duplicate'")

        // Only the sender's key can reuse its own bundle ID, and a second envelope is refused.
        let equivocation = try seal("something else", from: s.alice, to: s.bob, messageID: id)
        try phone.send(equivocation)
        let answers = try XCTUnwrap({ () -> [TLVRecord] in
            var found: [TLVRecord] = []
            try Wait.until(timeout: 10, "conflict refusal") {
                found = phone.frames(.custodyRefused).filter { Array($0.value.prefix(16)) == victim.bundleID }
                return !found.isEmpty
            }
            return found
        }())
        XCTAssertEqual(answers.compactMap(RawPeer.refusal), [.conflict])
        XCTAssertEqual(try s.hub.status().router.counters.refusedConflict, 1)
        XCTAssertEqual(try s.hub.status().router.store.conflicts, 1)

        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        XCTAssertEqual(try deliveries(of: victim.bundleID, to: bob), 1)
        let real = try XCTUnwrap(bob.receivedEnvelopes.first { $0.bundleID == victim.bundleID })
        XCTAssertEqual(try real.open(with: s.bob), Array("the real one".utf8), "the first envelope, not the conflicting one")
    }

    // MARK: 3. Immortal junk against a capped store

    func testJunkFromThrowawayKeysCannotEvictAQueuedQueue() throws {
        let s = try startUDPHub(extra: "store:\n  size_cap_mb: 1\n")
        defer { s.hub.stop() }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        var victims: [Envelope] = []
        for i in 0..<30 {
            let e = try seal("", from: s.alice, to: s.bob, size: 10_000 + i)
            try phone.send(e)
            XCTAssertNil(RawPeer.refusal(try phone.answer(for: e.bundleID)))
            victims.append(e)
        }
        // The attacker: 100 bundles of 10 KB, each from a fresh key (the per-sender limit is
        // per key), with the longest lifetime allowed, addressed to bob so they look useful.
        let mallory = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port, host: "127.0.0.2")
        let immortal = try seal("", from: Identity.generate(), to: s.bob, ttl: 1 << 62, size: 10_000)
        try mallory.send(immortal)
        XCTAssertEqual(RawPeer.refusal(try mallory.answer(for: immortal.bundleID)), .badLifetime)
        var refused = 0
        for _ in 0..<100 {
            let junk = try seal("", from: Identity.generate(), to: s.bob, ttl: EnvelopeLifetime.protocolMaxTTLMs, size: 10_000)
            try mallory.send(junk)
            if RawPeer.refusal(try mallory.answer(for: junk.bundleID)) == .storeFull { refused += 1 }
        }
        let status = try s.hub.status().router
        print("immortal junk: \(100 - refused) junk bundles stored, \(refused) refused as over their share; evicted \(status.store.evicted)")
        XCTAssertGreaterThan(refused, 0)
        XCTAssertEqual(status.counters.refusedOverShare, refused)
        XCTAssertEqual(status.counters.refusedLifetime, 1)
        XCTAssertEqual(status.store.evicted, 0, "nobody else's bundle was evicted for the flood")
        XCTAssertEqual(status.queue.queued, 30 + 100 - refused)
        // What an operator sees in `yaok-hub status`.
        let text = StatusFormatter.text(try s.hub.status())
        XCTAssertTrue(text.contains("over share \(refused)"), text)
        XCTAssertTrue(text.contains("lifetime 1"), text)

        try assertBobGetsEachOnce(victims, s, timeout: 60)
    }

    /// The attack: with a fresh key and a fresh address per bundle an attacker is never the
    /// heaviest sender or origin, so eviction that takes from the heaviest lets it empty an
    /// offline user's queue of acknowledged mail one bundle at a time (1 of 40 arriving). Here
    /// the 110 addresses are each in a /24 of their own (so grouping by network does not catch
    /// them); a newcomer whose origin holds nothing is refused rather than evicting, and keeps
    /// its bundle (custody refused).
    func testFreshAddressesCannotEvictAcknowledgedMail() throws {
        let s = try startUDPHub(router: "\n  sender_envelopes_per_minute: 100000", extra: "store:\n  size_cap_mb: 1\n")
        defer { s.hub.stop() }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        var victims: [Envelope] = []
        for i in 0..<40 {
            let e = try seal("", from: s.alice, to: s.bob, size: 10_000 + i)
            try phone.send(e)
            XCTAssertNil(RawPeer.refusal(try phone.answer(for: e.bundleID)), "acknowledged")
            victims.append(e)
        }
        var stored = 0, refused = 0
        for n in 0..<110 {
            let attacker = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port, host: "127.\(1 + n / 200).\(n % 200).7")
            let junk = try seal("", from: Identity.generate(), to: s.bob, ttl: EnvelopeLifetime.protocolMaxTTLMs, size: 10_000)
            try attacker.send(junk)
            switch RawPeer.refusal(try attacker.answer(for: junk.bundleID)) {
            case nil: stored += 1
            case .storeFull?: refused += 1
            case let other?: XCTFail("refused for \(String(describing: other))")
            }
        }
        let status = try s.hub.status().router
        print("fresh addresses: \(stored) junk bundles stored while there was room, \(refused) refused; evicted \(status.store.evicted)")
        XCTAssertGreaterThan(refused, 0, "the store filled")
        XCTAssertEqual(status.store.evicted, 0, "no acknowledged bundle was evicted for a newcomer")
        XCTAssertEqual(status.counters.refusedOverShare, refused)

        try assertBobGetsEachOnce(victims, s, timeout: 90)
    }

    /// Bob attaches, acknowledges as a phone does, and gets every one of `victims` exactly once.
    private func assertBobGetsEachOnce(_ victims: [Envelope], _ s: UDPHubSetup, timeout: TimeInterval,
                                       file: StaticString = #filePath, line: UInt = #line) throws {
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        try Wait.until(timeout: timeout, "all \(victims.count) of alice's messages delivered") {
            let got = Set(bob.receivedEnvelopes.map(\.bundleID))
            for e in bob.receivedEnvelopes where got.contains(e.bundleID) {
                try? bob.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
            }
            return victims.allSatisfy { got.contains($0.bundleID) }
        }
        for v in victims { XCTAssertEqual(bob.receivedEnvelopes.filter { $0.bundleID == v.bundleID }.count, 1, file: file, line: line) }
    }

    // MARK: 4. Summary flood

    func testSummaryFloodDegradesOnlyTheFloodingLink() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let pid = s.hub.process.processIdentifier
        let rssBefore = Self.rssKiB(pid)
        let flooder = try RawPeer(identity: Identity.generate(), role: .hub, hubPort: s.port, host: "127.0.0.2")
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)

        // ~200 offers a second of 4,000 random IDs each (a tenth of the frame limit), for 10 s.
        final class Stop: Sendable { let flag = Mutex(false) }
        let stop = Stop()
        let flood = Thread {
            while !stop.flag.withLock({ $0 }) {
                let ids = (0..<BundleIDList.maxCount).map { _ in Random.bytes(16) }
                if let v = try? BundleIDList(bundleIDs: ids) { try? flooder.send(TLVRecord(.offer, value: v.encoded)) }
                usleep(5_000)
            }
        }
        flood.start()
        var peakRSS = rssBefore
        let floodStart = Date()
        let (_, latencies) = try aliceSendsDuringAFlood(s, phone: phone, bob: bob, seconds: 10, pauseMicroseconds: 200_000) {
            peakRSS = max(peakRSS, Self.rssKiB(pid))
        }
        stop.flag.withLock { $0 = true }
        // The hub answers its control socket promptly after the flood.
        let t0 = Date()
        let status = try s.hub.status().router
        let statusMs = Date().timeIntervalSince(t0) * 1000
        let requested = flooder.frames(.request).reduce(0) { $0 + ((try? BundleIDList(parsing: $1.value))?.bundleIDs.count ?? 0) }
        print(String(format: "summary flood: %d messages delivered meanwhile, latency p50 %.1f ms, max %.1f ms; hub RSS %d → peak %d KiB; "
                     + "status answered in %.0f ms; %d offered IDs dropped, %d frames over the link's limits; %d IDs requested from the flooder",
                     latencies.count, latencies[latencies.count / 2], latencies.last ?? 0, rssBefore, peakRSS, statusMs,
                     status.counters.offersDropped, status.counters.framesRateLimited + status.counters.framesQueueFull, requested))
        XCTAssertGreaterThanOrEqual(latencies.count, 5, "legitimate messages kept flowing")
        // At most 4,000 outstanding at a time; they lapse after the custody timeout (5 s here),
        // so each 5 s of flooding may bring one more round.
        let rounds = Int(Date().timeIntervalSince(floodStart) / 5) + 1
        XCTAssertLessThanOrEqual(requested, rounds * Router.maxRequestedPerLink, "per-link request state is bounded")
        XCTAssertGreaterThan(status.counters.offersDropped, 0, "the flood was cut at the link's backlog")
    }

    /// While a flood runs: alice sends bob one message at a time for `seconds`, each waited for
    /// (30 s at most) and acknowledged by bob as a phone would, `pauseMicroseconds` apart.
    /// Returns their bundle IDs, in order, and their delivery latencies in ms, sorted.
    private func aliceSendsDuringAFlood(_ s: UDPHubSetup, phone: RawPeer, bob: RawPeer, seconds: TimeInterval,
                                        pauseMicroseconds: useconds_t, afterEach: () -> Void = {}) throws -> (ids: [[UInt8]], latencies: [Double]) {
        var ids: [[UInt8]] = []
        var latencies: [Double] = []
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            let e = try seal("during the flood", from: s.alice, to: s.bob)
            let t0 = Date()
            try phone.send(e)
            // A flood fills the hub's UDP socket buffer, where the kernel drops datagrams
            // without looking at who sent them; a phone sends a bundle its hub has not taken
            // into custody again (HubSession does), so alice does too, once a second until bob has it.
            var lastSend = Date()
            try Wait.until(timeout: 30, "alice's message delivered during the flood") {
                if bob.receivedEnvelopes.contains(where: { $0.bundleID == e.bundleID }) { return true }
                if Date().timeIntervalSince(lastSend) >= 1 {   // a held copy is answered as a duplicate
                    try phone.send(e)
                    lastSend = Date()
                }
                return false
            }
            latencies.append(Date().timeIntervalSince(t0) * 1000)
            ids.append(e.bundleID)
            try bob.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
            afterEach()
            usleep(pauseMicroseconds)
        }
        return (ids, latencies.sorted())
    }

    static func rssKiB(_ pid: Int32) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }

    // MARK: 4b. Forged-bundle flood

    /// Anyone may attach as a phone. Mallory sends bundles that claim alice as sender, each
    /// with a fresh message ID the signature does not cover, as fast as his link lets him for
    /// 5 s: every one costs the hub a signature check, on the receiving thread since session
    /// 21. None may be stored or carried, and alice's messages to bob keep flowing meanwhile.
    func testForgedBundleFloodIsRefusedAndAliceStillGetsThrough() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let mallory = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: s.port, host: "127.0.0.2")
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        let template = YaokWire.Bundle(envelope: try seal("a real one of alice's", from: s.alice, to: s.bob)).encoded
        let idRange = (HopHeader.lengthV1 + 2)..<(HopHeader.lengthV1 + 18)

        final class Flood: Sendable { let stop = Mutex(false); let sent = Mutex(0) }
        let flood = Flood()
        let thread = Thread {
            var attempts = 0
            while !flood.stop.withLock({ $0 }) {
                var forged = template
                forged.replaceSubrange(idRange, with: Random.bytes(16))
                if (try? mallory.send(TLVRecord(.bundle, value: forged))) != nil { flood.sent.withLock { $0 += 1 } }
                attempts += 1
                if attempts % 64 == 0 { usleep(1_000) }   // within the kernel's socket buffer, not the hub's limits
            }
        }
        thread.start()
        let (legit, latencies) = try aliceSendsDuringAFlood(s, phone: phone, bob: bob, seconds: 5, pauseMicroseconds: 100_000)
        flood.stop.withLock { $0 = true }
        while !thread.isFinished { usleep(10_000) }
        let sent = flood.sent.withLock { $0 }
        try Wait.until(timeout: 20, "a refusal for some of mallory's forgeries") {
            mallory.frames(.custodyRefused).contains { RawPeer.refusal($0) == .badSignature }
        }
        let c = try s.hub.status().router.counters
        print(String(format: "forged flood: %d sent, %d refused for their signature, %d over the link's limits; %d of alice's delivered meanwhile, p50 %.1f ms, max %.1f ms",
                     sent, c.refusedSignature, c.framesRateLimited + c.framesQueueFull, legit.count, latencies[latencies.count / 2], latencies.last ?? 0))
        XCTAssertGreaterThanOrEqual(legit.count, 5, "alice's messages kept flowing")
        XCTAssertGreaterThan(c.refusedSignature, 100, "the hub checked the forgeries")
        XCTAssertEqual(c.accepted, legit.count, "only alice's own bundles were stored")
        XCTAssertTrue(mallory.acknowledged.isEmpty, "no forgery was taken into custody")
        XCTAssertEqual(Set(bob.receivedEnvelopes.map(\.bundleID)), Set(legit), "bob got alice's messages and no forgery")
    }

    // MARK: 5. Attachment-table poisoning

    func testPoisonedAttachmentAnnouncementsAreRefused() throws {
        let s = try startUDPHub(router: "\n  policy: spray-and-wait\n  spray_copies: 1")
        defer { s.hub.stop() }
        let malloryKey = Identity.generate()
        let mallory = try RawPeer(identity: malloryKey, role: .hub, hubPort: s.port, host: "127.0.0.2")
        let now = WallClock.nowMilliseconds()
        // Pinning bob to the attacker for ever: a timestamp of Int64.max.
        let pinned = try AttachmentAnnouncement.signed(by: malloryKey, timestampMs: Int64.max, userIDs: [s.bob.userID])
        try mallory.send(TLVRecord(.attachment, value: pinned.encoded))
        // Speaking for another hub (a replayed or invented announcement of a key it does not hold).
        let other = try AttachmentAnnouncement.signed(by: Identity.generate(), timestampMs: now, userIDs: [s.bob.userID])
        try mallory.send(TLVRecord(.attachment, value: other.encoded))
        // A bad signature.
        var forged = try AttachmentAnnouncement.signed(by: malloryKey, timestampMs: now, userIDs: [s.bob.userID]).encoded
        forged[forged.count - 1] ^= 1
        try mallory.send(TLVRecord(.attachment, value: forged))
        // An endpoint may not announce at all.
        let phoneKey = Identity.generate()
        let phoneAttacker = try RawPeer(identity: phoneKey, role: .endpoint, hubPort: s.port, host: "127.0.0.3")
        try phoneAttacker.send(TLVRecord(.attachment, value: try AttachmentAnnouncement.signed(by: phoneKey, timestampMs: now, userIDs: [s.bob.userID]).encoded))
        try Wait.until(timeout: 10, "four announcements refused") { try s.hub.status().router.counters.attachmentsRefused == 4 }

        // The victim's mail is still delivered, exactly once, when bob attaches.
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let victim = try seal("still here", from: s.alice, to: s.bob)
        try phone.send(victim)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: victim.bundleID)))
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        XCTAssertEqual(try deliveries(of: victim.bundleID, to: bob), 1)
        XCTAssertEqual(try s.hub.status().router.counters.attachmentsRefused, 4)
    }

    // MARK: 6. A peer claiming the relay role

    func testAPeerClaimingTheRelayRoleGetsNoRegistrationsAndNoBundles() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        // Any UDP peer could say "I am the relay" and was handed every attached phone's relay
        // registration and the bundles routed to the internet.
        let fakeRelay = try RawPeer(identity: Identity.generate(), role: .relay, hubPort: s.port, host: "127.0.0.2")
        try Wait.until(timeout: 10, "the claimed relay role refused") { try s.hub.status().router.counters.rolesRefused == 1 }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        try phone.send(TLVRecord(.registration, value: [UInt8](repeating: 0x52, count: 120)))
        let victim = try seal("for bob, wherever he is", from: s.alice, to: s.bob)
        try phone.send(victim)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: victim.bundleID)))
        // The hub's periodic routing runs each second; give it two rounds, then look.
        let status = try s.hub.status().router
        XCTAssertFalse(status.links.contains { $0.role == "relay" }, "no relay link at the router: \(status.links)")
        let deadline = Date().addingTimeInterval(2.5)
        while Date() < deadline { usleep(100_000) }
        XCTAssertTrue(fakeRelay.frames(.registration).isEmpty, "a registration went to the fake relay")
        XCTAssertTrue(fakeRelay.receivedEnvelopes.isEmpty, "a bundle went to the fake relay")
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        XCTAssertEqual(try deliveries(of: victim.bundleID, to: bob), 1)
    }

    // MARK: 7. A receipt survives the receiver's crash

    func testReceiptSurvivesAReceiverKilledRightAfterStoring() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try MessagePathTests.initPair(dir)
        let url = "udp://127.0.0.1:\(s.port)"
        _ = try MessagePathTests.yaok(alice, ["send", "Bob", "do not lose my receipt", "--hub", url, "--json", "--timeout", "20"])
        // Bob stores the message (and its receipt) and dies before acknowledging or sending anything.
        var env = ProcessInfo.processInfo.environment
        env["YAOK_FAULT"] = "exit-after-receive"
        let crashed = try TestSupport.run(try TestSupport.product("yaok"), ["listen", "--home", bob, "--hub", url, "--json", "--timeout", "20"],
                                          timeout: 60, environment: env)
        XCTAssertEqual(crashed.status, 137, "the fault hook fired: \(crashed.output)")
        XCTAssertEqual(try MessagePathTests.yaok(bob, ["inbox", "--json"]).count, 1, "the message was stored before the crash")
        // Restarted: the hub sends the message again (no custody ack came), bob sees a
        // duplicate, and the stored receipt leaves.
        let again = try MessagePathTests.yaok(bob, ["listen", "--hub", url, "--json", "--timeout", "4"])
        XCTAssertFalse(again.contains { $0["event"] as? String == "message" }, "not shown twice")
        XCTAssertEqual(try MessagePathTests.yaok(bob, ["inbox", "--json"]).count, 1)
        var outbox: [[String: Any]] = []
        try Wait.until(timeout: 40, "alice's outbox shows delivered") {
            _ = try MessagePathTests.yaok(alice, ["listen", "--hub", url, "--json", "--timeout", "2"])
            outbox = try MessagePathTests.yaok(alice, ["outbox", "--json"])
            return outbox.first?["state"] as? String == "delivered"
        }
    }
}
