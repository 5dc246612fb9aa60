import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire
import struct YaokRelayProtocol.Registration

/// The host's router: frame in → parse → verify → store → route → frame out.
///
/// All state and every store call live on one serial queue, so the data path is
/// straight and ordered. A bundle is acknowledged to the link it came from
/// (custody) only after the store has durably committed it.
///
/// Between hubs, bundles move by offer and request: a hub offers message IDs
/// (``FrameType/offer``), the neighbour requests the ones it lacks
/// (``FrameType/request``), and only then does the bundle cross — so each
/// bundle crosses each link at most once. Endpoints and the relay get bundles
/// pushed directly.
// @unchecked: routing state is confined to `queue`; the entry points only enqueue (admission has its own lock).
public final class Router: @unchecked Sendable {

    public let hubID: [UInt8]
    let hubSigningKey: [UInt8]
    let sign: @Sendable ([UInt8]) -> [UInt8]
    let store: BundleStore
    let logger: Logger
    let queue = DispatchQueue(label: "yaok.router")
    var settings: Settings
    var policy: RoutingPolicy
    var links: [LinkKey: Link] = [:]
    var counters = Counters()
    /// Store operations failing now, each logged as an error once until it works again.
    var failingStoreOperations = Set<String>()
    /// What each neighbouring hub last announced about itself: hub ID → (attached users, timestamp).
    var announcements: [[UInt8]: (users: Set<[UInt8]>, atMs: Int64)] = [:]
    /// Per-link admission before the router queue (rate and backlog), on plugin threads.
    let admission: FrameAdmission
    /// The receipt commitments of messages stored lately, read on the transports' threads.
    let receiptCommitments = ReceiptCommitments()
    var senderWindow: (startMs: Int64, counts: [[UInt8]: Int]) = (0, [:])
    /// Bundles the relay refused for now (rate limited, full), until when it gets them again.
    var relayRefusedUntil: [[UInt8]: Int64] = [:]
    /// The latest relay registration each attached endpoint gave us (the relay checks it).
    var registrations: [[UInt8]: [UInt8]] = [:]
    var timer: DispatchSourceTimer?
    /// Group commit: the open transaction, the frames waiting for it, the items it covers.
    let group: GroupCommit<Router, WaitingFrame>
    /// A custody answer held for the open group's commit, and when the frame it answers arrived.
    typealias WaitingFrame = (record: TLVRecord, link: Link, arrivedNs: UInt64)
    /// When the frame being handled reached the router (monotonic ns), and when each bundle it
    /// stored arrived, until the bundle first leaves: the hub's added latency (``HopLatency``).
    var frameArrivedNs: UInt64 = 0
    var arrivedNs: [[UInt8]: UInt64] = [:]
    var hopLatency = HopLatency()
    /// A ``flushOffers()`` is queued.
    var offerFlushQueued = false
    /// Transports holding frames for ``flushHeldSends()`` (queued when the first was held),
    /// and when each held bundle arrived (its hop latency ends when it is written).
    var transportsHoldingSends: [ObjectIdentifier: any RouterTransport] = [:]
    var heldArrivals: [UInt64] = []
    /// From a bundle's arrival to its custody answer (ack or refusal), which waits for the commit.
    var custodyLatency = HopLatency()
    /// How long each group commit that changed the store took.
    var commitDuration = HopLatency()
    /// Where the next tick's page of due bundles starts (nil: from the oldest).
    var dueCursor: StoredBundle?
    static let duePage = 500
    /// Bundles an untrusted hub acknowledged (open trust), by the tick they were acknowledged
    /// in: `current` since the last tick, `previous` the tick before. Custody stays ours, and
    /// what the store records for each (``untrustedCustodyLapsed(_:nowMs:)``: a message's retry,
    /// a receipt's hand-over) waits a full tick, by when most messages have their delivery
    /// receipt and need no store access at all: otherwise it is a page write per bundle at every
    /// hop of an open-trust line. Until
    /// then the due walk passes them over, as it does bundles on the wire. Losing these in a
    /// crash loses nothing: the bundles are queued and due, and are offered again.
    var untrustedAcks: (current: Set<[UInt8]>, previous: Set<[UInt8]>) = ([], [])
    static let maxUntrustedAcksDeferred = 16_384
    /// Offer times remembered per link.
    static let maxOfferedMemory = 100_000
    /// A group closes after this many work items even if more are queued.
    static let maxGroupItems = 1024
    /// Commits at least this far apart while work keeps coming. Only custody answers wait for
    /// a commit, so this is what they wait at most, never what a forwarded bundle waits; 5 ms
    /// rather than 2 cut the hub's CPU per message by about a third at 250 msg/s offered
    /// (Docs/performance.md, "Group commit").
    static let commitSpacingUs: UInt64 = 5_000
    /// A small group (``GroupCommit``'s `unwaitedMaxItems`, a light load's frame or two) that
    /// holds no custody answer when its commit comes up commits at most this long after it
    /// opened, or with the first answer held in it. What such a group changes (a peer took
    /// custody, a holder learnt, a retry scheduled, a sweep) is safe to lose in a crash: after
    /// a restart those bundles are queued again, resent, and the peer answers that it holds
    /// them. So at light load those changes share the next answer's fsync instead of costing
    /// one of their own (disk writes per message down by about 27 %, Docs/performance.md).
    static let unwaitedCommitBoundUs: UInt64 = 1_000_000
    var lastSweepMs: Int64 = 0
    /// The timestamp of our last attachment announcement (they must increase).
    var lastAnnouncementMs: Int64 = 0
    /// When we last tried to set the system clock (`clock.set_system_clock`).
    var lastSystemClockSetMs: Int64?
    var lastVacuumCheckMs: Int64 = 0
    /// When a group last committed a change, and when the store's WAL was last emptied.
    var lastChangeMs: Int64 = 0
    var walEmptiedMs: Int64 = 0
    var maintenanceQueued = false
    /// The WAL keeps older images of the pages it holds (a delivered bundle's envelope among
    /// them) until it is checkpointed and truncated: whoever takes the hub with its key could
    /// read them. So it is emptied once the store has changed nothing for this long (a phone
    /// walked past, the burst is over), and at least every ``walMaxAgeMs`` while it keeps
    /// changing (Docs/store.md). Tests shorten it (``Settings/Testing/walQuietMs``).
    var walQuietMs: Int64 { settings.testing.walQuietMs }
    static let walMaxAgeMs: Int64 = 3_600_000
    /// The hub clock (every deadline) and the estimate of true time (Docs/protocol.md §2.2).
    public let time: HubTime
    var lastClockPersistMs: Int64 = 0
    /// The hub clock joins a commit that happens anyway at most this often…
    static let clockPersistIntervalMs: Int64 = 60_000
    /// …and an idle hub commits it alone this often: within the 10 min that
    /// ``HubClockStart/resume(persisted:wallNowMs:)`` counts, without writing the SD card every minute.
    static let idleClockPersistIntervalMs: Int64 = 300_000

