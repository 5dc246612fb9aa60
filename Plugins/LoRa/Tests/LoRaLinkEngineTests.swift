import Synchronization
import XCTest
import YaokLoRaPlugin
import YaokPluginKit
import YaokRNodeEmulator
import YaokTesting

/// Link engines on a simulated channel, in simulated time: beacons, handshakes, fragments,
/// the duty cycle, restarts and hostile frames, with no device and no thread.
final class LoRaLinkEngineTests: XCTestCase {
    /// Hubs (engines) on one `SimulatedAir`, stepped 10 ms at a time.
    final class Air {
        struct Hub {
            var engine: LoRaLinkEngine
            var up: [LinkID: [UInt8]] = [:]            // link → peer key
            var frames: [(LinkID, [UInt8])] = []
            var transmissions: [(start: Double, airtime: Double)] = []
            var downs: [String] = []
        }
        var hubs: [Hub] = []
        var identities: [TestLinkIdentity]
        var air: SimulatedAir
        var now = 0.0
        let settings: LoRaLinkSettings
        let channel: SimulatedAir.Channel
        /// The cookies' clock, in milliseconds of simulated time.
        final class Milliseconds: Sendable { let value = Mutex<Int64>(0) }
        let ms = Milliseconds()
        /// Packets a listener heard (every frame on the air), for replay attacks.
        var overheard: [[UInt8]] = []

        init(hubs count: Int, inRange: [Int: Set<Int>]? = nil, loss: Double = 0, settings: LoRaLinkSettings? = nil) {
            let s = settings ?? LoRaLinkEngineTests.settings()
            self.settings = s
            channel = SimulatedAir.Channel(frequencyHz: 869_525_000, bandwidthHz: UInt32(s.modulation.bandwidthHz),
                                           spreadingFactor: UInt8(s.modulation.spreadingFactor), codingRate: UInt8(s.modulation.codingRate))
            identities = (0..<count).map { TestLinkIdentity(seed: UInt8(10 + $0)) }
            let range = inRange ?? Dictionary(uniqueKeysWithValues: (0..<count).map { a in (a, Set(0..<count).subtracting([a])) })
            air = SimulatedAir(inRange: range, loss: loss, seed: 7)
            for i in 0..<count { hubs.append(Hub(engine: makeEngine(i))) }
        }

        func makeEngine(_ i: Int) -> LoRaLinkEngine {
            let ms = self.ms
            return LoRaLinkEngine(identity: identities[i], settings: settings, cookieClock: { ms.value.withLock { $0 } })
        }

        /// A hub restarts: a new engine with the same key; its links are gone on its side.
        func restart(_ i: Int) {
            hubs[i] = Hub(engine: makeEngine(i))
        }

        func apply(_ i: Int, _ effects: [LoRaLinkEngine.Effect]) {
            for e in effects {
                switch e {
                case .transmit(let bytes):
                    air.queue(from: i, bytes: bytes, channel: channel, at: now)
                    overheard.append(bytes)
                case .linkUp(let info): hubs[i].up[info.id] = info.peerSigningKey
                case .linkDown(let id, let why):
                    hubs[i].up[id] = nil
                    hubs[i].downs.append(String(format: "%.0f s: ", now) + why)
                case .frame(let f, let link): hubs[i].frames.append((link, f))
                case .log: break
                }
            }
        }

        func step(_ seconds: Double = 0.01) {
            now += seconds
            ms.value.withLock { $0 = Int64(now * 1000) }
            for r in air.receptions(until: now) {
                apply(r.receiver, hubs[r.receiver].engine.received(r.bytes, rssiDBm: r.rssiDBm, snrDB: r.snrDB, now: now))
            }
            for i in hubs.indices { apply(i, hubs[i].engine.tick(now: now)) }
            for t in air.startWaiting(at: now) { hubs[t.sender].transmissions.append((t.start, t.end - t.start)) }
        }

        /// Steps until `done` or `limit` simulated seconds; whether `done` came true.
        @discardableResult
        func run(for limit: Double, step seconds: Double = 0.01, until done: () -> Bool = { false }) -> Bool {
            let end = now + limit
            while now < end {
                if done() { return true }
                step(seconds)
            }
            return done()
        }

        func link(_ i: Int, to j: Int) -> LinkID? {
            hubs[i].up.first { $0.value == identities[j].signingKey }?.key
        }
    }

