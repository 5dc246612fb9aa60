import Foundation
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokWire
import struct YaokPluginKit.IPEndpoint
import RelayTestSupport

/// A UDP forwarder between one client and the relay, standing in for an on-path attacker: it
/// sees every packet, can drop the relay's packets and inject its own towards the client
/// (from the address the client's connected socket accepts).
// @unchecked: `client`, `running`, `fromClient`, `dropFilter` only under `lock`; `thread` only on the test's thread.
final class UDPInterposer: @unchecked Sendable {
    let fd: Int32
    let relayPort: Int
    private let lock = NSCondition()
    private var client: sockaddr_in?
    private var running = true
    private var thread: Thread?
    /// Packets from the client, parsed (in arrival order).
    private var fromClient: [RelayPacket] = []
    private var dropFilter: @Sendable (RelayPacket) -> Bool = { _ in false }
    /// Drop the relay's packets matching this (set while the forwarding thread runs).
    var dropFromRelay: @Sendable (RelayPacket) -> Bool {
        get { lock.withLock { dropFilter } }
        set { lock.withLock { dropFilter = newValue } }
    }

    init(relayPort: Int) throws {
        self.relayPort = relayPort
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr)
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { throw NSError(domain: "bind", code: Int(errno)) }
        var tv = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let t = Thread { [weak self] in self?.run() }
        thread = t
        t.start()
    }

    var port: Int {
        var sa = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: sa.sin_port))
    }

    func stop() {
        lock.withLock { running = false }
        thread = nil
    }

    deinit { close(fd) }

    private func run() {
        var buf = [UInt8](repeating: 0, count: 65_536)
        while lock.withLock({ running }) {
            var from = sockaddr_in()
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            let n = buf.withUnsafeMutableBytes { b in
                withUnsafeMutablePointer(to: &from) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, b.baseAddress, b.count, 0, $0, &len) } }
            }
            guard n > 0 else { continue }
            let bytes = Array(buf[0..<n])
            if Int(UInt16(bigEndian: from.sin_port)) == relayPort {
                if let p = try? RelayPacket(parsing: bytes), lock.withLock({ dropFilter })(p) { continue }
                if let c = lock.withLock({ client }) { sendTo(c, bytes) }
            } else {
                lock.withLock {
                    client = from
                    if let p = try? RelayPacket(parsing: bytes) { fromClient.append(p) }
                    lock.broadcast()
                }
                var relay = sockaddr_in()
                relay.sin_family = sa_family_t(AF_INET)
                relay.sin_port = UInt16(relayPort).bigEndian
                inet_pton(AF_INET, "127.0.0.1", &relay.sin_addr)
                sendTo(relay, bytes)
            }
        }
    }

    private func sendTo(_ address: sockaddr_in, _ bytes: [UInt8]) {
        var a = address
        _ = withUnsafePointer(to: &a) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, sa, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
    }

    /// Sends forged bytes to the client, as if from the relay.
    func inject(_ bytes: [UInt8]) {
        guard let c = lock.withLock({ client }) else { return }
        sendTo(c, bytes)
    }

    /// Waits for a client packet matching `match`, seen after the first `after` packets.
    func waitForClientPacket(after: Int, timeout: TimeInterval = 10, _ match: (RelayPacket) -> Bool) -> RelayPacket? {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock()
        defer { lock.unlock() }
        while true {
            if fromClient.count > after, let p = fromClient[after...].first(where: match) { return p }
            if !lock.wait(until: deadline) { return nil }
        }
    }

    var clientPacketCount: Int { lock.withLock { fromClient.count } }

    /// How many packets from the client matched `match` so far.
    func packetsFromClient(_ match: (RelayPacket) -> Bool) -> Int { lock.withLock { fromClient.filter(match).count } }
}

final class RelayResetAndAddressLimitTests: XCTestCase {
    var relay: RelayHarness!
    var interposer: UDPInterposer?

