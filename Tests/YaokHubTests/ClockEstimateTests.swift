import XCTest
import Synchronization
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting

/// The hub clock and the estimate of true time (Docs/protocol.md, clock 0x0C), in memory.
final class ClockEstimateTests: XCTestCase {
    private let hour: Int64 = 3_600_000
    private let h0: Int64 = 1_767_225_600_000

    func testTheHubClockResumesAcrossARestartButNotAcrossAClockThatJumped() {
        let p = (hubMs: h0, wallMs: h0 + 5_000)
        XCTAssertEqual(HubClockStart.resume(persisted: nil, wallNowMs: 42), 42, "a new store starts from the wall clock")
        XCTAssertEqual(HubClockStart.resume(persisted: p, wallNowMs: h0 + 5_000 + 120_000), h0 + 120_000, "a restart two minutes later")
        XCTAssertEqual(HubClockStart.resume(persisted: p, wallNowMs: h0 - 30 * 24 * hour), h0,
                       "a clock restored from a saved time (fake-hwclock, timesyncd) moves nothing back")
        XCTAssertEqual(HubClockStart.resume(persisted: p, wallNowMs: h0 + 48 * hour), h0,
                       "a clock that jumped two days forward (synchronised at last) ages nothing")
    }

    func testTheHubClockIgnoresTheWallClockJumping() throws {
        let wall = Mutex<Int64>(h0)
        let time = HubTime(startHubMs: h0, trust: .never, wallClock: { wall.withLock { $0 } })
        let before = time.hubNowMs()
        wall.withLock { $0 += 48 * hour }
        time.refresh()
        let after = time.hubNowMs()
        XCTAssertLessThan(after - before, 5_000, "two days of wall clock moved the hub clock by nothing")
        XCTAssertEqual(time.estimate.source, .none)
        XCTAssertNil(time.knownTrueTimeMs())
        XCTAssertEqual(Double(time.estimate.wallMinusHubMs), Double(48 * hour), accuracy: 5_000)
    }

    func testSourcesRankSystemThenRelayThenHubsThenPhones() {
        var e = ClockEstimator()
        e.observeSystem(wallMs: h0 - 47 * hour, hubMs: h0 - 47 * hour, synchronised: false)
        XCTAssertEqual(e.estimate().source, .none)
        for i in 0..<12 { e.observePhone([UInt8(i)], timeMs: h0 + Int64(i) * 1_000, hubMs: h0 - 47 * hour) }
        XCTAssertEqual(e.estimate().source, .phones)
        XCTAssertFalse(e.estimate().known)
        for i in 0..<3 { e.observeHub([0xA0 + UInt8(i)], frame: ClockFrame(source: .system, timeMs: h0), hubMs: h0 - 47 * hour) }
        XCTAssertEqual(e.estimate().source, .hubs)
        XCTAssertTrue(e.estimate().known)
        e.observeRelay(timeMs: h0 + 500, hubMs: h0 - 47 * hour)
        let estimate = e.estimate()
        XCTAssertEqual(estimate.source, .relay)
        XCTAssertEqual(estimate.trueMinusHubMs, 47 * hour + 500)
        XCTAssertEqual(estimate.summary, "unsynchronised, about 47 h behind (relay, 3 hubs, 12 phones)")
        e.observeSystem(wallMs: h0, hubMs: h0 - 47 * hour, synchronised: true)
        XCTAssertEqual(e.estimate().source, .system)
        XCTAssertEqual(e.estimate().summary, "synchronised (system) (relay, 3 hubs, 12 phones)")
    }