    /// Called (on the router queue) whenever something status-worthy changes.
    public var onChange: (@Sendable () -> Void)?

    /// The hub clock, ms: what every deadline in the store is kept on.
    func now() -> Int64 { time.hubNowMs() }

    /// When this hub last answered a neighbour's first exchange message (``syncAnswerSpacingMs``).
    var lastSyncAnsweredMs: Int64?

    public init(hubIdentity: Identity, store: BundleStore, settings: Settings, policy: RoutingPolicy, logger: Logger,
                time: HubTime) {
        self.hubID = hubIdentity.userID
        self.hubSigningKey = hubIdentity.signingKey
        let signing = hubIdentity.signingKeyPair
        self.sign = { signing.sign($0) }
        self.store = store
        self.settings = settings
        self.policy = policy
        self.logger = logger
        self.time = time
        self.admission = FrameAdmission(framesPerSecond: settings.linkFramesPerSecond)
        self.group = Self.groupCommit(on: queue, testDelayUs: settings.testing.commitDelayUs)
    }

    /// When the last tick ran, on the hub clock (a stopped or starved hub shows as a gap).
    var lastTickHubMs: Int64?
    /// A tick this late (ticks are 1 s apart) means the hub did not run for the difference.
    static let stallThresholdMs: Int64 = 1_500

