import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire

// Between hubs: offers, requests, `held`, and set reconciliation.
extension Router {
    // MARK: Offer / request between hubs

    /// Offered IDs waiting to be looked up, per link; more are dropped (and offered again
    /// later by the neighbour, whose queued bundles come due).
    static let maxOfferedPerLink = 20_000
    /// Outstanding requests per link: an offer is looked up only while fewer are pending, so
    /// a neighbour that offers and never delivers cannot grow this table.
    static let maxRequestedPerLink = 4_000
    /// IDs looked up per turn of the router queue: one store transaction, then other links' work.
    static let offerSliceSize = 500

    /// An offer is queued per link and looked up in slices (see ``drainOffers(_:)``), so one
    /// frame of 4,000 IDs, or a flood of them, costs bounded memory and delays only its link.
    func handleOffer(_ value: [UInt8], from link: Link) {
        // A phone pushes its bundles; an offer from it would make the hub record it as holding
        // other people's bundles (fewer spray-and-wait copies, no offers to it).
        guard link.info.peerRole != .endpoint else { counters.framesRefusedForRole += 1; return }
        guard let offer = try? BundleIDList(parsing: value) else { counters.refusedMalformed += 1; return }
        counters.offersReceived += 1
        let room = max(0, Self.maxOfferedPerLink - link.offered.count)
        if offer.bundleIDs.count > room { counters.offersDropped += offer.bundleIDs.count - room }
        link.offered.append(contentsOf: offer.bundleIDs.prefix(room))
        drainOffers(link)
    }

    /// Looks up one slice of a link's offered IDs, requests what we lack, and yields the
    /// queue before the next slice.
    func drainOffers(_ link: Link) {
        guard links[link.key] === link, !link.drainingOffers else { return }
        let t = now()
        // Each tick drops expired requests; here only when they stand between an offer and its
        // room (a filter at every offer frame was 2 % of a line hub's CPU).
        if link.requested.count >= Self.maxRequestedPerLink { link.requested = link.requested.filter { $0.value > t } }
        let room = Self.maxRequestedPerLink - link.requested.count
        guard !link.offered.isEmpty, room > 0 else { return }
        let slice = Array(link.offered.prefix(min(room, Self.offerSliceSize)))
        link.offered.removeFirst(slice.count)
        let unknown: [[UInt8]]
        do {
            if link.isUntrustedHub {
                // An untrusted hub's claim to hold a bundle is remembered for its link only.
                unknown = try store.unknownIDs(slice)
                noteUntrustedHolds(slice.filter { !unknown.contains($0) }, on: link)
            } else {
                unknown = try store.noteOffered(slice, by: link.peerID)
            }
        } catch {
            logger.error("store: looking up an offer from \(link.key): \(error)")
            return
        }
        var wanted: [[UInt8]] = []
        for id in unknown {
            // Asked another neighbour for it already and that request is still live.
            if links.values.contains(where: { $0.requested[id].map { $0 > t } ?? false }) { continue }
            link.requested[id] = t + link.pacing.timeoutMs()
            wanted.append(id)
        }
        if !wanted.isEmpty, let vector = try? BundleIDList(bundleIDs: wanted) {
            send(TLVRecord(.request, value: vector.encoded), on: link)
        }
        // Say which ones we hold, so the neighbour stops offering them.
        let unknownSet = Set(unknown)
        let held = slice.filter { !unknownSet.contains($0) }
        if !held.isEmpty, mayExchange(with: link), let vector = try? BundleIDList(bundleIDs: held) {
            counters.heldSent += vector.bundleIDs.count
            send(TLVRecord(.held, value: vector.encoded), on: link)
        }
        if !link.offered.isEmpty {
            link.drainingOffers = true
            // By key: link objects stay on the router queue, and a link that went down
            // meanwhile has nothing left to drain.
            let key = link.key
            work {
                guard let link = self.links[key] else { return }
                link.drainingOffers = false
                self.drainOffers(link)
            }
        }
    }

    /// Bundles a neighbour may ask for but that wait for window room, per link.
    static let maxWantedPerLink = 20_000

