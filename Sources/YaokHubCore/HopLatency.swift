/// The hub's own added latency per bundle: from the frame reaching the router to the bundle
/// leaving on its first onward link (after the group commit that made it durable). Fixed
/// 50 µs buckets up to 100 ms and one above, so recording is O(1) and memory is fixed (16 KB);
/// percentiles are bucket upper bounds.
struct HopLatency {
    static let bucketUs = 50
    static let buckets = 2_000
    private var counts = [Int](repeating: 0, count: buckets + 1)
    private(set) var samples = 0
    private(set) var maxUs = 0

    mutating func record(nanoseconds: UInt64) {
        let us = Int(clamping: nanoseconds / 1_000)
        counts[min(us / Self.bucketUs, Self.buckets)] += 1
        samples += 1
        maxUs = max(maxUs, us)
    }

    /// The smallest bucket bound at or above fraction `p` of the samples (0 with none).
    func percentileUs(_ p: Double) -> Int {
        guard samples > 0 else { return 0 }
        let rank = max(1, Int((Double(samples) * p).rounded(.up)))
        var seen = 0
        for (i, c) in counts.enumerated() {
            seen += c
            if seen >= rank { return i == Self.buckets ? maxUs : (i + 1) * Self.bucketUs }
        }
        return maxUs
    }
}
