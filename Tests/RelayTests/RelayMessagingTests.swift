import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokWire
import YaokTesting
import RelayTestSupport

final class RelayMessagingTests: XCTestCase {
    var relay: RelayHarness!

    override func setUpWithError() throws {
        var limits = RelayLimits()
        limits.leaseMs = 1_000
        relay = try RelayHarness(limits: limits)
    }
    override func tearDown() { relay.tearDown() }

    func testSendToOnlineRecipientIsPushedAndAckDeletes() throws {
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let b = try relay.registeredClient(bob)
        let bundle = try messageBundle(from: alice, to: bob)
        let mark = b.currentSeq()
        let queued = try a.sendAndWait(bundle: bundle)
        XCTAssertEqual(queued.status, .pushed)
        let got = try b.nextMessage(after: mark, timeout: 5)
        XCTAssertEqual(got.bundle, bundle)
        // The relay held it durably before pushing and keeps it until the ACK.
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 1)
        try b.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: bob.userID) } == 0 })
        XCTAssertFalse(try relay.store.contains(got.bundleID))
        // Sending it again is recognised... as new, since it was delivered and deleted; but a
        // duplicate while queued is reported as such.
        let carol = Identity.generate()
        let forCarol = try messageBundle(from: alice, to: carol)
        XCTAssertEqual(try a.sendAndWait(bundle: forCarol).status, .queued)
        XCTAssertEqual(try a.sendAndWait(bundle: forCarol).status, .duplicate)
    }

    func testOfflineRecipientQueuedThenPollReturnsBatchesAndAckDeletes() throws {
        let alice = Identity.generate(), carol = Identity.generate()
        let a = try relay.registeredClient(alice)
        var sent: [[UInt8]] = []
        for _ in 0..<13 {
            let b = try messageBundle(from: alice, to: carol)
            XCTAssertEqual(try a.sendAndWait(bundle: b).status, .queued)
            sent.append(b)
        }
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: carol.userID) }, 13)

        // Carol comes online: registering pushes the first 10 at once...
        let c = relay.client()
        try c.connect()
        let mark = c.currentSeq()
        XCTAssertEqual(try c.registerAndWait([relay.registration(carol, on: c)]).map(\.status), [.accepted])
        var received: [[UInt8]: [UInt8]] = [:]
        for m in try c.nextMessages(10, after: mark, timeout: 5) { received[m.bundleID] = m.bundle }
        XCTAssertEqual(received.count, 10)
        // ...and a poll returns the other 3 (the 10 are leased, not offered twice).
        let polled = try c.pollAndWait()
        XCTAssertEqual(polled.count, 3)
        for m in polled { received[m.bundleID] = m.bundle }
        XCTAssertTrue(Set(received.values) == Set(sent), "received \(received.count) distinct bundles, not the 13 sent")

        // Acknowledge all but one: they are deleted; the last is offered again after its lease.
        let ids = Array(received.keys)
        try c.ack(Array(ids.dropLast()))
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: carol.userID) } == 1 })
        Thread.sleep(forTimeInterval: 1.1)   // let the 1 s lease run out (no event marks a lease ending)
        let again = try c.pollAndWait()
        XCTAssertTrue(again.map(\.bundleID) == [ids.last!], "re-offered \(again.count) messages")
        try c.ack([ids.last!])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: carol.userID) } == 0 })
        XCTAssertEqual(try c.pollAndWait().count, 0)
    }

    func testOnlyTheRecipientsSessionCanAck() throws {
        let alice = Identity.generate(), carol = Identity.generate(), mallory = Identity.generate()
        let a = try relay.registeredClient(alice)
        let bundle = try messageBundle(from: alice, to: carol)
        _ = try a.sendAndWait(bundle: bundle)
        let m = try relay.registeredClient(mallory)
        try m.ack([BundleID.of(bundle: bundle)!])
        _ = try m.pollAndWait()   // a round trip after the ACK: it has been processed
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: carol.userID) }, 1)
    }

    func testForgedEnvelopeIsRefused() throws {
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        var bundle = try messageBundle(from: alice, to: bob)
        bundle[bundle.count - 100] ^= 0x01   // inside the ciphertext, covered by the signature
        XCTAssertThrowsError(try a.sendAndWait(bundle: bundle)) { error in
            guard case RelayProtocolError.refused(let notice) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(notice.code, .badSignature)
            XCTAssertEqual(notice.reference, BundleID.of(bundle: bundle))
        }
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 0)
    }

    func testTenKilobyteEnvelopeIsFragmentedAndReassembled() throws {
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let b = try relay.registeredClient(bob)
        let bundle = try messageBundle(from: alice, to: bob, size: Envelope.maxPlaintextLength)
        XCTAssertEqual(bundle.count, HopHeader.lengthV1 + Envelope.maxEncodedLength)
        XCTAssertGreaterThan(bundle.count, 7 * RelayPacket.maxDatagramLength)
        let before = relay.server.metricsSnapshot().datagramsIn
        let mark = b.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .pushed)
        let got = try b.nextMessage(after: mark, timeout: 5)
        XCTAssertEqual(got.bundle, bundle)
        XCTAssertGreaterThanOrEqual(relay.server.metricsSnapshot().datagramsIn - before, 8)
        // It opens at the recipient: the relay forwarded the exact bytes.
        let envelope = try YaokWire.Bundle(parsing: got.bundle).envelope
        XCTAssertEqual(try envelope.open(with: bob), Array(repeating: 0x61, count: Envelope.maxPlaintextLength))
    }

    func testHubCarriesAPhonesRegistrationAndKeepsItAcrossReconnect() throws {
        let hub = Identity.generate(), phone = Identity.generate(), alice = Identity.generate()
        let h = try relay.registeredClient(hub)
        // The phone signs once; the hub carries it.
        XCTAssertEqual(try h.registerAndWait([relay.carried(phone, collector: hub)]).map(\.status), [.accepted])
        let a = try relay.registeredClient(alice)
        let mark = h.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: phone)).status, .pushed)
        let m = try h.nextMessage(after: mark, timeout: 5)
        try h.ack([m.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: phone.userID) } == 0 })

        // The hub reconnects on a new session and registers only itself: the phone stays reachable.
        h.stop()
        let h2 = try relay.registeredClient(hub)
        let mark2 = h2.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: phone)).status, .pushed)
        XCTAssertNotNil(try? h2.nextMessage(after: mark2, timeout: 5))
    }
}

