import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// Each link's custody timeout and window are learnt from its own acknowledgements
/// (``CustodyPacing``): the arithmetic alone, then a real hub resending a bundle whose
/// custody answer a phone withholds.
final class CustodyPacingTests: XCTestCase {
    func testTimeoutIsTheConfiguredOneUntilTheFirstAnswerThenFollowsTheRoundTrip() {
        var p = CustodyPacing(maxTimeoutMs: 30_000)
        XCTAssertEqual(p.timeoutMs(), 30_000, "no measurement yet: the configured timeout")
        p.answered(rttMs: 800)
        // RFC 6298 first sample: srtt = r, rttvar = r / 2, timeout = srtt + 4 rttvar.
        XCTAssertEqual(p.smoothedRTTMs, 800)
        XCTAssertEqual(p.timeoutMs(), 2_400)
        XCTAssertEqual(p.timeoutMs(resends: 1), 4_800, "doubled for each resend")
        XCTAssertEqual(p.timeoutMs(resends: 10), 30_000, "never above the configured timeout")
        for _ in 0..<50 { p.answered(rttMs: 2) }
        XCTAssertEqual(p.timeoutMs(), CustodyPacing.minTimeoutMs, "never below the floor")
        // A timeout backs the whole link off until a fresh measurement.
        p.timedOut(nowMs: 1_000)
        XCTAssertEqual(p.timeoutMs(), 2 * CustodyPacing.minTimeoutMs)
        p.timedOut(nowMs: 5_000)
        XCTAssertEqual(p.timeoutMs(), 4 * CustodyPacing.minTimeoutMs)
        p.answered(rttMs: nil)
        XCTAssertEqual(p.timeoutMs(), 4 * CustodyPacing.minTimeoutMs, "an ambiguous answer does not end the backoff")
        p.answered(rttMs: 2)
        XCTAssertEqual(p.timeoutMs(), CustodyPacing.minTimeoutMs)
    }

    func testAResentBundlesAnswerIsNotMeasured() {
        var p = CustodyPacing(maxTimeoutMs: 30_000)
        p.answered(rttMs: nil)
        XCTAssertNil(p.smoothedRTTMs, "Karn's rule: an answer to a resent bundle is ambiguous")
        XCTAssertEqual(p.window, CustodyPacing.initialWindow + 1, "but it still opens the window")
    }

    func testWindowGrowsPerAnswerAndHalvesOncePerLossEvent() {
        var p = CustodyPacing(maxTimeoutMs: 30_000)
        XCTAssertEqual(p.window, CustodyPacing.initialWindow)
        for _ in 0..<200 { p.answered(rttMs: 10) }
        XCTAssertEqual(p.window, CustodyPacing.maxWindow)
        // A burst of timeouts in one tick is one loss event.
        for _ in 0..<40 { p.timedOut(nowMs: 10_000) }
        XCTAssertEqual(p.window, CustodyPacing.maxWindow / 2)
        // A timeout later (2 s floor, doubled by the first loss), another loss halves it again.
        p.timedOut(nowMs: 13_999)
        XCTAssertEqual(p.window, CustodyPacing.maxWindow / 2)
        p.timedOut(nowMs: 14_000)
        XCTAssertEqual(p.window, CustodyPacing.maxWindow / 4)
        for i in 0..<20 { p.timedOut(nowMs: 20_000 + Int64(i) * 40_000) }
        XCTAssertEqual(p.window, CustodyPacing.minWindow, "never below the floor")
    }

    /// A phone withholds the custody answer to one bundle on a working link. The hub must
    /// send it again after about the link's measured timeout (a second or two), not after the
    /// configured `custody_timeout_s` (5 s in these tests; 30 s by default), and the link's
    /// window, grown by the answers before, halves.
    func testAnUnansweredBundleOnALiveLinkIsResentAfterTheMeasuredTimeout() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let alice = try RawPeer(identity: s.alice, role: .endpoint, hubPort: s.port)
        let bob = try RawPeer(identity: s.bob, role: .endpoint, hubPort: s.port)
        // Ten answered bundles: round-trip samples, and ten more in the window.
        for i in 0..<10 {
            let e = try seal("warm-up \(i)", from: s.alice, to: s.bob)
            try alice.send(e)
            try Wait.until(timeout: 10, "warm-up \(i) reached bob") { bob.receivedEnvelopes.contains { $0.bundleID == e.bundleID } }
            try bob.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
        }
        func bobsLink() throws -> RouterStatus.LinkView? {
            try s.hub.status().router.links.first { $0.role == "endpoint" && $0.peer == Router.shortID(Hash.sha256(s.bob.signingKey)) }
        }
        try Wait.until(timeout: 10, "bob's link measured") { try bobsLink()?.window == CustodyPacing.initialWindow + 10 }
        let measured = try XCTUnwrap(bobsLink())
        XCTAssertNotNil(measured.roundTripMs)
        XCTAssertEqual(measured.custodyTimeoutMs, CustodyPacing.minTimeoutMs, "loopback round trips are far below the 1 s floor")

        let lost = try seal("its answer is lost", from: s.alice, to: s.bob)
        try alice.send(lost)
        try Wait.until(timeout: 10, "the bundle reached bob") { bob.receivedEnvelopes.contains { $0.bundleID == lost.bundleID } }
        let firstCopy = Date()
        try Wait.until(timeout: 10, "the hub sent it again") {
            bob.receivedEnvelopes.filter { $0.bundleID == lost.bundleID }.count >= 2
        }
        let resentAfter = Date().timeIntervalSince(firstCopy)
        print(String(format: "custody answer withheld: resent after %.2f s (configured custody_timeout_s 5)", resentAfter))
        XCTAssertLessThan(resentAfter, 4.5, "resent after the measured timeout (2 s floor + the 1 s tick), not custody_timeout_s")
        let after = try XCTUnwrap(bobsLink())
        XCTAssertEqual(after.window, (CustodyPacing.initialWindow + 10) / 2, "the window halved on the loss")
        XCTAssertGreaterThanOrEqual(try s.hub.status().router.counters.custodyTimeouts, 1)
        try bob.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: lost.bundleID).encoded))
        try Wait.until(timeout: 10, "the bundle delivered") { try s.hub.status().router.queue.inFlight == 0 }
        XCTAssertEqual(try s.hub.status().router.queue.queued, 0)
    }
}
