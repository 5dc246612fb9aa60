import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokTesting
import YaokWire
import YaokEndpoint
import YaokProcess
@testable import YaokHubCore

/// A hub in the field has no real-time clock: it boots offline days behind, or a bad GPS fix
/// puts it days ahead (Docs/protocol.md §2.2). Each test runs a real `yaok-hub` under
/// libfaketime (its wall clock only: `FAKETIME_DONT_FAKE_MONOTONIC=1`, so the hub clock's
/// monotonic source stays true, as on a Pi) and `yaok` phones on the true clock, or the other
/// way round.
final class FieldClockTests: XCTestCase {
    private static let day: Int64 = 86_400_000

    /// The command prefix that runs a program with its wall clock `offset` away (`-2d`, `+1h`):
    /// Debian's `faketime` wrapper, which preloads libfaketime. (Setting LD_PRELOAD ourselves
    /// lost a Swift program's arguments when it was spawned from another process here.)
    static func faketime(_ offset: String) throws -> [String] {
        try RequiredTool.require("/usr/bin/faketime", package: "faketime")
        return ["/usr/bin/faketime", "-f", offset]
    }

    /// Only the wall clock is faked: the monotonic clock stays true, as on a Pi.
    static let faketimeEnvironment = ["FAKETIME_DONT_FAKE_MONOTONIC": "1"]

    /// Milliseconds an offset like `-2d` or `+1h` stands for.
    static func milliseconds(_ offset: String) -> Int64 {
        let sign: Int64 = offset.hasPrefix("-") ? -1 : 1
        let number = Int64(offset.dropFirst().dropLast()) ?? 0
        let unit: Int64 = offset.hasSuffix("d") ? day : 3_600_000
        return sign * number * unit
    }

