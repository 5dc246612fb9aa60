import HubTestSupport
import Foundation
import Synchronization
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
import YaokTesting

/// Sends one datagram from `fd` to an IPv4 address (the attack tests' raw sends).
func sendDatagram(_ fd: Int32, _ bytes: [UInt8], to address: sockaddr_in) {
    var target = address
    _ = withUnsafePointer(to: &target) { a in
        a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
            bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, sa, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }
}

/// A UDP interposer on loopback: the victim dials it instead of the hub; it forwards both
/// ways, records every datagram (a passive capture of the link), and can drop, inject and
/// replay as an attacker on the path would. To the hub, what it injects comes from the
/// victim's address.
final class UDPTap: Sendable {
    let fd: Int32
    let port: UInt16
    private let hub: IPEndpoint
    private struct State {
        var victim: sockaddr_in?
        var running = true
        var captured: [(fromVictim: Bool, bytes: [UInt8])] = []
        var dropFromHub: @Sendable ([UInt8]) -> Bool = { _ in false }
        var delayFromHubMs = 0
    }
    private let state = Mutex(State())
    /// Hub → victim datagrams for which this returns true are dropped (set while the tap runs).
    var dropFromHub: @Sendable ([UInt8]) -> Bool {
        get { state.withLock { $0.dropFromHub } }
        set { state.withLock { $0.dropFromHub = newValue } }
    }

    /// Hub → victim datagrams wait this long (a slow radio) while the tap runs.
    var delayFromHubMs: Int {
        get { state.withLock { $0.delayFromHubMs } }
        set { state.withLock { $0.delayFromHubMs = newValue } }
    }

    init(hubPort: UInt16) throws {
        hub = IPEndpoint(host: "127.0.0.1", port: hubPort)
        let sock = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var addr = IPEndpoint(host: "127.0.0.1", port: 0).sockaddr
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(sock, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(sock, $0, &len) } }
        var tv = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        fd = sock
        port = UInt16(bigEndian: bound.sin_port)
        Thread.detachNewThread { [self] in run() }
    }

    func stop() {
        state.withLock { $0.running = false }
    }

    var snapshot: [(fromVictim: Bool, bytes: [UInt8])] { state.withLock { $0.captured } }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while state.withLock({ $0.running }) {
            var from = sockaddr_in()
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            let n = buffer.withUnsafeMutableBytes { b in
                withUnsafeMutablePointer(to: &from) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, b.baseAddress, b.count, 0, $0, &len) } }
            }
            guard n > 0 else { continue }
            let bytes = Array(buffer[0..<n])
            let fromHub = IPEndpoint(from) == hub
            let (target, drop, delayMs): (sockaddr_in?, Bool, Int) = state.withLock { s in
                s.captured.append((!fromHub, bytes))
                if fromHub { return (s.victim, s.dropFromHub(bytes), s.delayFromHubMs) }
                s.victim = from
                return (hub.sockaddr, false, 0)
            }
            guard let t = target, !drop else { continue }
            if delayMs > 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delayMs)) { [fd] in sendDatagram(fd, bytes, to: t) }
            } else {
                sendDatagram(fd, bytes, to: t)
            }
        }
        close(fd)
    }

    /// Sends `bytes` to the hub from the victim's address (as the hub sees it).
    func inject(_ bytes: [UInt8]) { sendDatagram(fd, bytes, to: hub.sockaddr) }

    /// Sends `bytes` to the victim from the hub's address (as the victim sees it): what a blind
    /// off-path spoofer can do, knowing only the two addresses. False before the victim spoke.
    @discardableResult
    func injectToVictim(_ bytes: [UInt8]) -> Bool {
        guard let victim = state.withLock({ $0.victim }) else { return false }
        sendDatagram(fd, bytes, to: victim)
        return true
    }
}

