/// The hub's own added latency per bundle: from the frame reaching the router to the bundle
/// leaving on its first onward link (after the group commit that made it durable). Fixed
/// buckets, so recording is O(1) and memory fixed (21 KB): 50 µs wide up to 100 ms, then
/// 100 ms wide up to 60.1 s, then one for the rest. Percentiles are bucket upper bounds (the
/// last bucket reports the largest sample).
struct HopLatency {
    static let fineUs = 50, fineBuckets = 2_000          // 0 ..< 100 ms
    static let coarseUs = 100_000, coarseBuckets = 600   // 100 ms ..< 60.1 s
    private var counts = [Int](repeating: 0, count: fineBuckets + coarseBuckets + 1)
    private(set) var samples = 0
    private(set) var maxUs = 0

    private static func bucket(_ us: Int) -> Int {
        let fineEnd = fineUs * fineBuckets
        if us < fineEnd { return us / fineUs }
        return min(fineBuckets + (us - fineEnd) / coarseUs, fineBuckets + coarseBuckets)
    }

    private static func upperBoundUs(_ bucket: Int) -> Int? {
        if bucket < fineBuckets { return (bucket + 1) * fineUs }
        if bucket < fineBuckets + coarseBuckets { return fineUs * fineBuckets + (bucket - fineBuckets + 1) * coarseUs }
        return nil
    }

    mutating func record(nanoseconds: UInt64) {
        let us = Int(clamping: nanoseconds / 1_000)
        counts[Self.bucket(us)] += 1
        samples += 1
        maxUs = max(maxUs, us)
    }

    /// The bucket bound at or above fraction `p` of the samples (0 with none).
    func percentileUs(_ p: Double) -> Int {
        guard samples > 0 else { return 0 }
        let rank = max(1, Int((Double(samples) * p).rounded(.up)))
        var seen = 0
        for (i, c) in counts.enumerated() {
            seen += c
            if seen >= rank { return min(Self.upperBoundUs(i) ?? maxUs, maxUs) }
        }
        return maxUs
    }
}
