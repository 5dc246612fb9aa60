import Foundation
import Logging
import NIOCore
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokRelayWebSocket
import YaokWire
import enum YaokPluginKit.Hex
import YaokTesting
import RelayTestSupport

/// A relay session driven by hand over a real UDP socket (RawUDP): HELLO with or without a
/// cookie, then sealed packets. For what RelayClient never sends (v1 REGISTER, cookie-less
/// HELLOs under load).
final class RawRelaySession {
    let udp = RawUDP()
    let port: Int
    let pin: [UInt8]
    let eph = EphemeralKX.generate()
    private(set) var secure: SecureSession?

    init(port: Int, pin: [UInt8]) {
        self.port = port
        self.pin = pin
    }

    var helloBytes: [UInt8] { (try? RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: eph.publicKey).encoded).encoded()) ?? [] }

    func hello(cookie: [UInt8]? = nil) -> [UInt8] {
        (try? RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: eph.publicKey, cookie: cookie).encoded).encoded()) ?? []
    }

    /// Sends `datagram` and returns the first answer of an accepted type, retrying every 200 ms
    /// for at most `tries` receives (lost datagrams on a busy machine).
    func exchange(_ datagram: [UInt8], tries: Int = 25, accept: (RelayPacket) -> Bool) -> (bytes: [UInt8], packet: RelayPacket)? {
        for i in 0..<tries {
            if i % 5 == 0 { udp.send(datagram, port: port) }
            guard let bytes = udp.receive(), let p = try? RelayPacket(parsing: bytes) else { continue }
            if accept(p) { return (bytes, p) }
        }
        return nil
    }

    /// Completes the handshake from a HELLO_REPLY packet.
    func accept(_ reply: RelayPacket) throws {
        let r = try HelloReply(parsing: reply.payload)
        try r.verify(pinnedKey: pin, sessionID: reply.sessionID, clientKey: eph.publicKey)
        secure = try SecureSession(side: .client, sessionID: reply.sessionID, ours: eph, theirs: r.relayEphemeralKey)
    }

    /// Seals `message` as `type` and sends it without waiting for an answer.
    func post(_ type: RelayPacketType, _ message: [UInt8]) throws {
        udp.send(try XCTUnwrap(secure).seal(type, message), port: port)
    }

    /// Seals `message` as `type` and returns the first sealed answer's (type, plaintext).
    func request(_ type: RelayPacketType, _ message: [UInt8]) throws -> (RelayPacketType, [UInt8])? {
        let s = try XCTUnwrap(secure)
        let datagram = try s.seal(type, message)
        // A sealed packet may not be resent (replay window): send once, wait up to 5 s.
        udp.send(datagram, port: port)
        for _ in 0..<25 {
            guard let bytes = udp.receive(), let p = try? RelayPacket(parsing: bytes), p.type.isSealed else { continue }
            return (p.type, try s.open(p))
        }
        return nil
    }
}

/// At the relay: registrations are bound (not bearer tokens), and the DoS limits (address
/// prefixes, HELLO cookies, shares, no global resets). Real relay on loopback (RelayHarness)
/// unless a test says it drives the engine or a limiter directly.
final class RelayBindingAndDoSTests: XCTestCase {
    var relay: RelayHarness!

    override func tearDown() {
        relay?.tearDown()
        relay = nil
    }

    // MARK: Registrations are not bearer tokens

    /// The attack: a fake relay got phone P's fresh registration (carried for hub H) and
    /// presents it at the real relay first, on its own session, then polls and ACKs. Refused
    /// and counted, nothing is deleted, the nonce is not used up, and P's mail later reaches
    /// the genuine hub exactly once.
    func testCapturedPhoneRegistrationIsRefusedToAnAttackerAndTheMailReachesTheGenuineHubOnce() throws {
        relay = try RelayHarness()
        let hub = Identity.generate(), phone = Identity.generate(), alice = Identity.generate(), mallory = Identity.generate()
        let captured = try relay.carried(phone, collector: hub)

        let a = try relay.registeredClient(alice)
        let bundle = try messageBundle(from: alice, to: phone)
        let bundleID = try XCTUnwrap(BundleID.of(bundle: bundle))
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .queued)

