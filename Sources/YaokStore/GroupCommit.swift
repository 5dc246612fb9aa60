import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// Group commit, as the hub's router and a phone's `HubSession` both run it on their serial
/// queue (Docs/performance.md, "Group commit"). Every store change of a burst of work joins one
/// transaction, opened by the first work item after a commit; the commit is queued behind the
/// work already waiting, so it covers all of it, and runs by the ``CommitSpacing``: one fsync
/// for the burst, none when idle. What depends on the changes (custody answers, events) is held
/// here and released only once the commit has returned; if the commit fails it is dropped (none
/// of it happened).
///
/// Every call is made on `queue`, with the owner; the owner's hooks do what differs between owners
/// (its store, its counters and logs, how it sends what waited). A queued commit keeps the owner alive.
// @unchecked: state only on the owner's serial `queue` (where the blocks it schedules run too).
public final class GroupCommit<Owner: AnyObject & Sendable, Waiting>: @unchecked Sendable {
    /// Whether a group is open: what depends on it must be held until it commits (``hold(_:)``).
    public private(set) var isOpen = false
    private var items = 0
    private var commitQueued = false
    private var openedNs: UInt64 = 0
    /// Counts the groups opened, so a deferred commit (``unwaitedBoundNs``) finds its own group.
    private var opened: UInt64 = 0
    /// The group whose deferred commit is scheduled.
    private var deferredCommitFor: UInt64?
    private var spacing: CommitSpacing
    private var waiting: [Waiting] = []

    private let queue: DispatchQueue
    private let maxItems: Int
    private let closesAfterSpacing: Bool
    private let unwaitedBoundNs: UInt64?
    private let testDelayUs: UInt32
    private let begin: (Owner) throws -> Void
    private let hasChanges: (Owner) -> Bool
    private let beginFailed: (Owner, any Error) -> Void
    private let commitStore: (Owner) throws -> Bool
    private let committed: (Owner, _ items: Int, _ openNs: UInt64) -> Void
    private let failed: (Owner, _ items: Int, _ dropped: Int, any Error) -> Void
    private let release: (Owner, [Waiting]) -> Void

    /// - Parameters:
    ///   - maxItems: a group commits after this many work items even if more are queued.
    ///   - closesAfterSpacing: a group also commits at once when it has been open for the spacing
    ///     (otherwise its commit waits only for the spacing after the previous one).
    ///   - unwaitedCommitBoundUs: nil, or how long a small group (``unwaitedMaxItems``) that
    ///     changed the store but holds nothing (``hold(_:)``) when its commit comes up may stay
    ///     open: it commits that long after it opened, or with the first thing held in it,
    ///     whichever comes first. For owners whose unheld changes are safe to lose in a crash
    ///     (the hub: what its peers acknowledged is resent after a restart and found a
    ///     duplicate), so they share the fsync of the next group that holds an answer instead
    ///     of costing one each.
    ///   - testDelayUs: tests only: holds every group that much longer before its commit.
    ///   - begin: opens the store's group transaction.
    ///   - hasChanges: whether the open group has changed the store yet. One that has not costs
    ///     nothing to commit, so it commits without waiting for the spacing, and does not move it.
    ///   - beginFailed: no group could open (each change then commits alone, what depends on it leaves at once).
    ///   - commit: commits the group durably, or rolls it back whole and throws; whether it changed anything.
    ///   - committed: a group that changed the store committed: the work items it covered, and how
    ///     long it stayed open, from its first item to the end of its commit.
    ///   - failed: the commit failed and was rolled back: the items it covered, how many things
    ///     that waited for it are dropped, and why.
    ///   - release: after a commit, or when none was open: what waited, in order, to send or report.
    public init(queue: DispatchQueue, spacing: CommitSpacing, maxItems: Int, closesAfterSpacing: Bool,
                unwaitedCommitBoundUs: UInt64? = nil, testDelayUs: UInt32,
                begin: @escaping (Owner) throws -> Void,
                hasChanges: @escaping (Owner) -> Bool,
                beginFailed: @escaping (Owner, any Error) -> Void,
                commit: @escaping (Owner) throws -> Bool,
                committed: @escaping (Owner, _ items: Int, _ openNs: UInt64) -> Void,
                failed: @escaping (Owner, _ items: Int, _ dropped: Int, any Error) -> Void,
                release: @escaping (Owner, [Waiting]) -> Void) {
        self.queue = queue
        self.spacing = spacing
        self.maxItems = maxItems
        self.closesAfterSpacing = closesAfterSpacing
        self.unwaitedBoundNs = unwaitedCommitBoundUs.map { $0 * 1_000 }
        self.testDelayUs = testDelayUs
        self.begin = begin
        self.hasChanges = hasChanges
        self.beginFailed = beginFailed
        self.commitStore = commit
        self.committed = committed
        self.failed = failed
        self.release = release
    }

