import Foundation
import XCTest
import YaokPluginKit
@testable import YaokMeshPlugin
import YaokTesting
import YaokWire

/// The engine over real loopback TCP sockets (discovery off; beacons run in the netns tests).
final class MeshEngineTests: XCTestCase {
    let alice = TestLinkIdentity(seed: 1)
    let bob = TestLinkIdentity(seed: 2)

    func started(_ identity: TestLinkIdentity, _ settings: MeshSettings, _ recorder: LinkEventRecorder) throws -> MeshEngine {
        let engine = MeshTestSupport.engine(identity, settings, recorder)
        try engine.start()
        addTeardownBlock { engine.stop() }
        return engine
    }

    func testHubsThatDialEachOtherKeepExactlyOneSessionChosenByTheLowerKey() throws {
        let portA = MeshTestSupport.freePort(), portB = MeshTestSupport.freePort()
        let ra = LinkEventRecorder(), rb = LinkEventRecorder()
        let a = try started(alice, try MeshTestSupport.loopback(port: portA, peers: [portB]), ra)
        let b = try started(bob, try MeshTestSupport.loopback(port: portB, peers: [portA]), rb)
        let oneLink: (LinkEventRecorder.State) -> Bool = { $0.ups.count - $0.downs.count == 1 }
        ra.wait("a link at A", oneLink)
        rb.wait("a link at B", oneLink)
        // Let any duplicate settle, then check both ends agree on the one session.
        Thread.sleep(forTimeInterval: 1.5)
        XCTAssertEqual(a.snapshot.neighbours.count, 1)
        XCTAssertEqual(b.snapshot.neighbours.count, 1)
        XCTAssertEqual(a.snapshot.sessions, 1, "the duplicate session is closed")
        XCTAssertEqual(b.snapshot.sessions, 1)
        let lowerIsAlice = alice.signingKey.lexicographicallyPrecedes(bob.signingKey)
        // The kept session was dialled by the lower key: the dialler's remote is the listener's port.
        let aRemote = try XCTUnwrap(a.snapshot.neighbours.first)
        let bRemote = try XCTUnwrap(b.snapshot.neighbours.first)
        if lowerIsAlice {
            XCTAssertTrue(aRemote.hasSuffix(":\(portB)"), "A dialled B: \(aRemote)")
            XCTAssertFalse(bRemote.hasSuffix(":\(portA)"), "B accepted A's dial: \(bRemote)")
        } else {
            XCTAssertTrue(bRemote.hasSuffix(":\(portA)"), "B dialled A: \(bRemote)")
            XCTAssertFalse(aRemote.hasSuffix(":\(portB)"), "A accepted B's dial: \(aRemote)")
        }
        let up = try XCTUnwrap(ra.snapshot.ups.last)
        XCTAssertEqual(up.peerSigningKey, bob.signingKey)
        XCTAssertEqual(up.peerKXKey, bob.kxKey)
        XCTAssertEqual(up.peerRole, .hub)
        XCTAssertEqual(up.mtu, 65_511, "the largest frame one sealed record carries")
        XCTAssertEqual(up.cost, 20)
        XCTAssertEqual(up.kind, "tcp")
    }

    func testFramesCrossInOrderAndSendValidatesItsInput() throws {
        let portB = MeshTestSupport.freePort()
        let ra = LinkEventRecorder(), rb = LinkEventRecorder()
        let a = try started(alice, try MeshTestSupport.loopback(peers: [portB], extra: ["queue_frames": .int(5_000)]), ra)
        _ = try started(bob, try MeshTestSupport.loopback(port: portB), rb)
        ra.wait("link at A") { $0.ups.count == 1 }
        rb.wait("link at B") { $0.ups.count == 1 }
        let link = ra.snapshot.ups[0].id
        // Under the 16 MB queue bound in total, with a few maximum-size records.
        func size(_ i: Int) -> Int { i % 500 == 0 ? MeshEngine.mtu - 3 : (i % 3 == 0 ? 4_000 : 40) }
        let frames: [[UInt8]] = (0..<2_000).map { (i: Int) -> [UInt8] in
            TLVRecord(.bundle, value: [UInt8](repeating: UInt8(i % 251), count: size(i))).encoded
        }
        for f in frames { try a.send(f, to: link) }
        rb.wait("2000 frames at B", timeout: 30) { $0.frames.count == 2_000 }
        XCTAssertEqual(rb.snapshot.frames.map(\.0), frames, "every frame, byte for byte, in order")
        XCTAssertEqual(a.snapshot.counters.bundlesOut, 2_000)
        XCTAssertEqual(a.snapshot.bundlesByPeer.values.first?.1, 2_000)

        XCTAssertThrowsError(try a.send([1, 0, 0], to: 999)) { XCTAssertEqual($0 as? TransportError, .unknownLink(999)) }
        XCTAssertThrowsError(try a.send([UInt8](repeating: 0, count: MeshEngine.mtu + 1), to: link)) {
            XCTAssertEqual($0 as? TransportError, .frameTooLarge(size: MeshEngine.mtu + 1, mtu: MeshEngine.mtu))
        }
    }