    static func settings(sf: Int = 7, duty: Double = 0.1) -> LoRaLinkSettings {
        var s = LoRaLinkSettings(modulation: LoRaModulation(spreadingFactor: sf, bandwidthHz: 125_000, codingRate: 5), dutyCycle: duty)
        s.beaconInterval = 30
        s.keepalive = 60
        s.idleTimeout = 180
        return s
    }

    func frame(_ n: Int, fill: UInt8) -> [UInt8] { TLVRecord(type: 0x01, value: [UInt8](repeating: fill, count: n)).encoded }

    func testTwoHubsLinkFromBeaconsAndCarryFramesWholeAndInFragments() throws {
        let air = Air(hubs: 2)
        XCTAssertTrue(air.run(for: 60) { air.link(0, to: 1) != nil && air.link(1, to: 0) != nil }, "the hubs did not link")
        let a = try XCTUnwrap(air.link(0, to: 1)), b = try XCTUnwrap(air.link(1, to: 0))
        let small = frame(100, fill: 1), large = frame(3_000, fill: 2)
        try air.hubs[0].engine.send(small, to: a)
        try air.hubs[1].engine.send(large, to: b)
        XCTAssertTrue(air.run(for: 60) { air.hubs[1].frames.count == 1 && air.hubs[0].frames.count == 1 },
                      "frames: \(air.hubs.map(\.frames.count)), counters \(air.hubs.map(\.engine.counters)), queued \(air.hubs.map(\.engine.queuedFrames))")
        XCTAssertTrue(air.hubs[1].frames.first?.1 == small)
        XCTAssertTrue(air.hubs[0].frames.first?.1 == large, "a 3 KB frame, in \(3_003 / Fragments.maxSlice + 1) sealed fragments, arrives whole")
        for hub in air.hubs {
            XCTAssertTrue(hub.transmissions.allSatisfy { $0.airtime <= 0.42 }, "every frame fits one LoRa frame: \(hub.transmissions.map(\.airtime).max() ?? 0)")
        }
        XCTAssertThrowsError(try air.hubs[0].engine.send(frame(Fragments.maxFrame, fill: 3), to: a)) {
            XCTAssertEqual($0 as? TransportError, .frameTooLarge(size: Fragments.maxFrame + 3, mtu: Fragments.maxFrame))
        }
    }

    func testThreeHubsInALineLinkOnlyWithThoseInRange() {
        let air = Air(hubs: 3, inRange: [0: [1], 1: [0, 2], 2: [1]])
        XCTAssertTrue(air.run(for: 120) { air.link(0, to: 1) != nil && air.link(2, to: 1) != nil && air.hubs[1].up.count == 2 })
        XCTAssertNil(air.link(0, to: 2))
        XCTAssertNil(air.link(2, to: 0))
        XCTAssertEqual(Set(air.hubs[1].engine.neighbours.filter(\.linked).map(\.shortID)),
                       Set([0, 2].map { ShortID(signingKey: air.identities[$0].signingKey) }))
    }

    func testFramesGetThroughAFivePercentLossyChannelByResending() throws {
        // The engine does not resend a lost frame (custody does, above it): here the test resends
        // what has not arrived, as the router's custody timer would.
        let air = Air(hubs: 2, loss: 0.05)
        XCTAssertTrue(air.run(for: 120) { air.link(0, to: 1) != nil && air.link(1, to: 0) != nil })
        let a = try XCTUnwrap(air.link(0, to: 1))
        let frames = (0..<20).map { frame(400 + $0, fill: UInt8($0)) }
        for round in 0..<10 {
            let got = Set(air.hubs[1].frames.map(\.1))
            let missing = frames.filter { !got.contains($0) }
            if missing.isEmpty { break }
            for f in missing { try air.hubs[0].engine.send(f, to: a) }
            air.run(for: 60 + Double(round) * 10) { Set(air.hubs[1].frames.map(\.1)).isSuperset(of: frames) }
        }
        XCTAssertEqual(Set(air.hubs[1].frames.map(\.1)), Set(frames), "every frame arrived, none altered")
        XCTAssertGreaterThan(air.air.lost, 0, "the channel lost frames")
    }