    override func tearDown() {
        interposer?.stop()
        relay?.tearDown()
    }

    /// A registered client that talks to the relay through an interposer.
    private func interposedClient(_ user: Identity) throws -> (RelayClient, UDPInterposer, UInt64) {
        let proxy = try UDPInterposer(relayPort: relay.port)
        interposer = proxy
        let c = relay.client { $0.relay = IPEndpoint(host: "127.0.0.1", port: UInt16(proxy.port)) }
        let mark = c.currentSeq()
        try c.connect(timeout: 10)
        let session = try c.waitFor("connected", timeout: 5, after: mark) { e -> UInt64? in
            if case .connected(let id, _) = e { return id }
            return nil
        }
        XCTAssertEqual(try c.registerAndWait([relay.registration(user, on: c)]).map(\.status), [.accepted])
        // Like the plugin and RelayUserSession: fresh registrations after every handshake.
        let relayKey = relay.identity.signingKey  // the same across restarts (same identity file)
        c.registrationProvider = { channel in
            (try? Registration.owner(user, relaySigningKey: relayKey, channel: channel, timestampMs: nowMs())).map { [$0] } ?? []
        }
        return (c, proxy, session)
    }

    /// A forged RESET (the session ID is visible on the wire) does not drop the session or fail
    /// pending requests: the client handshakes beside it, and only the relay's reply signed by
    /// the pinned key replaces the session.
    func testForgedResetCostsOneAuthenticatedHandshakeAndNothingElse() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate()
        let (a, proxy, session) = try interposedClient(alice)
        let b = try relay.registeredClient(bob)
        let handshakesBefore = relay.server.metricsSnapshot().handshakes

        let mark = a.currentSeq()
        proxy.inject(try RelayPacket(type: .reset, sessionID: session, counter: 0, payload: []).encoded())
        let newSession = try a.waitFor("re-handshake", timeout: 10, after: mark) { e -> UInt64? in
            if case .connected(let id, _) = e { return id }
            if case .disconnected(let reason) = e { XCTFail("a forged RESET dropped the session: \(reason)") }
            return nil
        }
        XCTAssertNotEqual(newSession, session)
        // Its registration provider registered it again on the new session.
        let status = try a.waitFor("REGISTERED", timeout: 5, after: mark) { e -> RegistrationStatus? in
            if case .registered(let id, let s) = e, id == alice.userID { return s }
            return nil
        }
        XCTAssertEqual(status, .accepted)
        XCTAssertEqual(relay.server.metricsSnapshot().handshakes, handshakesBefore + 1)
        XCTAssertEqual(a.counterSnapshot.resets, 1)
        XCTAssertTrue(a.isConnected)