    func handleRequest(_ value: [UInt8], from link: Link) {
        guard let request = try? BundleIDList(parsing: value) else { counters.refusedMalformed += 1; return }
        // Only hubs and the relay take bundles by request; a phone gets its own mail pushed.
        guard link.info.peerRole != .endpoint else { counters.framesRefusedForRole += 1; return }
        let room = max(0, Self.maxWantedPerLink - link.wanted.count)
        link.wanted.append(contentsOf: request.bundleIDs.prefix(room))
        sendWanted(on: link)
    }

    /// Sends requested bundles while the link's window has room; the rest wait for acks.
    func sendWanted(on link: Link) {
        var sent = 0
        while sent < link.wanted.count, link.inFlight.count < link.pacing.window {
            let id = link.wanted[sent]
            sent += 1
            guard let b = storeCall("bundle", { try store.bundle(id) }), b.state != .delivered, b.state != .expired else { continue }
            if policy.boundsCopies && !chosenHops(for: b).contains(link.key) {
                counters.requestsOverCopyBudget += 1
                continue
            }
            transmit(b, on: link)
        }
        link.wanted.removeFirst(sent)
    }

    func offer(_ ids: [[UInt8]], to link: Link, duringSync: Bool = false) {
        guard mayExchange(with: link) else { return }
        // While an exchange is pending or under way the backlog waits: it ends with offerAll,
        // which lists what the neighbour lacks. Bundles accepted meanwhile go at once, or
        // they would wait out the 5 s first wait or a 2 s "busy" retry (protocol.md, reconcile).
        guard link.sync == nil || duringSync else { return }
        var ids = ids
        if let holdings = link.peerHoldings { ids.removeAll { holdings.peerHolds($0) } }
        // The same ID to the same link at most once per custody timeout learnt for the link
        // (at most `custody_timeout_s`), whatever the answer: an offer or its request lost to
        // a full backlog costs that long, not the configured ceiling.
        let t = now(), window = link.pacing.timeoutMs()
        let fresh = ids.filter { id in
            if let at = link.offeredAtMs[id], t - at < window { counters.reoffersSuppressed += 1; return false }
            return true
        }
        if link.offeredAtMs.count + fresh.count > Self.maxOfferedMemory {
            link.offeredAtMs = link.offeredAtMs.filter { t - $0.value < window }
        }
        for id in fresh where link.offeredAtMs.count < Self.maxOfferedMemory { link.offeredAtMs[id] = t }
        guard !fresh.isEmpty else { return }
        link.offersToSend += fresh
        if !offerFlushQueued {
            offerFlushQueued = true
            queue.async { self.flushOffers() }
        }
    }

    /// Sends the offers collected since the last flush, as few lists per link as fit: queued
    /// behind the work waiting when the first was collected, so a burst of bundles is offered
    /// in one frame (one request back, one admission slot each way) and a lone bundle at once.
    func flushOffers() {
        offerFlushQueued = false
        for link in links.values where !link.offersToSend.isEmpty {
            let ids = link.offersToSend
            link.offersToSend.removeAll()
            for vector in BundleIDList.chunked(ids) {
                counters.idsOffered += vector.bundleIDs.count
                send(TLVRecord(.offer, value: vector.encoded), on: link)
            }
        }
    }

    /// On contact: offer everything the policy lets this neighbour have.
    func offerAll(to link: Link) {
        guard let bundles = storeCall("forwardable", { try store.forwardable(limit: 100_000, withBytes: false) }) else { return }
        var ids: [[UInt8]] = []
        let holdings = link.peerHoldings
        let wire = onTheWire()
        for b in bundles where !wire.contains(b.bundleID) && !(holdings?.peerHolds(b.bundleID) ?? false) && chosenHops(for: b).contains(link.key) {
            ids.append(b.bundleID)
        }
        offer(ids, to: link)
    }


    // MARK: Set reconciliation (Docs/protocol.md, reconcile 0x0A)

    /// Where a hub link is in its reconciliation exchange.
    enum SyncPhase {
        /// The neighbour initiates; its first message (kind 1 of either version) has not come yet.
        case awaitingEstimate
        /// Our exchange: version 2 (``CodedInitiator``), or 1 with a neighbour that speaks no 2.
        case initiating(any ReconcileExchange)
        /// The neighbour's, in the version it started.
        case responding(any ReconcileExchange)
    }

