import Foundation
import XCTest
import YaokHubCore
@testable import YaokConsole

/// What the charts say on a fresh hub.
final class ChartTests: XCTestCase {
    func report(delivered: Int) -> Hub.StatusReport {
        var r = FakeBackend().status()
        r.router.counters.deliveredDirect = delivered
        return r
    }

    func testDeliveriesPerMinuteCountTheLastMinuteNeverScaledUpFromOneSample() {
        let h = History()
        h.record(report(delivered: 0), at: 1000)
        h.record(report(delivered: 2), at: 1010)
        XCTAssertEqual(h.deliveriesPerMinute().map(\.v), [2], "2 deliveries in the first 10 s are 2 per minute, not 12")
        // One delivery every 10 s for three minutes: 6 per minute once a minute has passed.
        for i in 2...18 { h.record(report(delivered: 2 + (i - 1)), at: 1000 + Double(i) * 10) }
        let rates = h.deliveriesPerMinute()
        XCTAssertEqual(rates.last?.v, 6)
        // Each point is the deliveries of the minute up to it (the first minute held the first 2 and 5 more).
        XCTAssertEqual(rates.map(\.v), [2, 3, 4, 5, 6, 7] + Array(repeating: 6, count: 12))
    }

    func testAFreshHubsLineSpansTheChartAndTheAxisSaysHowLong() throws {
        let now = 10_000.0
        let points: History.Series = [(now - 20, 1), (now - 10, 3), (now, 2)]
        let drawn = Chart.draw(id: "c", title: "t", unit: "u", series: [("q", points)], now: now)
        XCTAssertTrue(drawn.svg.contains(">1 min ago<"), drawn.svg)
        let polyline = try XCTUnwrap(drawn.svg.range(of: "points=\"").map { drawn.svg[$0.upperBound...].prefix { $0 != "\"" } })
        let firstX = try XCTUnwrap(Double(polyline.split(separator: " ")[0].split(separator: ",")[0]))
        let plotRight = Chart.width - Chart.right
        XCTAssertLessThan(firstX, plotRight - 0.3 * (plotRight - Chart.left), "the line is not squeezed against the right edge")
        // An hour of samples keeps the hour.
        let hour = Chart.draw(id: "c", title: "t", unit: "u", series: [("q", [(now - 7200, 1), (now, 2)])], now: now)
        XCTAssertTrue(hour.svg.contains(">60 min ago<") && hour.svg.contains(">30 min<"), hour.svg)
    }
}
