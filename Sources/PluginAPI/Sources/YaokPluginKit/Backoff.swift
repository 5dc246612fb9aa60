/// Capped exponential backoff with jitter for redialling: the mesh plugin's redials and the
/// relay client's per-node failover (YaokRelayProtocol) share it.
public struct Backoff: Sendable, Equatable {
    public var failures = 0
    public let baseMs: Int64
    public let capMs: Int64

    public init(baseMs: Int64 = 1_000, capMs: Int64 = 60_000) {
        self.baseMs = baseMs
        self.capMs = capMs
    }

    /// The delay before the next attempt after one more failure.
    public mutating func nextDelayMs() -> Int64 {
        failures += 1
        let raw = min(capMs, baseMs << Int64(min(failures - 1, 20)))
        // ±25 % jitter so hubs that lost each other at once do not redial in lockstep.
        return raw * Int64.random(in: 75...125) / 100
    }

    public mutating func reset() { failures = 0 }
}
