import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire

/// The host's router: frame in → parse → verify → store → route → frame out.
///
/// All state and every store call live on one serial queue, so the data path is
/// straight and ordered. A bundle is acknowledged to the link it came from
/// (custody) only after the store has durably committed it.
///
/// Between hubs, bundles move by offer and request: a hub offers message IDs
/// (``FrameType/summary``), the neighbour requests the ones it lacks
/// (``FrameType/request``), and only then does the bundle cross — so each
/// bundle crosses each link at most once. Endpoints and the relay get bundles
/// pushed directly.
public final class Router: TransportEventHandler, @unchecked Sendable {
    /// Router tuning, from the config's `router` section.
    public struct Settings: Sendable {
        public var hopLimit: Int
        public var linkFramesPerSecond: Int
        public var senderEnvelopesPerMinute: Int
        public var custodyTimeoutMs: Int64
        /// Bundles awaiting custody on one link at once; more wait for acknowledgements.
        public var linkWindow: Int
        public init(hopLimit: Int = 10, linkFramesPerSecond: Int = 2000, senderEnvelopesPerMinute: Int = 600, custodyTimeoutMs: Int64 = 30_000,
                    linkWindow: Int = 64) {
            self.linkWindow = linkWindow
            self.hopLimit = hopLimit
            self.linkFramesPerSecond = linkFramesPerSecond
            self.senderEnvelopesPerMinute = senderEnvelopesPerMinute
            self.custodyTimeoutMs = custodyTimeoutMs
        }
    }

    /// Counters shown in status.
    public struct Counters: Sendable, Codable, Equatable {
        public var accepted = 0
        public var duplicates = 0
        public var refusedMalformed = 0
        public var refusedSignature = 0
        public var refusedExpired = 0
        public var refusedHopLimit = 0
        public var refusedRateLimited = 0
        public var refusedStoreFull = 0
        public var forwarded = 0
        public var deliveredDirect = 0
        public var receiptsSeen = 0
        public var custodyTimeouts = 0
        public var framesRateLimited = 0
        public var unknownFrames = 0
        public var expired = 0
    }

    final class Link {
        let key: LinkKey
        let transport: TransportHost
        let info: LinkInfo
        let peerID: [UInt8]
        let upAtMs: Int64
        var tokens: Double
        var lastRefillNs: UInt64
        /// Bundles sent on this link awaiting custody, with their deadline.
        var inFlight: [[UInt8]: Int64] = [:]
        /// Resends after a custody timeout on this (still up) link, per bundle.
        var resends: [[UInt8]: Int] = [:]
        /// IDs we asked this neighbour for, with a deadline; not asked elsewhere meanwhile.
        var requested: [[UInt8]: Int64] = [:]
        /// IDs this neighbour asked us for that did not fit the window yet, oldest first.
        var wanted: [[UInt8]] = []
        var framesIn = 0

        init(key: LinkKey, transport: TransportHost, info: LinkInfo, peerID: [UInt8], now: Int64, rate: Int) {
            self.key = key
            self.transport = transport
            self.info = info
            self.peerID = peerID
            self.upAtMs = now
            self.tokens = Double(rate)
            self.lastRefillNs = DispatchTime.now().uptimeNanoseconds
        }
    }

    public let hubID: [UInt8]
    private let hubSigningKey: [UInt8]
    private let sign: @Sendable ([UInt8]) -> [UInt8]
    private let store: BundleStore
    private let logger: Logger
    private let queue = DispatchQueue(label: "yaok.router")
    private var settings: Settings
    private var policy: RoutingPolicy
    private var links: [LinkKey: Link] = [:]
    private var counters = Counters()
    /// Where endpoints were last announced as attached: user ID → (hub ID, timestamp).
    private var attachments: [[UInt8]: (hub: [UInt8], atMs: Int64)] = [:]
    private var senderWindow: (startMs: Int64, counts: [[UInt8]: Int]) = (0, [:])
    /// The latest relay registration each attached endpoint gave us (the relay checks it).
    private var registrations: [[UInt8]: [UInt8]] = [:]
    private var timer: DispatchSourceTimer?
    private var lastSweepMs: Int64 = 0
    private var lastVacuumCheckMs: Int64 = 0
    private let now: @Sendable () -> Int64

    /// Called (on the router queue) whenever something status-worthy changes.
    public var onChange: (@Sendable () -> Void)?

