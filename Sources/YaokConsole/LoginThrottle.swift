import Foundation
import struct YaokPluginKit.Backoff

/// Progressive delay after failed logins, per client address: the first two failures cost
/// nothing, the third locks the address for 30 s, and each further failure doubles it
/// (60 s, 120 s, …, at most one day). A success clears the address.
// @unchecked: the entries only under `lock`.
public final class LoginThrottle: @unchecked Sendable {
    /// Failures allowed before the first delay.
    public static let freeFailures = 2
    public static let firstDelay: Double = 30
    public static let maxDelay: Double = 86_400
    /// Addresses tracked at once; the oldest entry is dropped beyond it (bounds memory under a spray of addresses).
    public static let maxEntries = 4096

    private struct Entry { var failures: Int; var lockedUntil: Double; var touched: Double }
    private var entries: [String: Entry] = [:]
    private let lock = NSLock()
    private let now: @Sendable () -> Double

    public init(now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) { self.now = now }

    /// The lock that `failures` consecutive failures earn: 0, 0, 30, 60, 120, … seconds.
    public static func delay(afterFailures failures: Int) -> Double {
        guard failures > freeFailures else { return 0 }
        let ms = Backoff.delayMs(failures: failures - freeFailures, baseMs: Int64(firstDelay * 1_000), capMs: Int64(maxDelay * 1_000))
        return Double(ms) / 1_000
    }

    /// Seconds this address must still wait before a login attempt is even checked (0: go ahead).
    public func wait(for address: String) -> Double {
        lock.withLock {
            guard let e = entries[address] else { return 0 }
            return max(0, e.lockedUntil - now())
        }
    }

    /// Records a failure and returns the wait it earned.
    @discardableResult
    public func failed(_ address: String) -> Double {
        lock.withLock {
            let t = now()
            var e = entries[address] ?? Entry(failures: 0, lockedUntil: 0, touched: t)
            e.failures += 1
            e.touched = t
            let delay = Self.delay(afterFailures: e.failures)
            e.lockedUntil = t + delay
            entries[address] = e
            if entries.count > Self.maxEntries, let oldest = entries.min(by: { $0.value.touched < $1.value.touched })?.key {
                entries[oldest] = nil
            }
            return delay
        }
    }

    /// Forgets the address's failures.
    public func succeeded(_ address: String) { lock.withLock { entries[address] = nil } }
}