    /// Keeps `item` until the open group has committed (call it only while ``isOpen``).
    public func hold(_ item: Waiting) {
        waiting.append(item)
    }

    /// Runs one work item inside the open group, opening one if none is. Then commits at once if
    /// the group is full (or has been open for the spacing, with `closesAfterSpacing`), otherwise
    /// queues the commit behind the work already waiting (what arrives meanwhile joins the group).
    public func run(_ owner: Owner, _ body: () -> Void) {
        if !isOpen {
            do {
                try begin(owner)
                isOpen = true
                opened &+= 1
                openedNs = DispatchTime.now().uptimeNanoseconds
            } catch {
                beginFailed(owner, error)
            }
        }
        body()
        guard isOpen else { return }
        items += 1
        if items >= maxItems || (closesAfterSpacing && DispatchTime.now().uptimeNanoseconds &- openedNs >= spacing.spacingNs) {
            commit(owner)
        } else if !commitQueued && (deferredCommitFor != opened || !waiting.isEmpty) {
            // (A group whose commit was deferred for want of anything held queues it again
            // once something is.)
            commitQueued = true
            queue.async { self.commitWhenSpaced(owner) }
        }
    }

    /// The most work items a group nothing is held in may cover and still wait (``unwaitedBoundNs``):
    /// a light load's group covers a frame or two. A bigger one means frames are coming fast,
    /// so its commit is not deferred: deferring it under a backlog saves commits but costs the
    /// hub CPU per message in the single-hub bench (Docs/performance.md).
    static var unwaitedMaxItems: Int { 4 }

    /// The deferred commit of a group nothing was held in (``unwaitedBoundNs``), if that group
    /// is still open and no commit is queued for it.
    private func commitDeferred(_ owner: Owner, group: UInt64) {
        guard isOpen, opened == group, !commitQueued else { return }
        commit(owner)
    }

    /// Commits now, or later by the ``CommitSpacing`` (a group stays open at most about the
    /// spacing, the extra latency an answer can see). A group that has changed nothing only
    /// read: its commit syncs nothing, so what waits on it leaves now.
    private func commitWhenSpaced(_ owner: Owner) {
        guard commitQueued else { return }
        if let bound = unwaitedBoundNs, waiting.isEmpty, items <= Self.unwaitedMaxItems, hasChanges(owner) {
            // Nothing waits on this small group once the work queued before its commit is
            // done: it stays open for the next thing held in it, or until the bound runs out.
            commitQueued = false
            guard deferredCommitFor != opened else { return }
            deferredCommitFor = opened
            let group = opened
            queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: openedNs &+ bound)) { self.commitDeferred(owner, group: group) }
            return
        }
        if items < maxItems, hasChanges(owner), let due = spacing.deferredUntil() {
            queue.asyncAfter(deadline: due) { self.commitWhenSpaced(owner) }
            return
        }
        commit(owner)
    }

    /// Commits the open group (if any), then releases what waited for it. If the commit fails,
    /// what waited is dropped: none of it is sent or reported.
    public func commit(_ owner: Owner) {
        commitQueued = false
        let covered = items
        items = 0
        if isOpen {
            isOpen = false
            if testDelayUs > 0 { usleep(testDelayUs) }
            do {
                let changed = try commitStore(owner)
                let end = DispatchTime.now().uptimeNanoseconds
                // Only a commit that synced spaces the next one.
                if changed {
                    spacing.committed(now: end)
                    committed(owner, covered, end &- openedNs)
                }
            } catch {
                spacing.committed()
                let dropped = waiting.count
                waiting.removeAll()
                failed(owner, covered, dropped, error)
                return
            }
        }
        let out = waiting
        waiting.removeAll(keepingCapacity: true)
        release(owner, out)
    }
}
