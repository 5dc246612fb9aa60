import Foundation
#if canImport(Glibc)
import Glibc
#endif
import struct YaokPluginKit.Backoff
import struct YaokPluginKit.TokenBucket

/// Who may have a password checked, and when. Per client (an IPv4 address, an IPv6 /64):
/// the first two wrong passwords cost nothing, the third locks the client for 30 s, and each
/// further one doubles it (60 s, 120 s, …, at most one day; at most ``loopbackMaxDelay`` for
/// loopback, where every operator who came in by `ssh -L` shares one address). An attempt is
/// counted *before* its password is checked and only one check per client runs at a time, so
/// a burst of parallel guesses gets one checked, not forty. Across all clients at most
/// ``checksPerMinute`` checks run a minute: many addresses (an IPv6 /64 is four billion
/// billion) buy no more guesses, only a wait for everyone while they last. A right password
/// clears the client's record.
// @unchecked: the state only under `lock`.
public final class LoginThrottle: @unchecked Sendable {
    /// Failures allowed before the first delay.
    public static let freeFailures = 2
    public static let firstDelay: Double = 30
    public static let maxDelay: Double = 86_400
    /// The longest lock of a loopback client (whoever uses it already has a shell on the hub).
    public static let loopbackMaxDelay: Double = 60
    /// Password checks (Argon2, 64 MiB each) across all clients: a burst of this many, refilled
    /// at this many a minute.
    public static let checksPerMinute: Double = 10
    /// Clients tracked at once; the oldest entry is dropped beyond it (bounds memory under a spray of addresses).
    public static let maxEntries = 4096

    /// What a login attempt may do now.
    public enum Admission: Equatable, Sendable {
        /// Check the password, then call ``finished(_:passwordRight:)``.
        case check
        /// Not checked: wait this many seconds (this client's lock, or the global bound).
        case wait(seconds: Double)
        /// Not checked: this client's previous attempt is still being checked.
        case busy
    }

    private struct Entry { var failures: Int; var lockedUntil: Double; var touched: Double; var checking: Bool }
    private var entries: [String: Entry] = [:]
    private var checks: TokenBucket
    private let lock = NSLock()
    private let now: @Sendable () -> Double

    /// `now`: seconds on a clock that only moves forward (default: the monotonic clock), so a
    /// wall clock stepped by days (a Pi that synchronises late) neither ends nor stretches a lock.
    public init(now: @escaping @Sendable () -> Double = { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }) {
        self.now = now
        checks = TokenBucket(capacity: Self.checksPerMinute, nowMs: Int64(now() * 1_000))
    }

    /// The lock that `failures` consecutive failures earn: 0, 0, 30, 60, 120, … seconds.
    public static func delay(afterFailures failures: Int, loopback: Bool = false) -> Double {
        guard failures > freeFailures else { return 0 }
        let cap = loopback ? loopbackMaxDelay : maxDelay
        let ms = Backoff.delayMs(failures: failures - freeFailures, baseMs: Int64(firstDelay * 1_000), capMs: Int64(cap * 1_000))
        return Double(ms) / 1_000
    }

    /// The client an address belongs to: an IPv4 address (also when mapped into IPv6), or an
    /// IPv6 /64 (one household or phone may hold all of it); whether it is loopback.
    public static func client(of address: String) -> (key: String, loopback: Bool) {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 {
            return (address, UInt32(bigEndian: v4.s_addr) >> 24 == 127)
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address, &v6) == 1 else { return (address, false) }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
            let mapped = bytes[12...].map(String.init).joined(separator: ".")
            return (mapped, bytes[12] == 127)
        }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return ("::1", true) }
        let prefix = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
        return (prefix.joined(separator: ":") + "::/64", false)
    }

    /// Reserves a password check for `address`, counting it as a failure until
    /// ``finished(_:passwordRight:)`` says otherwise.
    public func admit(_ address: String) -> Admission {
        let key = Self.client(of: address).key
        return lock.withLock {
            let t = now()
            var e = entries[key] ?? Entry(failures: 0, lockedUntil: 0, touched: t, checking: false)
            if e.lockedUntil > t { return .wait(seconds: e.lockedUntil - t) }
            if e.checking { return .busy }
            if let ms = checks.take(capacity: Self.checksPerMinute, perMs: Self.checksPerMinute / 60_000, nowMs: Int64(t * 1_000)) {
                return .wait(seconds: Double(ms) / 1_000)
            }
            e.failures += 1
            e.touched = t
            e.checking = true
            entries[key] = e
            if entries.count > Self.maxEntries,
               let oldest = entries.filter({ !$0.value.checking }).min(by: { $0.value.touched < $1.value.touched })?.key {
                entries[oldest] = nil
            }
            return .check
        }
    }

    /// Ends the check ``admit(_:)`` allowed. A right password clears the client's record; a
    /// wrong one stays counted and locks the client for what its failures earn, returned (0: none).
    @discardableResult
    public func finished(_ address: String, passwordRight: Bool) -> Double {
        let (key, loopback) = Self.client(of: address)
        return lock.withLock {
            if passwordRight { entries[key] = nil; return 0 }
            guard var e = entries[key] else { return 0 }
            let delay = Self.delay(afterFailures: e.failures, loopback: loopback)
            e.checking = false
            e.lockedUntil = now() + delay
            entries[key] = e
            return delay
        }
    }
}