    /// A `yaok-hub` on a free UDP port, its wall clock `offset` away (nil: the true clock).
    func startHub(clockOffset offset: String?, extra: String = "") throws -> (HubProcess, String) {
        let launcher = try offset.map { try Self.faketime($0) } ?? []
        return try Self.startingOnceMoreIfItHangs("a hub at \(offset ?? "the true clock")") {
            let dir = try TestSupport.temporaryDirectory(self)
            let port = HubProcessTests.freePort()
            let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port, extra: extra)
            let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"),
                                     extraEnvironment: Self.faketimeEnvironment, launcher: launcher)
            do { try hub.waitReady() } catch { hub.stop(); throw error }
            return (hub, "udp://127.0.0.1:\(port)")
        }
    }

    /// libfaketime is a test tool at the boundary, and once (in CI, under load; never in some
    /// hundred starts here) a hub it launched wrote nothing and never answered. Such a start is
    /// printed with what each of its threads was doing, and made once more; a second hang fails.
    static func startingOnceMoreIfItHangs<T>(_ what: String, _ start: () throws -> T) throws -> T {
        do {
            return try start()
        } catch let hang as HubProcess.DidNotStart {
            print("FIELD_CLOCK: \(what) did not start under libfaketime, starting it once more: \(hang)")
            return try start()
        }
    }

    /// Runs `yaok` for the user at `home`, its clock `offset` away (nil: the true clock).
    static func yaok(_ home: String, _ args: [String], clockOffset offset: String? = nil, timeout: TimeInterval = 60) throws -> [[String: Any]] {
        var env = ProcessInfo.processInfo.environment
        for (k, v) in faketimeEnvironment { env[k] = v }
        let launcher = try offset.map { try faketime($0) } ?? []
        let full = [args[0], "--home", home] + args.dropFirst()
        let exe = try TestSupport.product("yaok")
        let r = try TestSupport.run(launcher.first ?? exe, Array(launcher.dropFirst()) + (launcher.isEmpty ? [] : [exe]) + full,
                                    timeout: timeout, environment: env)
        XCTAssertEqual(r.status, 0, "yaok \(full.joined(separator: " ")): \(r.output)")
        return r.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    static func events(_ out: [[String: Any]], _ name: String) -> [[String: Any]] { out.filter { $0["event"] as? String == name } }

    /// Alice sends, Bob receives, Alice learns of the delivery, through `url`; Alice's clock
    /// `aliceClock` away. Alice sends with `--wait-delivered` while Bob listens, so each process
    /// ends on an event, never on a timed wait (which a process under libfaketime may not return from).
    func exchange(via url: String, alice: String, bob: String, text: String, aliceClock: String? = nil,
                  file: StaticString = #filePath, line: UInt = #line) throws {
        let sending = DispatchQueue(label: "alice")
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var sent: [[String: Any]] = []
        nonisolated(unsafe) var sendError: Error?
        sending.async {
            do { sent = try Self.yaok(alice, ["send", "Bob", text, "--hub", url, "--json", "--wait-delivered", "--timeout", "40"], clockOffset: aliceClock) } catch { sendError = error }
            done.signal()
        }
        let got = try Self.yaok(bob, ["listen", "--hub", url, "--count", "1", "--json", "--timeout", "30"])
        XCTAssertEqual(Self.events(got, "message").first?["text"] as? String, text, "\(got)", file: file, line: line)
        XCTAssertEqual(done.wait(timeout: .now() + 70), .success, "alice's send returned", file: file, line: line)
        if let sendError { throw sendError }
        let id = try XCTUnwrap(Self.events(sent, "queued").first?["id"] as? String, "\(sent)", file: file, line: line)
        // The receipt can overtake the custody ack (the ack waits for the hub's commit, the
        // onward send does not); then `delivered` is all Alice prints, and it implies custody.
        XCTAssertTrue(Self.events(sent, "delivered").contains { $0["id"] as? String == id }, "the receipt came back: \(sent)", file: file, line: line)
    }

    /// The offsets the issue names: a hub 30 days or 2 days behind (booted offline with an old
    /// saved time), an hour off either way, 2 or 30 days ahead (a bad GPS fix). Phones on the
    /// true clock. Every message is delivered and its receipt comes back; the hub learns from
    /// three phones' votes how far off it is and says so.
    func testAHubWhoseClockIsOffCarriesMailWithReceipts() throws {
        let homes = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try MessagePathTests.initPair(homes)
        let carol = homes + "/carol"
        _ = try Self.yaok(carol, ["init", "--name", "Carol"])
        for offset in ["-30d", "-2d", "-1h", "+1h", "+2d", "+30d"] {
            let (hub, url) = try startHub(clockOffset: offset)
            defer { hub.stop() }
            try exchange(via: url, alice: alice, bob: bob, text: "hub clock \(offset)")
            XCTAssertEqual(try hub.status().router.counters.refusedLifetime, 0, offset)
            XCTAssertEqual(try hub.status().router.counters.refusedExpired, 0, offset)
            // A third phone attaches: three phones agree on the time, the hub says how far off it is.
            _ = try Self.yaok(carol, ["listen", "--hub", url, "--json", "--timeout", "1"])
            let clock = try XCTUnwrap(try hub.status().router.clock, offset)
            XCTAssertEqual(clock.source, .phones, "\(offset): \(clock.summary)")
            XCTAssertFalse(clock.known, "phones alone never make true time known")
            XCTAssertEqual(Double(clock.systemClockErrorMs), Double(Self.milliseconds(offset)), accuracy: 120_000, "\(offset): \(clock.summary)")
            XCTAssertTrue(clock.summary.hasPrefix("unsynchronised, about "), clock.summary)
            XCTAssertTrue(clock.summary.contains(offset.hasPrefix("-") ? "behind" : "ahead"), clock.summary)
            let shown = try TestSupport.run(try TestSupport.product("yaok-hub"), ["status", "--config", hub.configPath]).output
            XCTAssertTrue(shown.contains("clock: unsynchronised, about"), shown)
            print("FIELD_CLOCK hub \(offset): delivered with receipt; \(clock.summary)")
        }
    }

    /// A phone whose own clock is three days off, either way, sends and receives through a hub
    /// that knows true time (its operator vouches for its clock): its messages are judged by
    /// age, its dates within the lead a sender's clock may have. The sending phones are `yaok`
    /// processes under libfaketime; the receiving ones are the same endpoint code in this
    /// process with its clock moved, because a `yaok listen` under libfaketime does not reliably
    /// return from libdispatch's timed waits (absolute CLOCK_REALTIME futex waits, which
    /// libfaketime cannot shift): the clock is the boundary, the hub and the link are real.
    func testAPhoneWhoseClockIsOffStillGetsItsMailThrough() throws {
        let homes = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try MessagePathTests.initPair(homes)
        let (hub, url) = try startHub(clockOffset: nil, extra: "clock:\n  trust_system_clock: always\n")
        defer { hub.stop() }
        XCTAssertEqual(try hub.status().router.clock?.source, .system)
        for offset in ["-3d", "+3d"] {
            try exchange(via: url, alice: alice, bob: bob, text: "from a phone at \(offset)", aliceClock: offset)
            print("FIELD_CLOCK phone \(offset) sends: delivered, its receipt back")
        }
        for offset in ["-3d", "+3d"] {
            let text = "to a phone at \(offset)"
            let sent = try Self.yaok(alice, ["send", "Bob", text, "--hub", url, "--json", "--timeout", "20"])
            let id = try XCTUnwrap(Self.events(sent, "queued").first?["id"] as? String)
            let shift = Self.milliseconds(offset)
            let bobOff = try Endpoint.open(home: bob, now: { WallClock.nowMilliseconds() + shift })
            let session = HubSession(endpoint: bobOff, hub: try HubSession.parseHub(url)) { _ in }
            try session.start()
            try Wait.until(timeout: 20, "the message at Bob, clock \(offset)") { try bobOff.store.inbox().contains { $0.text == text } }
            XCTAssertTrue(session.drain(timeout: 10), "Bob's receipt left")
            session.stop()
            var receipts: [[String: Any]] = []
            try Wait.until(timeout: 40, "the receipt from Bob, clock \(offset)") {
                receipts = try Self.yaok(alice, ["listen", "--hub", url, "--json", "--timeout", "3"])
                return Self.events(receipts, "delivered").contains { $0["id"] as? String == id }
            }
            print("FIELD_CLOCK phone \(offset) receives: delivered, its receipt back")
        }
        XCTAssertEqual(try hub.status().router.counters.refusedLifetime, 0)
        XCTAssertEqual(try hub.status().router.counters.refusedExpired, 0)
    }

    /// Five throwaway phone keys all say it is 30 days later: the hub shows their vote and
    /// judges nothing by it (it would expire everything).
    func testThrowawayPhonesVotingForAFalseTimeExpireNothing() throws {
        let (hub, url) = try startHub(clockOffset: nil, extra: "clock:\n  trust_system_clock: never\n")
        defer { hub.stop() }
        let port = try XCTUnwrap(UInt16(url.split(separator: ":").last ?? ""))
        let liar = WallClock.nowMilliseconds() + 30 * Self.day
        var peers: [RawPeer] = []
        for _ in 0..<5 {
            let p = try RawPeer(identity: Identity.generate(), role: .endpoint, hubPort: port)
            try p.send(ClockFrame(source: .system, timeMs: liar).record)
            peers.append(p)
        }
        try Wait.until(timeout: 10, "five phone samples") { try hub.status().router.counters.clockSamples >= 5 }
        let clock = try XCTUnwrap(try hub.status().router.clock)
        XCTAssertEqual(clock.source, .phones)
        XCTAssertFalse(clock.known)
        XCTAssertTrue(clock.summary.contains("about 30 d behind"), clock.summary)
        // A message dated by the true clock, with a day to live, is taken: the vote expires nothing.
        let alice = Identity.generate(), bob = Identity.generate()
        let sender = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        let e = try seal("still on time", from: alice, to: bob, ttl: Self.day)
        try sender.send(e)
        XCTAssertNil(RawPeer.refusal(try sender.answer(for: e.bundleID)), "taken, not refused as expired")
        XCTAssertEqual(try hub.status().router.counters.refusedExpired, 0)
        print("FIELD_CLOCK five throwaway phones at +30 d: \(clock.summary); nothing refused")
    }

    /// The lifetime attacks of the threats table, against a hub two days behind that knows no
    /// true time, and a hub that knows it: immortal, far-future, age-lying and replayed bundles.
    func testOldLifetimeAttacksAreStillBoundedOnAHubWithAWrongClock() throws {
        let mallory = Identity.generate(), bob = Identity.generate()
        func envelope(created: Int64, ttl: Int64) throws -> Envelope {
            try Envelope.sealMessage(plaintext: Array("x".utf8), from: mallory, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                     createdMs: created, ttlMs: ttl)
        }
        func answer(_ peer: RawPeer, _ e: Envelope, age: UInt32?) throws -> CustodyRefusal.Reason? {
            try peer.send(e, hop: HopHeader.origin(ageMs: age))
            return RawPeer.refusal(try peer.answer(for: e.bundleID))
        }
        let now = WallClock.nowMilliseconds()

        // Two days behind, no source of true time: the age decides.
        let (behind, behindURL) = try startHub(clockOffset: "-2d")
        defer { behind.stop() }
        let p1 = try RawPeer(identity: mallory, role: .endpoint, hubPort: try XCTUnwrap(UInt16(behindURL.split(separator: ":").last ?? "")))
        XCTAssertEqual(try answer(p1, envelope(created: now, ttl: Int64(1) << 62), age: 0), .badLifetime, "immortal")
        XCTAssertEqual(try answer(p1, envelope(created: now, ttl: Self.day), age: UInt32(Self.day)), .expired, "an age of its whole lifetime")
        XCTAssertEqual(try answer(p1, envelope(created: now, ttl: Self.day), age: UInt32.max), .expired, "the largest age")
        XCTAssertNil(try answer(p1, envelope(created: now + 30 * Self.day, ttl: Self.day), age: 0),
                     "dated 30 days ahead: taken, for at most its one-day lifetime on this hub's monotonic clock")

        // A hub that knows true time (its operator vouches for its clock): the clock bounds too.
        let (knows, knowsURL) = try startHub(clockOffset: nil, extra: "clock:\n  trust_system_clock: always\n")
        defer { knows.stop() }
        let p2 = try RawPeer(identity: mallory, role: .endpoint, hubPort: try XCTUnwrap(UInt16(knowsURL.split(separator: ":").last ?? "")))
        XCTAssertEqual(try answer(p2, envelope(created: now - 8 * Self.day, ttl: 7 * Self.day), age: 0), .expired,
                       "a week-old capture replayed with its age reset")
        XCTAssertEqual(try answer(p2, envelope(created: now + 8 * Self.day, ttl: Self.day), age: 0), .badLifetime,
                       "dated more than a lifetime ahead")
        XCTAssertNil(try answer(p2, envelope(created: now + 3 * Self.day, ttl: Self.day), age: 0), "a phone three days ahead")
        XCTAssertNil(try answer(p2, envelope(created: now - 6 * Self.day, ttl: 7 * Self.day), age: 0),
                     "six days old with its age reset: taken, for the day its expiry leaves")
        XCTAssertEqual(try knows.status().router.counters.refusedExpired, 1)
        XCTAssertEqual(try knows.status().router.counters.refusedLifetime, 1)
    }

    /// A hub two days behind, with an uplink: the relay refuses its registration as stale
    /// (±5 minutes) until the PONG tells the relay plugin the relay's time; then the hub knows
    /// true time from the relay and mail crosses the internet both ways.
    func testAHubTwoDaysBehindLearnsTheTimeFromItsRelayAndCarriesMailBothWays() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let relay = try RelayChild(in: dir)
        defer { relay.stop() }
        let key = relay.key

        let (hub, hubURL) = try Self.startingOnceMoreIfItHangs("a hub at -2d") {
            try relay.startHub(self, dir: dir, extraEnvironment: Self.faketimeEnvironment, launcher: try Self.faketime("-2d"))
        }
        defer { hub.stop() }
        // Alice pins this hub: only a hub she trusts may collect her internet mail.
        let hubKey = try hub.signingKeyHex()
        try Wait.until(timeout: 10, "the relay's time at the hub") { try hub.status().router.clock?.source == .relay }
        let clock = try XCTUnwrap(try hub.status().router.clock)
        XCTAssertTrue(clock.known)
        XCTAssertEqual(clock.summary, "unsynchronised, about 48 h behind (relay)")

        let (alice, bob) = try MessagePathTests.initPair(dir)
        let relayAddress = relay.address
        // Alice (phone, true clock) registers through the hub; its registration is dated by her clock.
        _ = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--json", "--timeout", "3"])
        let bobListen = BackgroundYaok(bob, ["listen", "--relay", relayAddress, "--relay-key", key, "--count", "1", "--json", "--timeout", "45"])
        _ = try MessagePathTests.yaok(alice, ["send", "Bob", "from a hub two days behind", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--json", "--timeout", "20"])
        let bobGot = try XCTUnwrap(bobListen.events(), "bob's listen returned")
        XCTAssertTrue(bobGot.contains { $0["text"] as? String == "from a hub two days behind" }, "\(bobGot)\n\(hub.log)")

        let aliceListen = BackgroundYaok(alice, ["listen", "--hub", hubURL, "--relay-key", key, "--trust-hub", hubKey, "--count", "1", "--json", "--timeout", "45"])
        _ = try MessagePathTests.yaok(bob, ["send", "Alice", "to a hub two days behind", "--relay", relayAddress, "--relay-key", key, "--json", "--timeout", "20"])
        let aliceGot = try XCTUnwrap(aliceListen.events(), "alice's listen returned")
        XCTAssertTrue(aliceGot.contains { $0["text"] as? String == "to a hub two days behind" }, "\(aliceGot)\n\(hub.log)")
        XCTAssertEqual(try hub.status().router.counters.refusedExpired + hub.status().router.counters.refusedLifetime, 0)
        print("FIELD_CLOCK hub -2d with a relay: \(clock.summary); mail both ways")
    }
}
