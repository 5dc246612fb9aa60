import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire
import struct YaokRelayProtocol.Registration

// Frames in: bundles, custody answers and the other host frames (Docs/protocol.md §4).
extension Router {
    // MARK: Frames

    func handleFrame(_ frame: [UInt8], key: LinkKey, bundle: ReceivedBundleFrame?) {
        guard let link = links[key] else { return }
        link.framesIn += 1
        link.bytesIn += frame.count
        let record: TLVRecord
        do {
            record = try bundle?.record ?? TLVRecord(parsing: frame)
        } catch {
            counters.refusedMalformed += 1
            logger.debug("malformed frame on \(key): \(error)")
            return
        }
        if record.type == RoutingFrameType.hubCertificate.rawValue {
            handleCertificate(record.value, from: link)
            return
        }
        if record.type == RoutingFrameType.clock.rawValue {
            handleClock(record.value, from: link)
            return
        }
        if !mayExchange(with: link) {
            // An untrusted hub under list/network trust: keep-alives only, until it proves itself.
            switch HostFrameType(record.type) {
            case .link(.ping): send(TLVRecord(.pong, value: record.value), on: link)
            case .link(.pong), .link(.linkClose), .routing(.custodyAck), .routing(.custodyRefused): break
            case .routing(.custodyAcks): if record.value == CustodyAcks.announcement.value { link.peerReadsAckLists = true }
            case .routing(.attachment): counters.attachmentsRefused += 1
            default: counters.untrustedHubFramesRefused += 1
            }
            return
        }
        switch HostFrameType(record.type) {
        case .link(.bundle): acceptBundle(record.value, from: link, checked: bundle?.checked)
        case .routing(.custodyAck): handleCustodyAck(record.value, from: link)
        case .routing(.custodyAcks): handleCustodyAcks(record.value, from: link)
        case .routing(.custodyRefused): handleCustodyRefusal(record.value, from: link)
        case .routing(.offer): handleOffer(record.value, from: link)
        case .routing(.held): handleHeld(record.value, from: link)
        case .routing(.reconcile): handleReconcile(record.value, from: link)
        case .routing(.request): handleRequest(record.value, from: link)
        case .routing(.attachment): handleAttachment(record.value, from: link)
        case .routing(.registration): handleRegistration(record.value, from: link)
        case .routing(.registrationAnswer): handleRegistrationAnswer(record.value, from: link)
        case .link(.ping): send(TLVRecord(.pong, value: record.value), on: link)
        case .link(.pong), .link(.linkClose), .routing(.hubCertificate), .routing(.clock), .routing(.relay): break
        case .link(.linkIdentity), .link(.linkOutcome), .link(.linkFragment), .link(.linkHello), .link(.linkCookie), .link(.linkReply), .link(.sealed),
             .link(.linkVersion), .unknown:
            // Link-session records never reach the host: a transport handing one up is broken.
            counters.unknownFrames += 1
            logger.debug("unknown frame type 0x\(String(record.type, radix: 16)) on \(key)")
        }
    }

    func refuse(_ id: [UInt8]?, _ reason: CustodyRefusal.Reason, to link: Link) {
        guard let id, id.count == 16 else { return }
        sendAfterCommit(TLVRecord(.custodyRefused, value: CustodyRefusal(bundleID: id, reason: reason).encoded), on: link)
    }

