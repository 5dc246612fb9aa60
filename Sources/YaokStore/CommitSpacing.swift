import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// When a group commit may run: at least `spacingNs` after the previous one while work keeps
/// coming, so what arrives meanwhile joins the group (one fsync and one write of each dirty
/// page for all of it). The first change after a quiet spell commits at once. The hub's router
/// and a phone's `HubSession` follow this one rule (Docs/performance.md, "Group commit").
public struct CommitSpacing: Sendable {
    /// The spacing, in nanoseconds.
    public let spacingNs: UInt64
    private var lastCommitNs: UInt64 = 0

    /// `environmentKey` (microseconds, at most 20,000) overrides `defaultUs`, for benchmarks.
    public init(environmentKey: String, defaultUs: UInt64 = 2_000) {
        let configured = getenv(environmentKey).flatMap { UInt64(String(cString: $0)) }
        spacingNs = min(configured ?? defaultUs, 20_000) * 1_000
    }

    /// Nil when a commit may run now; otherwise the time to run it at.
    public func deferredUntil(now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> DispatchTime? {
        let due = lastCommitNs &+ spacingNs
        return now < due ? DispatchTime(uptimeNanoseconds: due) : nil
    }

    /// Records that a commit (or a failed attempt) just finished.
    public mutating func committed(now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        lastCommitNs = now
    }
}
