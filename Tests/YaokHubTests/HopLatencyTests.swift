import XCTest
@testable import YaokHubCore
@testable import YaokRouting

final class HopLatencyTests: XCTestCase {
    func testPercentilesAreBucketUpperBounds() {
        var h = HopLatency()
        XCTAssertEqual(h.percentileUs(0.99), 0, "no samples, no latency")
        // 97 fast bundles (0.12 ms), one at 4.3 ms, one at 2.55 s (coarse buckets) and one
        // at 90 s (beyond the last bucket).
        for _ in 0..<97 { h.record(nanoseconds: 120_000) }
        h.record(nanoseconds: 4_300_000)
        h.record(nanoseconds: 2_550_000_000)
        h.record(nanoseconds: 90_000_000_000)
        XCTAssertEqual(h.samples, 100)
        XCTAssertEqual(h.percentileUs(0.5), 150)
        XCTAssertEqual(h.percentileUs(0.97), 150)
        XCTAssertEqual(h.percentileUs(0.98), 4_350)
        XCTAssertEqual(h.percentileUs(0.99), 2_600_000, "100 ms buckets above 100 ms")
        XCTAssertEqual(h.percentileUs(1.0), 90_000_000, "the last bucket reports the largest sample")
        XCTAssertEqual(h.maxUs, 90_000_000)
    }
}