    /// `checked`: the bundle as parsed and verified on the receiving thread
    /// (``ReceivedBundleFrame``); nil if it did not parse there, when it is parsed again here
    /// for the reason it is refused.
    func acceptBundle(_ bytes: [UInt8], from link: Link, checked: ReceivedBundleFrame.Checked?) {
        let t = now()
        let bundle: YaokWire.Bundle
        do {
            bundle = try checked?.bundle ?? YaokWire.Bundle(parsing: bytes)
        } catch WireError.hopLimitReached {
            counters.refusedHopLimit += 1
            refuse(BundleID.of(bundle: bytes), .hopLimit, to: link)
            return
        } catch {
            counters.refusedMalformed += 1
            logger.debug("malformed bundle from \(link.key): \(error)")
            refuse(BundleID.of(bundle: bytes), .malformed, to: link)
            return
        }
        let envelope = bundle.envelope
        let id = envelope.bundleID
        let proven = checked?.proven ?? false
        guard proven || (checked?.signatureValid ?? envelope.verifySignature()) else {
            counters.refusedSignature += 1
            logger.warning("bundle \(Self.shortID(id)) from \(link.key) has a bad signature; refused")
            refuse(id, .badSignature, to: link)
            return
        }
        // Judged by its age and, only where true time is known, by the clock (Docs/protocol.md §2.2).
        let judgement: EnvelopeLifetime.Judgement
        do {
            judgement = try settings.lifetime.judge(envelope, claimedAgeMs: bundle.hop.ageMs, trueTimeMs: time.knownTrueTimeMs())
        } catch .expired {
            counters.refusedExpired += 1
            refuse(id, .expired, to: link)
            return
        } catch {
            counters.refusedLifetime += 1
            logger.info("bundle \(Self.shortID(id)) from \(link.key) refused: \(error)")
            refuse(id, .badLifetime, to: link)
            return
        }
        guard Int(bundle.hop.hopCount) <= Int(bundle.hop.hopLimit) else {
            counters.refusedHopLimit += 1
            refuse(id, .hopLimit, to: link)
            return
        }
        if !allowSender(envelope.senderSigningKey, nowMs: t) {
            counters.refusedRateLimited += 1
            refuse(id, .rateLimited, to: link)
            return
        }
        // A bundle from an endpoint starts its life here: stamp our hop limit and us as first hop.
        var stored = bundle
        if link.info.peerRole == .endpoint {
            stored.hop = HopHeader(hopCount: 0, hopLimit: UInt8(clamping: settings.hopLimit), previousHop: hubID)
        }
        // The store keeps hub-clock times: created = now − age, so the age it leaves with is
        // `now − created` then; expires = now + what remains (§2.2).
        stored.hop.ageMs = nil
        let newBundle = NewBundle(
            bundleID: id, destination: envelope.recipientUserID, kind: envelope.kind.rawValue,
            sourceUserID: envelope.senderUserID, hopCount: Int(stored.hop.hopCount), hopLimit: Int(stored.hop.hopLimit),
            // A phone is never sent a bundle it did not address to itself, so recording it as
            // a holder would only cost a random page write per bundle.
            previousHop: link.info.peerRole == .endpoint ? nil : link.peerID,
            createdMs: t - judgement.ageMs, expiresMs: t + judgement.remainingMs,
            bytes: stored.encoded, receivedFrom: link.key.description, origin: link.origin,
            acknowledgedBundleID: envelope.acknowledgedBundleID)
        let result: AcceptResult
        let evictedBefore = store.statistics
        do {
            result = try store.accept(newBundle, nowMs: t, onTheWire: isOnTheWire)
        } catch {
            counters.refusedStoreFull += 1
            logger.error("store refused bundle \(Self.shortID(id)): \(error)")
            refuse(id, .storeFull, to: link)
            return
        }
        // The sender holds it, whatever happens next: never send it back on this link. (An
        // untrusted hub's holding is remembered for its link only; see ``Link/untrustedHolds``.)
        // (`accept` recorded a trusted peer already when it stored the bundle or found a duplicate.)
        if link.isUntrustedHub {
            noteUntrustedHolds([id], on: link)
        } else if link.info.peerRole != .endpoint, result != .stored, result != .duplicate {
            storeCall("recordPeerHas", { try store.recordPeerHas(id, peer: link.peerID) })
        }
        // A requested bundle arrived: room for the next slice of that link's offers.
        if link.requested.removeValue(forKey: id) != nil, !link.offered.isEmpty { drainOffers(link) }
        let evicted = store.statistics
        if evicted.evicted > evictedBefore.evicted {
            let n = evicted.evicted - evictedBefore.evicted
            let bySender = evicted.evictedHeaviestSender - evictedBefore.evictedHeaviestSender
            let byOrigin = evicted.evictedHeaviestOrigin - evictedBefore.evictedHeaviestOrigin
            logger.notice("store full: evicted \(n) bundles for \(Self.shortID(id)) (\(bySender) from the heaviest sender, \(byOrigin) from the heaviest origin)")
        }
        switch result {
        case .stored:
            counters.accepted += 1
            // Bounded: bundles that find no link soon are forgotten here (they wait in the store).
            if arrivedNs.count >= 4_096 { arrivedNs.removeAll(keepingCapacity: true) }
            arrivedNs[id] = frameArrivedNs
            logger.debug("stored bundle \(Self.shortID(id)) from \(link.key)")
            sendAfterCommit(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: link)
            if envelope.kind == .message { receiptCommitments.record(envelope) } else { handleReceipt(envelope, proven: proven) }
            route(StoredBundle(accepted: newBundle, nowMs: t), justAccepted: true)
        case .duplicate:
            counters.duplicates += 1
            sendAfterCommit(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: link)
        case .alreadyDelivered:
            counters.alreadyDelivered += 1
            sendAfterCommit(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: link)
        case .conflict where envelope.kind != .message && replaceForgedReceipt(with: newBundle, envelope: envelope):
            counters.receiptsReplaced += 1
            logger.warning("receipt \(Self.shortID(id)) from \(link.key) replaced a held copy whose signature failed")
            sendAfterCommit(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: link)
        case .conflict:
            counters.refusedConflict += 1
            logger.warning("bundle \(Self.shortID(id)) from \(link.key): another envelope holds this bundle ID; refused")
            refuse(id, .conflict, to: link)
        case .rejectedExpired:
            counters.refusedExpired += 1
            refuse(id, .expired, to: link)
        case .rejectedTooLarge:
            counters.refusedStoreFull += 1
            refuse(id, .storeFull, to: link)
        case .rejectedOverShare:
            counters.refusedOverShare += 1
            logger.notice("store full: refused \(Self.shortID(id)) from \(link.key), whose sender or origin holds the largest share, or whose origin holds nothing yet")
            refuse(id, .storeFull, to: link)
        }
        onChange?()
    }