    var reconcileEnabled: Bool { !settings.testing.noReconcile }
    var reconcileVersion1Only: Bool { settings.testing.reconcileVersion1Only }
    /// An exchange waits this long for the neighbour's first message (a neighbour from before
    /// reconciliation never sends one), and this long between messages once under way. The
    /// side waiting for an estimate starts an exchange itself after the first wait (the other
    /// side may have kept its link across our restart and see no reason to start one); if
    /// that is not answered either, both list offers.
    static let syncFirstWaitMs: Int64 = 5_000
    static let syncProgressWaitMs: Int64 = 30_000
    /// Frames a link must carry for an exchange: one message and its TLV header. Smaller
    /// (BLE's 10.5 KB) lists offers instead.
    static let syncMinimumMTU = ReconcileLimits.maxMessageBytes + TLVRecord.headerLength
    /// Exchanges under way at once (each holds its ID set, ~50 bytes per ID), and the spacing
    /// between exchanges neighbours start (each costs a scan of the store, ~0.1 s per 100,000
    /// IDs): beyond either, a neighbour's `estimate` is answered "busy" and both sides list
    /// offers. So a neighbour that keeps starting exchanges costs at most one scan a second.
    static let maxConcurrentSyncs = 4
    static let syncAnswerSpacingMs: Int64 = 1_000
    /// An initiator answered "busy" starts again after twice the spacing, this many times.
    static let syncBusyRetries = 3

    /// A hub link may now exchange bundles: reconcile first when both sides can (the hub with
    /// the lower ID initiates, the other answers), else offer everything.
    func startSync(with link: Link) {
        guard link.sync == nil, link.peerHoldings == nil else { return }
        guard reconcileEnabled, link.info.mtu == 0 || link.info.mtu >= Self.syncMinimumMTU,
              exchangesUnderWay < Self.maxConcurrentSyncs else {
            offerAll(to: link)
            return
        }
        guard hubID.lexicographicallyPrecedes(link.peerID) else {
            link.syncDeadlineMs = now() + Self.syncFirstWaitMs
            link.sync = .awaitingEstimate
            return
        }
        initiateSync(with: link)
    }

    func initiateSync(with link: Link) {
        guard let ids = storeCall("allBundleIDs", { try store.allBundleIDs() }) else { endSync(link, "the store could not list its IDs"); return }
        let first: ReconcileMessage
        if link.peerReconcilesVersion1Only || reconcileVersion1Only {
            let initiator = ReconcileInitiator(ids: Self.reconcileIDs(ids))
            link.sync = .initiating(initiator)
            first = initiator.firstMessage
        } else {
            let initiator = CodedInitiator(ids: Self.reconcileIDs(ids))
            link.sync = .initiating(initiator)
            first = initiator.firstMessage
        }
        link.syncDeadlineMs = now() + Self.syncFirstWaitMs
        sendReconcile([first], on: link)
    }

