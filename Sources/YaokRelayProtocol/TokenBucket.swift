/// A token bucket: `capacity` tokens, refilled continuously at `perMs` tokens per millisecond.
struct TokenBucket: Sendable {
    var tokens: Double
    var lastMs: Int64

    init(capacity: Double, nowMs: Int64) {
        tokens = capacity
        lastMs = nowMs
    }

    /// Takes one token if available; otherwise returns the milliseconds until one is.
    mutating func take(capacity: Double, perMs: Double, nowMs: Int64) -> Int64? {
        refill(capacity: capacity, perMs: perMs, nowMs: nowMs)
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return Int64(((1 - tokens) / perMs).rounded(.up))
    }

    mutating func refill(capacity: Double, perMs: Double, nowMs: Int64) {
        if nowMs > lastMs {
            tokens = min(capacity, tokens + Double(nowMs - lastMs) * perMs)
            lastMs = nowMs
        }
    }

    func isFull(capacity: Double, perMs: Double, nowMs: Int64) -> Bool {
        tokens + Double(max(0, nowMs - lastMs)) * perMs >= capacity
    }
}

/// Token buckets by key, with the map's size bounded: full buckets are pruned first, and if
/// that is not enough the map starts over (bounded memory beats exact fairness under attack).
/// The relay's per-address and per-sender limits, UDP and WebSocket alike.
public struct BucketMap<Key: Hashable & Sendable>: Sendable {
    public let capacity: Double
    public let perMs: Double
    public let maxKeys: Int
    private(set) var buckets: [Key: TokenBucket] = [:]

    public init(capacity: Double, perMs: Double, maxKeys: Int) {
        self.capacity = capacity
        self.perMs = perMs
        self.maxKeys = maxKeys
    }

    /// nil when allowed; else milliseconds until the next token.
    public mutating func take(_ key: Key, nowMs: Int64) -> Int64? {
        if buckets[key] == nil && buckets.count >= maxKeys { prune(nowMs: nowMs) }
        var b = buckets[key] ?? TokenBucket(capacity: capacity, nowMs: nowMs)
        let wait = b.take(capacity: capacity, perMs: perMs, nowMs: nowMs)
        buckets[key] = b
        return wait
    }

    /// Drops full buckets (their keys behave as new); starts over if still at `maxKeys`.
    public mutating func prune(nowMs: Int64) {
        buckets = buckets.filter { !$0.value.isFull(capacity: capacity, perMs: perMs, nowMs: nowMs) }
        if buckets.count >= maxKeys { buckets.removeAll() }
    }
}
