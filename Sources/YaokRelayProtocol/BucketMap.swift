import YaokPluginKit

/// Token buckets by key, with the map's size bounded. When a new key finds the map full,
/// keys whose bucket has refilled are forgotten first (a full bucket and a new one behave the
/// same); if that is not enough, the least recently used eighth of the keys is evicted.
/// Never the whole map: emptying it handed every limited address a fresh burst at once.
/// The relay's per-prefix and per-sender limits, UDP and WebSocket alike.
public struct BucketMap<Key: Hashable & Sendable>: Sendable {
    public let capacity: Double
    public let perMs: Double
    public let maxKeys: Int
    private(set) var buckets: [Key: TokenBucket] = [:]
    /// Keys evicted while still limited (metrics, tests).
    public private(set) var evicted = 0

    public init(capacity: Double, perMs: Double, maxKeys: Int) {
        self.capacity = capacity
        self.perMs = perMs
        self.maxKeys = max(1, maxKeys)
    }

    /// Keys held.
    public var count: Int { buckets.count }

    /// nil when allowed; else milliseconds until the next token.
    public mutating func take(_ key: Key, nowMs: Int64) -> Int64? {
        if buckets[key] == nil && buckets.count >= maxKeys { makeRoom(nowMs: nowMs) }
        var b = buckets[key] ?? TokenBucket(capacity: capacity, nowMs: nowMs)
        let wait = b.take(capacity: capacity, perMs: perMs, nowMs: nowMs)
        buckets[key] = b
        return wait
    }

    /// Whether `key` is held (tests).
    public func contains(_ key: Key) -> Bool { buckets[key] != nil }

    /// Drops full buckets (their keys behave as new).
    public mutating func prune(nowMs: Int64) {
        buckets = buckets.filter { !$0.value.isFull(capacity: capacity, perMs: perMs, nowMs: nowMs) }
    }

    /// Makes room for one key: full buckets go first, then the least recently used eighth
    /// (at least one). A bucket's `lastMs` is when it was last taken from, so it is the
    /// recency. Sorting an eighth at a time keeps the cost per new key small on average.
    private mutating func makeRoom(nowMs: Int64) {
        prune(nowMs: nowMs)
        guard buckets.count >= maxKeys else { return }
        let n = max(1, maxKeys / 8)
        let oldest = buckets.sorted { $0.value.last < $1.value.last }.prefix(n).map(\.key)
        for k in oldest { buckets[k] = nil }
        evicted += oldest.count
    }
}