final class RelayUserSessionTests: XCTestCase {
    func testInternetUserSendsReceivesAndAcknowledges() throws {
        let relay = try RelayHarness()
        defer { relay.tearDown() }
        let alice = Identity.generate(), bob = Identity.generate()
        let a = RelayUserSession(identity: alice, relay: relay.address, relayKey: relay.identity.signingKey)
        let b = RelayUserSession(identity: bob, relay: relay.address, relayKey: relay.identity.signingKey)
        defer { a.close(); b.close() }
        try a.open()
        let envelope = try Envelope.sealMessage(plaintext: Array("over the internet".utf8), from: alice, toSigningKey: bob.signingKey,
                                                recipientKXKey: bob.kxKey, createdMs: nowMs())
        XCTAssertEqual(try a.send(envelope).status, .queued)
        try b.open()
        // Registration pushed it (leased, so the poll round itself returns nothing new);
        // receive() hands out what was pushed as well.
        let got = try b.receive()
        XCTAssertEqual(got.count, 1)
        let bundle = try XCTUnwrap(got.first)
        XCTAssertEqual(try bundle.envelope.open(with: bob), Array("over the internet".utf8))
        try b.acknowledge([bundle.envelope.bundleID])
        XCTAssertTrue(Wait.poll { relay.server.withEngine { $0.queuedCount(for: bob.userID) } == 0 })
        XCTAssertEqual(try b.receive().count, 0)

        let wrong = RelayUserSession(identity: alice, relay: relay.address, relayKey: Identity.generate().signingKey)
        defer { wrong.close() }
        XCTAssertThrowsError(try wrong.open(timeout: 5)) { XCTAssertTrue(String(describing: $0).hasPrefix("relay key mismatch")) }
    }
}
