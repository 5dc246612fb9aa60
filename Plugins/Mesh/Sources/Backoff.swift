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