    func handleReconcile(_ value: [UInt8], from link: Link) {
        guard reconcileEnabled else { counters.unknownFrames += 1; return }
        guard link.info.peerRole == .hub else { counters.framesRefusedForRole += 1; return }
        counters.reconcileBytesIn += value.count
        let header = ReconcileMessage.header(of: value)
        let startsExchange = header?.kind == ReconcileMessage.estimateKind
        let step: ReconcileStep
        // Both sides started an exchange (the lower ID late, e.g. it trusted us only later, the
        // higher ID after its wait): the lower ID's exchange wins, the other side answers it.
        if case .initiating? = link.sync, startsExchange, link.peerID.lexicographicallyPrecedes(hubID) {
            link.sync = .awaitingEstimate
        }
        var version1Only = false
        switch link.sync {
        case .initiating(var initiator)?:
            step = initiator.receive(bytes: value)
            link.sync = .initiating(initiator)
            // An older neighbour refused version 2, listing what it speaks.
            if let versions = (initiator as? CodedInitiator)?.responderVersions {
                version1Only = versions.contains(ReconcileLimits.version) && !versions.contains(ReconcileLimits.codedVersion)
            }
        case .responding(var responder)?:
            step = responder.receive(bytes: value)
            link.sync = .responding(responder)
        case .awaitingEstimate?, nil:
            // Only an estimate starts an exchange; anything else of a finished one is stale.
            guard let header, startsExchange else { return }
            let t = now()
            let busy = lastSyncAnsweredMs.map { t &- $0 < Self.syncAnswerSpacingMs } ?? false
                || exchangesUnderWay >= Self.maxConcurrentSyncs
            if busy {
                counters.reconcileRefused += 1
                // The neighbour tries again shortly (or lists offers after a few tries).
                sendReconcile([.abort(.init(session: header.session, reason: .busy))], on: link)
                return
            }
            guard let ids = storeCall("allBundleIDs", { try store.allBundleIDs() }) else { return }
            lastSyncAnsweredMs = t
            if header.version == ReconcileLimits.codedVersion, reconcileVersion1Only {
                // What a hub that speaks version 1 only does with it.
                link.sync = nil
                sendReconcile([.abort(.init(session: header.session, reason: .unsupportedVersion, versions: [ReconcileLimits.version]))], on: link)
                endSync(link, "unsupported version: reconcile version 2 is not supported")
                return
            }
            var responder: any ReconcileExchange = header.version == ReconcileLimits.codedVersion
                ? CodedResponder(ids: Self.reconcileIDs(ids)) : ReconcileResponder(ids: Self.reconcileIDs(ids))
            step = responder.receive(bytes: value)
            link.sync = .responding(responder)
        }
        link.syncDeadlineMs = now() + Self.syncProgressWaitMs
        switch step {
        case .wait:
            break
        case .send(let messages):
            sendReconcile(messages, on: link)
        case .done(let peerLacks, let iLack, let lacksMessages):
            sendReconcile(lacksMessages, on: link)
            let reconciled: [BundleID]
            switch link.sync {
            case .initiating(let side)?, .responding(let side)?:
                reconciled = side.ids
                if side is ReconcileInitiator || side is ReconcileResponder { counters.reconciledVersion1 += 1 }
            default: reconciled = []
            }
            link.peerHoldings = PeerHoldings(reconciled: reconciled, peerLacks: peerLacks, peerOnly: iLack)
            link.sync = nil
            counters.reconciled += 1
            counters.reconcileDifferences += peerLacks.count + iLack.count
            logger.info("reconciled \(reconciled.count) bundle IDs with hub \(link.peerName) on \(link.key): it lacks \(peerLacks.count), we lack \(iLack.count)")
            offerAll(to: link)
        case .fallBack(let reason, let abort, let detail):
            if let abort { sendReconcile([abort], on: link) }
            if version1Only {
                // Start again in version 1 (the neighbour may answer "busy" first: it just
                // answered us, and the busy path below waits and starts again).
                link.peerReconcilesVersion1Only = true
                link.sync = nil
                initiateSync(with: link)
                return
            }
            if reason == .busy, abort == nil, link.syncBusyRetries < Self.syncBusyRetries {
                // The neighbour is answering another exchange: start again after its spacing.
                link.syncBusyRetries += 1
                link.sync = .awaitingEstimate
                link.syncDeadlineMs = now() + 2 * Self.syncAnswerSpacingMs
                return
            }
            endSync(link, "\(reason): \(detail)")
        }
    }

    /// Links holding an exchange's state (its ID set); one waiting for an estimate holds none.
    var exchangesUnderWay: Int {
        links.values.filter { link in
            switch link.sync {
            case .initiating?, .responding?: true
            case .awaitingEstimate?, nil: false
            }
        }.count
    }

    /// The exchange ended without a result: list offers, as with a hub from before it.
    func endSync(_ link: Link, _ why: String) {
        link.sync = nil
        counters.reconcileFallbacks += 1
        logger.info("reconciliation with hub \(link.peerName) on \(link.key) fell back to listing offers: \(why)")
        offerAll(to: link)
    }

    func sendReconcile(_ messages: [ReconcileMessage], on link: Link) {
        for message in messages {
            let bytes = message.encoded
            counters.reconcileBytesOut += bytes.count
            send(TLVRecord(.reconcile, value: bytes), on: link)
        }
    }

    /// The store's flat ID list (16 bytes each) as reconciliation IDs.
    static func reconcileIDs(_ flat: [UInt8]) -> [BundleID] {
        var out: [BundleID] = []
        out.reserveCapacity(flat.count / BundleID.length)
        var i = 0
        while i + BundleID.length <= flat.count {
            if let id = BundleID(flat[i..<(i + BundleID.length)]) { out.append(id) }
            i += BundleID.length
        }
        return out
    }
}