    public init(hubIdentity: Identity, store: BundleStore, settings: Settings, policy: RoutingPolicy, logger: Logger,
                now: @escaping @Sendable () -> Int64 = { Clock.nowMilliseconds() }) {
        self.hubID = hubIdentity.userID
        self.hubSigningKey = hubIdentity.signingKey
        let signing = hubIdentity.signingKeyPair
        self.sign = { signing.sign($0) }
        self.store = store
        self.settings = settings
        self.policy = policy
        self.logger = logger
        self.now = now
    }

    /// Starts the periodic work: custody timeouts, retries on the backoff schedule, expiry, vacuum.
    public func start() {
        queue.sync {
            do {
                let requeued = try store.requeueInFlight(nowMs: now())
                if requeued > 0 { logger.notice("requeued \(requeued) bundles that were in flight at the last shutdown") }
            } catch {
                logger.error("store: cannot requeue in-flight bundles: \(error)")
            }
        }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1)
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
        self.timer = timer
    }

    /// Stops the timers; waits for queued work to finish so the store is quiet.
    public func stop() {
        timer?.cancel()
        timer = nil
        queue.sync {}
    }

    /// Applies new settings and policy on reload.
    public func update(settings: Settings, policy: RoutingPolicy) {
        queue.async {
            self.settings = settings
            self.policy = policy
        }
    }

    // MARK: TransportEventHandler (called from plugin threads; hop onto the queue)

    public func linkUp(_ link: LinkInfo, on transport: TransportHost) {
        queue.async { self.handleLinkUp(link, transport: transport) }
    }

    public func linkDown(_ link: LinkID, reason: String?, on transport: TransportHost) {
        queue.async { self.handleLinkDown(LinkKey(transport: transport.name, link: link), reason: reason) }
    }

    public func frameReceived(_ frame: [UInt8], link: LinkID, on transport: TransportHost) {
        queue.async { self.handleFrame(frame, key: LinkKey(transport: transport.name, link: link)) }
    }

    public func statusChanged(on transport: TransportHost) {
        onChange?()
    }

    /// Drops every link of a transport that is being stopped (its plugin may be gone).
    public func forgetLinks(of transportName: String) {
        queue.sync {
            for key in links.keys where key.transport == transportName {
                handleLinkDown(key, reason: "transport stopped")
            }
        }
    }

    // MARK: Links

    private func handleLinkUp(_ info: LinkInfo, transport: TransportHost) {
        let key = LinkKey(transport: transport.name, link: info.id)
        let peerID = Hash.sha256(info.peerSigningKey)
        let link = Link(key: key, transport: transport, info: info, peerID: peerID, now: now(), rate: settings.linkFramesPerSecond)
        links[key] = link
        logger.info("link up \(key): \(info.peerRole) \(Self.shortID(peerID)) via \(info.kind) \(info.remote ?? "")")
        switch info.peerRole {
        case .endpoint:
            pushPending(to: link)
            announceAttachments()
        case .hub:
            offerAll(to: link)
            sendAttachmentAnnouncement(to: link)
        case .relay:
            for endpoint in links.values where endpoint.info.peerRole == .endpoint {
                if let r = registrations[endpoint.peerID] { _ = send(TLVRecord(.registration, value: r), on: link) }
            }
            pushForwardable(to: link)
        }
        onChange?()
    }

    /// A phone asks to be reachable from the internet through this hub: carry its
    /// registration (signed by the phone, bound to the relay's key and a timestamp) to
    /// every relay link, now and whenever a relay link comes up while the phone is here.
    private func handleRegistration(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole == .endpoint, value.count <= 1024 else { counters.refusedMalformed += 1; return }
        registrations[link.peerID] = value
        if registrations.count > 10_000 { registrations.removeAll() }
        for relay in links.values where relay.info.peerRole == .relay {
            _ = send(TLVRecord(.registration, value: value), on: relay)
        }
    }

    private func handleLinkDown(_ key: LinkKey, reason: String?) {
        guard let link = links.removeValue(forKey: key) else { return }
        logger.info("link down \(key): \(reason ?? "no reason given")")
        let t = now()
        for id in link.inFlight.keys { failAttemptIfStillInFlight(id, nowMs: t) }
        if link.info.peerRole == .endpoint { announceAttachments() }
        onChange?()
    }

    private func allowFrame(_ link: Link) -> Bool {
        let nowNs = DispatchTime.now().uptimeNanoseconds
        let rate = Double(settings.linkFramesPerSecond)
        link.tokens = min(rate, link.tokens + Double(nowNs - link.lastRefillNs) / 1e9 * rate)
        link.lastRefillNs = nowNs
        guard link.tokens >= 1 else { return false }
        link.tokens -= 1
        return true
    }

    private func send(_ record: TLVRecord, on link: Link) -> Bool {
        do {
            try link.transport.send(record.encoded, to: link.info.id)
            return true
        } catch {
            logger.warning("send on \(link.key) failed: \(error)")
            return false
        }
    }

    // MARK: Frames

    private func handleFrame(_ frame: [UInt8], key: LinkKey) {
        guard let link = links[key] else { return }
        link.framesIn += 1
        guard allowFrame(link) else {
            counters.framesRateLimited += 1
            return
        }
        let record: TLVRecord
        do {
            record = try TLVRecord(parsing: frame)
        } catch {
            counters.refusedMalformed += 1
            logger.debug("malformed frame on \(key): \(error)")
            return
        }
        switch FrameType(rawValue: record.type) {
        case .bundle: acceptBundle(record.value, from: link)
        case .custodyAck: handleCustodyAck(record.value, from: link)
        case .custodyRefused: handleCustodyRefusal(record.value, from: link)
        case .summary: handleOffer(record.value, from: link)
        case .request: handleRequest(record.value, from: link)
        case .attachment: handleAttachment(record.value, from: link)
        case .registration: handleRegistration(record.value, from: link)
        case .ping: _ = send(TLVRecord(.pong, value: record.value), on: link)
        case .pong, .linkChallenge, .linkProof, .linkClose: break
        case nil:
            counters.unknownFrames += 1
            logger.debug("unknown frame type 0x\(String(record.type, radix: 16)) on \(key)")
        }
    }

    private func refuse(_ id: [UInt8]?, _ reason: CustodyRefusal.Reason, to link: Link) {
        guard let id, id.count == 16 else { return }
        _ = send(TLVRecord(.custodyRefused, value: CustodyRefusal(bundleID: id, reason: reason).encoded), on: link)
    }

    private func acceptBundle(_ bytes: [UInt8], from link: Link) {
        let t = now()
        let bundle: YaokWire.Bundle
        do {
            bundle = try YaokWire.Bundle(parsing: bytes)
        } catch WireError.hopLimitReached {
            counters.refusedHopLimit += 1
            refuse(Self.messageIDGuess(bytes), .hopLimit, to: link)
            return
        } catch {
            counters.refusedMalformed += 1
            logger.debug("malformed bundle from \(link.key): \(error)")
            refuse(Self.messageIDGuess(bytes), .malformed, to: link)
            return
        }
        let envelope = bundle.envelope
        let id = envelope.messageID
        guard envelope.verifySignature() else {
            counters.refusedSignature += 1
            logger.warning("bundle \(Self.shortID(id)) from \(link.key) has a bad signature; refused")
            refuse(id, .badSignature, to: link)
            return
        }
        guard envelope.expiresMs > t else {
            counters.refusedExpired += 1
            refuse(id, .expired, to: link)
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
        let result: AcceptResult
        do {
            result = try store.accept(NewBundle(
                messageID: id, destination: envelope.recipientUserID, kind: envelope.kind.rawValue,
                sourceUserID: envelope.senderUserID, hopCount: Int(stored.hop.hopCount), hopLimit: Int(stored.hop.hopLimit),
                previousHop: link.peerID, createdMs: envelope.createdMs, expiresMs: envelope.expiresMs,
                bytes: stored.encoded, receivedFrom: link.key.description), nowMs: t)
        } catch {
            counters.refusedStoreFull += 1
            logger.error("store refused bundle \(Self.shortID(id)): \(error)")
            refuse(id, .storeFull, to: link)
            return
        }
        // The sender holds it, whatever happens next: never send it back on this link.
        try? store.recordPeerHas(id, peer: link.peerID)
        link.requested[id] = nil
        switch result {
        case .stored:
            counters.accepted += 1
            _ = send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: link)
            if envelope.kind != .message { handleReceipt(envelope) }
            if let b = try? store.bundle(id) { route(b) }
        case .duplicate:
            counters.duplicates += 1
            _ = send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded), on: link)
        case .rejectedExpired:
            counters.refusedExpired += 1
            refuse(id, .expired, to: link)
        case .rejectedTooLarge:
            counters.refusedStoreFull += 1
            refuse(id, .storeFull, to: link)
        }
        onChange?()
    }

    /// A delivery receipt means the original message arrived: purge our copy, or remember
    /// the delivery so copies still travelling are refused as duplicates. Only the original
    /// recipient's (signature-checked) receipt counts, so nobody can suppress others' mail.
    private func handleReceipt(_ receipt: Envelope) {
        counters.receiptsSeen += 1
        guard receipt.kind == .deliveryReceipt else { return }
        let ref = receipt.refID
        let t = now()
        if let original = try? store.bundle(ref) {
            if original.state != .delivered && original.destination == receipt.senderUserID {
                try? store.markDelivered(ref, nowMs: t)
            }
        } else {
            try? store.rememberDelivered(ref, destination: receipt.senderUserID, expiresMs: receipt.expiresMs, nowMs: t)
        }
    }

    private func allowSender(_ key: [UInt8], nowMs: Int64) -> Bool {
        if nowMs - senderWindow.startMs >= 60_000 || senderWindow.counts.count > 50_000 {
            senderWindow = (nowMs, [:])
        }
        let n = senderWindow.counts[key, default: 0] + 1
        senderWindow.counts[key] = n
        return n <= settings.senderEnvelopesPerMinute
    }

    private func handleCustodyAck(_ value: [UInt8], from link: Link) {
        guard let ack = try? CustodyAck(parsing: value) else { counters.refusedMalformed += 1; return }
        let id = ack.bundleID
        guard link.inFlight.removeValue(forKey: id) != nil else { return }
        link.resends[id] = nil
        let t = now()
        do {
            try store.recordPeerHas(id, peer: link.peerID)
            guard let b = try store.bundle(id) else { return }
            if link.info.peerRole == .endpoint && b.destination == link.peerID {
                try store.markDelivered(id, nowMs: t)
                counters.deliveredDirect += 1
                logger.debug("delivered \(Self.shortID(id)) to \(Self.shortID(link.peerID))")
            } else if b.state == .queued || b.state == .inFlight {
                try store.markHandedOver(id, to: link.peerID, nowMs: t)
                counters.forwarded += 1
            } else {
                counters.forwarded += 1
            }
        } catch {
            logger.error("store: custody ack for \(Self.shortID(id)): \(error)")
        }
        // Refill once the window is half empty, so listing pending bundles is amortised.
        if link.inFlight.count <= settings.linkWindow / 2 {
            switch link.info.peerRole {
            case .endpoint: pushPending(to: link)
            case .relay: pushForwardable(to: link)
            case .hub: sendWanted(on: link)
            }
        }
        onChange?()
    }

    private func handleCustodyRefusal(_ value: [UInt8], from link: Link) {
        guard let refusal = try? CustodyRefusal(parsing: value) else { counters.refusedMalformed += 1; return }
        let id = refusal.bundleID
        guard link.inFlight.removeValue(forKey: id) != nil else { return }
        logger.info("\(link.key) refused custody of \(Self.shortID(id)): \(refusal.reason)")
        switch refusal.reason {
        case .rateLimited, .storeFull:
            failAttemptIfStillInFlight(id, nowMs: now())
        default:
            // The neighbour will never take it: treat it as holding it so we stop offering.
            try? store.recordPeerHas(id, peer: link.peerID)
            failAttemptIfStillInFlight(id, nowMs: now())
        }
    }

    private func failAttemptIfStillInFlight(_ id: [UInt8], nowMs: Int64) {
        guard let b = try? store.bundle(id), b.state == .inFlight else { return }
        // Another link may still carry it.
        if links.values.contains(where: { $0.inFlight[id] != nil }) { return }
        try? store.markAttemptFailed(id, nowMs: nowMs)
    }

    // MARK: Offer / request between hubs

    private func handleOffer(_ value: [UInt8], from link: Link) {
        guard let offer = try? SummaryVector(parsing: value) else { counters.refusedMalformed += 1; return }
        let t = now()
        var wanted: [[UInt8]] = []
        for id in offer.bundleIDs {
            try? store.recordPeerHas(id, peer: link.peerID)
            if (try? store.bundle(id)) != nil { continue }
            // Asked another neighbour for it already and that request is still live.
            if links.values.contains(where: { $0.requested[id].map { $0 > t } ?? false }) { continue }
            link.requested[id] = t + settings.custodyTimeoutMs
            wanted.append(id)
        }
        for chunk in stride(from: 0, to: wanted.count, by: SummaryVector.maxCount) {
            let ids = Array(wanted[chunk..<min(wanted.count, chunk + SummaryVector.maxCount)])
            guard let vector = try? SummaryVector(bundleIDs: ids) else { continue }
            _ = send(TLVRecord(.request, value: vector.encoded), on: link)
        }
    }

    /// Bundles a neighbour may ask for but that wait for window room, per link.
    static let maxWantedPerLink = 20_000

    private func handleRequest(_ value: [UInt8], from link: Link) {
        guard let request = try? SummaryVector(parsing: value) else { counters.refusedMalformed += 1; return }
        let room = max(0, Self.maxWantedPerLink - link.wanted.count)
        link.wanted.append(contentsOf: request.bundleIDs.prefix(room))
        sendWanted(on: link)
    }

    /// Sends requested bundles while the link's window has room; the rest wait for acks.
    private func sendWanted(on link: Link) {
        var sent = 0
        while sent < link.wanted.count, link.inFlight.count < settings.linkWindow {
            let id = link.wanted[sent]
            sent += 1
            guard let b = try? store.bundle(id), b.state != .delivered, b.state != .expired else { continue }
            transmit(b, on: link)
        }
        link.wanted.removeFirst(sent)
    }

    private func offer(_ ids: [[UInt8]], to link: Link) {
        for chunk in stride(from: 0, to: ids.count, by: SummaryVector.maxCount) {
            let part = Array(ids[chunk..<min(ids.count, chunk + SummaryVector.maxCount)])
            guard let vector = try? SummaryVector(bundleIDs: part) else { continue }
            _ = send(TLVRecord(.summary, value: vector.encoded), on: link)
        }
    }

    /// On contact: offer everything the policy lets this neighbour have.
    private func offerAll(to link: Link) {
        guard let bundles = try? store.forwardable(limit: 100_000, withBytes: false) else { return }
        var ids: [[UInt8]] = []
        for b in bundles where chosenHops(for: b).contains(link.key) { ids.append(b.messageID) }
        offer(ids, to: link)
    }

    // MARK: Routing

    /// Links to an attached endpoint, newest first: a phone that reconnected is reachable
    /// on its new link while the old one may not have timed out yet.
    private func endpointLinks(for userID: [UInt8]) -> [Link] {
        links.values.filter { $0.info.peerRole == .endpoint && $0.peerID == userID }
            .sorted { ($0.upAtMs, -$0.info.cost) > ($1.upAtMs, -$1.info.cost) }
    }

    private func chosenHops(for b: StoredBundle) -> [LinkKey] {
        let attachedHub = attachments[b.destination]?.hub
        let candidates: [NeighbourCandidate] = links.values.compactMap { link in
            guard link.info.peerRole != .endpoint else { return nil }
            let holds = (try? store.peerHas(b.messageID, peer: link.peerID)) ?? false
            return NeighbourCandidate(key: link.key, role: link.info.peerRole, peerID: link.peerID, cost: link.info.cost,
                                      holdsBundle: holds || link.inFlight[b.messageID] != nil,
                                      isRecipientAttachment: attachedHub == link.peerID)
        }
        let handedOut = (try? store.peersHolding(b.messageID)) ?? 0
        return policy.nextHops(for: b, candidates: candidates, copiesHandedOut: max(0, handedOut - 1))
    }

    /// Routes one stored bundle: directly to its recipient if attached, else per policy.
    private func route(_ b: StoredBundle) {
        guard b.state == .queued || b.state == .handedOver else { return }
        if let direct = endpointLinks(for: b.destination).first {
            if direct.inFlight[b.messageID] == nil { transmit(b, on: direct) }
            return
        }
        for key in chosenHops(for: b) {
            guard let link = links[key] else { continue }
            switch link.info.peerRole {
            case .hub: offer([b.messageID], to: link)
            case .relay: transmit(b, on: link)
            case .endpoint: break
            }
        }
    }

    /// Sends the bundle itself on a link, recording custody in flight. Returns false when
    /// the link's window is full. `b` may come from a listing without bytes.
    @discardableResult
    private func transmit(_ listed: StoredBundle, on link: Link) -> Bool {
        guard link.inFlight.count < settings.linkWindow else { return false }
        guard link.inFlight[listed.messageID] == nil else { return true }
        guard let b = listed.bytes.isEmpty ? (try? store.bundle(listed.messageID)) ?? nil : listed, !b.bytes.isEmpty else { return true }
        let t = now()
        var outgoing = b.bytes
        if link.info.peerRole != .endpoint {
            guard let parsed = try? YaokWire.Bundle(parsing: b.bytes) else { return true }
            do {
                outgoing = try parsed.forwarded(by: hubID).encoded
            } catch {
                counters.refusedHopLimit += 1
                try? store.recordPeerHas(b.messageID, peer: link.peerID)
                return true
            }
        }
        guard outgoing.count + TLVRecord.headerLength <= link.info.mtu || link.info.mtu == 0 else {
            logger.warning("bundle \(Self.shortID(b.messageID)) (\(outgoing.count) bytes) exceeds \(link.key) MTU \(link.info.mtu)")
            return true
        }
        if b.state == .queued { try? store.markInFlight(b.messageID, link: link.key.description, nowMs: t) }
        link.inFlight[b.messageID] = t + settings.custodyTimeoutMs
        if !send(TLVRecord(.bundle, value: outgoing), on: link) {
            link.inFlight[b.messageID] = nil
            failAttemptIfStillInFlight(b.messageID, nowMs: t)
        }
        return true
    }

    /// An endpoint attached: hand it everything queued for it.
    private func pushPending(to link: Link) {
        let room = settings.linkWindow - link.inFlight.count
        guard room > 0, let pending = try? store.pending(destination: link.peerID, limit: settings.linkWindow + room, withBytes: false) else { return }
        for b in pending where b.state != .delivered && b.state != .expired && link.inFlight[b.messageID] == nil {
            if !transmit(b, on: link) { break }
        }
    }

    /// The relay came up: hand it what the policy routes there.
    private func pushForwardable(to link: Link) {
        guard let bundles = try? store.forwardable(limit: 100_000, withBytes: false) else { return }
        for b in bundles where link.inFlight[b.messageID] == nil && endpointLinks(for: b.destination).isEmpty && chosenHops(for: b).contains(link.key) {
            if !transmit(b, on: link) { break }
        }
    }

    // MARK: Attachment announcements

    private func attachedEndpoints() -> [[UInt8]] {
        Array(Set(links.values.filter { $0.info.peerRole == .endpoint }.map(\.peerID))).sorted { $0.lexicographicallyPrecedes($1) }
    }

    private func makeAnnouncement() -> AttachmentAnnouncement? {
        let users = Array(attachedEndpoints().prefix(AttachmentAnnouncement.maxCount))
        return try? AttachmentAnnouncement.make(hubSigningKey: hubSigningKey, timestampMs: now(), userIDs: users, sign: sign)
    }

    private func sendAttachmentAnnouncement(to link: Link) {
        guard let a = makeAnnouncement() else { return }
        _ = send(TLVRecord(.attachment, value: a.encoded), on: link)
    }

    private func announceAttachments() {
        guard let a = makeAnnouncement() else { return }
        for link in links.values where link.info.peerRole == .hub {
            _ = send(TLVRecord(.attachment, value: a.encoded), on: link)
        }
    }

    private func handleAttachment(_ value: [UInt8], from link: Link) {
        guard let a = try? AttachmentAnnouncement(parsing: value), a.verifySignature() else {
            counters.refusedSignature += 1
            return
        }
        let hub = Hash.sha256(a.hubSigningKey)
        guard hub != hubID else { return }
        var changed = false
        for user in a.userIDs {
            if let seen = attachments[user], seen.atMs >= a.timestampMs { continue }
            attachments[user] = (hub, a.timestampMs)
            changed = true
        }
        if attachments.count > 100_000 { attachments.removeAll() }
        // Flood newer announcements one hop further so hubs learn where recipients are.
        if changed {
            for other in links.values where other.info.peerRole == .hub && other.key != link.key && other.peerID != hub {
                _ = send(TLVRecord(.attachment, value: value), on: other)
            }
        }
    }

    // MARK: Timers

    /// Resends on a live link before a timeout counts as a failed attempt (with backoff):
    /// a lost frame on a working link is not an absent next hop.
    static let resendsBeforeBackoff = 3

    private func tick() {
        let t = now()
        for link in links.values {
            for (id, deadline) in link.inFlight where deadline <= t {
                link.inFlight[id] = nil
                counters.custodyTimeouts += 1
                let resends = link.resends[id, default: 0]
                if resends < Self.resendsBeforeBackoff, let b = try? store.bundle(id), b.state == .inFlight || b.state == .queued || b.state == .handedOver {
                    link.resends[id] = resends + 1
                    transmit(b, on: link)
                } else {
                    link.resends[id] = nil
                    failAttemptIfStillInFlight(id, nowMs: t)
                }
            }
            link.requested = link.requested.filter { $0.value > t }
            // Keep windows full even when acknowledgements stopped coming.
            if link.inFlight.count <= settings.linkWindow / 2 {
                switch link.info.peerRole {
                case .endpoint: pushPending(to: link)
                case .relay: if link.inFlight.isEmpty { pushForwardable(to: link) }
                case .hub: sendWanted(on: link)
                }
            }
        }
        if let due = try? store.due(nowMs: t, limit: 500, withBytes: false) {
            for b in due { route(b) }
        }
        if t - lastSweepMs >= 60_000 {
            lastSweepMs = t
            if let n = try? store.expire(nowMs: t), n > 0 {
                counters.expired += n
                logger.info("expired \(n) bundles")
            }
        }
        if t - lastVacuumCheckMs >= 3_600_000 {
            lastVacuumCheckMs = t
            do { try store.vacuumIfNeeded(nowMs: t) } catch { logger.warning("store vacuum failed: \(error)") }
        }
    }

    // MARK: Status

    /// A status snapshot (runs on the router queue).
    public func statusSnapshot() -> RouterStatus {
        queue.sync {
            let counts = (try? store.counts()) ?? [:]
            let last = (try? store.lastDelivery()) ?? []
            return RouterStatus(
                policy: policy.name,
                queue: RouterStatus.Queue(
                    queued: counts[.queued] ?? 0, inFlight: counts[.inFlight] ?? 0, handedOver: counts[.handedOver] ?? 0,
                    delivered: counts[.delivered] ?? 0, expired: counts[.expired] ?? 0,
                    bytes: (try? store.totalBytes()) ?? 0),
                store: RouterStatus.StoreCounters(duplicatesDropped: store.statistics.duplicatesDropped,
                                                  evicted: store.statistics.evicted, expired: store.statistics.expired),
                counters: counters,
                links: links.values.sorted { $0.key.description < $1.key.description }.map {
                    RouterStatus.LinkView(link: $0.key.description, role: $0.info.peerRole.description, peer: Self.shortID($0.peerID),
                                          kind: $0.info.kind, remote: $0.info.remote, inFlight: $0.inFlight.count)
                },
                lastDelivery: last.prefix(50).map { RouterStatus.Delivery(destination: Self.shortID($0.destination), atMs: $0.atMs) })
        }
    }

    /// The first 8 hex digits of an ID: enough for an operator, not a full identifier in logs.
    static func shortID(_ id: [UInt8]) -> String { YaokPluginKit.Hex.encode(id.prefix(4)) }

    /// Best effort: the message ID sits at a fixed offset of a bundle (hop header 35 + 2).
    static func messageIDGuess(_ bytes: [UInt8]) -> [UInt8]? {
        let offset = HopHeader.length + 2
        guard bytes.count >= offset + 16 else { return nil }
        return Array(bytes[offset..<offset + 16])
    }
}

/// The router's part of `yaok-hub status`.
public struct RouterStatus: Sendable, Codable, Equatable {
    public struct Queue: Sendable, Codable, Equatable {
        public var queued, inFlight, handedOver, delivered, expired: Int
        public var bytes: Int64
    }
    public struct StoreCounters: Sendable, Codable, Equatable {
        public var duplicatesDropped, evicted, expired: Int64
    }
    public struct LinkView: Sendable, Codable, Equatable {
        public var link, role, peer, kind: String
        public var remote: String?
        public var inFlight: Int
    }
    public struct Delivery: Sendable, Codable, Equatable {
        public var destination: String
        public var atMs: Int64
    }
    public var policy: String
    public var queue: Queue
    public var store: StoreCounters
    public var counters: Router.Counters
    public var links: [LinkView]
    public var lastDelivery: [Delivery]
}