        // The client re-registered itself on the new session and still works both ways.
        try assertPushed(from: alice, via: a, to: bob, via: b)
    }

    /// An on-path attacker that forges RESET and then answers the client's HELLO itself (its
    /// own key) is refused: the old session stays up and keeps carrying messages.
    func testForgedResetWithImpostorReplyKeepsTheSession() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate()
        let (a, proxy, session) = try interposedClient(alice)
        let b = try relay.registeredClient(bob)
        // The attacker suppresses the real relay's HELLO_REPLY.
        proxy.dropFromRelay = { $0.type == .helloReply }
        let before = proxy.clientPacketCount
        let mark = a.currentSeq()
        proxy.inject(try RelayPacket(type: .reset, sessionID: session, counter: 0, payload: []).encoded())
        let hello = try XCTUnwrap(proxy.waitForClientPacket(after: before) { $0.type == .hello }, "the client did not handshake")
        let clientKey = try Hello(parsing: hello.payload).clientKey
        let impostor = Identity.generate()
        let reply = HelloReply.make(sessionID: 7, clientKey: clientKey, relayEphemeralKey: EphemeralKX.generate().publicKey, relay: impostor)
        proxy.inject(try RelayPacket(type: .helloReply, sessionID: 7, counter: 0, payload: reply.encoded).encoded())

        let refusal = try a.waitFor("refusal", timeout: 10, after: mark) { e -> RelayProtocolError? in
            if case .handshakeFailed(let err) = e { return err }
            if case .connected = e { XCTFail("an impostor's HELLO_REPLY replaced the session") }
            if case .disconnected(let reason) = e { XCTFail("a forged RESET dropped the session: \(reason)") }
            return nil
        }
        guard case .relayKeyMismatch = refusal else { return XCTFail("\(refusal)") }
        XCTAssertTrue(a.isConnected)

        // The original session still carries messages.
        try assertPushed(from: alice, via: a, to: bob, via: b)
    }

    /// A RESET for a session the relay really lost (restart) is followed by a genuine
    /// handshake; a SEND pending at that moment is repeated on the new session, not failed.
    func testGenuineResetReplacesTheSessionAndKeepsPendingSends() throws {
        relay = try RelayHarness()
        let alice = Identity.generate(), bob = Identity.generate()
        let a = try relay.registeredClient(alice)
        let relayKey = relay.identity.signingKey  // the same across restarts (same identity file)
        a.registrationProvider = { channel in
            (try? Registration.owner(alice, relaySigningKey: relayKey, channel: channel, timestampMs: nowMs())).map { [$0] } ?? []
        }
        let mark = a.currentSeq()
        try relay.restart()
        let toBob = try messageBundle(from: alice, to: bob)
        // The SEND goes out on the old session, is answered by RESET, and is repeated after the handshake.
        let queued = try a.sendAndWait(bundle: toBob, timeout: 15)
        XCTAssertEqual(queued.status, .queued)
        let events = try a.waitFor("connected", timeout: 5, after: mark) { e -> Bool? in
            if case .connected = e { return true }
            return nil
        }
        XCTAssertTrue(events)
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: bob.userID) }, 1)
    }

    /// Keyless identities are free: one address may not multiply the per-sender hourly budget.
    func testSendsPerHourPerAddressAreLimited() throws {
        var limits = RelayLimits()
        limits.sendsPerHourPerIP = 3
        relay = try RelayHarness(limits: limits)
        let recipient = Identity.generate()
        var statuses: [QueuedNotice.Status] = []
        var refusal: RelayErrorNotice?
        for _ in 0..<4 {
            let sender = Identity.generate()   // a fresh sender each time: the per-sender limit never applies
            let c = try relay.registeredClient(sender)
            do {
                statuses.append(try c.sendAndWait(bundle: messageBundle(from: sender, to: recipient)).status)
            } catch RelayProtocolError.refused(let notice) {
                refusal = notice
            }
        }
        XCTAssertEqual(statuses, [.queued, .queued, .queued])
        let notice = try XCTUnwrap(refusal)
        XCTAssertEqual(notice.code, .rateLimited)
        XCTAssertTrue(notice.text.contains("3 messages per hour from one address"), notice.text)
        XCTAssertGreaterThan(notice.retryAfterMs, 0)
        XCTAssertEqual(relay.server.metricsSnapshot().sendsRefused["rate_limited_ip"], 1)
        XCTAssertEqual(relay.server.withEngine { $0.queuedCount(for: recipient.userID) }, 3)
    }
}

/// Alice's client sends Bob a message: the relay pushes it at once and Bob's client gets it.
private func assertPushed(from alice: Identity, via a: RelayClient, to bob: Identity, via b: RelayClient,
                          file: StaticString = #filePath, line: UInt = #line) throws {
    let markB = b.currentSeq()
    let toBob = try messageBundle(from: alice, to: bob)
    XCTAssertEqual(try a.sendAndWait(bundle: toBob).status, .pushed, file: file, line: line)
    XCTAssertEqual(try b.nextMessage(after: markB, timeout: 5).bundle, toBob, file: file, line: line)
}