        // The attacker's session: the captured registration alone, then beside its own owner
        // registration; neither makes it a collector for the phone.
        let m = relay.client()
        try m.connect()
        let attackerMark = m.currentSeq()
        XCTAssertEqual(try m.registerAndWait([captured]).map(\.status), [.collectorMismatch])
        XCTAssertEqual(try m.registerAndWait([relay.registration(mallory, on: m), captured]).map(\.status), [.accepted, .collectorMismatch])
        XCTAssertEqual(try m.pollAndWait().count, 0)
        try m.ack([bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.metricsSnapshot().acksRefused == 1 }, "the forged ACK is counted")
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: phone.userID) }, 1, "the forged ACK deleted nothing")
        XCTAssertNil(try? m.nextMessage(after: attackerMark, timeout: 0.3), "the attacker never got the phone's mail")
        let refused = relay.server.metricsSnapshot().registrationsRefusedByReason
        XCTAssertEqual(refused["collector_mismatch"], 2)

        // The genuine hub carries the same registration (its nonce was not used up by the
        // refusals) and gets the mail, once.
        let h = try relay.registeredClient(hub)
        let mark = h.currentSeq()
        XCTAssertEqual(try h.registerAndWait([captured]).map(\.status), [.accepted])
        let got = try h.nextMessage(after: mark, timeout: 5)
        XCTAssertEqual(got.bundle, bundle)
        try h.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: phone.userID) } == 0 })
        XCTAssertEqual(try h.pollAndWait().count, 0)
        XCTAssertThrowsError(try h.nextMessages(2, after: mark, timeout: 0.3), "the hub got the bundle exactly once")
        // And the attacker's session still cannot reach it: a later message for the phone is
        // pushed to the hub, not to the attacker.
        let later = try messageBundle(from: alice, to: phone)
        let mark2 = h.currentSeq()
        XCTAssertEqual(try a.sendAndWait(bundle: later).status, .pushed)
        XCTAssertEqual(try h.nextMessage(after: mark2, timeout: 5).bundle, later)
        XCTAssertEqual(try m.pollAndWait().count, 0)
    }

    /// An owner registration signs its session's channel binding: the same bytes on another
    /// session, or one signed for a session at another (fake) relay, are refused.
    func testOwnerRegistrationReplayedOnAnotherSessionIsRefused() throws {
        relay = try RelayHarness()
        let user = Identity.generate()
        let c = relay.client()
        try c.connect()
        let reg = try relay.registration(user, on: c)
        XCTAssertEqual(try c.registerAndWait([reg]).map(\.status), [.accepted])

        let attacker = relay.client()
        try attacker.connect()
        XCTAssertNotEqual(attacker.channelBinding, c.channelBinding)
        XCTAssertEqual(try attacker.registerAndWait([reg]).map(\.status), [.wrongChannel])
        // Signed for some other session (what a fake relay would collect): also refused.
        let elsewhere = try Registration.owner(user, relaySigningKey: relay.identity.signingKey,
                                               channel: ChannelBinding(bytes: Random.bytes(32)), timestampMs: nowMs())
        XCTAssertEqual(try attacker.registerAndWait([elsewhere]).map(\.status), [.wrongChannel])
        XCTAssertEqual(relay.server.metricsSnapshot().registrationsRefusedByReason["wrong_channel"], 2)
        // The attacker's session has no user, so it may not poll.
        let mark = attacker.currentSeq()
        try attacker.poll()
        let notice = try attacker.waitFor("ERROR", timeout: 5, after: mark) { e -> RelayErrorNotice? in
            if case .relayError(let n) = e { return n }
            return nil
        }
        XCTAssertEqual(notice.code, .notRegistered)
    }

    /// The attack: throwaway phones fill a hub's session with carried registrations so a real
    /// phone's is refused and its internet mail sits at the relay. Fresh ones are kept (a
    /// newcomer is refused, counted), renewals are never refused, and a place held by a
    /// registration its hub stopped renewing goes to the next newcomer: the real phone's mail
    /// then reaches the hub, once.
    func testThrowawayCarriedRegistrationsGiveWayToARealPhoneOnceTheyStopBeingRenewed() throws {
        var limits = RelayLimits()
        limits.maxRegistrationsPerSession = 9   // the hub's own and 8 carried
        limits.carriedIdleMs = 1_500
        relay = try RelayHarness(limits: limits)
        let hub = Identity.generate(), phone = Identity.generate(), alice = Identity.generate()
        let h = try relay.registeredClient(hub)
        let throwaway = (0..<8).map { _ in Identity.generate() }
        XCTAssertEqual(try h.registerAndWait(try throwaway.map { try relay.carried($0, collector: hub) }).map(\.status),
                       Array(repeating: .accepted, count: 8))
        // While they are fresh, the newcomer is refused (not a renewing one evicted)...
        XCTAssertEqual(try h.registerAndWait([relay.carried(phone, collector: hub)]).map(\.status), [.tooManyRegistrations])
        // ...and a renewal (a new registration from an attached phone) is always taken.
        XCTAssertEqual(try h.registerAndWait([relay.carried(throwaway[0], collector: hub)]).map(\.status), [.accepted])
        XCTAssertEqual(relay.server.metricsSnapshot().carriedRegistrationsEvicted, 0)

        let a = try relay.registeredClient(alice)
        let bundle = try messageBundle(from: alice, to: phone)
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .queued)
        // The real phone renews every few minutes (here: until a place frees up).
        let mark = h.currentSeq()
        try Wait.until(timeout: 15, "a place for the phone once the throwaway registrations are idle") {
            try h.registerAndWait([relay.carried(phone, collector: hub)]).map(\.status) == [.accepted]
        }
        let got = try h.nextMessage(after: mark, timeout: 5)
        XCTAssertEqual(got.bundle, bundle)
        try h.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: phone.userID) } == 0 })
        XCTAssertThrowsError(try h.nextMessages(2, after: mark, timeout: 0.3), "the hub got the bundle exactly once")
        let m = relay.server.metricsSnapshot()
        XCTAssertEqual(m.carriedRegistrationsEvicted, 1, "one idle place freed, the one renewed longest ago")
        XCTAssertGreaterThanOrEqual(m.registrationsRefusedByReason["too_many"] ?? 0, 1)
        // The evicted one was not throwaway[0] (renewed later): its renewal is still a renewal.
        XCTAssertEqual(try h.registerAndWait([relay.carried(throwaway[0], collector: hub)]).map(\.status), [.accepted])
    }

    /// A user's own session gets its mail before its collector's, even when the collector was
    /// heard from more recently (a collector's acknowledgement deletes at the relay).
    func testTheUsersOwnSessionIsPushedToBeforeItsCollectors() throws {
        relay = try RelayHarness()
        let hub = Identity.generate(), phone = Identity.generate(), alice = Identity.generate()
        let h = try relay.registeredClient(hub)
        XCTAssertEqual(try h.registerAndWait([relay.carried(phone, collector: hub)]).map(\.status), [.accepted])
        let own = try relay.registeredClient(phone)
        _ = try h.pollAndWait()   // the collector is now the one heard from last
        let a = try relay.registeredClient(alice)
        let hubMark = h.currentSeq(), ownMark = own.currentSeq()
        let bundle = try messageBundle(from: alice, to: phone)
        XCTAssertEqual(try a.sendAndWait(bundle: bundle).status, .pushed)
        XCTAssertEqual(try own.nextMessage(after: ownMark, timeout: 5).bundle, bundle)
        XCTAssertNil(try? h.nextMessage(after: hubMark, timeout: 0.5), "the collector was not pushed the phone's mail")
    }

    /// A carried registration whose `until` is past or more than 7 days ahead is refused.
    func testCarriedRegistrationUntilIsBounded() throws {
        relay = try RelayHarness()
        let hub = Identity.generate()
        let h = try relay.registeredClient(hub)
        let t = nowMs()
        let past = try relay.carried(Identity.generate(), collector: hub, timestampMs: t, untilMs: t - 1)
        let tooLong = try relay.carried(Identity.generate(), collector: hub, timestampMs: t, untilMs: t + Registration.maxCarriedLifetimeMs + 1)
        let week = try relay.carried(Identity.generate(), collector: hub, timestampMs: t, untilMs: t + Registration.maxCarriedLifetimeMs)
        XCTAssertEqual(try h.registerAndWait([past, tooLong, week]).map(\.status), [.badUntil, .badUntil, .accepted])
    }

    /// A v1 REGISTER (120-byte bearer registrations) gets one ERROR a v1 client can parse,
    /// with text saying why and what to do; nothing is registered.
    func testVersion1RegistrationGetsAClearRefusal() throws {
        relay = try RelayHarness()
        let raw = RawRelaySession(port: relay.port, pin: relay.identity.signingKey)
        let reply = try XCTUnwrap(raw.exchange(raw.helloBytes) { $0.type == .helloReply })
        try raw.accept(reply.packet)
        // A v1 registration as old clients made it.
        let user = Identity.generate()
        let t = nowMs(), nonce = Random.bytes(16)
        var w = ByteWriter()
        w.u64(UInt64(t))
        let body = Registration.v1Context + relay.identity.signingKey + user.signingKey + w.bytes + nonce
        let v1 = user.signingKey + w.bytes + nonce + user.sign(body)
        XCTAssertEqual(v1.count, Registration.v1Length)
        let answer = try XCTUnwrap(raw.request(.register, [1] + v1))
        XCTAssertEqual(answer.0, .error)
        let notice = try RelayErrorNotice(parsing: answer.1)
        XCTAssertEqual(notice.code, .malformed)
        XCTAssertEqual(notice.text, RelayProtocolError.registrationV1Text)
        XCTAssertTrue(notice.text.contains("yaok-relay-register-v2"))
        XCTAssertEqual(relay.server.metricsSnapshot().registrationsRefusedByReason["v1"], 1)
        XCTAssertEqual(relay.server.metricsSnapshot().registrationsAccepted, 0)
        // The new parser names the format too.
        XCTAssertThrowsError(try RegisterRequest(parsing: [1] + v1)) { XCTAssertEqual($0 as? RelayProtocolError, .registrationV1) }
    }

    // MARK: HELLO cookies

    /// Under load (here: always) a HELLO without a cookie gets a COOKIE_REPLY no larger than
    /// the HELLO and no session; the HELLO repeated with the cookie proceeds; a wrong cookie
    /// gets a fresh COOKIE_REPLY. RelayClient does the round by itself.
    func testHelloUnderLoadGetsASmallCookieReplyAndTheCookieLetsItProceed() throws {
        var limits = RelayLimits()
        limits.cookieHellosPerSecond = 0
        relay = try RelayHarness(limits: limits)
        let raw = RawRelaySession(port: relay.port, pin: relay.identity.signingKey)
        let hello = raw.hello()
        let first = try XCTUnwrap(raw.exchange(hello) { $0.type == .cookieReply || $0.type == .helloReply })
        XCTAssertEqual(first.packet.type, .cookieReply)
        XCTAssertLessThanOrEqual(first.bytes.count, hello.count)
        let cookie = try CookieReply(parsing: first.packet.payload)
        XCTAssertTrue(cookie.answers(clientKey: raw.eph.publicKey))
        XCTAssertEqual(relay.server.metricsSnapshot().handshakes, 0, "no session, no signature without a cookie")

        let wrong = try XCTUnwrap(raw.exchange(raw.hello(cookie: Random.bytes(16))) { $0.type == .cookieReply || $0.type == .helloReply })
        XCTAssertEqual(wrong.packet.type, .cookieReply)

        let second = try XCTUnwrap(raw.exchange(raw.hello(cookie: cookie.cookie)) { $0.type == .cookieReply || $0.type == .helloReply })
        XCTAssertEqual(second.packet.type, .helloReply)
        try raw.accept(second.packet)
        XCTAssertGreaterThanOrEqual(relay.server.metricsSnapshot().cookiesAccepted, 1)
        let pong = try XCTUnwrap(raw.request(.ping, [0, 0, 0, 0, 0, 0, 0, 1]))
        XCTAssertEqual(pong.0, .pong)

        // The client library handles the cookie round on its own.
        let alice = Identity.generate()
        let c = try relay.registeredClient(alice)
        XCTAssertTrue(c.isConnected)
        XCTAssertGreaterThanOrEqual(relay.server.metricsSnapshot().cookiesSent, 3)
    }

    /// "Under load" by rate: past the HELLO rate threshold, HELLOs get cookies instead of sessions.
    func testHelloFloodSwitchesToCookies() throws {
        var limits = RelayLimits()
        limits.cookieHellosPerSecond = 5
        relay = try RelayHarness(limits: limits)
        var types: [RelayPacketType] = []
        for _ in 0..<12 {
            let raw = RawRelaySession(port: relay.port, pin: relay.identity.signingKey)
            if let r = raw.exchange(raw.hello(), accept: { $0.type == .cookieReply || $0.type == .helloReply }) { types.append(r.packet.type) }
        }
        XCTAssertEqual(types.first, .helloReply)
        XCTAssertTrue(types.contains(.cookieReply), "\(types)")
        XCTAssertLessThanOrEqual(types.filter { $0 == .helloReply }.count, 6 * 2, "at most the threshold per window")
    }

    // MARK: Address prefixes

    /// The limiter's key: one IPv6 /64 is one key, another /64 another; IPv4 per address;
    /// IPv4-mapped IPv6 is the IPv4 address; the prefix length is configurable.
    func testAddressPrefixKeying() throws {
        func p(_ ip: String, _ len: Int = 64) throws -> AddressPrefix { AddressPrefix(try SocketAddress(ipAddress: ip, port: 1), ipv6PrefixLength: len) }
        XCTAssertEqual(try p("2001:db8:1:2::1"), try p("2001:db8:1:2:ffff:ffff:ffff:ffff"))
        XCTAssertNotEqual(try p("2001:db8:1:2::1"), try p("2001:db8:1:3::1"))
        XCTAssertEqual(try p("2001:db8:1:2::1", 48), try p("2001:db8:1:3::1", 48))
        XCTAssertNotEqual(try p("2001:db8:1:2::1", 128), try p("2001:db8:1:2::2", 128))
        XCTAssertNotEqual(try p("192.0.2.1"), try p("192.0.2.2"))
        XCTAssertEqual(try p("::ffff:192.0.2.1"), try p("192.0.2.1"))
        XCTAssertEqual(try p("2001:db8:1:2::1").description, "2001:db8:1:2:0:0:0:0/64")
    }

    /// Many IPv6 addresses from one /64 share one HELLO limit; another /64 is not affected.
    /// Drives the engine directly: this machine cannot send from many IPv6 source addresses
    /// (only ::1 is configured, and adding addresses needs privileges), so the real-socket
    /// tests cover IPv4 only.
    func testManyAddressesOfOneIPv6PrefixHitOneLimit() throws {
        let dir = NSTemporaryDirectory() + "relaybind-prefix-" + Hex.encode(Random.bytes(6))
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (identity, store) = try RelayServer.openDataDirectory(dir)
        defer { store.database.close() }
        var logger = Logger(label: "prefix")
        logger.logLevel = .critical
        var limits = RelayLimits()
        limits.hellosPerSecondPerIP = 2   // burst 4
        limits.cookieHellosPerSecond = Int.max
        let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger, now: { nowMs() })
        func hello() throws -> [UInt8] { try RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: EphemeralKX.generate().publicKey).encoded).encoded() }
        var answered = 0
        for i in 1...50 {
            let from = try SocketAddress(ipAddress: "2001:db8:1:2::\(String(i, radix: 16))", port: 4000 + i)
            answered += engine.handle(try hello(), from: from).count
        }
        XCTAssertEqual(answered, 4, "50 addresses of one /64 got one prefix's burst")
        XCTAssertEqual(engine.handle(try hello(), from: try SocketAddress(ipAddress: "2001:db8:1:3::1", port: 4000)).count, 1)
        XCTAssertEqual(engine.metricsSnapshot().droppedRateLimited, 46)
    }

    /// A full limiter table evicts its least recently used keys; a limited key that keeps
    /// sending stays limited (emptying a full table would hand it a fresh burst).
    func testFullLimiterTableEvictsOldKeysAndNeverResetsAnActiveOne() {
        var map = BucketMap<Int>(capacity: 2, perMs: 1.0 / 60_000, maxKeys: 64)
        var t: Int64 = 1_000
        XCTAssertNil(map.take(-1, nowMs: t))
        XCTAssertNil(map.take(-1, nowMs: t))
        XCTAssertNotNil(map.take(-1, nowMs: t), "the attacker's key is limited")
        for k in 0..<10_000 {
            t += 1
            _ = map.take(k, nowMs: t)
            if k % 16 == 0 { XCTAssertNotNil(map.take(-1, nowMs: t), "limited at key \(k)") }
            XCTAssertLessThanOrEqual(map.count, 64)
        }
        XCTAssertTrue(map.contains(-1))
        XCTAssertGreaterThan(map.evicted, 0)
    }

    // MARK: Shares

    /// One address prefix may hold only its share of the session table: past it, HELLOs from
    /// that prefix get no session (counted), while sessions stay available to others.
    func testOneAddressPrefixCannotTakeTheSessionTable() throws {
        var limits = RelayLimits()
        limits.maxSessionsPerPrefix = 3
        limits.cookieHellosPerSecond = Int.max
        relay = try RelayHarness(limits: limits)
        var replies = 0
        for _ in 0..<5 {
            let raw = RawRelaySession(port: relay.port, pin: relay.identity.signingKey)
            if raw.exchange(raw.helloBytes, tries: 5, accept: { $0.type == .helloReply }) != nil { replies += 1 }
        }
        XCTAssertEqual(replies, 3)
        XCTAssertGreaterThanOrEqual(relay.server.metricsSnapshot().droppedPrefixShare, 2)
        XCTAssertEqual(relay.server.withEngine { $0.sessionCount(fromPrefixOf: .udp(try! SocketAddress(ipAddress: "127.0.0.1", port: 1))) }, 3)
    }

    /// One address prefix's sessions share its part of the reassembly budget: partial
    /// messages beyond it are dropped (counted) and the buffered bytes stay within it.
    func testOneAddressPrefixCannotTakeTheReassemblyBudget() throws {
        var limits = RelayLimits()
        limits.maxReassemblyBytesPerPrefix = 5_000
        limits.cookieHellosPerSecond = Int.max
        relay = try RelayHarness(limits: limits)
        var sessions: [RawRelaySession] = []
        for _ in 0..<3 {
            let raw = RawRelaySession(port: relay.port, pin: relay.identity.signingKey)
            let reply = try XCTUnwrap(raw.exchange(raw.helloBytes) { $0.type == .helloReply })
            try raw.accept(reply.packet)
            sessions.append(raw)
        }
        // First fragments (of 9) of six messages, 1,425 bytes each, over three sessions.
        for (i, raw) in sessions.enumerated() {
            for k in 0..<2 {
                let f = Fragment(fragmentID: UInt32(10 * i + k + 1), index: 0, count: 9, innerType: .send, chunk: [UInt8](repeating: 0x55, count: 1_425))
                try raw.post(.fragment, f.encoded)
            }
        }
        XCTAssertTrue(Wait.poll { self.relay.server.metricsSnapshot().fragmentsDropped >= 3 }, "fragments beyond the prefix's share are dropped")
        XCTAssertEqual(relay.server.withEngine { $0.reassemblyBufferedBytes }, 3 * 1_425)
    }

    /// One sender cannot take the global queue: past its share it is refused `relay full`
    /// (reason sender_share) while the queue still has room for others.
    func testOneSenderCannotExhaustTheGlobalQueue() throws {
        var limits = RelayLimits()
        limits.maxQueuedTotal = 20
        limits.maxQueuedPerSender = 5
        relay = try RelayHarness(limits: limits)
        let mallory = Identity.generate(), alice = Identity.generate()
        let m = try relay.registeredClient(mallory)
        for _ in 0..<5 { XCTAssertEqual(try m.sendAndWait(bundle: messageBundle(from: mallory, to: Identity.generate())).status, .queued) }
        XCTAssertThrowsError(try m.sendAndWait(bundle: messageBundle(from: mallory, to: Identity.generate()))) { error in
            guard case RelayProtocolError.refused(let notice) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(notice.code, .relayFull)
            XCTAssertTrue(notice.text.contains("this sender holds its share (5)"), notice.text)
        }
        XCTAssertEqual(relay.server.metricsSnapshot().sendsRefused["sender_share"], 1)
        let a = try relay.registeredClient(alice)
        XCTAssertEqual(try a.sendAndWait(bundle: messageBundle(from: alice, to: Identity.generate())).status, .queued)
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(fromSender: mallory.userID) }, 5)
    }

    /// Throwaway senders from one address prefix share that prefix's part of the queue.
    func testOneAddressPrefixCannotExhaustTheGlobalQueue() throws {
        var limits = RelayLimits()
        limits.maxQueuedTotal = 100
        limits.maxQueuedPerPrefix = 6
        relay = try RelayHarness(limits: limits)
        let c = try relay.registeredClient(Identity.generate())
        for _ in 0..<6 {
            let sender = Identity.generate()
            XCTAssertEqual(try c.sendAndWait(bundle: messageBundle(from: sender, to: Identity.generate())).status, .queued)
        }
        XCTAssertThrowsError(try c.sendAndWait(bundle: messageBundle(from: Identity.generate(), to: Identity.generate()))) { error in
            guard case RelayProtocolError.refused(let notice) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(notice.code, .relayFull)
            XCTAssertTrue(notice.text.contains("address prefix"), notice.text)
        }
        XCTAssertEqual(relay.server.metricsSnapshot().sendsRefused["prefix_share"], 1)
    }
}
