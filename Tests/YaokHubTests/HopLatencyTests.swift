import XCTest
@testable import YaokHubCore

final class HopLatencyTests: XCTestCase {
    func testPercentilesAreBucketUpperBounds() {
        var h = HopLatency()
        XCTAssertEqual(h.percentileUs(0.99), 0, "no samples, no latency")
        // 98 fast bundles (0.12 ms), one at 4.3 ms and one at 250 ms (beyond the last bucket).
        for _ in 0..<98 { h.record(nanoseconds: 120_000) }
        h.record(nanoseconds: 4_300_000)
        h.record(nanoseconds: 250_000_000)
        XCTAssertEqual(h.samples, 100)
        XCTAssertEqual(h.percentileUs(0.5), 150)
        XCTAssertEqual(h.percentileUs(0.98), 150)
        XCTAssertEqual(h.percentileUs(0.99), 4_350)
        XCTAssertEqual(h.percentileUs(1.0), 250_000, "the overflow bucket reports the largest sample")
        XCTAssertEqual(h.maxUs, 250_000)
    }
}