    /// A delivery receipt means the original message arrived: purge our copy. It counts only
    /// for a message we hold whose recipient signed the receipt (the receipt's bundle ID
    /// binds its recipient — the message's sender — and the acknowledged message ID). A
    /// receipt for a message we do not hold suppresses nothing when it comes; it is stored like any
    /// bundle, and if the message arrives later `accept` finds it (`.alreadyDelivered`).
    /// Anybody else's receipt travels to its addressee and changes nothing here.
    ///
    /// `proven`: the receipt revealed the proof its message committed to
    /// (``ReceiptCommitments``), which only the recipient can compute: it counts without
    /// its signature having been checked.
    func handleReceipt(_ receipt: Envelope, proven: Bool) {
        counters.receiptsSeen += 1
        guard receipt.kind == .deliveryReceipt, let ref = receipt.acknowledgedBundleID else { return }
        if proven { counters.receiptsProven += 1 }
        // A store failure (nil) is counted as one, not as an unverified receipt.
        let counted = storeCall("deliveryReceipt") {
            try store.deliveryReceipt(for: ref, signedBy: proven ? nil : receipt.senderUserID, nowMs: now())
        }
        if counted == false { counters.receiptsUnverified += 1 }
        if counted == true {
            // Delivered: no retry to schedule for it.
            untrustedAcks.current.remove(ref)
            untrustedAcks.previous.remove(ref)
        }
    }