    /// Starts the periodic work: custody timeouts, retries on the backoff schedule, expiry, vacuum.
    /// `ticking: false` starts without the 1 s timer: an in-memory test calls ``tickNow()``.
    public func start(ticking: Bool = true) {
        queue.sync {
            // The WAL a hub starts with (its last run's commits) is history like any other: it
            // is emptied after the first quiet period, not at once.
            lastChangeMs = now()
            walEmptiedMs = lastChangeMs
            persistClock(hubNowMs: lastChangeMs)
            do {
                let requeued = try store.requeueInFlight(nowMs: now())
                if requeued > 0 { logger.notice("requeued \(requeued) bundles that were in flight at the last shutdown") }
            } catch {
                logger.error("store: cannot requeue in-flight bundles: \(error)")
            }
        }
        guard ticking else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1)
        timer.setEventHandler { [weak self] in self?.grouped { self?.tick() } }
        timer.resume()
        self.timer = timer
    }

    /// Stops the timers; waits for queued work to finish so the store is quiet.
    public func stop() {
        timer?.cancel()
        timer = nil
        queue.sync {
            grouped { persistClock(hubNowMs: now()) }
            commitGroup()
            flushHeldSends()
        }
    }

    /// Runs the periodic work once, now (what the timer does each second).
    func tickNow() {
        queue.sync { grouped { tick() } }
    }

    /// Waits for the work queued so far, commits it and sends what waited for the commit; twice,
    /// for the work that work queued (an offer's lookup, a flush).
    func settle() {
        for _ in 0..<2 {
            queue.sync {
                commitGroup()
                flushHeldSends()
            }
        }
    }

    // MARK: Group commit

    /// Runs router work on its queue inside the open group transaction.
    func work(_ body: @escaping @Sendable () -> Void) {
        queue.async { self.grouped(body) }
    }

    /// Every state change the router makes joins one transaction, opened by the first work item
    /// after a commit. The commit is queued behind whatever work is already waiting, so it covers
    /// all of it: one fsync for a burst of frames from every link, none when idle. Custody
    /// answers (acks, refusals) are held until the commit returns: custody is acknowledged only
    /// once durably taken. Other frames leave at once (``sendAfterCommit(_:on:)``).
    func grouped(_ body: () -> Void) {
        group.run(self, body)
    }

    /// Commits the open group (if any), then sends the frames that waited for it.
    func commitGroup() {
        group.commit(self)
    }

    /// The router's group commit: groups close after ``maxGroupItems`` work items; frames that
    /// waited go only on links still up.
    static func groupCommit(on queue: DispatchQueue, testDelayUs: UInt32) -> GroupCommit<Router, WaitingFrame> {
        GroupCommit(
            queue: queue, spacing: CommitSpacing(environmentKey: "YAOK_COMMIT_SPACING_US", defaultUs: commitSpacingUs),
            maxItems: maxGroupItems, closesAfterSpacing: false, unwaitedCommitBoundUs: unwaitedCommitBoundUs,
            testDelayUs: testDelayUs,
            begin: { try $0.store.database.beginGroup() },
            hasChanges: { $0.store.database.groupHasChanges },
            beginFailed: { router, error in
                router.logger.error("store: cannot open a group transaction, each change commits alone: \(error)")
            },
            commit: { router in
                let started = DispatchTime.now().uptimeNanoseconds
                let changed = try router.store.database.commitGroup()
                guard changed else { return false }
                let took = DispatchTime.now().uptimeNanoseconds &- started
                router.commitDuration.record(nanoseconds: took)
                if took >= 1_000_000_000 {
                    // Custody answers waited this long for the disk: on a field hub, a failing SD card.
                    router.logger.notice("store: a commit took \(String(format: "%.1f", Double(took) / 1e9)) s (the disk's write and flush); custody answers waited for it")
                }
                return true
            },
            committed: { router, items, _ in
                router.lastChangeMs = router.now()
                router.counters.groupCommits += 1
                router.counters.groupCommitItems += items
            },
            failed: { router, items, dropped, error in
                // Nothing in it happened: peers that sent bundles get no ack and keep custody.
                router.logger.error("store: a group commit of \(items) items failed, its changes are undone and its \(dropped) frames not sent: \(error)")
            },
            release: { router, waited in
                // Acks to a peer that reads lists wait for the end of the release: one frame each.
                var acks: [ObjectIdentifier: (link: Link, ids: [[UInt8]])] = [:]
                let releasedNs = DispatchTime.now().uptimeNanoseconds
                for (record, link, arrived) in waited where router.links[link.key] === link {
                    router.custodyLatency.record(nanoseconds: releasedNs &- arrived)
                    if record.type == RoutingFrameType.custodyAck.rawValue, link.peerReadsAckLists {
                        acks[ObjectIdentifier(link), default: (link, [])].ids.append(record.value)
                    } else {
                        router.send(record, on: link)
                    }
                }
                for (link, ids) in acks.values { router.sendAcks(ids, on: link) }
            })
    }

    /// Applies new settings and policy on reload.
    public func update(settings: Settings, policy: RoutingPolicy) {
        admission.setRate(settings.linkFramesPerSecond)
        work {
            let networkChanged = settings.trust.networkKey != self.settings.trust.networkKey
            self.settings = settings
            self.policy = policy
            for link in self.links.values where link.info.peerRole == .hub {
                let before = link.trusted
                link.listed = settings.trust.trustedHubs.contains(link.info.peerSigningKey)
                if networkChanged { link.certifiedUntilMs = nil }
                if !before && link.trusted { self.becameTrusted(link) }
            }
        }
    }

    // MARK: Transport events (called from plugin threads; hop onto the queue)

    public func linkUp(_ link: LinkInfo, on transport: any RouterTransport) {
        work { self.handleLinkUp(link, transport: transport) }
    }

    public func linkDown(_ link: LinkID, reason: String?, on transport: any RouterTransport) {
        work { self.handleLinkDown(LinkKey(transport: transport.name, link: link), reason: reason) }
    }

    /// A plugin refused a frame after `send` returned (sends to plugin processes are pipelined).
    /// What the router does depends on why (the ABI's `yaok_send_result`):
    /// - queue full: the link is alive but saturated — its window halves (once per round trip,
    ///   as for a lost answer) and the bundle stays in flight there, resent when its custody
    ///   wait runs out, without the store's retry backoff;
    /// - no link: the link is gone whatever its `link_down` says — it is dropped now, so every
    ///   bundle in flight on it is routed elsewhere and nothing more is sent to it;
    /// - too large: this bundle never goes on this link again (another may carry it);
    /// - failed (or an older plugin's 1): the bundle is no longer in flight on that link and
    ///   waits its retry, a failed attempt with the store's retry backoff.
    public func sendFailed(_ frame: [UInt8], link: LinkID, result: SendResult, reason: String, on transport: any RouterTransport) {
        work {
            let key = LinkKey(transport: transport.name, link: link)
            switch result {
            case .queueFull: self.counters.sendsRefusedQueueFull += 1
            case .noLink: self.counters.sendsRefusedNoLink += 1
            case .tooLarge: self.counters.sendsRefusedTooLarge += 1
            case .failed: self.counters.sendsFailed += 1
            }
            guard let l = self.links[key] else { return }
            if result == .noLink {
                self.logger.info("send on \(key) refused: \(reason); the link is gone, routing around it")
                self.handleLinkDown(key, reason: "its transport refused a send: \(reason)")
                return
            }
            if result == .queueFull {
                // Like a lost frame: the window halves and the bundle stays in flight on this
                // link, so the tick resends it when its custody wait runs out.
                self.logger.debug("send on \(key) refused: \(reason); backing off on this link")
                l.pacing.timedOut(nowMs: self.now())
                return
            }
            self.logger.warning("send on \(key) failed: \(reason)")
            guard let record = try? TLVRecord(parsing: frame), record.type == FrameType.bundle.rawValue,
                  let id = (try? YaokWire.Bundle(parsing: record.value))?.envelope.bundleID,
                  l.inFlight[id] != nil else { return }
            if result == .tooLarge { l.tooLarge.insert(id) }
            l.endFlight(id)
            self.failAttemptIfStillInFlight(id, nowMs: self.now())
        }
    }

    /// The per-link rate limit and backlog bound apply here, on the plugin's thread, before
    /// any work is queued: a flooding link costs a lock and a counter, and cannot grow the
    /// router's queue or delay other links.
    public func frameReceived(_ frame: [UInt8], link: LinkID, on transport: any RouterTransport) {
        let key = LinkKey(transport: transport.name, link: link)
        let kind: FrameAdmission.Kind = frame.first == FrameType.bundle.rawValue ? .bundle : .other
        switch admission.admit(key, kind) {
        case .admitted:
            let arrived = DispatchTime.now().uptimeNanoseconds
            // Parsed and its signature checked here, beside the router's serial queue: the
            // check is the one per-bundle cost that must stay.
            let bundle = kind == .bundle ? ReceivedBundleFrame(frame, commitments: receiptCommitments) : nil
            work {
                self.admission.done(key, kind)
                self.frameArrivedNs = arrived
                self.handleFrame(frame, key: key, bundle: bundle)
            }
        case .rateLimited, .backlogFull:
            break  // counted by the admission itself; queueing even a counter update would let the flood in
        }
    }

    public func statusChanged(on transport: any RouterTransport) {
        onChange?()
    }

    /// Drops every link of a transport that is being stopped (its plugin may be gone).
    public func forgetLinks(of transportName: String) {
        queue.sync {
            grouped {
                for key in links.keys where key.transport == transportName {
                    handleLinkDown(key, reason: "transport stopped")
                }
            }
        }
    }

    // MARK: Links

    func handleLinkUp(_ info: LinkInfo, transport: any RouterTransport) {
        let key = LinkKey(transport: transport.name, link: info.id)
        // A role is the peer's claim. The relay role gets every attached phone's registration
        // and the bundles routed to the internet, so it is honoured only on a link of the relay
        // plugin whose proven key is the one pinned in that section (`relay_key`).
        guard info.peerRole != .relay || Self.isPinnedRelay(info, on: transport) else {
            counters.rolesRefused += 1
            logger.warning("link \(key) claims the relay role but is not the pinned relay of a relay transport; ignored")
            return
        }
        let peerID = Hash.sha256(info.peerSigningKey)
        // A phone-facing transport carries phones only unless its section says otherwise
        // (`peer_roles`): a hub role there would be given offers and custody.
        guard info.peerRole == .relay || transport.peerRoles.contains(info.peerRole) else {
            counters.rolesRefused += 1
            let allowed = transport.peerRoles.map(\.description).sorted().joined(separator: ", ")
            logger.warning("link \(key) claims the \(info.peerRole) role; transport \(transport.name) accepts [\(allowed)] (peer_roles); ignored")
            logger.debug("link \(key) claiming the \(info.peerRole) role: key \(Self.peerName(info, peerID: peerID)) at \(info.remote ?? "?")")
            return
        }
        let link = Link(key: key, transport: transport, info: info, peerID: peerID, now: now(), custodyTimeoutMs: settings.custodyTimeoutMs)
        links[key] = link
        // A phone's ID and address stay out of the default log (Docs/operations.md, "What the
        // log holds"): a seized hub's journal must not map people to times and places.
        if info.peerRole == .endpoint {
            logger.info("link up \(key): endpoint via \(info.kind)")
            logger.debug("link up \(key): endpoint \(Self.shortID(peerID)) at \(info.remote ?? "")")
        } else {
            logger.info("link up \(key): \(info.peerRole) \(Self.peerName(info, peerID: peerID)) via \(info.kind) \(info.remote ?? "")")
        }
        // We read ack lists (Docs/protocol.md, custodyAcks): said to phones and hubs (a hub's
        // certificate still goes first); the relay plugin speaks its own protocol and is not told.
        switch info.peerRole {
        case .endpoint:
            // Our certificate first: a phone that knows the network trusts us for it
            // (Docs/protocol.md §5, "Which hubs a phone trusts").
            if let cert = settings.ownCertificate { send(TLVRecord(.hubCertificate, value: cert), on: link) }
            send(time.frame().record, on: link)
            send(CustodyAcks.announcement, on: link)
            send(TLVRecord(.relay, value: relayAnnouncement.encoded), on: link)
            pushPending(to: link)
            announceAttachments()
        case .hub:
            link.listed = settings.trust.trustedHubs.contains(info.peerSigningKey)
            // Our certificate goes first, so a peer in network mode can trust us before it offers.
            if let cert = settings.ownCertificate { send(TLVRecord(.hubCertificate, value: cert), on: link) }
            send(time.frame().record, on: link)
            send(CustodyAcks.announcement, on: link)
            if mayExchange(with: link) {
                startSync(with: link)
                sendAttachmentAnnouncement(to: link)
            } else {
                logger.notice("hub \(Self.peerName(info, peerID: peerID)) on \(key) is not trusted (hub_trust: \(settings.trust.mode.rawValue)); it gets nothing until it is")
            }
        case .relay:
            for endpoint in links.values where endpoint.info.peerRole == .endpoint {
                if let r = registrations[endpoint.peerID] { send(TLVRecord(.registration, value: r), on: link) }
            }
            if links.values.filter({ $0.info.peerRole == .relay }).count == 1 { announceRelay() }
            pushForwardable(to: link)
        }
        onChange?()
    }

    /// A phone asks to be reachable from the internet through this hub: carry its
    /// registration (signed by the phone, bound to the relay's key and a timestamp) to
    /// every relay link, now and whenever a relay link comes up while the phone is here.
    /// Only the link's own proven user, naming this hub: a phone cannot make the hub carry
    /// registrations for keys it did not prove on this link (throwaway or captured ones), and
    /// the hub keeps one per attached phone, forgotten when the phone leaves.
    /// Every registration gets an answer (Docs/protocol.md, registrationAnswer): the hub's own
    /// at once when it does not carry it or cannot yet, the relay's when it comes.
    func handleRegistration(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole == .endpoint else { counters.refusedMalformed += 1; return }
        let pinned = settings.relayKey
        func answer(_ status: UInt8, _ reason: String) {
            let a = RegistrationAnswer(status: status, userID: link.peerID, relayKey: pinned ?? [UInt8](repeating: 0, count: 32), reason: reason)
            send(TLVRecord(.registrationAnswer, value: a.encoded), on: link)
        }
        guard let registration = try? Registration(parsing: value), registration.kind == .carried,
              registration.userSigningKey == link.info.peerSigningKey, registration.binding == hubSigningKey else {
            counters.registrationsRefused += 1
            logger.notice("link \(link.key): a relay registration that is not the link's own user's, carried by this hub; not carried")
            answer(RegistrationAnswer.notCarried, "only a carried registration of this link's own user naming this hub as collector is carried")
            return
        }
        guard let pinned else {
            answer(RegistrationAnswer.hubHasNoRelay, "this hub has no relay: register through another hub or with the relay itself")
            return
        }
        guard registration.verifySignature(relaySigningKey: pinned) else {
            counters.registrationsRefused += 1
            logger.notice("link \(link.key): a relay registration that does not verify for this hub's relay \(Self.shortID(pinned)); not carried")
            answer(RegistrationAnswer.otherRelayKey, "it does not verify for this hub's relay, key \(YaokPluginKit.Hex.encode(pinned.prefix(4)))…: signed for another relay?")
            return
        }
        registrations[link.peerID] = value
        var carried = false
        for relay in links.values where relay.info.peerRole == .relay {
            send(TLVRecord(.registration, value: value), on: relay)
            carried = true
        }
        if !carried { answer(RegistrationAnswer.relayNotReachable, "kept: it goes to the relay when this hub's relay link is up") }
    }

    /// The relay's answer to a carried registration, from the relay transport: to the phone
    /// links of that user (a phone that left gets nothing; it registers again where it is).
    func handleRegistrationAnswer(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole == .relay, let answer = try? RegistrationAnswer(parsing: value) else {
            counters.refusedMalformed += 1
            return
        }
        for phone in links.values where phone.info.peerRole == .endpoint && phone.peerID == answer.userID {
            send(TLVRecord(.registrationAnswer, value: answer.encoded), on: phone)
        }
    }

    /// What this hub says to phones about its relay (Docs/protocol.md, relay).
    var relayAnnouncement: RelayAnnouncement {
        guard let key = settings.relayKey else { return RelayAnnouncement(state: .none, relayKey: []) }
        return RelayAnnouncement(state: links.values.contains { $0.info.peerRole == .relay } ? .linked : .configured, relayKey: key)
    }

    func announceRelay() {
        let record = TLVRecord(.relay, value: relayAnnouncement.encoded)
        for phone in links.values where phone.info.peerRole == .endpoint { send(record, on: phone) }
    }

    func handleLinkDown(_ key: LinkKey, reason: String?) {
        admission.forget(key)
        guard let link = links.removeValue(forKey: key) else { return }
        logger.info("link down \(key): \(reason ?? "no reason given")")
        let t = now()
        for id in link.inFlight.keys { failAttemptIfStillInFlight(id, nowMs: t) }
        // A hub's announcement only routes over a direct link to it: forget it with the last link.
        if link.info.peerRole == .hub, !links.values.contains(where: { $0.peerID == link.peerID }) {
            announcements[link.peerID] = nil
        }
        if link.info.peerRole == .endpoint {
            if !links.values.contains(where: { $0.peerID == link.peerID }) { registrations[link.peerID] = nil }
            announceAttachments()
        }
        if link.info.peerRole == .relay, !links.values.contains(where: { $0.info.peerRole == .relay }) { announceRelay() }
        onChange?()
    }

    /// Sends a custody answer (an ack or a refusal) on a link: after the open group commits, if
    /// one is open (always, on the router queue). It says what the store now holds, so it may
    /// leave only once that is durable. Every other frame (offers, requests, bundles) says
    /// nothing about our store and leaves at once with ``send(_:on:arrivedNs:)``: a bundle
    /// forwarded before its own commit stays in the upstream's custody until this ack.
    func sendAfterCommit(_ record: TLVRecord, on link: Link) {
        guard group.isOpen else {
            custodyLatency.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- frameArrivedNs)
            send(record, on: link)
            return
        }
        group.hold((record, link, frameArrivedNs))
    }

    /// Custody acks for one link: one frame per list if the peer reads lists (``CustodyAcks``).
    func sendAcks(_ ids: [[UInt8]], on link: Link) {
        for record in CustodyAcks.records(for: ids, peerReadsLists: link.peerReadsAckLists) {
            guard send(record, on: link), record.type == RoutingFrameType.custodyAcks.rawValue else { continue }
            counters.ackListsSent += 1
            counters.acksInListsSent += (record.value.count - 2) / 16
        }
    }

    /// Sends a frame on a link; false if the transport refused it. The plugin process may
    /// hold it until the work queued now is done (``flushHeldSends()``): the frames of one
    /// pass over the queue cross the process boundary in one message. A refusal after that
    /// comes back through ``sendFailed(_:link:result:reason:on:)``.
    @discardableResult
    func send(_ record: TLVRecord, on link: Link, arrivedNs: UInt64? = nil) -> Bool {
        do {
            let frame = record.encoded
            let held = try link.transport.send(frame, to: link.info.id, held: true)
            link.framesOut += 1
            link.bytesOut += frame.count
            if held {
                if let arrivedNs { heldArrivals.append(arrivedNs) }
                if transportsHoldingSends.isEmpty { queue.async { self.flushHeldSends() } }
                transportsHoldingSends[ObjectIdentifier(link.transport)] = link.transport
            } else if let arrivedNs {
                hopLatency.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- arrivedNs)
            }
            return true
        } catch {
            logger.warning("send on \(link.key) failed: \(error)")
            return false
        }
    }

    /// Writes what the transports held during the pass just done.
    func flushHeldSends() {
        let transports = transportsHoldingSends.values
        transportsHoldingSends.removeAll(keepingCapacity: true)
        for t in transports { t.flushHeldSends() }
        let written = DispatchTime.now().uptimeNanoseconds
        for arrived in heldArrivals { hopLatency.record(nanoseconds: written &- arrived) }
        heldArrivals.removeAll(keepingCapacity: true)
    }
}