    func testSendThrowsWhenTheQueueIsFullAndNeverBlocks() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["queue_frames": .int(8), "idle_timeout_s": .int(60)]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        let peer = try RawPeer(port: port)
        XCTAssertTrue(peer.handshake(as: bob, role: .hub))
        r.wait("link up") { $0.ups.count == 1 }
        let link = r.snapshot.ups[0].id
        // The raw peer never reads: kernel buffers fill, then the bounded queue.
        let big = TLVRecord(.bundle, value: [UInt8](repeating: 9, count: MeshEngine.mtu - 3)).encoded
        var refused: Error?
        let started = Date()
        for _ in 0..<5_000 {
            do { try engine.send(big, to: link) } catch { refused = error; break }
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 20, "send only queues")
        let error = try XCTUnwrap(refused, "the queue never filled")
        XCTAssertTrue("\(error)".contains("queue"), "\(error)")
        XCTAssertEqual(engine.snapshot.counters.queueFull, 1)
    }

    func testAFrameBeforeTheHandshakeDisconnects() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(), r)
        let peer = try RawPeer(port: try XCTUnwrap(engine.listenAddress?.port))
        XCTAssertTrue(peer.write(TLVRecord(.bundle, value: [1, 2, 3]).encoded))
        XCTAssertTrue(peer.waitForClose(), "the engine hangs up on a peer that skips the handshake")
        XCTAssertEqual(r.snapshot.ups.count, 0)
        XCTAssertEqual(r.snapshot.frames.count, 0, "nothing reached the host")
        XCTAssertEqual(engine.snapshot.counters.handshakeFailures, 1)
        r.wait("the reason logged") { $0.logs.contains { $0.contains("in clear") } }
    }

    func testEndpointsAreRefused() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(), r)
        let peer = try RawPeer(port: try XCTUnwrap(engine.listenAddress?.port))
        _ = peer.handshake(as: bob, role: .endpoint)
        XCTAssertTrue(peer.waitForClose())
        XCTAssertEqual(r.snapshot.ups.count, 0)
        XCTAssertEqual(engine.snapshot.counters.refusedRole, 1)
        r.wait("the refusal to be logged") { $0.logs.contains { $0.contains("tcp links carry role hub only") } }
    }

    func testABadProofClosesTheSession() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(), r)
        let peer = try RawPeer(port: try XCTUnwrap(engine.listenAddress?.port))
        // An identity that claims Bob's key but is signed by someone else.
        _ = peer.handshake(as: ClaimedIdentity(claimed: bob, signer: TestLinkIdentity(seed: 3)), role: .hub)
        XCTAssertTrue(peer.waitForClose())
        XCTAssertEqual(r.snapshot.ups.count, 0)
        XCTAssertEqual(engine.snapshot.counters.handshakeFailures, 1)
    }

    /// The keyless takeover: an attacker that got a genuine neighbour's proof presents it with a
    /// tie-break nonce of its choosing, hoping the hub drops its real neighbour. A proof is bound
    /// to its own session: an attacker claiming Bob's key while Bob's link is up is closed, the
    /// live link is untouched, and nothing is closed as a "duplicate".
    func testAClaimedKeyCannotDisplaceTheLiveLink() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        let realBob = try RawPeer(port: port)
        XCTAssertTrue(realBob.handshake(as: bob, role: .hub))
        r.wait("Bob's link up") { $0.ups.count == 1 }
        for _ in 0..<3 {
            let mallory = try RawPeer(port: port)
            _ = mallory.handshake(as: ClaimedIdentity(claimed: bob, signer: TestLinkIdentity(seed: 9)), role: .hub)
            XCTAssertTrue(mallory.waitForClose(), "the claimant is closed")
        }
        XCTAssertEqual(engine.snapshot.counters.handshakeFailures, 3)
        XCTAssertEqual(engine.snapshot.counters.duplicatesClosed, 0)
        XCTAssertTrue(r.snapshot.downs.isEmpty, "Bob's link never went down")
        // And it still carries frames both ways.
        XCTAssertTrue(realBob.send(TLVRecord(.offer, value: [0, 0]).encoded))
        r.wait("Bob's frame delivered") { $0.frames.count == 1 }
        try engine.send(TLVRecord(.offer, value: [0, 0]).encoded, to: r.snapshot.ups[0].id)
        XCTAssertEqual(realBob.readRecord()?.type, RoutingFrameType.offer.rawValue)
    }

    func testAFloodingPeerIsThrottledThenDisconnected() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["max_frames_per_second": .int(10)]), r)
        let peer = try RawPeer(port: try XCTUnwrap(engine.listenAddress?.port))
        XCTAssertTrue(peer.handshake(as: bob, role: .hub))
        r.wait("link up") { $0.ups.count == 1 }
        let flood = Thread {
            let frame = TLVRecord(.offer, value: [0]).encoded
            for _ in 0..<2_000 {
                guard peer.send(frame) else { return }
                usleep(5_000)  // 200 frames/s against a limit of 10
            }
        }
        flood.start()
        r.wait("the flooder's link to go down", timeout: 20) { !$0.downs.isEmpty }
        XCTAssertTrue(r.snapshot.downs[0].1.contains("frames/s"), r.snapshot.downs[0].1)
        XCTAssertEqual(engine.snapshot.counters.misbehaviourDisconnects, 1)
        XCTAssertGreaterThan(engine.snapshot.counters.throttled, 0)
        // 10 frames/s with a one-second burst over about six seconds: well under 100 of the ~1000 sent.
        XCTAssertLessThan(r.snapshot.frames.count, 100, "throttled: the host got frames at the limited rate only")
    }

    func testASilentPeerTimesOutAndAPingingOneStaysUp() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["keepalive_s": .double(0.2), "idle_timeout_s": .double(1)]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        let silent = try RawPeer(port: port)
        XCTAssertTrue(silent.handshake(as: bob, role: .hub))
        r.wait("link up") { $0.ups.count == 1 }
        XCTAssertEqual(silent.readRecord()?.type, FrameType.ping.rawValue, "the engine pings an idle link")
        r.wait("idle link down", timeout: 5) { $0.downs.count == 1 }
        XCTAssertTrue(r.snapshot.downs[0].1.contains("nothing heard"), r.snapshot.downs[0].1)
        _ = engine
    }

    func testStopSaysGoodbyeReportsLinksDownAndCanStartAgain() throws {
        let r = LinkEventRecorder()
        let engine = MeshTestSupport.engine(alice, try MeshTestSupport.loopback(), r)
        try engine.start()
        let peer = try RawPeer(port: try XCTUnwrap(engine.listenAddress?.port))
        XCTAssertTrue(peer.handshake(as: bob, role: .hub))
        r.wait("link up") { $0.ups.count == 1 }
        let t0 = Date()
        engine.stop()
        XCTAssertLessThan(Date().timeIntervalSince(t0), 2)
        XCTAssertEqual(r.snapshot.downs.map(\.1), ["transport stopped"])
        var sawClose = false
        while let record = peer.readRecord() { if record.type == FrameType.linkClose.rawValue { sawClose = true } }
        XCTAssertTrue(sawClose, "the peer got a link-close goodbye")
        XCTAssertThrowsError(try engine.send([1, 0, 0], to: 1)) { XCTAssertEqual($0 as? TransportError, .notRunning) }
        try engine.start()
        addTeardownBlock { engine.stop() }
        XCTAssertNotNil(try RawPeer(port: try XCTUnwrap(engine.listenAddress?.port)), "listening again after a restart")
    }

    func testAConfiguredAddressThatIsOurselvesIsNotRedialled() throws {
        let port = MeshTestSupport.freePort()
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(port: port, peers: [port]), r)
        r.wait("the self-dial to be recognised") { $0.logs.contains { $0.contains("this hub itself") } }
        Thread.sleep(forTimeInterval: 2.5)
        XCTAssertEqual(r.snapshot.logs.filter { $0.hasPrefix("dialling") }.count, 1, "dialled once only: \(r.snapshot.logs)")
        XCTAssertEqual(r.snapshot.ups.count, 0)
        _ = engine
    }

    func testAMissingBeaconInterfaceIsNamed() throws {
        let r = LinkEventRecorder()
        let settings = try MeshTestSupport.settings(["listen": .string("127.0.0.1:0"), "interfaces": .list([.string("nosuch0")]),
                                                     "beacon_port": .int(Int(MeshTestSupport.freePort()))])
        let engine = try started(alice, settings, r)
        r.wait("a warning about nosuch0") { $0.logs.contains { $0.contains("nosuch0") } }
        XCTAssertEqual(engine.snapshot.missingInterfaces, ["nosuch0 (missing or down)"])
        XCTAssertEqual(engine.snapshot.interfaces, [])
    }

    func testALinkCarryingTrafficOneWayStaysUp() throws {
        let portB = MeshTestSupport.freePort()
        let fast: [String: ConfigValue] = ["keepalive_s": .double(0.2), "idle_timeout_s": .double(1)]
        let ra = LinkEventRecorder(), rb = LinkEventRecorder()
        let a = try started(alice, try MeshTestSupport.loopback(peers: [portB], extra: fast), ra)
        _ = try started(bob, try MeshTestSupport.loopback(port: portB, extra: fast), rb)
        ra.wait("link at A") { $0.ups.count == 1 }
        let link = ra.snapshot.ups[0].id
        // A streams to B for three idle timeouts; B's host never sends anything back.
        let until = Date().addingTimeInterval(3)
        while Date() < until {
            try a.send(TLVRecord(.offer, value: [1]).encoded, to: link)
            usleep(10_000)
        }
        XCTAssertTrue(ra.snapshot.downs.isEmpty, "A kept the link: B's pongs answer its pings: \(ra.snapshot.downs)")
        XCTAssertTrue(rb.snapshot.downs.isEmpty, "\(rb.snapshot.downs)")
        XCTAssertGreaterThan(rb.snapshot.frames.count, 100)
    }

    /// A hub that redials (it restarted, or lost the old connection without a goodbye) gets
    /// its fresh session: both are authenticated by its key, so the newer one is kept.
    func testAFreshSessionFromTheSameHubReplacesTheOldOne() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["idle_timeout_s": .int(30)]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        let old = try RawPeer(port: port)
        XCTAssertTrue(old.handshake(as: bob, role: .hub))
        r.wait("first link up") { $0.ups.count == 1 }
        let fresh = try RawPeer(port: port)
        XCTAssertTrue(fresh.handshake(as: bob, role: .hub))
        r.wait("the old link replaced") { $0.ups.count == 2 && $0.downs.count == 1 }
        XCTAssertTrue(r.snapshot.downs[0].1.contains("replaced by session"), r.snapshot.downs[0].1)
        XCTAssertTrue(old.waitForClose(timeout: 5))
        XCTAssertEqual(engine.snapshot.neighbours.count, 1)
        XCTAssertEqual(engine.snapshot.counters.duplicatesClosed, 1)
        XCTAssertTrue(fresh.send(TLVRecord(.offer, value: [0, 0]).encoded))
        r.wait("the fresh link carries frames") { $0.frames.count == 1 }
    }

    func testSessionsBeyondMaxSessionsAreRefused() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["max_sessions": .int(2)]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        let first = try RawPeer(port: port), second = try RawPeer(port: port)
        XCTAssertTrue(first.handshake(as: bob, role: .hub))
        XCTAssertTrue(second.handshake(as: TestLinkIdentity(seed: 3), role: .hub))
        r.wait("two links") { $0.ups.count == 2 }
        let third = try RawPeer(port: port)
        XCTAssertTrue(third.waitForClose(timeout: 5), "the third connection is closed at once")
        XCTAssertEqual(engine.snapshot.counters.refusedFull, 1)
        XCTAssertEqual(engine.snapshot.neighbours.count, 2, "the established links are untouched")
    }

    /// Connections that never finish their handshake hold a slot only until a peer that does
    /// needs it: with the table full, the oldest unfinished one gives way.
    func testUnfinishedHandshakesGiveWayToAPeerThatCompletesOne() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["max_sessions": .int(2)]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        let silent1 = try RawPeer(port: port)
        Wait.poll(timeout: 5) { engine.snapshot.sessions >= 1 }
        let silent2 = try RawPeer(port: port)
        Wait.poll(timeout: 5) { engine.snapshot.sessions >= 2 }
        XCTAssertEqual(engine.snapshot.sessions, 2, "the table is full of unfinished handshakes")
        let honest = try RawPeer(port: port)
        XCTAssertTrue(honest.handshake(as: bob, role: .hub))
        r.wait("the honest peer's link") { $0.ups.count == 1 }
        XCTAssertTrue(silent1.waitForClose(timeout: 5), "the oldest unfinished handshake made room")
        XCTAssertEqual(engine.snapshot.counters.halfOpenEvicted, 1)
        XCTAssertEqual(engine.snapshot.counters.refusedFull, 0)
        _ = silent2
    }

    /// 32 throwaway "hub" keys would fill the mesh's 32 sessions: one address holds at most four
    /// inbound sessions, whatever keys it shows, and the rest are refused at once.
    func testOneAddressCannotFillTheSessionTable() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        var peers: [RawPeer] = []
        for seed in 10..<14 {
            let p = try RawPeer(port: port)
            XCTAssertTrue(p.handshake(as: TestLinkIdentity(seed: UInt8(seed)), role: .hub))
            peers.append(p)
        }
        r.wait("four links") { $0.ups.count == 4 }
        for _ in 0..<3 {
            let extra = try RawPeer(port: port)
            XCTAssertTrue(extra.waitForClose(timeout: 5), "a fifth session from the same address is closed at once")
        }
        XCTAssertEqual(engine.snapshot.counters.refusedFull, 3)
        XCTAssertEqual(engine.snapshot.neighbours.count, 4, "the established links are untouched")
        _ = peers
    }

    /// The attack: throwaway keys on eight addresses fill the 32 sessions, so a hub from
    /// elsewhere is refused for good. One network (/24, /64) holds at most a quarter of
    /// the table, and a full table gives a newcomer from a less crowded network the place of
    /// the idlest session of the most crowded one; the crowd competes only with itself.
    func testManyAddressesCannotKeepAHubFromAnotherNetworkOut() throws {
        let r = LinkEventRecorder()
        let engine = try started(alice, try MeshTestSupport.loopback(extra: ["max_sessions": .int(8)]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        var attackers: [RawPeer] = []
        var seed: UInt8 = 20
        func attacker(from source: String) throws -> RawPeer {
            seed += 1
            let p = try RawPeer(port: port, source: source)
            attackers.append(p)
            return p
        }
        for host in 2...5 { XCTAssertTrue(try attacker(from: "127.0.0.\(host)").handshake(as: TestLinkIdentity(seed: seed), role: .hub)) }
        r.wait("four links from 127.0.0.0/24") { $0.ups.count == 4 }
        XCTAssertTrue(try attacker(from: "127.0.0.6").waitForClose(timeout: 5), "a fifth from the same /24 is refused")
        XCTAssertEqual(engine.snapshot.counters.refusedFull, 1)
        for host in 2...5 { XCTAssertTrue(try attacker(from: "127.0.1.\(host)").handshake(as: TestLinkIdentity(seed: seed), role: .hub)) }
        r.wait("the table full: eight links") { $0.ups.count == 8 }

        // A hub from another network gets in; the idlest session of a crowd gives way.
        let honestKey = TestLinkIdentity(seed: 99)
        let honest = try RawPeer(port: port, source: "127.0.9.1")
        XCTAssertTrue(honest.handshake(as: honestKey, role: .hub))
        r.wait("the hub from another network is linked") { $0.ups.contains { $0.peerSigningKey == honestKey.signingKey } }
        XCTAssertEqual(engine.snapshot.counters.crowdEvicted, 1)
        XCTAssertEqual(engine.snapshot.sessions, 8)
        // The crowd cannot push it out again: from either of its networks it is refused.
        XCTAssertTrue(try attacker(from: "127.0.0.7").waitForClose(timeout: 5))
        XCTAssertTrue(try attacker(from: "127.0.1.7").waitForClose(timeout: 5))
        XCTAssertEqual(engine.snapshot.counters.crowdEvicted, 1)
        XCTAssertTrue(engine.snapshot.neighbours.contains { $0.contains("@127.0.9.1:") }, "the hub's link is kept: \(engine.snapshot.neighbours)")
        XCTAssertTrue(honest.send(TLVRecord(.offer, value: [0, 0]).encoded))
        r.wait("its frames still arrive") { !$0.frames.isEmpty }
    }

    /// The attack: strangers with throwaway keys, one per network, hold the whole table, so no
    /// newcomer's network is less crowded than theirs and a hub this one trusts is refused for
    /// as long as they stay. A hub in `router.trusted_hubs` heard by beacon is dialled and
    /// takes the idlest stranger's place; an untrusted hub heard the same way still waits.
    func testATrustedHubHeardByBeaconTakesTheSessionOfAStranger() throws {
        // The hub under test has the lowest key, so it dials a hub at once when it hears it.
        let ids = (100...130).map { TestLinkIdentity(seed: UInt8($0)) }.sorted { $0.signingKey.lexicographicallyPrecedes($1.signingKey) }
        let (hub, trustedHub, strangerHub) = (ids[0], ids[1], ids[2])
        let rTrusted = LinkEventRecorder(), rStranger = LinkEventRecorder()
        let trustedPort = try XCTUnwrap(try started(trustedHub, try MeshTestSupport.loopback(), rTrusted).listenAddress?.port)
        let strangerPort = try XCTUnwrap(try started(strangerHub, try MeshTestSupport.loopback(), rStranger).listenAddress?.port)
        let beaconPort = MeshTestSupport.freePort()
        let r = LinkEventRecorder()
        let engine = try started(hub, try MeshTestSupport.settings([
            "listen": .string("127.0.0.1:0"), "interfaces": .list([.string("lo")]), "beacon_port": .int(Int(beaconPort)),
            "beacon_interval_s": .double(600), "max_sessions": .int(4),
        ], trustedHubs: [trustedHub.signingKey]), r)
        let port = try XCTUnwrap(engine.listenAddress?.port)
        var strangers: [RawPeer] = []
        for n in 1...4 {
            let p = try RawPeer(port: port, source: "127.0.\(n).2")
            XCTAssertTrue(p.handshake(as: TestLinkIdentity(seed: UInt8(40 + n)), role: .hub))
            strangers.append(p)
            r.wait("stranger \(n) linked") { $0.ups.count == n }   // one at a time: the first is the idlest
        }
        func beacon(_ id: TestLinkIdentity, port: UInt16) throws -> [UInt8] {
            try Beacon(signingKey: id.signingKey, kxKey: id.kxKey, tcpPort: port, timestampMs: Int64(Date().timeIntervalSince1970 * 1000))
                .encoded(sign: id.sign)
        }
        MeshTestSupport.sendDatagram(try beacon(strangerHub, port: strangerPort), to: "127.0.0.1", port: beaconPort)
        r.wait("the untrusted hub heard") { $0.logs.contains { $0.contains("heard hub \(MeshEngine.shortKey(strangerHub.signingKey))") } }
        MeshTestSupport.sendDatagram(try beacon(trustedHub, port: trustedPort), to: "127.0.0.1", port: beaconPort)
        r.wait("linked with the trusted hub") { $0.ups.contains { $0.peerSigningKey == trustedHub.signingKey } }
        rTrusted.wait("the trusted hub has the link too") { $0.ups.contains { $0.peerSigningKey == hub.signingKey } }
        XCTAssertTrue(strangers[0].waitForClose(timeout: 5), "the idlest stranger gave its place")
        XCTAssertEqual(engine.snapshot.counters.trustedDisplaced, 1)
        XCTAssertEqual(engine.snapshot.sessions, 4)
        // The untrusted hub, heard first and considered on every dial round since, got nothing.
        XCTAssertFalse(r.snapshot.ups.contains { $0.peerSigningKey == strangerHub.signingKey })
        XCTAssertTrue(rStranger.snapshot.ups.isEmpty)
        // Another stranger from a fifth network is refused; the trusted link stays and carries frames.
        XCTAssertTrue(try RawPeer(port: port, source: "127.0.5.2").waitForClose(timeout: 5))
        let link = try XCTUnwrap(r.snapshot.ups.first { $0.peerSigningKey == trustedHub.signingKey })
        try engine.send(TLVRecord(.offer, value: [0, 0]).encoded, to: link.id)
        rTrusted.wait("a frame crosses the trusted link") { !$0.frames.isEmpty }
        XCTAssertEqual(engine.snapshot.counters.trustedDisplaced, 1)
        _ = strangers
    }
}