    func testTheDutyCycleHoldsOverEveryHourUnderABacklog() throws {
        // 1 % at SF7: 36 s of airtime an hour. A backlog kept full for two and a half hours.
        var settings = Self.settings(sf: 7, duty: 0.01)
        settings.keepalive = 120
        settings.idleTimeout = 600
        let air = Air(hubs: 2, settings: settings)
        XCTAssertTrue(air.run(for: 120) { air.link(0, to: 1) != nil })
        let a = try XCTUnwrap(air.link(0, to: 1))
        var queued = 0
        while air.now < 2.5 * 3600 {
            while queued < 500, (try? air.hubs[0].engine.send(frame(300, fill: UInt8(queued & 0xFF)), to: a)) != nil { queued += 1 }
            air.run(for: 10, step: 0.1)
        }
        let sent = air.hubs[0].transmissions
        var worst = 0.0
        var start = 0.0
        while start < air.now {
            let total = sent.reduce(0.0) { $0 + max(0, min($1.start + $1.airtime, start + 3600) - max($1.start, start)) }
            worst = max(worst, total)
            start += 5
        }
        XCTAssertLessThanOrEqual(worst, 36 + 1e-6, "no hour holds more than 1 % of airtime")
        XCTAssertGreaterThan(worst, 30, "the budget is used, not wasted")
        XCTAssertEqual(air.hubs[0].engine.headroom(now: air.now), 36 - air.hubs[0].engine.airtimeUsed(now: air.now), accuracy: 1e-6)
        XCTAssertGreaterThan(air.hubs[1].frames.count, 100, "counters \(air.hubs.map(\.engine.counters)), queued \(air.hubs.map(\.engine.queuedFrames)), links \(air.hubs.map(\.up.count)), downs \(air.hubs.map(\.downs)), queued by the test \(queued)")
    }

    func testAHubThatRestartsIsLinkedAgainAndFramesFlow() throws {
        let air = Air(hubs: 2)
        XCTAssertTrue(air.run(for: 60) { air.link(0, to: 1) != nil && air.link(1, to: 0) != nil })
        for (restarted, other) in [(1, 0), (0, 1)] {
            air.restart(restarted)
            XCTAssertTrue(air.run(for: 240) { air.link(restarted, to: other) != nil }, "the restarted hub is linked again")
            // The other side takes the new session when the restarted hub's identity arrives, a frame later.
            air.run(for: 5)
            let a = try XCTUnwrap(air.link(other, to: restarted))
            try air.hubs[other].engine.send(frame(50, fill: 9), to: a)
            XCTAssertTrue(air.run(for: 60) { air.hubs[restarted].frames.count == 1 },
                      "the first hub's frames reach the restarted one: counters \(air.hubs.map(\.engine.counters)), queued \(air.hubs.map(\.engine.queuedFrames)), first dials: \(air.identities[0].signingKey.lexicographicallyPrecedes(air.identities[1].signingKey))")
        }
    }

    func testReplayedForgedAndForeignFramesChangeNothing() throws {
        let air = Air(hubs: 2)
        XCTAssertTrue(air.run(for: 60) { air.link(0, to: 1) != nil && air.link(1, to: 0) != nil })
        let a = try XCTUnwrap(air.link(0, to: 1))
        try air.hubs[0].engine.send(frame(900, fill: 5), to: a)
        XCTAssertTrue(air.run(for: 60) { air.hubs[1].frames.count == 1 })
        let b = air.hubs[1].engine
        let refusedBefore = b.counters.sealedRefused, foreignBefore = b.counters.foreign
        // A listener sends every frame it heard again, some altered, and noise.
        for packet in air.overheard where (try? AirFrame(parsing: packet))?.kind == .link {
            _ = b.received(packet, rssiDBm: nil, snrDB: nil, now: air.now)
            var altered = packet
            altered[altered.count - 1] ^= 1
            _ = b.received(altered, rssiDBm: nil, snrDB: nil, now: air.now)
        }
        _ = b.received([0x12, 0, 1], rssiDBm: nil, snrDB: nil, now: air.now)
        _ = b.received([0x31, 0, 1, 0, 2], rssiDBm: nil, snrDB: nil, now: air.now)
        _ = b.received([UInt8](repeating: 0xC0, count: 300), rssiDBm: nil, snrDB: nil, now: air.now)
        // A beacon naming a key whose short ID is not the sender's.
        _ = b.received(AirFrame(kind: .beacon, sender: ShortID(value: 1), receiver: .everyone, body: air.identities[0].signingKey).encoded,
                       rssiDBm: nil, snrDB: nil, now: air.now)
        air.run(for: 5)
        XCTAssertEqual(air.hubs[1].frames.count, 1, "nothing replayed or altered was delivered")
        XCTAssertGreaterThan(b.counters.sealedRefused, refusedBefore)
        XCTAssertGreaterThanOrEqual(b.counters.foreign - foreignBefore, 4)
        XCTAssertNotNil(air.link(1, to: 0), "the link lives on")
    }

