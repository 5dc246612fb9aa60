import Foundation
import XCTest
import YaokHubCore
import YaokRouting
import YaokSupervision
import YaokPluginKit
@testable import YaokConsole

/// The first screen answers "is mail flowing?", in the same words as `yaok-hub status`.
final class GlanceTests: XCTestCase {
    let nowMs: Int64 = 1_800_000_000_000

    /// Two phones and a hub attached, four messages held, a delivery five minutes ago, and a
    /// relay transport switched on whose link is down.
    func report() throws -> Hub.StatusReport {
        var r = FakeBackend().status()
        func link(_ id: Int, _ role: String) throws -> RouterStatus.LinkView {
            try JSONDecoder().decode(RouterStatus.LinkView.self, from: Data(#"{"link":"\#(id)","role":"\#(role)","peer":"ab12","kind":"udp","inFlight":0}"#.utf8))
        }
        r.router.links = [try link(1, "endpoint"), try link(2, "hub"), try link(3, "endpoint")]
        r.router.lastDelivery = try JSONDecoder().decode([RouterStatus.Delivery].self, from: Data(
            #"[{"destination":"cd34","atMs":\#(nowMs - 3_600_000)},{"destination":"ef56","atMs":\#(nowMs - 300_000)}]"#.utf8))
        r.transports.append(TransportRuntimeStatus(name: "relay", kind: "relay", enabled: true, pluginPath: nil, pluginVersion: nil,
                                                   status: TransportStatus(state: .failed, reason: "relay.example.org:443 unreachable"),
                                                   startFailures: 2, nextRetryInSeconds: 30))
        r.transports.append(TransportRuntimeStatus(name: "ble", kind: "ble", enabled: false, pluginPath: nil, pluginVersion: nil,
                                                   status: TransportStatus(state: .stopped, reason: ""), startFailures: 0, nextRetryInSeconds: nil))
        return r
    }

    func testTheGlanceSaysWhoIsAttachedWhatWaitsTheLastDeliveryAndTheRelay() throws {
        let g = StatusFormatter.glance(try report(), nowMs: nowMs)
        XCTAssertEqual(g.phones, 2)
        XCTAssertEqual(g.hubs, 1)
        XCTAssertEqual(g.waiting, 4, "3 waiting to be sent and 1 awaiting its acknowledgement")
        XCTAssertEqual(g.lastDeliveryAtMs, nowMs - 300_000)
        XCTAssertEqual(g.lastDelivery, "5 min ago")
        XCTAssertEqual(g.relayUp, false)
        XCTAssertEqual(g.relay, "not connected: relay.example.org:443 unreachable")
        XCTAssertEqual(g.transports, "1 of 2 transports running (1 switched off)")
        XCTAssertEqual(StatusFormatter.glance(FakeBackend().status(), nowMs: nowMs).relayUp, nil, "no relay switched on")
        XCTAssertEqual(StatusFormatter.glance(FakeBackend().status(), nowMs: nowMs).relay, "none switched on")
        XCTAssertEqual(StatusFormatter.glance(FakeBackend().status(), nowMs: nowMs).lastDelivery, "none yet")
        for (ms, says) in [(Int64(1_000), "just now"), (-60_000, "just now"), (42_000, "42 s ago"), (3 * 3_600_000 + 300_000, "3 h 5 min ago"), (3 * 86_400_000, "3 days ago")] {
            XCTAssertEqual(StatusFormatter.ago(ms), says)
        }
    }

    /// A Pi booted offline: its system clock is 3 days behind what the relay says, and status
    /// times are on the relay's time. A delivery 5 minutes ago still reads "5 min ago", in the
    /// glance and on the Links page, not "just now" for three days.
    func testHowLongAgoIsRightOnAHubWhoseClockIsDaysOff() throws {
        var r = try report()
        let behind: Int64 = 3 * 86_400_000
        r.router.clock = try JSONDecoder().decode(ClockEstimate.self, from: Data(
            #"{"source":"relay","trueMinusHubMs":\#(behind),"wallMinusHubMs":0,"systemSynchronised":false,"relay":true,"hubs":0,"phones":0,"phonesAgree":false}"#.utf8))
        r.router.lastDelivery = try JSONDecoder().decode([RouterStatus.Delivery].self, from: Data(
            #"[{"destination":"ef56","atMs":\#(nowMs + behind - 300_000)}]"#.utf8))
        XCTAssertEqual(StatusFormatter.glance(r, nowMs: nowMs).lastDelivery, "5 min ago")
        r.router.links[0].upAtMs = nowMs + behind - 600_000
        let links = Pages.links(r, now: nowMs)
        XCTAssertTrue(links.contains(">10 min ago</time>"), links)
    }

    func testTheConsoleShowsTheGlanceFirstAndTheCLISaysTheSame() throws {
        let r = try report()
        let page = OverviewPage.render(r, csrf: "x", notice: nil, error: nil)
        let glance = try XCTUnwrap(page.range(of: "id=\"glance\""))
        let firstCard = try XCTUnwrap(page.range(of: "class=\"card\""))
        XCTAssertLessThan(glance.lowerBound, firstCard.lowerBound, "the answers come before the cards")
        let fields = Dictionary(OverviewPage.fields(r, nowMs: nowMs).map { ($0.key, $0.text) }, uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(fields["glance.phones"], "2")
        XCTAssertEqual(fields["glance.waiting"], "4")
        XCTAssertEqual(fields["glance.lastDelivery"], "5 min ago")
        XCTAssertEqual(fields["glance.relay"], "not connected: relay.example.org:443 unreachable")
        let cli = StatusFormatter.text(r, nowMs: nowMs)
        XCTAssertTrue(cli.contains("now: 2 phones attached, 1 hub linked, 4 messages waiting, last delivery 5 min ago"), cli)
        XCTAssertTrue(cli.contains("relay: not connected: relay.example.org:443 unreachable"), cli)
        XCTAssertTrue(cli.contains("transports: \(try XCTUnwrap(fields["glance.transports"]))"), cli)
    }

    /// A reason is said once, with what to do; a last error that is the reason is not repeated.
    func testAnAbsentRadioIsExplainedOnceWithTheFix() throws {
        var r = FakeBackend().status()
        let why = "no Bluetooth adapter hci0 (none present)"
        var status = TransportStatus(state: .unavailable, reason: why)
        status.lastError = why
        r.transports = [TransportRuntimeStatus(name: "ble", kind: "ble", enabled: true, pluginPath: nil, pluginVersion: nil,
                                               status: status, startFailures: 0, nextRetryInSeconds: nil)]
        let page = OverviewPage.render(r, csrf: "x", notice: nil, error: nil)
        // Shown once (attributes keep exact values for the live updates; only text is read).
        XCTAssertEqual(page.components(separatedBy: ">" + why).count - 1, 1, "the reason is shown once: \(page)")
        XCTAssertTrue(page.contains("To fix: give this box what is named here, or switch the transport off"), page)
        XCTAssertTrue(page.contains(">the reason above<"), page)
    }
}
