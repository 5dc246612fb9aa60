import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokWire
import YaokTesting
import RelayTestSupport

final class RelayLimitsAndRobustnessTests: XCTestCase {
    var relay: RelayHarness!

    override func tearDown() { relay?.tearDown() }

    func testRateLimitGivesClearErrorWithRetryTime() throws {
        var limits = RelayLimits()
        limits.messagesPerHour = 3
        relay = try RelayHarness(limits: limits)
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        for _ in 0..<3 { XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob)).status, .queued) }
        XCTAssertThrowsError(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob))) { error in
            guard case RelayProtocolError.refused(let notice) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(notice.code, .rateLimited)
            // One token per 20 minutes at 3 per hour.
            XCTAssertGreaterThan(notice.retryAfterMs, 1_100_000)
            XCTAssertLessThanOrEqual(notice.retryAfterMs, 1_200_000)
            let text = String(describing: error)
            XCTAssertTrue(text.contains("rate limit: 3 messages per hour per sender"), text)
            XCTAssertTrue(text.contains("retry in"), text)
        }
        XCTAssertEqual(relay.server.metricsSnapshot().sendsRefused["rate_limited"], 1)
        // Another sender is not affected.
        let dave = Identity.generate()
        let d = try relay.registeredClient(dave)
        XCTAssertEqual(try d.sendAndWait(bundle: messageBundle(from: dave, to: bob)).status, .queued)
    }

    func testRecipientQueueLimit() throws {
        var limits = RelayLimits()
        limits.maxQueuedPerUser = 2
        relay = try RelayHarness(limits: limits)
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        for _ in 0..<2 { _ = try a.sendAndWait(bundle: messageBundle(from: alice, to: bob)) }
        XCTAssertThrowsError(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob))) { error in
            guard case RelayProtocolError.refused(let notice) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(notice.code, .recipientQueueFull)
        }
    }

    func testRegistrationsPerIPAreRateLimited() throws {
        var limits = RelayLimits()
        limits.registrationsPerMinutePerIP = 2   // burst 10
        relay = try RelayHarness(limits: limits)
        let c = relay.client()
        try c.connect()
        let regs = try (0..<10).map { _ in try relay.registration(Identity.generate(), on: c) }
        XCTAssertEqual(try c.registerAndWait(regs).map(\.status), Array(repeating: .accepted, count: 10))
        let more = try c.registerAndWait([relay.registration(Identity.generate(), on: c)])
        XCTAssertEqual(more.map(\.status), [.tooManyRegistrations])
    }

    func testRegistrationLimitCountsAPhoneAttachedThroughItsHubOnce() throws {
        var limits = RelayLimits()
        limits.maxRegistrations = 3
        relay = try RelayHarness(limits: limits)
        let hub = relay.client()
        try hub.connect()
        // The hub owns its session; the phone registered on it is attached to the hub.
        let hubID = Identity.generate()
        let hubAndPhone = try [relay.registration(hubID, on: hub), relay.carried(Identity.generate(), collector: hubID)]
        XCTAssertEqual(try hub.registerAndWait(hubAndPhone).map(\.status), [.accepted, .accepted])
        let other = relay.client()
        try other.connect()
        // Two distinct users so far: a third fits, a fourth does not.
        XCTAssertEqual(try other.registerAndWait([relay.registration(Identity.generate(), on: other)]).map(\.status), [.accepted])
        XCTAssertEqual(try other.registerAndWait([relay.registration(Identity.generate(), on: other)]).map(\.status), [.tooManyRegistrations])
    }

    func testMalformedAndOversizedDatagramsAreCountedAndDropped() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let raw = RawUDP()
        let port = relay.port
        let before = relay.server.metricsSnapshot()

        raw.send(Array("hello there".utf8), port: port)                       // not ours
        raw.send([], port: port)                                              // empty
        var badVersion = RelayPacket.header(type: .ping, sessionID: 1, counter: 1, payloadLength: 0)
        badVersion[4] = 9
        raw.send(badVersion, port: port)                                      // version 9
        var badType = RelayPacket.header(type: .ping, sessionID: 1, counter: 1, payloadLength: 0)
        badType[5] = 0xEE
        raw.send(badType, port: port)                                         // unknown type
        raw.send(RelayPacket.header(type: .ping, sessionID: 1, counter: 1, payloadLength: 500), port: port)  // length lies
        raw.send(try RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: [1, 2, 3]).encoded(), port: port)  // short HELLO
        raw.send([UInt8](repeating: 0x59, count: 4000), port: port)          // oversized
        raw.send(RelayPacket.magic + [UInt8](repeating: 0, count: 1500), port: port)  // oversized with magic
        XCTAssertTrue(Wait.poll {
            let m = self.relay.server.metricsSnapshot()
            return m.droppedMalformed - before.droppedMalformed == 6 && m.droppedOversized - before.droppedOversized == 2
        }, "\(relay.server.metricsSnapshot())")

        // A sealed packet for an unknown session is answered with a RESET, nothing else.
        raw.send(try RelayPacket(type: .ping, sessionID: 42, counter: 1, payload: [UInt8](repeating: 0, count: 24)).encoded(), port: port)
        let reply = try XCTUnwrap(raw.receive())
        let reset = try RelayPacket(parsing: reply)
        XCTAssertEqual(reset.type, .reset)
        XCTAssertEqual(reset.sessionID, 42)
        XCTAssertEqual(reply.count, RelayPacket.headerLength)

        // The relay still works.
        let b = try relay.registeredClient(bob)
        let mark = b.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: bob)).status, .pushed)
        XCTAssertNoThrow(try b.nextMessage(after: mark, timeout: 5))
    }

    func testPerIPPacketRateLimitDrops() throws {
        var limits = RelayLimits()
        limits.packetsPerSecondPerIP = 20   // burst 40
        relay = try RelayHarness(limits: limits)
        let raw = RawUDP()
        for _ in 0..<200 { raw.send(Array("junk".utf8), port: relay.port) }
        XCTAssertTrue(Wait.poll { self.relay.server.metricsSnapshot().datagramsIn >= 200 })
        let m = relay.server.metricsSnapshot()
        XCTAssertGreaterThanOrEqual(m.droppedRateLimited, 150)
        XCTAssertEqual(m.droppedRateLimited + m.droppedMalformed, 200)
    }

    func testQueueSurvivesRestartAndClientsReconnect() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), carol = Identity.generate()
        let a = try relay.registeredClient(alice)
        let bundle = try messageBundle(from: alice, to: carol)
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .queued)
        let carolClient = relay.client()
        try carolClient.connect()
        let carolReg = try relay.registration(carol, on: carolClient)
        let mark = carolClient.currentSeq()
        XCTAssertEqual(try carolClient.registerAndWait([carolReg]).map(\.status), [.accepted])
        _ = try carolClient.nextMessage(after: mark, timeout: 5)   // pushed, not acked
        carolClient.stop()

        let reconnect = a.currentSeq()
        try relay.restart()
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: carol.userID) }, 1)

        // Alice's client learns its session is gone (RESET) once it talks, and handshakes again.
        try? a.poll()
        let event = try a.waitFor("reconnect", timeout: 10, after: reconnect) { e -> Bool? in
            if case .connected = e { return true }
            return nil
        }
        XCTAssertTrue(event)

        // Carol's old registration is worthless on a new session (bound to the old channel),
        // and a carried one cannot be replayed after the restart (nonce cache persisted).
        let c2 = relay.client()
        try c2.connect()
        XCTAssertEqual(try c2.registerAndWait([carolReg]).map(\.status), [.wrongChannel])
        let mark2 = c2.currentSeq()
        XCTAssertEqual(try c2.registerAndWait([relay.registration(carol, on: c2)]).map(\.status), [.accepted])
        let got = try c2.nextMessage(after: mark2, timeout: 5)
        XCTAssertEqual(got.bundle, bundle)
        try c2.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: carol.userID) } == 0 })
    }

    func testMetricsEndpointServesPrometheusText() throws {
        relay = try RelayHarness()
        _ = try relay.registeredClient(Identity.generate())
        let addr = try XCTUnwrap(relay.server.metricsAddress)
        let text = try XCTUnwrap(httpGet(port: addr.port!, path: "/metrics"))
        XCTAssertTrue(text.hasPrefix("HTTP/1.0 200 OK"), text)
        XCTAssertTrue(try XCTUnwrap(httpGet(port: addr.port!, path: "/other")).hasPrefix("HTTP/1.0 404"))
        XCTAssertTrue(text.contains("yaok_relay_handshakes_total 1"), text)
        XCTAssertTrue(text.contains("yaok_relay_registered_users 1"), text)
        XCTAssertTrue(text.contains("# TYPE yaok_relay_sessions gauge"), text)
        XCTAssertTrue(text.contains("# HELP yaok_relay_dropped_total Datagrams dropped, by reason."), text)
        XCTAssertTrue(text.contains("yaok_relay_dropped_total{reason=\"malformed\"} 0"), text)
        // Counters advance between scrapes (the registry is brought up to the engine's values).
        RawUDP().send([0x59, 0x41, 0x4f, 0x4b, 0xff], port: relay.port)
        _ = try relay.registeredClient(Identity.generate())
        XCTAssertTrue(Wait.poll { self.relay.server.metricsText().contains("yaok_relay_dropped_total{reason=\"malformed\"} 1") }, relay.server.metricsText())
        let again = relay.server.metricsText()
        XCTAssertTrue(again.contains("yaok_relay_handshakes_total 2"), again)
        XCTAssertTrue(again.contains("yaok_relay_registered_users 2"), again)
    }
}
