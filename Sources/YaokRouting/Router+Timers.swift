import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire

// The once-a-second tick: custody deadlines, retries, expiry, store upkeep.
extension Router {
    // MARK: Timers

    /// How long a bundle is resent on a live link before it counts as a failed attempt (and
    /// waits out the store's backoff, a minute at first): this many custody timeouts' worth.
    /// A lost frame on a working link is not an absent next hop; resends come after the
    /// link's measured timeout, doubling (``CustodyPacing``), so a count of resends would give
    /// up after seconds on a link that is merely slow to answer.
    static let custodyTimeoutsBeforeBackoff: Int64 = 3

    func tick() {
        let t = now()
        tickClock(hubNowMs: t)
        // A tick much later than its 1 s means this hub itself did not run meanwhile: the
        // acknowledgements that came in are still queued behind this tick, so a deadline that
        // passed while we were not running says nothing about the peer. Move every deadline on
        // by the time we lost; otherwise each stall resends what the peer already took.
        // (The hub clock advances with the monotonic clock: a gap in it is time we did not run.)
        if let last = lastTickHubMs, t - last > Self.stallThresholdMs {
            let lost = t - last - 1_000
            for link in links.values { for (id, deadline) in link.inFlight { link.inFlight[id] = deadline + lost } }
            counters.stallsDeferred += 1
        }
        lastTickHubMs = t
        let best = time.bestTrueTimeMs()
        for link in links.values {
            if let until = link.certifiedUntilMs, best.timeMs - best.toleranceMs > until {
                link.certifiedUntilMs = nil
                logger.notice("hub \(link.peerName) on \(link.key): its certificate expired; no longer trusted")
            }
            for (id, deadline) in link.inFlight where deadline <= t {
                link.inFlight[id] = nil
                counters.custodyTimeouts += 1
                link.pacing.timedOut(nowMs: t)
                let resends = link.resends[id, default: 0]
                let trying = t - (link.firstSentMs[id] ?? t) < Self.custodyTimeoutsBeforeBackoff * settings.custodyTimeoutMs
                if trying, let b = storeCall("bundle", { try store.bundle(id) }), b.state == .inFlight || b.state == .queued || b.state == .handedOver {
                    link.resends[id] = resends + 1
                    transmit(b, on: link, resend: true)
                } else {
                    link.endFlight(id)
                    if link.unanswered.count < Self.maxUnansweredPerLink { link.unanswered.insert(id) }
                    failAttemptIfStillInFlight(id, nowMs: t)
                }
            }
            link.requested = link.requested.filter { $0.value > t }
            if link.sync != nil, t >= link.syncDeadlineMs {
                if case .awaitingEstimate? = link.sync {
                    initiateSync(with: link)
                } else {
                    endSync(link, "the neighbour went quiet or does not reconcile")
                }
            }
            if !link.offered.isEmpty { drainOffers(link) }
            // Keep windows full even when acknowledgements stopped coming.
            if link.inFlight.count <= link.pacing.window / 2 {
                switch link.info.peerRole {
                case .endpoint: pushPending(to: link)
                case .relay: if link.inFlight.isEmpty { pushForwardable(to: link) }
                case .hub: sendWanted(on: link)
                }
            }
        }
        // Untrusted hubs' acknowledgements a tick old whose receipt has not come: messages'
        // retries, receipts handed over.
        for id in untrustedAcks.previous { untrustedCustodyLapsed(id, nowMs: t) }
        untrustedAcks = (current: [], previous: untrustedAcks.current)
        // A page of due bundles a tick, walking round the whole queue: each is looked at
        // again within (queued / 500) s, however many stay due ahead of it.
        if let due = storeCall("due", { try store.due(nowMs: t, limit: Self.duePage, withBytes: false, after: dueCursor) }) {
            let wire = onTheWire()
            for b in due where !wire.contains(b.bundleID) && !untrustedAcks.previous.contains(b.bundleID) { route(b) }
            dueCursor = due.count < Self.duePage ? nil : due.last
        }
        if t - lastSweepMs >= 60_000 {
            lastSweepMs = t
            if let n = storeCall("expire", { try store.expire(nowMs: t) }), n > 0 {
                counters.expired += n
                logger.info("expired \(n) bundles")
            }
        }
        let vacuumDue = t - lastVacuumCheckMs >= 3_600_000
        if vacuumDue { lastVacuumCheckMs = t }
        if !maintenanceQueued, vacuumDue || walEmptyingDue(t) {
            // This tick runs inside the open group, where SQLite refuses both a VACUUM and a
            // checkpoint: the maintenance queues behind it and commits the group first.
            maintenanceQueued = true
            queue.async { self.maintainStore(vacuum: vacuumDue) }
        }
    }

    func walEmptyingDue(_ t: Int64) -> Bool {
        (t - lastChangeMs >= walQuietMs || t - walEmptiedMs >= Self.walMaxAgeMs) && store.database.walFileBytes > 0
    }

    /// The store's maintenance, on the router queue outside any group: the hourly vacuum check
    /// and emptying the WAL (``walQuietMs``).
    func maintainStore(vacuum: Bool) {
        maintenanceQueued = false
        commitGroup()
        var t = now()
        if vacuum {
            do {
                if try store.vacuumIfNeeded(nowMs: t) {
                    walEmptiedMs = t
                    logger.info("store: vacuumed, free pages returned and the WAL emptied")
                }
            } catch {
                logger.warning("store vacuum failed: \(error)")
            }
        }
        t = now()
        guard walEmptyingDue(t) else { return }
        do {
            try store.database.emptyWAL()
            walEmptiedMs = t
            logger.info("store: WAL emptied, \(t - lastChangeMs >= walQuietMs ? "the store is quiet" : "hourly while it is busy")")
        } catch {
            logger.warning("store: cannot empty the WAL: \(error)")
        }
    }
}