/// Link attacks, re-enacted against a real hub process over UDP. Each asserts that the victim's
/// message arrives exactly once and that the attack is refused and counted.
final class LinkSecurityTests: XCTestCase {
    private func udpDetail(_ hub: HubProcess, _ key: String) throws -> Int {
        let udp = try XCTUnwrap(try hub.status().transports.first { $0.kind == "udp" })
        return Int(udp.status.details[key] ?? "") ?? -1
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
            if Array(haystack[i..<(i + needle.count)]) == needle { return true }
        }
        return false
    }

    /// A passive listener on the link sees no key, user ID, message ID or bundle ID: every
    /// datagram after the two handshake messages is a sealed record.
    func testAPassiveCaptureShowsNoKeyIDOrRecipient() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let tap = try UDPTap(hubPort: s.port)
        defer { tap.stop() }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: tap.port)
        let message = try seal("the plan", from: s.alice, to: s.bob)
        try phone.send(message)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: message.bundleID)))
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        try Wait.until(timeout: 20, "bob got the message") { bob.receivedEnvelopes.contains { $0.bundleID == message.bundleID } }

        let capture = tap.snapshot
        XCTAssertGreaterThanOrEqual(capture.count, 5, "hello, cookie, hello, reply, sealed frames")
        let secrets: [(String, [UInt8])] = [
            ("the sender's signing key", s.alice.signingKey), ("the sender's X25519 key", s.alice.kxKey),
            ("the sender's user ID", s.alice.userID), ("the recipient's user ID", s.bob.userID),
            ("the recipient's signing key", s.bob.signingKey),
            ("the message ID", message.messageID), ("the bundle ID", message.bundleID),
            ("the hub's user ID", try XCTUnwrap(YaokPluginKit.Hex.decode(try s.hub.status().hub.id))),
        ]
        for (what, bytes) in secrets {
            for (fromVictim, datagram) in capture {
                XCTAssertFalse(contains(datagram, Array(bytes.prefix(8))), "\(what) in clear \(fromVictim ? "from the phone" : "from the hub")")
            }
        }
        let types = Set(capture.map { $0.bytes[0] })
        XCTAssertTrue(types.isSubset(of: [FrameType.linkHello.rawValue, FrameType.linkCookie.rawValue,
                                          FrameType.linkReply.rawValue, FrameType.sealed.rawValue]), "types on the air: \(types)")
    }

    /// An attacker on the path (it relays the phone's handshake, so the hub's session is
    /// with the real phone) drops the hub's frames and forges, in clear and from the phone's
    /// address, a custody ack and a link close, then replays the phone's sealed frames. The
    /// hub takes none of it: the message stays in custody, the link stays up, and the phone
    /// gets the message exactly once when the path clears.
    func testAManInTheMiddleCanNeitherAckNorCloseNorReplay() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let tap = try UDPTap(hubPort: s.port)
        defer { tap.stop() }
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: tap.port)
        tap.dropFromHub = { $0.first == FrameType.sealed.rawValue }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let message = try seal("only for bob", from: s.alice, to: s.bob)
        try phone.send(message)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: message.bundleID)))
        // The hub has pushed the bundle towards bob (and the tap dropped it).
        try Wait.until(timeout: 10, "the bundle in flight to bob") { try s.hub.status().router.queue.inFlight >= 1 }

        let sealedRefusedBefore = try udpDetail(s.hub, "sealed_refused")
        let droppedBefore = try udpDetail(s.hub, "dropped_datagrams")
        tap.inject(TLVRecord(.custodyAck, value: CustodyAck(bundleID: message.bundleID).encoded).encoded)
        tap.inject(TLVRecord(.linkClose, value: []).encoded)
        let replays = tap.snapshot.filter { $0.fromVictim && $0.bytes.first == FrameType.sealed.rawValue }.map(\.bytes)
        XCTAssertFalse(replays.isEmpty)
        for r in replays { tap.inject(r) }
        try Wait.until(timeout: 10, "the forgeries counted") {
            try udpDetail(s.hub, "dropped_datagrams") >= droppedBefore + 2
                && udpDetail(s.hub, "sealed_refused") >= sealedRefusedBefore + replays.count
        }
        let status = try s.hub.status()
        XCTAssertEqual(status.router.queue.delivered, 0, "a forged ack ends nothing")
        XCTAssertEqual(status.router.counters.receiptsUnverified, 0)
        XCTAssertEqual(status.transports.first { $0.kind == "udp" }?.status.links, 2, "a forged link close closes nothing")

        // The path clears: the hub's retransmission reaches bob over the same, still-live session.
        tap.dropFromHub = { _ in false }
        XCTAssertEqual(try deliveries(of: message.bundleID, to: bob, settle: 1.5), 1)
        try Wait.until(timeout: 10, "bob's real ack accepted") { try s.hub.status().router.queue.inFlight == 0 }
    }

    /// Attack 8 of the third security review: a blind off-path spoofer sends clear version
    /// refusals (one listing our own version, one listing only version 1) and forged replies
    /// and cookies "from" a configured peer, 100 a second, never seeing the traffic. Each used
    /// to abort the dialling hub's half-open handshake (243 attempts, 0 links in 25 s). Now
    /// they are dropped and counted, and the link comes up over a slow path (100 ms each way
    /// from the peer) all the same.
    func testABlindSpooferCannotAbortAHandshake() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let tap = try UDPTap(hubPort: s.port)
        defer { tap.stop() }
        tap.delayFromHubMs = 100
        let dir = try TestSupport.temporaryDirectory(self)
        let victim = try HubProcess(dir: dir, config: HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)],
                                                                             udpPort: HubProcessTests.freePort(), peers: [tap.port]),
                                    executable: try TestSupport.product("yaok-hub"))
        defer { victim.stop() }
        try victim.waitReady()
        let flooding = Atomic(true)
        let forgeries: [[UInt8]] = [
            TLVRecord(.linkVersion, value: [SecureLink.version]).encoded, TLVRecord(.linkVersion, value: [1]).encoded,
            TLVRecord(.linkReply, value: (0..<SecureLink.replyLength).map { _ in UInt8.random(in: 0...255) }).encoded,
            TLVRecord(.linkCookie, value: [UInt8](repeating: 7, count: LinkCookies.cookieLength - 1)).encoded,
            TLVRecord(.linkCookie, value: [UInt8](repeating: 8, count: LinkCookies.cookieLength)).encoded,
            TLVRecord(.linkCookie, value: [UInt8](repeating: 9, count: LinkCookies.cookieLength + LinkCookies.echoLength)).encoded,
        ]
        let sent = Atomic(0)
        let flood = Thread {
            while flooding.load(ordering: .relaxed) {
                for f in forgeries where tap.injectToVictim(f) { sent.add(1, ordering: .relaxed) }
                Thread.sleep(forTimeInterval: 0.04)
            }
        }
        flood.start()
        defer { flooding.store(false, ordering: .relaxed) }
        try Wait.until(timeout: 30, "the victim hub's link to its configured peer, under the spoofing") {
            try victim.transport("udp")?.status.links == 1
        }
        try Wait.until(timeout: 10, "forgeries counted") { try udpDetail(victim, "handshake_records_ignored") >= 10 }
        XCTAssertGreaterThan(sent.load(ordering: .relaxed), 10)
        XCTAssertGreaterThan(try udpDetail(victim, "version_refused"), 0)
        // The victim's link is up when the reply comes; the hub's when the identity frame does.
        try Wait.until(timeout: 5, "the hub's side of the link (log: \(s.hub.log.suffix(1500)))") { try s.hub.transport("udp")?.status.links == 1 }
    }

    /// Attack 4 of the third security review: keys are free, so 256 handshakes from one IP with
    /// throwaway keys filled `max_sessions`, and a real phone's bundles got no custody ack. Now
    /// one address holds at most 8 sessions (its idlest gives way to its newest), and when the
    /// table is full a newcomer takes the place of the idlest session of the most crowded /24:
    /// a phone from another network gets in and its message is taken into custody.
    func testThrowawayKeysCannotFillTheUDPSessionTable() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "keepalive_s: 1", with: "keepalive_s: 1\n    max_sessions: 16")
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        defer { hub.stop() }
        try hub.waitReady()
        func links() throws -> Int { try hub.transport("udp")?.status.links ?? -1 }

        var junk: [RawPeer] = []
        for _ in 0..<20 { junk.append(try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: port)) }
        try Wait.until(timeout: 10, "the address's own sessions giving way") { try udpDetail(hub, "sessions_evicted") >= 12 }
        XCTAssertEqual(try links(), 8, "20 throwaway keys from one address hold 8 sessions (UDPLinkEngine.maxSessionsPerAddress)")

        // More addresses of the same /24 fill the table and then compete among themselves.
        for host in ["127.0.0.2", "127.0.0.3"] {
            for _ in 0..<8 { junk.append(try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: port, host: host)) }
        }
        try Wait.until(timeout: 10, "the table full") { try links() == 16 }
        let evictedBefore = try udpDetail(hub, "sessions_evicted")
        XCTAssertGreaterThan(evictedBefore, 0, "24 sessions of one /24 for 16 slots: the crowd made room within itself")

        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port, host: "127.0.1.7")
        let message = try seal("through a full table", from: alice, to: bob)
        try phone.sendUntilAcknowledged([message])
        XCTAssertEqual(try udpDetail(hub, "sessions_evicted"), evictedBefore + 1, "the phone took one crowded session's place")
        XCTAssertEqual(try links(), 16)
        XCTAssertTrue(try hub.status().router.links.contains { $0.remote?.hasPrefix("127.0.1.7:") == true }, "the phone's link is up")
        _ = junk
    }

    /// A phone that reconnects quickly (a new port each time, its old sessions not yet idle)
    /// must not run out of slots (`no session slot` after four): its idlest session gives way
    /// to its newest, and the sixth reconnect gets its message into custody.
    func testAPhoneThatReconnectsReplacesItsStaleSessions() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        var stale: [RawPeer] = []
        for _ in 0..<5 { stale.append(try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)) }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let message = try seal("after five reconnects", from: s.alice, to: s.bob)
        try phone.sendUntilAcknowledged([message])
        XCTAssertEqual(try udpDetail(s.hub, "slots_refused"), 0)
        XCTAssertGreaterThanOrEqual(try udpDetail(s.hub, "sessions_evicted"), 2, "six sessions of one key, four slots")
        XCTAssertFalse(s.hub.log.contains("no session slot"), s.hub.log.suffix(2000).description)
        _ = stale
    }

    /// Many one-off datagrams from many source addresses: 3-byte junk and cookie-less hellos.
    /// The hub keeps no state for them, answers junk with nothing and hellos with less than
    /// they sent, and a configured peer still links.
    func testAFloodFromManyAddressesHoldsNoSlotsAndReflectsLessThanItSends() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        var sent = 0
        let hub = IPEndpoint(host: "127.0.0.1", port: s.port)
        for i in 0..<300 {
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            sockets.append(fd)
            var tv = timeval(tv_sec: 0, tv_usec: 1_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            let probe = SecureLink(identity: Identity.generate(), role: .hub, isInitiator: true, channel: .datagram)
            let datagram = i % 2 == 0 ? [UInt8](repeating: 0x20, count: 3) : try probe.hello()
            sendDatagram(fd, datagram, to: hub.sockaddr)
            sent += datagram.count
        }
        do {
            try Wait.until(timeout: 10, "150 cookies sent") { try udpDetail(s.hub, "cookies_sent") >= 150 }
        } catch {
            XCTFail("udp: \(String(describing: try? s.hub.transport("udp")))\nlog: \(s.hub.log.suffix(3000))")
            throw error
        }
        var received = 0
        var buffer = [UInt8](repeating: 0, count: 2048)
        for fd in sockets {
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                if n <= 0 { break }
                received += n
            }
        }
        print("flood: \(sent) bytes sent from 300 addresses, \(received) bytes answered (ratio \(String(format: "%.2f", Double(received) / Double(sent))))")
        XCTAssertGreaterThan(received, 0, "hellos are answered (with cookies)")
        XCTAssertLessThanOrEqual(received, sent, "no amplification")
        XCTAssertEqual(try udpDetail(s.hub, "sessions"), 0, "no state for unvalidated addresses")

        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let message = try seal("still here", from: s.alice, to: s.bob)
        try phone.send(message)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: message.bundleID)))
    }

    /// Validated but never-finished handshakes from many ports cannot lock out an honest peer:
    /// at most 8 per IP address, and the oldest half-open one gives way when all are taken.
    func testHalfOpenHandshakesCannotLockOutAnHonestPeer() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        var peers: [UDPLinkEngineProbe] = []
        for host in ["127.0.0.3", "127.0.0.4"] {
            for _ in 0..<40 { peers.append(try UDPLinkEngineProbe(host: host, hubPort: s.port)) }
        }
        defer { peers.forEach { $0.close() } }
        for p in peers { p.helloWithCookie() }
        try Wait.until(timeout: 10, "the per-address cap refused most") { try udpDetail(s.hub, "slots_refused") >= 60 }
        XCTAssertLessThanOrEqual(try udpDetail(s.hub, "sessions"), 16)
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let message = try seal("through the flood", from: s.alice, to: s.bob)
        try phone.send(message)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: message.bundleID)))
    }
    /// Attack 6 of the third security review: cookie-validated hellos from 16 addresses at full
    /// speed; the newest evicted the oldest half-open session, so a phone on a slow radio (its
    /// identity frame 300 ms after the hub's reply) completed 1 handshake in 38. Now the most
    /// crowded /24 gives way first, and within one /24 a half-open session has 2 s.
    func testAValidatedHelloFloodDoesNotEvictASlowPhonesHandshake() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let tap = try UDPTap(hubPort: s.port)
        defer { tap.stop() }
        // 700 ms from the hub to the phone: its identity frame comes ~700 ms after the hub's
        // reply (and its whole handshake still fits in the 2 s before it says hello again).
        tap.delayFromHubMs = 700
        let flooding = Atomic(true), hellos = Atomic(0)
        let hosts = (1...16).map { "127.0.2.\($0)" }
        let hubPort = s.port
        for first in 0..<2 {
            Thread.detachNewThread {
                var i = first
                while flooding.load(ordering: .relaxed) {
                    if let probe = try? UDPLinkEngineProbe(host: hosts[i % hosts.count], hubPort: hubPort) {
                        probe.helloWithCookie()
                        probe.close()
                        hellos.add(1, ordering: .relaxed)
                    }
                    i += 2
                }
            }
        }
        defer { flooding.store(false, ordering: .relaxed) }
        try Wait.until(timeout: 20, "the flood filling the half-open table") { try udpDetail(s.hub, "half_open_evicted") + udpDetail(s.hub, "slots_refused") > 100 }
        let phone = try RawPeer(identity: s.alice, role: .endpoint, hubPort: tap.port)
        let message = try seal("over a slow radio, through the flood", from: s.alice, to: s.bob)
        try phone.sendUntilAcknowledged([message])
        flooding.store(false, ordering: .relaxed)
        print("half-open flood: \(hellos.load(ordering: .relaxed)) validated hellos from 16 addresses; the slow phone's handshake completed")
    }
}

/// An initiator that completes the cookie round and sends its padded hello, then goes silent:
/// a half-open handshake as cheap as an attacker can make one.
final class UDPLinkEngineProbe {
    let fd: Int32
    let hub: IPEndpoint
    let link = SecureLink(identity: Identity.generate(), role: .hub, isInitiator: true, channel: .datagram)

    init(host: String, hubPort: UInt16) throws {
        hub = IPEndpoint(host: "127.0.0.1", port: hubPort)
        let sock = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var addr = IPEndpoint(host: host, port: 0).sockaddr
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(sock, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { throw TransportError.system(call: "bind \(host)", errno: errno) }
        var tv = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        fd = sock
    }

    func close() { Glibc.close(fd) }

    private func send(_ bytes: [UInt8]) { sendDatagram(fd, bytes, to: hub.sockaddr) }

    /// Hello, cookie, hello with the cookie; the reply is read and ignored.
    func helloWithCookie() {
        guard let hello = try? link.hello() else { return }
        send(hello)
        var buffer = [UInt8](repeating: 0, count: 2048)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0, let record = try? TLVRecord(parsing: Array(buffer[0..<n])),
              case .send(let again)? = try? link.receive(record).first else { return }
        send(again)
    }
}
