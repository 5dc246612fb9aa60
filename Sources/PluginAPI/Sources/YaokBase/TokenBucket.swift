/// A token bucket: at most `capacity` tokens, refilled continuously. The one rate limiter of
/// the code base: stream links, beacons, the relay's per-sender and per-prefix limits and the
/// router's per-link frame admission. Capacity and rate are passed on each call so that a
/// table of many buckets (the relay's `BucketMap`) stores only two numbers per key.
///
/// A bucket keeps to one clock: milliseconds (`nowMs`, a rate `perMs`), or nanoseconds of a
/// monotonic clock (`nowNs`, a rate `perSecond`) for callers that time frames finer than a
/// millisecond.
public struct TokenBucket: Sendable {
    public var tokens: Double
    /// When the bucket was last refilled, on its clock (milliseconds or nanoseconds).
    public var last: Int64

    /// A full bucket.
    public init(capacity: Double, nowMs: Int64) {
        tokens = capacity
        last = nowMs
    }

    /// A full bucket on a nanosecond clock.
    public init(capacity: Double, nowNs: Int64) {
        tokens = capacity
        last = nowNs
    }

    /// Takes one token if available; otherwise returns the milliseconds until one is.
    public mutating func take(capacity: Double, perMs: Double, nowMs: Int64) -> Int64? {
        refill(capacity: capacity, perMs: perMs, nowMs: nowMs)
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return Int64(((1 - tokens) / perMs).rounded(.up))
    }

    public mutating func refill(capacity: Double, perMs: Double, nowMs: Int64) {
        if nowMs > last {
            tokens = min(capacity, tokens + Double(nowMs - last) * perMs)
            last = nowMs
        }
    }

    /// Refills a bucket on a nanosecond clock at `perSecond` tokens a second. A reading
    /// older than the last (threads racing to the bucket's lock) adds nothing.
    public mutating func refill(capacity: Double, perSecond: Double, nowNs: Int64) {
        if nowNs > last {
            tokens = min(capacity, tokens + Double(nowNs - last) / 1e9 * perSecond)
            last = nowNs
        }
    }

    /// Whether the bucket has refilled completely (then it behaves like a new one).
    public func isFull(capacity: Double, perMs: Double, nowMs: Int64) -> Bool {
        tokens + Double(max(0, nowMs - last)) * perMs >= capacity
    }
}

/// Frames waiting to be written on one stream, bounded by count and bytes.
public struct FrameQueue: Sendable {
    public let maxFrames: Int
    public let maxBytes: Int
    private var frames: [[UInt8]] = []
    private var head = 0
    public private(set) var byteCount = 0

    public init(maxFrames: Int, maxBytes: Int) {
        self.maxFrames = maxFrames
        self.maxBytes = maxBytes
    }

    public var count: Int { frames.count - head }
    public var isEmpty: Bool { count == 0 }

    /// Appends a frame; false (and nothing queued) when either bound would be exceeded.
    public mutating func push(_ frame: [UInt8]) -> Bool {
        guard count < maxFrames, byteCount + frame.count <= maxBytes else { return false }
        frames.append(frame)
        byteCount += frame.count
        return true
    }

    /// Removes frames from the front until about `budget` bytes are taken (at least one frame).
    public mutating func pop(upTo budget: Int) -> [UInt8] {
        var out: [UInt8] = []
        while head < frames.count && (out.isEmpty || out.count + frames[head].count <= budget) {
            out += frames[head]
            byteCount -= frames[head].count
            frames[head] = []
            head += 1
        }
        // Compact now and then so the array does not grow without bound.
        if head > 64 && head * 2 > frames.count {
            frames.removeFirst(head)
            head = 0
        }
        return out
    }
}