    /// A receipt admitted by its proof alone may be a copy of the real one that an on-path
    /// hub re-dated or re-signed badly; held first, it would make the real one a conflict,
    /// and hubs that check signatures would refuse it on its way to the sender. So when a
    /// receipt conflicts with a held one, both signatures are checked (only then: a
    /// conflict needs someone who saw the proof), and a held copy that fails gives way to
    /// one that verifies. Whether the held copy was replaced.
    func replaceForgedReceipt(with newBundle: NewBundle, envelope: Envelope) -> Bool {
        guard let held = storeCall("bundle", { try store.bundle(newBundle.bundleID) }),
              let bytes = held.bytes.held,
              let heldEnvelope = try? YaokWire.Bundle(parsing: bytes).envelope,
              !heldEnvelope.verifySignature(), envelope.verifySignature() else { return false }
        return storeCall("replaceEnvelope", { try store.replaceEnvelope(with: newBundle) }) ?? false
    }

    func allowSender(_ key: [UInt8], nowMs: Int64) -> Bool {
        if nowMs - senderWindow.startMs >= 60_000 || senderWindow.counts.count > 50_000 {
            senderWindow = (nowMs, [:])
        }
        let n = senderWindow.counts[key, default: 0] + 1
        senderWindow.counts[key] = n
        return n <= settings.senderEnvelopesPerMinute
    }

    func handleCustodyAck(_ value: [UInt8], from link: Link) {
        guard let ack = try? CustodyAck(parsing: value) else { counters.refusedMalformed += 1; return }
        custodyAcknowledged([ack.bundleID], by: link)
    }

    /// A list of acks (or, empty, the peer's announcement that it reads them). A list that
    /// does not parse is refused whole; each ID of one that does is checked on its own.
    func handleCustodyAcks(_ value: [UInt8], from link: Link) {
        guard let list = try? BundleIDList(parsing: value) else { counters.refusedMalformed += 1; return }
        link.peerReadsAckLists = true
        guard !list.bundleIDs.isEmpty else { return }
        counters.ackListsReceived += 1
        counters.acksInListsReceived += list.bundleIDs.count
        custodyAcknowledged(list.bundleIDs, by: link)
    }

    /// The peer took custody of `ids`: each counts only if it is in flight on this link.
    func custodyAcknowledged(_ ids: [[UInt8]], by link: Link) {
        let t = now()
        var answered = false
        for id in ids {
            let flight = link.endFlight(id)
            guard flight.wasInFlight else { continue }
            answered = true
            link.pacing.answered(rttMs: flight.sentOnceAtMs.map { t - $0 })
            if link.isUntrustedHub {
                // An untrusted hub (open trust) took a copy: our custody stands. A message goes back
                // to queued, stays eligible for every other route, and only a verified delivery
                // receipt ends it. No holder is recorded in the store, so this hub's word neither
                // uses up a spray-and-wait copy nor stops an offer to anybody else.
                counters.untrustedHandOvers += 1
                noteUntrustedHolds([id], on: link)
                if untrustedAcks.current.count + untrustedAcks.previous.count < Self.maxUntrustedAcksDeferred {
                    untrustedAcks.current.insert(id)
                } else {
                    untrustedCustodyLapsed(id, nowMs: t)
                }
                logger.debug("untrusted hub \(link.peerName) acknowledged \(Self.shortID(id)); still in our custody")
                continue
            }
            switch storeCall("custodyTaken", { try store.custodyTaken(id, by: link.peerID, peerIsEndpoint: link.info.peerRole == .endpoint, nowMs: t) }) {
            case .delivered?:
                counters.deliveredDirect += 1
                logger.debug("delivered \(Self.shortID(id)) to \(link.peerName)")
            case .handedOver?:
                counters.forwarded += 1
            case nil:
                break  // gone meanwhile (evicted, expired), or the store failed: the slot is free either way
            }
        }
        guard answered else { return }
        // Refill once the window is half empty, so listing pending bundles is amortised.
        if link.inFlight.count <= link.pacing.window / 2 {
            switch link.info.peerRole {
            case .endpoint: pushPending(to: link)
            case .relay: pushForwardable(to: link)
            case .hub: sendWanted(on: link)
            }
        }
        onChange?()
    }

