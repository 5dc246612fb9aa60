import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokRelayProtocol
import YaokWire
import YaokTesting
import RelayTestSupport

/// The relay transport plugin, loaded from its built .so, against a real `yaok-relay` process.
final class RelayPluginTests: XCTestCase {
    private var dirs: [String] = []

    override func tearDown() {
        for d in dirs { try? FileManager.default.removeItem(atPath: d) }
    }

    private func tempDir() -> String {
        let d = NSTemporaryDirectory() + "yaok-relay-plugin-" + Hex.encode(Random.bytes(6))
        dirs.append(d)
        return d
    }

    private func bundle(from sender: Identity, to recipient: Identity) throws -> [UInt8] {
        let e = try Envelope.sealMessage(plaintext: Array("hi".utf8), from: sender, toSigningKey: recipient.signingKey,
                                         recipientKXKey: recipient.kxKey, createdMs: Int64(Date().timeIntervalSince1970 * 1000))
        return YaokWire.Bundle(envelope: e).encoded
    }

    /// A started instance linked to `relay` (its default config), with the link's ID.
    private func startedHost(for relay: RelayProcess) throws -> (PluginTestHost, UInt64) {
        let host = try PluginTestHost(plugin: "relay")
        XCTAssertNil(host.create(config: ["enabled": true, "address": "127.0.0.1:\(relay.port)", "relay_key": Hex.encode(relay.key)]))
        let m0 = host.mark
        try host.start()
        let link: UInt64 = try host.wait("link up", after: m0) { e in
            if case .linkUp(let id, 3, _, _) = e { return id }
            return nil
        }
        return (host, link)
    }