    func testAHubCountsOnlyIfItsOwnTimeComesFromItsSystemOrTheRelay() {
        var e = ClockEstimator()
        e.observeSystem(wallMs: h0, hubMs: h0, synchronised: false)
        e.observeHub([1], frame: ClockFrame(source: .hubs, timeMs: h0 + 30 * 24 * hour), hubMs: h0)
        e.observeHub([2], frame: ClockFrame(source: .phones, timeMs: h0 + 30 * 24 * hour), hubMs: h0)
        e.observeHub([3], frame: ClockFrame(source: .none, timeMs: h0 + 30 * 24 * hour), hubMs: h0)
        XCTAssertEqual(e.estimate().source, .none, "no circle of hubs, no hub's phones, no hub's guess")
        e.observeHub([4], frame: ClockFrame(source: .relay, timeMs: h0 + hour), hubMs: h0)
        XCTAssertEqual(e.estimate().hubs, 1)
        e.observeHub([4], frame: ClockFrame(source: .none, timeMs: h0 + hour), hubMs: h0)
        XCTAssertEqual(e.estimate().source, .none, "a hub that lost its source takes its sample back")
    }

    func testThrowawayPhonesNeverMakeTimeKnownAndAMinorityCannotMoveTheVote() {
        var e = ClockEstimator()
        e.observeSystem(wallMs: h0, hubMs: h0, synchronised: false)
        e.observePhone([1], timeMs: h0 + 30 * 24 * hour, hubMs: h0)
        e.observePhone([2], timeMs: h0 + 30 * 24 * hour, hubMs: h0)
        XCTAssertEqual(e.estimate().source, .none, "two phones are no vote")
        XCTAssertNil(ClockEstimator.phoneVote([0, 30 * 24 * hour, -30 * 24 * hour]), "three phones that disagree are no vote")
        for i in 3..<6 { e.observePhone([UInt8(i)], timeMs: h0 + 30 * 24 * hour, hubMs: h0) }
        let attacked = e.estimate()
        XCTAssertEqual(attacked.source, .phones)
        XCTAssertFalse(attacked.known, "five throwaway keys move the display, never a lifetime")
        XCTAssertEqual(attacked.toleranceMs, hour)
        // Honest phones outnumbering them take the median back.
        for i in 10..<17 { e.observePhone([UInt8(i)], timeMs: h0 + Int64(i) * 100, hubMs: h0) }
        XCTAssertLessThan(e.estimate().trueMinusHubMs, 60_000)
        XCTAssertEqual(ClockEstimator.phoneVote([5, 0, 100, 4 * hour, 50]), 50)
    }

    func testSamplesAgeOutAndTheTablesAreBounded() {
        var e = ClockEstimator()
        e.observeSystem(wallMs: h0, hubMs: h0, synchronised: false)
        e.observeRelay(timeMs: h0, hubMs: h0)
        for i in 0..<300 { e.observePhone([UInt8(i / 256), UInt8(i % 256)], timeMs: h0, hubMs: h0 + Int64(i)) }
        XCTAssertEqual(e.estimate().phones, ClockEstimator.maxPhones)
        e.forgetOld(hubMs: h0 + 25 * hour)
        XCTAssertEqual(e.estimate().source, .none)
        XCTAssertEqual(e.estimate().phones, 0)
    }

    func testTheFrameAHubSendsSaysWhereItsTimeComesFrom() {
        let time = HubTime(startHubMs: h0, trust: .always, wallClock: { 1_767_225_600_000 })
        XCTAssertEqual(time.frame().source, .system)
        XCTAssertNotNil(time.knownTrueTimeMs())
        let unsure = HubTime(startHubMs: h0, trust: .never)
        XCTAssertEqual(unsure.frame().source, .none)
        XCTAssertEqual(unsure.bestTrueTimeMs().toleranceMs, EnvelopeLifetime.protocolMaxTTLMs)
        XCTAssertTrue(unsure.update { $0.observeRelay(timeMs: 2_000_000_000_000, hubMs: $1) }, "the source changed")
        XCTAssertEqual(unsure.frame().source, .relay)
        XCTAssertEqual(Double(unsure.knownTrueTimeMs() ?? 0), 2_000_000_000_000, accuracy: 5_000)
    }
}