    func handleCustodyRefusal(_ value: [UInt8], from link: Link) {
        guard let refusal = try? CustodyRefusal(parsing: value) else { counters.refusedMalformed += 1; return }
        let id = refusal.bundleID
        guard link.endFlight(id).wasInFlight else { return }
        logger.info("\(link.key) refused custody of \(Self.shortID(id)): \(refusal.reason)")
        switch refusal.reason {
        case .rateLimited, .storeFull:
            // Later, not before the refuser's hint (the relay's rate limit gives one).
            let t = now()
            let notBefore = refusal.retryAfterS.map { t + Int64($0) * 1000 }
            failAttemptIfStillInFlight(id, nowMs: t, notBeforeMs: notBefore)
            if link.info.peerRole == .relay {
                // The relay route waits for the hint or the backoff; a send that failed because
                // a link went down (a relay failover) does not: the next link takes it at once.
                let due = storeCall("bundle", { try store.bundle(id) }).flatMap { $0 }?.nextAttemptMs ?? (t + 60_000)
                relayRefusedUntil[id] = max(due, notBefore ?? 0)
                if relayRefusedUntil.count > 100_000 { relayRefusedUntil = relayRefusedUntil.filter { $0.value > t } }
            }
        default:
            // The neighbour will never take it: treat it as holding it so we stop offering.
            if link.isUntrustedHub {
                noteUntrustedHolds([id], on: link)
            } else {
                storeCall("recordPeerHas", { try store.recordPeerHas(id, peer: link.peerID) })
            }
            failAttemptIfStillInFlight(id, nowMs: now())
        }
    }

    /// An untrusted hub's custody of `id` that its delivery receipt did not end (a tick later, or
    /// at once when too many wait): a message counts a failed attempt and is retried on the
    /// store's backoff; a receipt, which has no receipt to end it, is handed over here instead —
    /// kept for its addressee and new neighbours, never retried (protocol.md, custodyAck).
    func untrustedCustodyLapsed(_ id: [UInt8], nowMs: Int64) {
        if isOnTheWire(id) { return }
        if storeCall("receiptTakenByUntrustedHub", { try store.receiptTakenByUntrustedHub(id) }) == true {
            counters.untrustedReceiptHandOvers += 1
        } else {
            failAttemptIfStillInFlight(id, nowMs: nowMs)
        }
    }

    /// A send of `id` ended without custody: unless another link still carries it, a queued
    /// bundle counts a failed attempt and waits for its retry time (the store leaves a
    /// handed-over one, or one gone meanwhile, as it is).
    func failAttemptIfStillInFlight(_ id: [UInt8], nowMs: Int64, notBeforeMs: Int64? = nil) {
        if isOnTheWire(id) { return }
        storeCall("markAttemptFailed") {
            do { try store.markAttemptFailed(id, nowMs: nowMs, notBeforeMs: notBeforeMs) } catch StoreError.bundleNotFound { /* evicted or expired meanwhile */ }
        }
    }

    /// Whether some link is sending `id`, custody not yet answered.
    func isOnTheWire(_ id: [UInt8]) -> Bool {
        links.values.contains { $0.inFlight[id] != nil }
    }

    /// Bundles being sent on some link, custody not yet answered. The store does not record
    /// this (see ``BundleStore``): listings of queued bundles pass these over.
    func onTheWire() -> Set<[UInt8]> {
        var ids = Set<[UInt8]>()
        for link in links.values { ids.formUnion(link.inFlight.keys) }
        return ids
    }
}