    func testConfigErrorsNameTheKey() throws {
        let host = try PluginTestHost(plugin: "relay")
        let err = host.create(config: ["enabled": true, "address": "127.0.0.1:7900"])
        XCTAssertNotNil(err)
        XCTAssertTrue(err?.contains("transports.relay.relay_key") == true, err ?? "")
        let host2 = try PluginTestHost(plugin: "relay")
        let err2 = host2.create(config: ["enabled": true, "address": "nowhere", "relay_key": String(repeating: "ab", count: 32)])
        XCTAssertTrue(err2?.contains("transports.relay.address") == true, err2 ?? "")
        let host3 = try PluginTestHost(plugin: "relay")
        let err3 = host3.create(config: ["enabled": true, "address": "127.0.0.1:1", "relay_key": "abcd"])
        XCTAssertTrue(err3?.contains("64 hex digits") == true, err3 ?? "")
        let host4 = try PluginTestHost(plugin: "relay")
        let err4 = host4.create(config: ["enabled": true, "address": "127.0.0.1:1", "relay_key": String(repeating: "ab", count: 32), "pol_interval_s": 3])
        XCTAssertTrue(err4?.contains("unknown key") == true, err4 ?? "")
        // wss:// needs the TLS pin; the pin makes no sense for UDP; a bad URL names the key.
        let key = String(repeating: "ab", count: 32)
        let err5 = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "address": "wss://127.0.0.1:7443", "relay_key": key])
        XCTAssertTrue(err5?.contains("transports.relay.tls_spki_sha256") == true && err5?.contains("yaok-relay tls-pin") == true, err5 ?? "")
        let err6 = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "address": "127.0.0.1:7900", "relay_key": key, "tls_spki_sha256": key])
        XCTAssertTrue(err6?.contains("only applies to a wss:// address") == true, err6 ?? "")
        let err7 = try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "address": "wss://127.0.0.1:x", "relay_key": key, "tls_spki_sha256": key])
        XCTAssertTrue(err7?.contains("transports.relay.address") == true, err7 ?? "")
        XCTAssertNil(try PluginTestHost(plugin: "relay").create(config: ["enabled": true, "address": "wss://127.0.0.1:7443", "relay_key": key, "tls_spki_sha256": key]))
    }

    func testLinkCustodyMessagesPhoneRegistrationAndOutage() throws {
        let dir = tempDir()
        var relay = try RelayProcess(dataDir: dir, extra: ["--messages-per-hour", "3"])
        defer { relay.stop() }
        let host = try PluginTestHost(plugin: "relay")
        let hubUserID = host.identity.userID
        _ = hubUserID
        XCTAssertNil(host.create(config: ["enabled": true, "address": "127.0.0.1:\(relay.port)",
                                          "relay_key": Hex.encode(relay.key), "poll_interval_s": 1]))
        let m0 = host.mark
        try host.start()

        // One link, role relay, the relay's key as peer key.
        let (link, mtu): (UInt64, UInt32) = try host.wait("link up", after: m0) { e in
            if case .linkUp(let id, let role, let key, let mtu) = e, role == 3, key == relay.key { return (id, mtu) }
            return nil
        }
        XCTAssertGreaterThanOrEqual(Int(mtu), 3 + YaokWire.Bundle.maxEncodedLength)

        // Host → bundle: the relay's QUEUED comes back as a custody ack.
        let alice = Identity.generate(), bob = Identity.generate()
        let b1 = try bundle(from: alice, to: bob)
        let id1 = BundleID.of(bundle: b1)!
        let m1 = host.mark
        XCTAssertNil(host.send(TLVRecord(.bundle, value: b1).encoded, link: link))
        let ack: [UInt8] = try host.wait("custody ack", after: m1) { e in
            if case .frame(let l, let bytes) = e, l == link, let r = try? TLVRecord(parsing: bytes), r.type == RoutingFrameType.custodyAck.rawValue { return r.value }
            return nil
        }
        XCTAssertEqual(ack, id1)

        // Rate limit (3 per hour): the 4th from the same sender is refused with reason rateLimited.
        for _ in 0..<2 { XCTAssertNil(host.send(TLVRecord(.bundle, value: try bundle(from: alice, to: bob)).encoded, link: link)) }
        let b4 = try bundle(from: alice, to: bob)
        let m4 = host.mark
        XCTAssertNil(host.send(TLVRecord(.bundle, value: b4).encoded, link: link))
        let refusal: CustodyRefusal = try host.wait("custody refusal", after: m4) { e in
            if case .frame(_, let bytes) = e, let r = try? TLVRecord(parsing: bytes), r.type == RoutingFrameType.custodyRefused.rawValue {
                return try? CustodyRefusal(parsing: r.value)
            }
            return nil
        }
        XCTAssertEqual(refusal.bundleID, BundleID.of(bundle: b4)!)
        XCTAssertEqual(refusal.reason, .rateLimited)
        // The relay's retry hint comes with it (the hourly limit: up to an hour).
        XCTAssertTrue((1...3_600).contains(refusal.retryAfterS ?? 0), "\(refusal)")

        // A phone's registration, carried by the hub (frame 0x07): mail for the phone reaches the hub.
        let phone = Identity.generate()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let reg = try Registration.carried(by: phone, relaySigningKey: relay.key, collector: host.identity.signingKey, timestampMs: now, untilMs: now + 3_600_000)
        XCTAssertNil(host.send(TLVRecord(type: 0x07, value: reg.encoded).encoded, link: link))
        XCTAssertTrue(Wait.poll(timeout: 10) { relay.metric("yaok_relay_registrations_accepted_total") == 2 })
        // The plugin carries only v2 registrations naming this hub: one naming another hub and
        // a v1 record (a bearer token) are dropped before the relay sees them, so the relay
        // counts no refusal by the time it accepts the next good one.
        let wrongCollector = try Registration.carried(by: Identity.generate(), relaySigningKey: relay.key, collector: Identity.generate().signingKey,
                                                      timestampMs: now, untilMs: now + 3_600_000)
        XCTAssertNil(host.send(TLVRecord(type: 0x07, value: wrongCollector.encoded).encoded, link: link))
        XCTAssertNil(host.send(TLVRecord(type: 0x07, value: [UInt8](repeating: 1, count: Registration.v1Length)).encoded, link: link))
        let another = try Registration.carried(by: Identity.generate(), relaySigningKey: relay.key, collector: host.identity.signingKey,
                                               timestampMs: now, untilMs: now + 3_600_000)
        XCTAssertNil(host.send(TLVRecord(type: 0x07, value: another.encoded).encoded, link: link))
        XCTAssertTrue(Wait.poll(timeout: 10) { relay.metric("yaok_relay_registrations_accepted_total") == 3 })
        XCTAssertNil(relay.metric("yaok_relay_registrations_refused_total{reason=\"collector_mismatch\"}"))
        XCTAssertNil(relay.metric("yaok_relay_registrations_refused_total{reason=\"v1\"}"))

        let dave = Identity.generate()
        var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: UInt16(relay.port)), relaySigningKey: relay.key)
        cfg.handshakeRetryMs = 200
        let internetUser = RelayClient(configuration: cfg)
        defer { internetUser.stop() }
        try internetUser.connect()
        XCTAssertEqual(try internetUser.registerAndWait([Registration.owner(dave, relaySigningKey: relay.key, channel: XCTUnwrap(internetUser.channelBinding),
                                                                           timestampMs: Int64(Date().timeIntervalSince1970 * 1000))]).map(\.status), [.accepted])
        let forPhone = try bundle(from: dave, to: phone)
        let m5 = host.mark
        XCTAssertEqual(try internetUser.sendAndWait(bundle: forPhone).status, .pushed)
        let delivered: [UInt8] = try host.wait("bundle from the relay", after: m5) { e in
            if case .frame(let l, let bytes) = e, l == link, let r = try? TLVRecord(parsing: bytes), r.type == FrameType.bundle.rawValue { return r.value }
            return nil
        }
        XCTAssertEqual(delivered, forPhone)
        // Not deleted until the host's store says so.
        XCTAssertEqual(relay.metric("yaok_relay_acks_total"), 0)
        XCTAssertNil(host.send(CustodyAck(bundleID: BundleID.of(bundle: forPhone)!).frame, link: link))
        XCTAssertTrue(Wait.poll(timeout: 10) { relay.metric("yaok_relay_acks_total") == 1 })

        let status = host.statusJSON()
        XCTAssertEqual(status["state"] as? String, "running")
        XCTAssertEqual((status["details"] as? [String: String])?["registered"], "true")

        // The relay goes away: the next send finds it unreachable and the link goes down.
        let port = relay.port
        relay.stop()
        let m6 = host.mark
        _ = host.send(TLVRecord(.bundle, value: try bundle(from: bob, to: alice)).encoded, link: link)
        let reason: String = try host.wait("link down", after: m6) { e in
            if case .linkDown(let id, let reason) = e, id == link { return reason }
            return nil
        }
        XCTAssertTrue(reason.contains("unreachable"), reason)
        XCTAssertEqual(host.statusJSON()["state"] as? String, "degraded")
        XCTAssertNotNil(host.send(TLVRecord(.bundle, value: b1).encoded, link: link), "sending on a down link must fail")

        // It comes back on the same port and data directory: a new link comes up.
        let m7 = host.mark
        relay = try RelayProcess(dataDir: dir, listen: "127.0.0.1:\(port)")
        let link2: UInt64 = try host.wait("link up again", after: m7, timeout: 40) { e in
            if case .linkUp(let id, 3, _, _) = e { return id }
            return nil
        }
        XCTAssertNotEqual(link2, link)
    }

    /// `stop` returns only after the client thread's callback to the host has returned: the
    /// hub destroys the instance next, and a report after that used a freed table (it crashed
    /// the test process once, in `status_changed`). The host holds the custody ack's callback.
    func testStopWaitsForTheCallbackTheClientThreadIsIn() throws {
        let relay = try RelayProcess(dataDir: tempDir())
        defer { relay.stop() }
        let (host, link) = try startedHost(for: relay)
        let began = host.holdNextFrame(for: 0.5)
        XCTAssertNil(host.send(TLVRecord(.bundle, value: try bundle(from: Identity.generate(), to: Identity.generate())).encoded, link: link))
        XCTAssertEqual(began.wait(timeout: .now() + 10), .success, "the custody ack reached the host")
        host.stop()
        XCTAssertEqual(host.callbacksAfterStop, 0, "a callback was still running when stop returned")
    }

    /// The plugin speaks bundle IDs both ways. Uploads: a squatter's bundle under the victim's
    /// message ID and the victim's real one are two custody acks (distinct bundle IDs); a
    /// conflicting envelope and an immortal one come back as `conflict` and `badLifetime`
    /// refusals naming their bundle IDs. Downloads: both bundles under one message ID reach the
    /// host, and the host's ack of the victim's bundle deletes exactly that one at the relay.
    func testBundleIDsBothWaysThroughThePlugin() throws {
        let relay = try RelayProcess(dataDir: tempDir())
        defer { relay.stop() }
        let (host, link) = try startedHost(for: relay)
        /// The custody answer the host gets for `b`: the ack's bundle ID, or the refusal.
        func answer(uploading b: [UInt8]) throws -> (ack: [UInt8]?, refusal: CustodyRefusal?) {
            let m = host.mark
            XCTAssertNil(host.send(TLVRecord(.bundle, value: b).encoded, link: link))
            return try host.wait("custody answer", after: m) { e in
                guard case .frame(let l, let bytes) = e, l == link, let r = try? TLVRecord(parsing: bytes) else { return nil }
                if r.type == RoutingFrameType.custodyAck.rawValue { return (r.value, nil) }
                if r.type == RoutingFrameType.custodyRefused.rawValue { return (nil, try? CustodyRefusal(parsing: r.value)) }
                return nil
            }
        }
        let alice = Identity.generate(), bob = Identity.generate(), mallory = Identity.generate()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        func sealed(_ from: Identity, _ text: String, id: [UInt8]? = nil, ttl: Int64 = Envelope.defaultTTLMilliseconds) throws -> Envelope {
            try Envelope.sealMessage(plaintext: Array(text.utf8), from: from, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                     createdMs: now, ttlMs: ttl, messageID: id)
        }
        let real = try sealed(alice, "real")
        let squat = try sealed(mallory, "squat", id: real.messageID)
        XCTAssertEqual(try answer(uploading: YaokWire.Bundle(envelope: squat).encoded).ack, squat.bundleID)
        XCTAssertEqual(try answer(uploading: YaokWire.Bundle(envelope: real).encoded).ack, real.bundleID)
        let clash = try sealed(alice, "clash", id: real.messageID)
        XCTAssertEqual(try answer(uploading: YaokWire.Bundle(envelope: clash).encoded).refusal, CustodyRefusal(bundleID: real.bundleID, reason: .conflict))
        let immortal = try sealed(mallory, "forever", ttl: 1 << 62)
        XCTAssertEqual(try answer(uploading: YaokWire.Bundle(envelope: immortal).encoded).refusal,
                       CustodyRefusal(bundleID: immortal.bundleID, reason: .badLifetime))
        XCTAssertEqual(relay.metric("yaok_relay_sends_refused_total{reason=\"conflict\"}"), 1)
        XCTAssertEqual(relay.metric("yaok_relay_sends_refused_total{reason=\"lifetime_too_long\"}"), 1)
        XCTAssertEqual(relay.metric("yaok_relay_queued_messages"), 2)

        // Bob's mail comes to this hub (its phone registration): both bundles are handed over.
        let t = Int64(Date().timeIntervalSince1970 * 1000)
        let reg = try Registration.carried(by: bob, relaySigningKey: relay.key, collector: host.identity.signingKey, timestampMs: t, untilMs: t + 3_600_000)
        let m1 = host.mark
        XCTAssertNil(host.send(TLVRecord(type: 0x07, value: reg.encoded).encoded, link: link))
        var delivered: [[UInt8]] = []
        _ = try host.wait("two bundles from the relay", after: m1) { e -> Bool? in
            if case .frame(let l, let bytes) = e, l == link, let r = try? TLVRecord(parsing: bytes), r.type == FrameType.bundle.rawValue {
                delivered.append(r.value)
            }
            return delivered.count == 2 ? true : nil
        }
        XCTAssertEqual(Set(delivered), [YaokWire.Bundle(envelope: real).encoded, YaokWire.Bundle(envelope: squat).encoded])
        // The host kept only the real one (the squatter is no contact of Bob's): its ack deletes that one only.
        XCTAssertNil(host.send(CustodyAck(bundleID: real.bundleID).frame, link: link))
        XCTAssertTrue(Wait.poll(timeout: 10) { relay.metric("yaok_relay_acks_total") == 1 })
        XCTAssertEqual(relay.metric("yaok_relay_queued_messages"), 1)
        // An ack by bare message ID names no bundle the plugin handed over: it goes nowhere.
        XCTAssertNil(host.send(CustodyAck(bundleID: squat.messageID).frame, link: link))
        XCTAssertEqual((host.statusJSON()["details"] as? [String: String])?["outstanding"], "1", "the squatter's bundle still awaits the host")
        XCTAssertEqual(relay.metric("yaok_relay_queued_messages"), 1)
    }
}
