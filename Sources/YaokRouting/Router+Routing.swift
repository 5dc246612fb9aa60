import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire

// Where a bundle goes next, and attachment announcements.
extension Router {
    // MARK: Routing

    /// Links to an attached endpoint, newest first: a phone that reconnected is reachable
    /// on its new link while the old one may not have timed out yet.
    func endpointLinks(for userID: [UInt8]) -> [Link] {
        links.values.filter { $0.info.peerRole == .endpoint && $0.peerID == userID }
            .sorted { ($0.upAtMs, -$0.info.cost) > ($1.upAtMs, -$1.info.cost) }
    }

    /// - Parameter justAccepted: `b` was stored by this work item, so the one holder the store
    ///   knows is its previous hop (``BundleStore/accept(_:nowMs:onTheWire:)`` records it with
    ///   the row): that is checked here instead of asking the store once per link.
    func chosenHops(for b: StoredBundle, justAccepted: Bool = false) -> [LinkKey] {
        let attachedHub = announcements.first { $0.value.users.contains(b.destination) }?.key
        let candidates: [NeighbourCandidate] = links.values.compactMap { link in
            guard link.info.peerRole != .endpoint, mayExchange(with: link) else { return nil }
            let recorded = justAccepted ? b.previousHop == link.peerID
                : (storeCall("peerHas", { try store.peerHas(b.bundleID, peer: link.peerID) }) ?? false)
            let holds = link.untrustedHolds.contains(b.bundleID) || (link.peerHoldings?.peerHolds(b.bundleID) ?? false) || recorded
            return NeighbourCandidate(key: link.key, role: link.info.peerRole, peerID: link.peerID, cost: link.info.cost,
                                      holdsBundle: holds || link.inFlight[b.bundleID] != nil,
                                      isRecipientAttachment: attachedHub == link.peerID)
        }
        // Holders are hubs and the relay only (phones are not recorded), the previous hop among
        // them for a bundle that came from another hub.
        let holders = (storeCall("peersHolding", { try store.peersHolding(b.bundleID) })) ?? 0
        // A copy sent and not yet acknowledged is handed out too: the store records a holder
        // only at its custody answer, and a bundle routed again between two answers (it is
        // handed over after the first) must not spray a copy more than the policy allows.
        let unanswered = links.values.filter { $0.info.peerRole != .endpoint && $0.inFlight[b.bundleID] != nil }.count
        return policy.nextHops(for: b, candidates: candidates,
                               copiesHandedOut: max(0, b.hopCount == 0 ? holders : holders - 1) + unanswered)
    }

    /// Routes one stored bundle: directly to its recipient if attached, else per policy.
    /// `justAccepted`: the bundle arrived now (live traffic, offered even while a
    /// reconciliation with the neighbour is pending), not from the walk of the queue.
    func route(_ b: StoredBundle, justAccepted: Bool = false) {
        guard b.state == .queued || b.state == .handedOver else { return }
        if let direct = endpointLinks(for: b.destination).first {
            if direct.inFlight[b.bundleID] == nil { transmit(b, on: direct) }
            return
        }
        for key in chosenHops(for: b, justAccepted: justAccepted) {
            guard let link = links[key] else { continue }
            switch link.info.peerRole {
            case .hub: offer([b.bundleID], to: link, duringSync: justAccepted)
            case .relay: transmit(b, on: link)
            case .endpoint: break
            }
        }
    }

    /// Sends the bundle itself on a link, recording custody in flight. Returns false when
    /// the link's window is full. `b` may come from a listing without bytes.
    @discardableResult
    func transmit(_ listed: StoredBundle, on link: Link, resend: Bool = false) -> Bool {
        // A resend takes its own slot back, even when the window has just shrunk below it.
        guard resend || link.inFlight.count < link.pacing.window else { return false }
        guard link.inFlight[listed.bundleID] == nil else { return true }
        // A phone receives only its own mail, whatever asked for this send.
        guard link.info.peerRole != .endpoint || listed.destination == link.peerID else {
            counters.endpointMisroutesPrevented += 1
            logger.error("refused to send \(Self.shortID(listed.bundleID)) to endpoint link \(link.key): not its mail")
            return true
        }
        // Nothing goes to a hub we do not trust under list/network trust.
        guard mayExchange(with: link) else { return true }
        // A listing leaves the bytes out: read them now, for this one bundle. A tombstone has none to send.
        let b: StoredBundle
        switch listed.bytes {
        case .held: b = listed
        case .notRead:
            guard let read = storeCall("bundle", { try store.bundle(listed.bundleID) }) ?? nil else { return true }
            b = read
        case .dropped: return true
        }
        guard let bytes = b.bytes.held else { return true }
        let t = now()
        var outgoing = bytes
        // Its age when it leaves: the age it came with plus its time here (§2.2); only to a
        // peer that reads version-2 headers.
        let age: UInt32? = link.peerReadsAge ? HopHeader.clampedAge(t - b.createdMs) : nil
        if link.info.peerRole == .endpoint {
            if let age, let rewritten = try? YaokWire.Bundle.rewritingHopHeader(of: bytes, { var h = $0; h.ageMs = age; return h }) {
                outgoing = rewritten
            }
        } else {
            do {
                outgoing = try YaokWire.Bundle.rewritingHopHeader(of: bytes) { try $0.forwarded(by: hubID, ageMs: age) }
            } catch WireError.hopLimitReached {
                counters.refusedHopLimit += 1
                storeCall("recordPeerHas", { try store.recordPeerHas(b.bundleID, peer: link.peerID) })
                return true
            } catch {
                return true
            }
        }
        guard !link.tooLarge.contains(b.bundleID) else { return true }
        guard outgoing.count + TLVRecord.headerLength <= link.info.mtu || link.info.mtu == 0 else {
            logger.warning("bundle \(Self.shortID(b.bundleID)) (\(outgoing.count) bytes) exceeds \(link.key) MTU \(link.info.mtu)")
            return true
        }
        let resends = link.resends[b.bundleID] ?? 0
        if resends == 0 { link.firstSentMs[b.bundleID] = t }
        link.inFlight[b.bundleID] = t + link.pacing.timeoutMs(resends: resends)
        if !send(TLVRecord(.bundle, value: outgoing), on: link, arrivedNs: arrivedNs.removeValue(forKey: b.bundleID)) {
            link.endFlight(b.bundleID)
            failAttemptIfStillInFlight(b.bundleID, nowMs: t)
        }
        return true
    }

