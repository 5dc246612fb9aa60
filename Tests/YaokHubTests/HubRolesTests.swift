import HubTestSupport
import Foundation
import Synchronization
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire
@testable import YaokHubCore
import YaokTesting

/// "Roles are authorised, not claimed", against real hub processes, where processes matter: trust
/// read from the config and certificate files, two real hubs carrying mail, `peer_roles` from the
/// config, metrics, the CLI. The routing rules themselves (list trust, certificates, what an
/// endpoint may ask for, roles per transport) are tested in memory in RouterTrustTests.
/// Attackers are `RawPeer`s with throwaway keys over UDP. Every wait is bounded; each "got
/// nothing" is checked only after the hub has visibly done the work that would have sent it.
final class HubRolesTests: XCTestCase {
    struct Setup {
        let hub: HubProcess
        let port: UInt16
        let dir: String
        let alice = Identity.generate(), bob = Identity.generate()
    }

    /// A hub whose `router` section gets `router` lines (indented by two) after the custody timeout.
    func startHub(router: [String] = [], udpPeerRoles: String = "[endpoint, hub]", prepare: ((String) throws -> Void)? = nil) throws -> Setup {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port, udpPeerRoles: udpPeerRoles)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: (["custody_timeout_s: 5"] + router).joined(separator: "\n  "))
        try prepare?(dir)
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        try hub.waitReady()
        return Setup(hub: hub, port: port, dir: dir)
    }

    func seal(_ text: String, from sender: Identity, to recipient: Identity) throws -> Envelope {
        try Envelope.sealMessage(plaintext: Array(text.utf8), from: sender, toSigningKey: recipient.signingKey, recipientKXKey: recipient.kxKey,
                                 createdMs: WallClock.nowMilliseconds(), ttlMs: 3_600_000)
    }

    /// A phone hands `envelope` to the hub and the hub takes custody.
    func submit(_ envelope: Envelope, via phone: RawPeer) throws {
        try phone.send(envelope)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: envelope.bundleID)))
    }

    /// IDs offered to `peer` in summary frames so far.
    func offered(to peer: RawPeer) -> Set<[UInt8]> {
        Set(peer.frames(.offer).listedBundleIDs)
    }

    func waitOffered(_ id: [UInt8], to peer: RawPeer, _ who: String) throws {
        try Wait.until(timeout: 15, "\(who) offered \(Hex.encode(id.prefix(4)))") { offered(to: peer).contains(id) }
    }

    /// Bob attaches and takes his mail; returns how often `id` came.
    func deliver(_ id: [UInt8], to s: Setup) throws -> Int {
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        try Wait.until(timeout: 20, "bob gets \(Hex.encode(id.prefix(4)))") { bob.receivedEnvelopes.contains { $0.bundleID == id } }
        try bob.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded))
        try Wait.until(timeout: 10, "the message marked delivered") { try s.hub.status().router.queue.delivered >= 1 }
        return bob.receivedEnvelopes.filter { $0.bundleID == id }.count
    }

    func linkTrust(_ s: Setup, _ who: Identity) throws -> String? {
        try s.hub.status().router.links.first { $0.peer == Hex.encode(who.signingKey.prefix(4)) && $0.role == "hub" }?.trust
    }

    // MARK: open

    func testOpenTrustKeepsCustodyOfABundleHandedToAnUntrustedHub() throws {
        let trustyKey = Identity.generate()
        // Spray-and-wait with one hub copy: had the untrusted hand-over counted, the listed
        // hub would never be offered the bundle.
        let s = try startHub(router: ["hub_trust: open", "policy: spray-and-wait", "spray_copies: 2",
                                      "trusted_hubs: [\"\(Hex.encode(trustyKey.signingKey))\"]"])
        defer { s.hub.stop() }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let victim = try seal("keep me", from: s.alice, to: s.bob)
        try submit(victim, via: phone)

        let malloryKey = Identity.generate()
        let mallory = try RawPeer(identity: malloryKey, role: .hub, hubPort: s.port, host: "127.0.0.2")
        try waitOffered(victim.bundleID, to: mallory, "the untrusted hub (open trust)")
        try mallory.send(TLVRecord(.request, value: BundleIDList(bundleIDs: [victim.bundleID]).encoded))
        try Wait.until(timeout: 10, "the bundle sent to the untrusted hub") { mallory.receivedEnvelopes.contains { $0.bundleID == victim.bundleID } }
        // It says it took custody (and would then drop the bundle).
        try mallory.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: victim.bundleID).encoded))
        try Wait.until(timeout: 10, "the hand-over counted") { try s.hub.status().router.counters.untrustedHandOvers == 1 }
        var status = try s.hub.status().router
        XCTAssertEqual(status.queue.handedOver, 0, "custody did not pass to the untrusted hub")
        XCTAssertEqual(status.queue.queued, 1, "the bundle is ours and queued again")
        XCTAssertEqual(status.counters.forwarded, 0)
        XCTAssertEqual(try linkTrust(s, malloryKey), "untrusted")
        // No receipt follows: a tick after the hand-over the bundle waits out its first retry
        // time like any failed attempt (the router defers that store write by a tick, for the
        // receipt that usually ends it first).
        let db = try TestSupport.openHubStore(s.dir)
        try Wait.until(timeout: 10, "the retry scheduled") {
            try db.query("SELECT attempts FROM bundles WHERE bundle_id = ?", [.blob(victim.bundleID)]).first?.first?.intValue == 1
        }
        let offersOfVictim = mallory.frames(.offer).listedBundleIDs.filter { $0 == victim.bundleID }
        XCTAssertEqual(offersOfVictim.count, 1, "not offered again to the hub that has it")

        // A trusted route comes: it is offered the bundle and takes custody for real.
        let trusty = try RawPeer(identity: trustyKey, role: .hub, hubPort: s.port, host: "127.0.0.3")
        try waitOffered(victim.bundleID, to: trusty, "the listed hub")
        try trusty.send(TLVRecord(.request, value: BundleIDList(bundleIDs: [victim.bundleID]).encoded))
        try Wait.until(timeout: 10, "the bundle sent to the listed hub") { trusty.receivedEnvelopes.contains { $0.bundleID == victim.bundleID } }
        try trusty.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: victim.bundleID).encoded))
        try Wait.until(timeout: 10, "custody handed to the listed hub") { try s.hub.status().router.queue.handedOver == 1 }
        status = try s.hub.status().router
        XCTAssertEqual(status.counters.forwarded, 1)
        XCTAssertEqual(mallory.receivedEnvelopes.filter { $0.bundleID == victim.bundleID }.count, 1, "never resent to the hub that has it")
        // The recipient still gets it from us, once.
        XCTAssertEqual(try deliver(victim.bundleID, to: s), 1)
    }

    /// Under open trust a receipt an untrusted hub took cannot stay queued work: a receipt
    /// has no receipt to end it, so it would be retried until it expired. The untrusted hub's
    /// acknowledgement hands a receipt over (kept, offered to new neighbours, delivered to its
    /// addressee) and only the message stays queued work.
    func testOpenTrustHandsOverAReceiptAnUntrustedHubTookAndRetriesOnlyTheMessage() throws {
        let trustyKey = Identity.generate()
        let s = try startHub(router: ["hub_trust: open", "trusted_hubs: [\"\(Hex.encode(trustyKey.signingKey))\"]"])
        defer { s.hub.stop() }
        // Bob hands the hub his receipt for a message of Alice's, and a message to Carol; then
        // he leaves. Neither addressee is attached.
        let earlier = try seal("earlier", from: s.alice, to: s.bob)
        let receipt = try Envelope.receipt(kind: .deliveryReceipt, for: earlier.messageID, originalSenderUserID: s.alice.userID,
                                           from: s.bob, createdMs: WallClock.nowMilliseconds())
        let message = try seal("keep me", from: s.bob, to: Identity.generate())
        let bobPhone = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        try submit(receipt, via: bobPhone)
        try submit(message, via: bobPhone)
        bobPhone.engine.stop()
        try Wait.until(timeout: 10, "bob's link gone") { try !s.hub.status().router.links.contains { $0.role == "endpoint" } }

        // An untrusted hub takes both.
        let mallory = try RawPeer(identity: Identity.generate(), role: .hub, hubPort: s.port, host: "127.0.0.2")
        try waitOffered(message.bundleID, to: mallory, "the untrusted hub")
        try waitOffered(receipt.bundleID, to: mallory, "the untrusted hub")
        try mallory.send(TLVRecord(.request, value: BundleIDList(bundleIDs: [message.bundleID, receipt.bundleID].sorted { $0.lexicographicallyPrecedes($1) }).encoded))
        try Wait.until(timeout: 10, "both sent to the untrusted hub") {
            Set(mallory.receivedEnvelopes.map(\.bundleID)).isSuperset(of: [message.bundleID, receipt.bundleID])
        }
        for id in [message.bundleID, receipt.bundleID] { try mallory.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded)) }
        try Wait.until(timeout: 10, "both hand-overs counted") { try s.hub.status().router.counters.untrustedHandOvers == 2 }

        // The message waits out its first retry (a tick after the hand-over); by then the
        // receipt would have too, had it stayed queued.
        let db = try TestSupport.openHubStore(s.dir)
        func row(_ id: [UInt8]) throws -> (state: Int?, attempts: Int?) {
            let r = try db.query("SELECT state, attempts FROM bundles WHERE bundle_id = ?", [.blob(id)]).first
            return (r?[0].intValue, r?[1].intValue)
        }
        try Wait.until(timeout: 10, "the message's retry scheduled") { try row(message.bundleID).attempts == 1 }
        XCTAssertEqual(try row(message.bundleID).state, BundleState.queued.rawValue, "the message is still ours, queued")
        XCTAssertEqual(try row(receipt.bundleID).state, BundleState.handedOver.rawValue, "the receipt is handed over")
        XCTAssertEqual(try row(receipt.bundleID).attempts, 0, "and not retried")
        XCTAssertEqual(try db.query("SELECT count(*) FROM bundle_holders h JOIN bundles b ON h.bundle_row = b.id WHERE b.bundle_id = ?",
                                    [.blob(receipt.bundleID)]).first?.first?.intValue, 0, "the untrusted hub is not recorded as its holder")
        var status = try s.hub.status().router
        XCTAssertEqual(status.queue.queued, 1, "only the message is work")
        XCTAssertEqual(status.queue.handedOver, 1)
        XCTAssertEqual(status.counters.untrustedReceiptHandOvers, 1)
        XCTAssertTrue(StatusFormatter.text(try s.hub.status()).contains("of them receipts (kept, not retried) 1"))

        // A new neighbour is offered both at link up: the kept receipt still travels.
        let trusty = try RawPeer(identity: trustyKey, role: .hub, hubPort: s.port, host: "127.0.0.3")
        try waitOffered(message.bundleID, to: trusty, "the listed hub")
        try waitOffered(receipt.bundleID, to: trusty, "the listed hub")
        // And its addressee gets it from here, once.
        let alice = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        try Wait.until(timeout: 20, "alice gets the receipt") { alice.receivedEnvelopes.contains { $0.bundleID == receipt.bundleID } }
        try alice.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: receipt.bundleID).encoded))
        try Wait.until(timeout: 10, "the receipt delivered") { try s.hub.status().router.queue.delivered == 1 }
        status = try s.hub.status().router
        XCTAssertEqual(status.queue.handedOver, 0)
        XCTAssertEqual(alice.receivedEnvelopes.filter { $0.bundleID == receipt.bundleID }.count, 1)
    }

    // MARK: network

    func testNetworkTrustAcceptsOnlyAValidCertificateForTheLinksKey() throws {
        let network = SigningKeyPair.generate(), otherNetwork = SigningKeyPair.generate()
        let day: Int64 = 86_400_000
        let now = WallClock.nowMilliseconds()
        let hubIdentityHolder = HubIdentityHolder()
        // This hub knows true time (its operator vouches for its clock), so certificates are judged
        // with a 10-minute tolerance (Docs/protocol.md, clock 0x0C); ClockEstimateTests has the others.
        let s = try startHub(router: ["hub_trust: network", "network_key: \(Hex.encode(network.publicKey))", "hub_certificate: hub.cert",
                                      "\nclock:\n  trust_system_clock: always"]) { dir in
            // The hub under test gets its own certificate: its identity is made before it starts.
            let data = dir + "/data"
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let identity = try IdentityFile.loadOrCreate(path: data + "/identity.key")
            hubIdentityHolder.identity.withLock { $0 = identity }
            let own = try HubCertificate.issue(networkKey: network, hubKey: identity.signingKey, notBeforeMs: now - day, notAfterMs: now + day)
            try Data(own.encoded).write(to: URL(fileURLWithPath: data + "/hub.cert"))
        }
        defer { s.hub.stop() }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let victim = try seal("network only", from: s.alice, to: s.bob)
        try submit(victim, via: phone)

        func certFrame(_ c: HubCertificate) -> TLVRecord { TLVRecord(type: RoutingFrameType.hubCertificate.rawValue, value: c.encoded) }
        // Expired a day ago (beyond the 10-minute skew).
        let expiredKey = Identity.generate()
        let expired = try RawPeer(identity: expiredKey, role: .hub, hubPort: s.port, host: "127.0.0.2")
        try expired.send(certFrame(try HubCertificate.issue(networkKey: network, hubKey: expiredKey.signingKey, notBeforeMs: now - 3 * day, notAfterMs: now - day)))
        // Signed by another network.
        let foreignKey = Identity.generate()
        let foreign = try RawPeer(identity: foreignKey, role: .hub, hubPort: s.port, host: "127.0.0.3")
        try foreign.send(certFrame(try HubCertificate.issue(networkKey: otherNetwork, hubKey: foreignKey.signingKey, notBeforeMs: now - day, notAfterMs: now + day)))
        // A genuine certificate, but another hub's (replayed from the air).
        let thiefKey = Identity.generate()
        let thief = try RawPeer(identity: thiefKey, role: .hub, hubPort: s.port, host: "127.0.0.4")
        try thief.send(certFrame(try HubCertificate.issue(networkKey: network, hubKey: Identity.generate().signingKey, notBeforeMs: now - day, notAfterMs: now + day)))
        try Wait.until(timeout: 10, "three certificates refused") { try s.hub.status().router.counters.certificatesRefused == 3 }

        // A member: certified, trusted, offered the victim.
        let memberKey = Identity.generate()
        let member = try RawPeer(identity: memberKey, role: .hub, hubPort: s.port, host: "127.0.0.5")
        try member.send(certFrame(try HubCertificate.issue(networkKey: network, hubKey: memberKey.signingKey, notBeforeMs: now - day, notAfterMs: now + day)))
        try waitOffered(victim.bundleID, to: member, "the certified hub")
        XCTAssertEqual(try linkTrust(s, memberKey), "certified")
        let c = try s.hub.status().router.counters
        XCTAssertEqual(c.certificatesAccepted, 1)
        XCTAssertEqual(c.certificatesRefused, 3)
        for (name, peer, key) in [("expired", expired, expiredKey), ("foreign", foreign, foreignKey), ("thief", thief, thiefKey)] {
            XCTAssertTrue(offered(to: peer).isEmpty, "\(name) was offered bundles")
            XCTAssertTrue(peer.receivedEnvelopes.isEmpty, "\(name) got bundles")
            XCTAssertEqual(try linkTrust(s, key), "untrusted", name)
        }
        // The hub sent its own certificate first thing on each hub link, and it checks out.
        let own = try XCTUnwrap(member.lock.withLock { member.frames.first { $0.type == RoutingFrameType.hubCertificate.rawValue } }, "the hub's certificate")
        let hubKey = try XCTUnwrap(hubIdentityHolder.identity.withLock { $0 }).signingKey
        XCTAssertNoThrow(try HubCertificate(parsing: own.value).check(networkKey: network.publicKey, hubKey: hubKey, nowMs: WallClock.nowMilliseconds(), clockSkewMs: 0))
        XCTAssertEqual(member.lock.withLock { member.frames.first?.type }, RoutingFrameType.hubCertificate.rawValue, "the certificate comes before anything else")
        let metrics = String(decoding: try s.hub.client.request("metrics"), as: UTF8.self)
        XCTAssertTrue(metrics.contains(#"yaok_router_certificates_total{outcome=\"refused\"} 3"#), metrics)
        XCTAssertTrue(metrics.contains(#"yaok_router_links{role=\"hub\",trust=\"certified\"} 1"#), metrics)
    }

    final class HubIdentityHolder: Sendable { let identity = Mutex<Identity?>(nil) }

    /// Two real hubs in one network, linked over UDP, each holding a certificate: they
    /// trust each other and carry alice's message from one to bob on the other. A third,
    /// uncertified hub linked to the first gets nothing.
    func testTwoCertifiedHubsCarryMailAndAnUncertifiedOneGetsNone() throws {
        let network = SigningKeyPair.generate()
        let now = WallClock.nowMilliseconds()
        let plugins = try TestSupport.pluginDirectory(self)
        let exe = try TestSupport.product("yaok-hub")
        func makeHub(port: UInt16, peers: [UInt16], certified: Bool) throws -> (HubProcess, Identity) {
            let dir = try TestSupport.temporaryDirectory(self)
            try FileManager.default.createDirectory(atPath: dir + "/data", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let identity = try IdentityFile.loadOrCreate(path: dir + "/data/identity.key")
            var router = ["hub_trust: network", "network_key: \(Hex.encode(network.publicKey))"]
            if certified {
                let cert = try HubCertificate.issue(networkKey: network, hubKey: identity.signingKey, notBeforeMs: now - 60_000, notAfterMs: now + 86_400_000)
                try Data(cert.encoded).write(to: URL(fileURLWithPath: dir + "/data/hub.cert"))
                router.append("hub_certificate: hub.cert")
            }
            let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port, peers: peers)
                .replacingOccurrences(of: "custody_timeout_s: 5", with: (["custody_timeout_s: 5"] + router).joined(separator: "\n  "))
            let hub = try HubProcess(dir: dir, config: config, executable: exe)
            try hub.waitReady()
            return (hub, identity)
        }
        let portA = HubProcessTests.freePort(), portB = HubProcessTests.freePort(), portC = HubProcessTests.freePort()
        let (hubB, idB) = try makeHub(port: portB, peers: [], certified: true)
        defer { hubB.stop() }
        let (hubC, idC) = try makeHub(port: portC, peers: [], certified: false)
        defer { hubC.stop() }
        let (hubA, idA) = try makeHub(port: portA, peers: [portB, portC], certified: true)
        defer { hubA.stop() }
        func trust(_ hub: HubProcess, _ of: Identity) throws -> String? {
            try hub.status().router.links.first { $0.peer == Hex.encode(of.signingKey.prefix(4)) }?.trust
        }
        try Wait.until(timeout: 20, "A and B certified to each other") { try trust(hubA, idB) == "certified" && trust(hubB, idA) == "certified" }
        try Wait.until(timeout: 10, "C untrusted at A") { try trust(hubA, idC) == "untrusted" }

        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: portA)
        let message = try seal("across the network", from: alice, to: bob)
        try submit(message, via: phone)
        try Wait.until(timeout: 20, "B took custody from A") { try hubA.status().router.queue.handedOver == 1 }
        let bobPhone = try RawPeer(identity: bob, role: .endpoint, hubPort: portB)
        try Wait.until(timeout: 20, "bob gets the message at B") { bobPhone.receivedEnvelopes.contains { $0.bundleID == message.bundleID } }
        XCTAssertEqual(try bobPhone.receivedEnvelopes.first { $0.bundleID == message.bundleID }?.open(with: bob), Array("across the network".utf8))
        let c = try hubC.status().router
        XCTAssertEqual(c.queue.queued + c.queue.inFlight + c.queue.handedOver, 0, "the uncertified hub got the bundle")
        XCTAssertEqual(try hubA.status().router.counters.certificatesAccepted, 1)
    }

    // MARK: peer_roles

    func testAHubRoleOnAnEndpointOnlyTransportIsRefused() throws {
        let s = try startHub(udpPeerRoles: "[endpoint]")
        defer { s.hub.stop() }
        let posingKey = Identity.generate()
        let posing = try RawPeer(identity: posingKey, role: .hub, hubPort: s.port, host: "127.0.0.2")
        try Wait.until(timeout: 10, "the hub role refused") { try s.hub.status().router.counters.rolesRefused == 1 }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let victim = try seal("phones only here", from: s.alice, to: s.bob)
        try submit(victim, via: phone)
        XCTAssertEqual(try deliver(victim.bundleID, to: s), 1)
        let status = try s.hub.status().router
        XCTAssertFalse(status.links.contains { $0.role == "hub" }, "\(status.links)")
        XCTAssertTrue(posing.frames(.offer).isEmpty && posing.receivedEnvelopes.isEmpty && posing.frames(.attachment).isEmpty)
        let log = s.hub.log
        XCTAssertTrue(log.contains("claims the hub role"), log)
        XCTAssertFalse(log.contains(Hex.encode(posingKey.userID)) || log.contains(Hex.encode(posingKey.signingKey)), "a full key in the log")
    }

    // MARK: control socket

    func testIdleConnectionFloodDoesNotStopStatus() throws {
        let s = try startHub()
        defer { s.hub.stop() }
        let pid = s.hub.process.processIdentifier
        _ = try s.hub.status()
        let threadsBefore = Self.threads(pid)
        // 200 local clients connect and say nothing, and keep their connections open.
        var idle: [Int32] = []
        defer { for fd in idle { close(fd) } }
        for _ in 0..<200 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var addr = try ControlClient.address(s.hub.socketPath)
            let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
            XCTAssertEqual(rc, 0)
            idle.append(fd)
        }
        // One more sends an endless line.
        let chatty = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(chatty) }
        var addr = try ControlClient.address(s.hub.socketPath)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(chatty, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        let blob = [UInt8](repeating: 0x41, count: 8192)
        _ = blob.withUnsafeBytes { write(chatty, $0.baseAddress, $0.count) }

        let t0 = Date()
        let report = try s.hub.status()
        let ms = Date().timeIntervalSince(t0) * 1000
        print("status answered in \(Int(ms)) ms with 200 idle control connections open")
        XCTAssertEqual(report.hub.pid, pid)
        XCTAssertLessThan(ms, 3000)
        let threadsAfter = Self.threads(pid)
        XCTAssertLessThan(threadsAfter - threadsBefore, 10, "idle connections cost threads: \(threadsBefore) → \(threadsAfter)")
        // The over-long line got an error answer, not a hang.
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(chatty, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = read(chatty, &buf, buf.count)
        XCTAssertGreaterThan(n, 0)
        XCTAssertTrue(String(decoding: buf.prefix(max(0, n)), as: UTF8.self).contains("\"ok\":false"))
    }

    static func threads(_ pid: Int32) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Threads:") }) else { return 0 }
        return Int(line.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "0") ?? 0
    }

    // MARK: CLI

    func testNetworkKeyAndCertificateRoundTripThroughTheCLI() throws {
        let exe = try TestSupport.product("yaok-hub")
        let dir = try TestSupport.temporaryDirectory(self)
        let keyFile = dir + "/network.key", certFile = dir + "/hub.cert"
        let made = try TestSupport.run(exe, ["network-key", "init", keyFile])
        XCTAssertEqual(made.status, 0, made.output)
        let attrs = try FileManager.default.attributesOfItem(atPath: keyFile)
        XCTAssertEqual((attrs[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let networkHex = try XCTUnwrap(made.output.split(separator: "\n").first?.split(separator: " ").last.map(String.init))
        XCTAssertEqual(networkHex.count, 64)
        let again = try TestSupport.run(exe, ["network-key", "init", keyFile])
        XCTAssertNotEqual(again.status, 0, "a network key is never overwritten")
        XCTAssertTrue(again.output.contains("already exists"), again.output)

        let hub = Identity.generate()
        let issued = try TestSupport.run(exe, ["cert", "issue", "--network-key", keyFile, "--hub", Hex.encode(hub.signingKey), "--days", "30", "--out", certFile])
        XCTAssertEqual(issued.status, 0, issued.output)
        let inspected = try TestSupport.run(exe, ["cert", "inspect", certFile])
        XCTAssertEqual(inspected.status, 0, inspected.output)
        XCTAssertTrue(inspected.output.contains("network key  \(networkHex)"), inspected.output)
        XCTAssertTrue(inspected.output.contains("hub key      \(Hex.encode(hub.signingKey))"), inspected.output)
        XCTAssertTrue(inspected.output.contains(Identity.fingerprint(hub.userID)), inspected.output)
        XCTAssertTrue(inspected.output.contains("(valid now)") && inspected.output.contains("signature    verifies"), inspected.output)
        let cert = try HubCertificate(parsing: [UInt8](try Data(contentsOf: URL(fileURLWithPath: certFile))))
        XCTAssertEqual(cert.notAfterMs - cert.notBeforeMs, 30 * 86_400_000)
        XCTAssertNoThrow(try cert.check(networkKey: XCTUnwrap(YaokPluginKit.Hex.decode(networkHex)), hubKey: hub.signingKey, nowMs: WallClock.nowMilliseconds(), clockSkewMs: 0))

        let reissue = try TestSupport.run(exe, ["cert", "issue", "--network-key", keyFile, "--hub", Hex.encode(hub.signingKey), "--days", "30", "--out", certFile])
        XCTAssertNotEqual(reissue.status, 0, "an existing certificate is never overwritten")
        // One flipped bit in the signed fields: inspect says so and fails.
        var bytes = cert.encoded
        bytes[40] ^= 1
        try Data(bytes).write(to: URL(fileURLWithPath: certFile))
        let tampered = try TestSupport.run(exe, ["cert", "inspect", certFile])
        XCTAssertEqual(tampered.status, 2, tampered.output)
        XCTAssertTrue(tampered.output.contains("DOES NOT VERIFY"), tampered.output)
    }
}
