import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire

// Hub trust (certificates, lists) and the clock (Docs/protocol.md, clock 0x0C).
extension Router {
    // MARK: Hub trust

    /// Whether bundles, offers and announcements may cross this link: always for endpoints
    /// and the relay; for a hub, if it is trusted or `hub_trust` is `open`.
    func mayExchange(with link: Link) -> Bool {
        link.info.peerRole != .hub || link.trusted || settings.trust.mode == .open
    }

    /// Largest number of bundle IDs remembered per untrusted link.
    static let maxUntrustedHolds = 20_000

    /// A neighbour holds these offered bundles: offer them to it no more. A trusted hub's word
    /// is recorded in the store; an untrusted hub's is remembered for its link only.
    func handleHeld(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole != .endpoint else { counters.framesRefusedForRole += 1; return }
        guard let held = try? BundleIDList(parsing: value) else { counters.refusedMalformed += 1; return }
        counters.heldReceived += held.bundleIDs.count
        if link.isUntrustedHub {
            noteUntrustedHolds(held.bundleIDs, on: link)
            return
        }
        let t = now()
        for id in held.bundleIDs {
            // A trusted hub that holds it has it in its custody, as if it had acknowledged it:
            // recorded as a holder and, if queued here, handed over. Otherwise, after a kill -9
            // between a hand-over and its commit, the bundle stayed queued here for ever with
            // nowhere left to go (protocol.md, held). Only IDs we hold are touched; a claim
            // about others costs one lookup.
            storeCall("custodyTaken", { try store.custodyTaken(id, by: link.peerID, peerIsEndpoint: false, nowMs: t) })
            link.offeredAtMs[id] = nil
        }
    }

    func noteUntrustedHolds(_ ids: [[UInt8]], on link: Link) {
        for id in ids where link.untrustedHolds.count < Self.maxUntrustedHolds { link.untrustedHolds.insert(id) }
    }

    /// A hub's certificate: it names the hub key this link proved, is signed by the
    /// configured network key and is valid now (give or take the clock skew). The frame
    /// arrives over the link itself, so naming the proven key binds it to this peer.
    func handleCertificate(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole == .hub else {
            counters.certificatesRefused += 1
            return
        }
        // A network we are not part of: the certificate means nothing here, and is no fault.
        guard let network = settings.trust.networkKey else { return }
        let cert: HubCertificate
        do {
            cert = try HubCertificate(parsing: value)
            // Judged against our best estimate of true time, not blindly against our wall clock.
            let best = time.bestTrueTimeMs()
            try cert.check(networkKey: network, hubKey: link.info.peerSigningKey, nowMs: best.timeMs, clockSkewMs: best.toleranceMs)
        } catch {
            counters.certificatesRefused += 1
            logger.warning("certificate from hub \(link.peerName) on \(link.key) refused: \(error)")
            return
        }
        let before = link.trusted
        link.certifiedUntilMs = cert.notAfterMs
        counters.certificatesAccepted += 1
        logger.info("hub \(link.peerName) on \(link.key) presented a valid certificate; trusted")
        if !before { becameTrusted(link) }
        onChange?()
    }

    /// A hub link just became trusted: if it got nothing so far, it now gets what a trusted
    /// hub gets at link up. (Under open trust it had the offers already.)
    func becameTrusted(_ link: Link) {
        link.untrustedHolds.removeAll()
        guard settings.trust.mode != .open else { return }
        startSync(with: link)
        sendAttachmentAnnouncement(to: link)
    }

    // MARK: Time (Docs/protocol.md, clock 0x0C)

    /// A peer's `clock` frame: it reads version-2 hop headers; its time is a sample if the
    /// link is the pinned relay (with a measurement), a trusted hub, or a phone.
    func handleClock(_ value: [UInt8], from link: Link) {
        guard let frame = try? ClockFrame(parsing: value) else {
            counters.refusedMalformed += 1
            counters.clockFramesIgnored += 1
            return
        }
        link.peerReadsAge = true
        let changed: Bool
        switch link.info.peerRole {
        case .relay:
            guard frame.source == .relay else { counters.clockFramesIgnored += 1; return }
            changed = time.update { $0.observeRelay(timeMs: frame.timeMs, hubMs: $1) }
        case .hub:
            guard link.trusted else { counters.clockFramesIgnored += 1; return }
            changed = time.update { $0.observeHub(link.peerID, frame: frame, hubMs: $1) }
        case .endpoint:
            changed = time.update { $0.observePhone(link.peerID, timeMs: frame.timeMs, hubMs: $1) }
        }
        counters.clockSamples += 1
        if changed { clockSourceChanged() }
    }

    /// Each tick: look at the system clock, persist the hub clock now and then, and set the
    /// system clock if the operator allowed it.
    func tickClock(hubNowMs t: Int64) {
        if time.refresh() { clockSourceChanged() }
        let sincePersist = t - lastClockPersistMs
        if sincePersist >= Self.idleClockPersistIntervalMs
            || (sincePersist >= Self.clockPersistIntervalMs && store.database.groupHasChanges) {
            persistClock(hubNowMs: t)
        }
        guard settings.setSystemClock else { return }
        let e = time.estimate
        guard e.known, e.source != .system, e.systemClockErrorMs.magnitude > 60_000,
              lastSystemClockSetMs.map({ t - $0 >= 600_000 }) ?? true else { return }
        lastSystemClockSetMs = t
        let target = t &+ e.trueMinusHubMs
        do {
            try HubTime.setSystemClock(toMs: target)
            logger.notice("clock: set the system clock \(e.systemClockErrorMs < 0 ? "forward" : "back") by \(ClockEstimate.span(e.systemClockErrorMs.magnitude)) to the \(e.source)'s time (clock.set_system_clock)")
            if time.refresh() { clockSourceChanged() }
        } catch {
            logger.warning("clock: \(error); set_system_clock stays on and is tried again in 10 min")
        }
    }

    func persistClock(hubNowMs t: Int64) {
        lastClockPersistMs = t
        storeCall("persistHubClock", { try store.persistHubClock(hubMs: t, wallMs: WallClock.nowMilliseconds()) })
    }

    /// Our estimate now comes from another source: say so, and tell the peers that read it.
    func clockSourceChanged() {
        logger.notice("clock: \(time.estimate.summary)")
        let frame = time.frame().record
        for link in links.values where link.info.peerRole != .relay && link.peerReadsAge { send(frame, on: link) }
        onChange?()
    }
}