    /// An endpoint attached: hand it everything queued for it. What it left unanswered on this
    /// link until it became a failed attempt waits for its retry time, as on any other route
    /// (otherwise a phone that never answers is sent it again every custody wait, for ever).
    func pushPending(to link: Link) {
        let room = link.pacing.window - link.inFlight.count
        guard room > 0, let pending = storeCall("pending", { try store.pending(destination: link.peerID, limit: link.pacing.window + room, withBytes: false) }) else { return }
        let t = now()
        for b in pending where b.state != .delivered && b.state != .expired && link.inFlight[b.bundleID] == nil {
            if link.unanswered.contains(b.bundleID) {
                guard b.nextAttemptMs <= t else { continue }
                link.unanswered.remove(b.bundleID)
            }
            if !transmit(b, on: link) { break }
        }
    }

    /// Bundles remembered per link as left unanswered there (``Link/unanswered``).
    static let maxUnansweredPerLink = 4_096

    /// The relay came up: hand it what the policy routes there.
    /// Bundles for the relay: not those it refused for now until their time (its hint, or the
    /// backoff), nor those it refused for good (recorded as held by it).
    func pushForwardable(to link: Link) {
        guard let bundles = storeCall("forwardable", { try store.forwardable(limit: 100_000, excludingPeer: link.peerID, withBytes: false) }) else { return }
        let wire = onTheWire()
        let t = now()
        for b in bundles where (relayRefusedUntil[b.bundleID] ?? 0) <= t && !wire.contains(b.bundleID) && endpointLinks(for: b.destination).isEmpty && chosenHops(for: b).contains(link.key) {
            if !transmit(b, on: link) { break }
        }
    }

    // MARK: Attachment announcements

    func attachedEndpoints() -> [[UInt8]] {
        Array(Set(links.values.filter { $0.info.peerRole == .endpoint }.map(\.peerID))).sorted { $0.lexicographicallyPrecedes($1) }
    }

    func makeAnnouncement() -> AttachmentAnnouncement? {
        let users = Array(attachedEndpoints().prefix(AttachmentAnnouncement.maxCount))
        // Dated by our best estimate of true time (peers judge it by theirs), and always later
        // than our last one, which a peer requires even when our estimate moved back.
        lastAnnouncementMs = max(lastAnnouncementMs + 1, time.bestTrueTimeMs().timeMs)
        return try? AttachmentAnnouncement.make(hubSigningKey: hubSigningKey, timestampMs: lastAnnouncementMs, userIDs: users, sign: sign)
    }

    func sendAttachmentAnnouncement(to link: Link) {
        guard let a = makeAnnouncement() else { return }
        send(TLVRecord(.attachment, value: a.encoded), on: link)
    }

    func announceAttachments() {
        guard let a = makeAnnouncement() else { return }
        for link in links.values where link.info.peerRole == .hub && mayExchange(with: link) {
            send(TLVRecord(.attachment, value: a.encoded), on: link)
        }
    }

    /// A neighbouring hub says which users are attached to it. Accepted only over a hub link
    /// from the hub it describes (its key is the link's proven key), signed, dated no later
    /// than our clock allows and newer than its last one; it replaces that hub's own entry
    /// (at most ``AttachmentAnnouncement/maxCount`` users) and nobody else's, and is not
    /// passed on: routing uses it only to pick a direct link to that hub.
    func handleAttachment(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole == .hub, let a = try? AttachmentAnnouncement(parsing: value) else {
            counters.attachmentsRefused += 1
            return
        }
        let hub = Hash.sha256(a.hubSigningKey)
        let best = time.bestTrueTimeMs()
        guard hub == link.peerID, a.timestampMs <= best.timeMs + best.toleranceMs,
              a.timestampMs > (announcements[hub]?.atMs ?? Int64.min), a.verifySignature() else {
            counters.attachmentsRefused += 1
            logger.debug("attachment announcement on \(link.key) refused")
            return
        }
        announcements[hub] = (Set(a.userIDs), a.timestampMs)
    }
}
