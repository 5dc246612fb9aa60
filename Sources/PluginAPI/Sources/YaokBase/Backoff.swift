/// Capped exponential backoff: `baseMs` after the first failure, doubling to at most `capMs`,
/// with ±25 % jitter unless `jitter` is false. The one redial/restart backoff of the code base:
/// the mesh plugin's redials, the relay client's per-node failover and HELLO retries
/// (YaokRelayProtocol), the transport host's plugin start and restart delays, the relay's
/// Postgres LISTEN reconnects, the endpoint's hub reconnects and relay poll pacing, and the
/// console's login lockout share it.
public struct Backoff: Sendable, Equatable {
    public var failures = 0
    public let baseMs: Int64
    public let capMs: Int64
    /// Whether delays are spread ±25 % (hubs that lost each other at once should not redial
    /// in lockstep); false gives the nominal sequence exactly.
    public let jitter: Bool

    public init(baseMs: Int64 = 1_000, capMs: Int64 = 60_000, jitter: Bool = true) {
        self.baseMs = baseMs
        self.capMs = capMs
        self.jitter = jitter
    }

    /// The nominal delay (no jitter) after `failures` consecutive failures (at least one):
    /// `baseMs`, doubled `failures - 1` times, at most `capMs`.
    public static func delayMs(failures: Int, baseMs: Int64, capMs: Int64) -> Int64 {
        var delay = baseMs
        var doublings = max(0, failures - 1)
        // Doubling stops at the cap, so a long run of failures cannot overflow.
        while doublings > 0 && delay < capMs {
            delay = delay > capMs / 2 ? capMs : delay * 2
            doublings -= 1
        }
        return min(capMs, delay)
    }

    /// The delay before the next attempt after one more failure.
    public mutating func nextDelayMs() -> Int64 {
        failures += 1
        let raw = Self.delayMs(failures: failures, baseMs: baseMs, capMs: capMs)
        return jitter ? raw * Int64.random(in: 75...125) / 100 : raw
    }

    public mutating func reset() { failures = 0 }
}
