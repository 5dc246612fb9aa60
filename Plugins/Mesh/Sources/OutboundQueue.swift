/// Frames waiting to be written on one session, bounded by count and bytes.
struct OutboundQueue: Sendable {
    let maxFrames: Int
    let maxBytes: Int
    private var frames: [[UInt8]] = []
    private var head = 0
    private(set) var byteCount = 0

    init(maxFrames: Int, maxBytes: Int) {
        self.maxFrames = maxFrames
        self.maxBytes = maxBytes
    }

    var count: Int { frames.count - head }
    var isEmpty: Bool { count == 0 }

    /// Appends a frame; false (and nothing queued) when either bound would be exceeded.
    mutating func push(_ frame: [UInt8]) -> Bool {
        guard count < maxFrames, byteCount + frame.count <= maxBytes else { return false }
        frames.append(frame)
        byteCount += frame.count
        return true
    }

    /// Removes frames from the front until about `budget` bytes are taken (at least one frame).
    mutating func pop(upTo budget: Int) -> [UInt8] {
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

/// A token bucket: `rate` events per second with a burst of one second's worth.
struct RateLimiter: Sendable {
    let rate: Double
    private(set) var tokens: Double
    private var lastNs: UInt64

    init(perSecond rate: Int, nowNs: UInt64) {
        self.rate = Double(rate)
        self.tokens = Double(rate)
        self.lastNs = nowNs
    }

    /// Refills for the time passed; whether a token is available.
    mutating func hasTokens(nowNs: UInt64) -> Bool {
        if nowNs > lastNs {
            tokens = min(rate, tokens + Double(nowNs - lastNs) / 1e9 * rate)
            lastNs = nowNs
        }
        return tokens >= 1
    }

    /// Spends `n` tokens (may go negative: the sender then waits longer).
    mutating func spend(_ n: Int) { tokens -= Double(n) }
}

/// Capped exponential backoff with jitter for redialling.
struct Backoff: Sendable {
    var failures = 0
    let baseMs: Int64
    let capMs: Int64

    init(baseMs: Int64 = 1_000, capMs: Int64 = 60_000) {
        self.baseMs = baseMs
        self.capMs = capMs
    }

    /// The delay before the next attempt after one more failure.
    mutating func nextDelayMs() -> Int64 {
        failures += 1
        let raw = min(capMs, baseMs << Int64(min(failures - 1, 20)))
        // ±25 % jitter so hubs that lost each other at once do not redial in lockstep.
        return raw * Int64.random(in: 75...125) / 100
    }

    mutating func reset() { failures = 0 }
}