    func testAStrangersHelloFloodGetsAtMostATenthOfTheBudget() {
        // One hub, 1 %; a stranger sends a hello addressed to it every 100 ms for an hour.
        let air = Air(hubs: 1, settings: Self.settings(sf: 7, duty: 0.01))
        let hub = air.hubs[0].engine
        let stranger = SecureLink(identity: TestLinkIdentity(seed: 99), role: .hub, isInitiator: true, channel: .datagram)
        let hello = AirFrame(kind: .link, sender: ShortID(value: 0x4242), receiver: hub.shortID, body: try! stranger.hello()).encoded
        while air.now < 3600 {
            _ = hub.received(hello, rssiDBm: nil, snrDB: nil, now: air.now)
            air.run(for: 0.1)
        }
        let spent = air.hubs[0].transmissions.reduce(0) { $0 + $1.airtime }
        XCTAssertLessThanOrEqual(spent, 2 * 3.6 + 1e-6, "cookies and beacons within their tenths: \(spent) s")
        XCTAssertGreaterThan(hub.counters.budgetRefused, 0)
        XCTAssertEqual(hub.linkCount, 0)
    }

    func testFragmentReassemblyIsBoundedAndRefusesInconsistentSlices() {
        var r = Fragments.Reassembly()
        let whole = frame(1_000, fill: 7)
        let parts = Fragments.split(whole, tag: 1).map { Array($0[TLVRecord.headerLength...]) }
        XCTAssertGreaterThan(parts.count, 1)
        for p in parts.dropLast() { XCTAssertNil(r.add(p, now: 0, timeout: 10)) }
        XCTAssertEqual(r.add(parts.last!, now: 1, timeout: 10), whole)
        // Three frames begun: the oldest gives way; a timed-out one is dropped.
        for tag in UInt8(10)...12 { XCTAssertNil(r.add([tag, 0, 3] + [UInt8](repeating: 0, count: Fragments.maxSlice), now: Double(tag), timeout: 10)) }
        XCTAssertEqual(r.partialCount, Fragments.Reassembly.perNeighbour)
        r.expire(now: 100)
        XCTAssertEqual(r.partialCount, 0)
        // Index beyond count, a count of one, a short middle slice, a count that changes.
        XCTAssertNil(r.add([1, 3, 3, 0], now: 0, timeout: 10))
        XCTAssertNil(r.add([1, 0, 1, 0], now: 0, timeout: 10))
        XCTAssertNil(r.add([2, 0, 3, 0], now: 0, timeout: 10))
        XCTAssertNil(r.add([3, 0, 3] + [UInt8](repeating: 0, count: Fragments.maxSlice), now: 0, timeout: 10))
        XCTAssertNil(r.add([3, 1, 4] + [UInt8](repeating: 0, count: Fragments.maxSlice), now: 0, timeout: 10))
        XCTAssertEqual(r.dropped, 3 + 4, "one evicted, two timed out; four refused or replaced")
    }

    func testAirFramesParseOnlyWhatTheyShould() {
        let f = AirFrame(kind: .link, sender: ShortID(value: 0x1234), receiver: .everyone, body: [1, 2, 3])
        XCTAssertEqual(f.encoded, [0x12, 0x12, 0x34, 0xFF, 0xFF, 1, 2, 3])
        XCTAssertEqual(try AirFrame(parsing: f.encoded), f)
        XCTAssertThrowsError(try AirFrame(parsing: [0x12, 0, 0, 0])) { XCTAssertEqual($0 as? AirFrame.ParseError, .tooShort(4)) }
        XCTAssertThrowsError(try AirFrame(parsing: [0x22, 0, 0, 0, 0])) { XCTAssertEqual($0 as? AirFrame.ParseError, .otherVersion(2)) }
        XCTAssertThrowsError(try AirFrame(parsing: [0x15, 0, 0, 0, 0])) { XCTAssertEqual($0 as? AirFrame.ParseError, .unknownKind(5)) }
        XCTAssertThrowsError(try AirFrame(parsing: [0x12] + [UInt8](repeating: 0, count: 254))) { XCTAssertEqual($0 as? AirFrame.ParseError, .tooLong(255)) }
        XCTAssertEqual(Fragments.maxInner, 254 - 5 - SecureLink.overhead)
    }
}
