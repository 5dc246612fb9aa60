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
/// (``FrameType/summary``), the neighbour requests the ones it lacks
/// (``FrameType/request``), and only then does the bundle cross — so each
/// bundle crosses each link at most once. Endpoints and the relay get bundles
/// pushed directly.
// @unchecked: routing state is confined to `queue`; the entry points only enqueue (admission has its own lock).
public final class Router: TransportEventHandler, @unchecked Sendable {
    /// Router tuning, from the config's `router` section.
    public struct Settings: Sendable {
        public var hopLimit: Int
        public var linkFramesPerSecond: Int
        public var senderEnvelopesPerMinute: Int
        public var custodyTimeoutMs: Int64
        /// Envelope lifetime rules (maximum TTL, clock skew) checked before anything is stored.
        public var lifetime: EnvelopeLifetime
        /// Which hub peers are trusted, and what the others get.
        public var trust: HubConfig.HubTrustSettings
        /// This hub's own certificate (``HubCertificate`` bytes), sent on every hub link.
        public var ownCertificate: [UInt8]?
        /// `clock.set_system_clock`: step the system clock to a known true time when the kernel
        /// says it is unsynchronised (needs CAP_SYS_TIME).
        public var setSystemClock = false
        /// The relay key an enabled relay transport pins (`relay_key`): what phones are told
        /// and their registrations are checked against; nil when the hub has no relay.
        public var relayKey: [UInt8]?
        /// Switches only tests set; the daemon takes them from `YAOK_TEST_*` variables
        /// (``Hub/testSwitches(_:)``), so no routing code reads the environment.
        public var testing = Testing()
        public init(hopLimit: Int = 10, linkFramesPerSecond: Int = 2000, senderEnvelopesPerMinute: Int = 600, custodyTimeoutMs: Int64 = 30_000,
                    lifetime: EnvelopeLifetime = EnvelopeLifetime(),
                    trust: HubConfig.HubTrustSettings = .init(), ownCertificate: [UInt8]? = nil, setSystemClock: Bool = false) {
            self.setSystemClock = setSystemClock
            self.trust = trust
            self.ownCertificate = ownCertificate
            self.lifetime = lifetime
            self.hopLimit = hopLimit
            self.linkFramesPerSecond = linkFramesPerSecond
            self.senderEnvelopesPerMinute = senderEnvelopesPerMinute
            self.custodyTimeoutMs = custodyTimeoutMs
        }
    }

    /// What tests change in a router's behaviour.
    public struct Testing: Sendable, Equatable {
        /// Behave like a hub from before reconciliation, which ignores record 0x0A as unknown
        /// and starts no exchange (`YAOK_TEST_NO_RECONCILE`).
        public var noReconcile = false
        /// Behave like a hub that speaks reconciliation version 1 only: start version 1, and
        /// answer any other version's first message with `abort(unsupported version, [1])`,
        /// then list offers (`YAOK_TEST_RECONCILE_V1_ONLY`).
        public var reconcileVersion1Only = false
        /// Hold every group open this much longer before its commit, so a test can SIGKILL the
        /// hub inside the window and prove nothing that depends on the group (a custody ack)
        /// left before it (`YAOK_TEST_COMMIT_DELAY_MS`, at most 2 s).
        public var commitDelayUs: UInt32 = 0
        /// How long the store must change nothing before its WAL is emptied
        /// (`YAOK_TEST_WAL_QUIET_MS`, at least 100 ms; 5 minutes otherwise).
        public var walQuietMs: Int64 = 300_000
        public init() {}
    }

    /// Counters shown in status.
    public struct Counters: Sendable, Codable, Equatable {
        /// Group commits, and the router work items (frames, link events, ticks) they covered.
        public var groupCommits = 0
        public var groupCommitItems = 0
        public var accepted = 0
        public var duplicates = 0
        public var refusedMalformed = 0
        /// Relay registrations a phone gave that the hub would not carry: not a carried
        /// registration of the link's own proven user naming this hub as collector.
        public var registrationsRefused = 0
        public var refusedSignature = 0
        public var refusedExpired = 0
        public var refusedHopLimit = 0
        public var refusedRateLimited = 0
        public var refusedStoreFull = 0
        /// Store calls that failed (``Router/storeCall(_:_:)``): each is logged; nothing is dropped.
        public var storeFailures = 0
        /// Sends a plugin refused, by its `yaok_send_result`: link saturated, link gone, frame
        /// too large for the link, other.
        public var sendsRefusedQueueFull = 0
        public var sendsRefusedNoLink = 0
        public var sendsRefusedTooLarge = 0
        public var sendsFailed = 0
        /// Requested bundles not sent because the routing policy's copy budget was spent.
        public var requestsOverCopyBudget = 0
        public var forwarded = 0
        public var deliveredDirect = 0
        public var receiptsSeen = 0
        public var custodyTimeouts = 0
        /// Ticks that found this hub had not run for a while (overloaded, stopped, a slow VM)
        /// and moved the custody deadlines on by that time (``tick()``).
        public var stallsDeferred = 0
        public var framesRateLimited = 0
        public var unknownFrames = 0
        public var expired = 0
        /// Envelopes whose lifetime exceeds the maximum TTL or that are dated in the future.
        public var refusedLifetime = 0
        /// Bundles whose bundle ID is held with a different envelope.
        public var refusedConflict = 0
        /// Refused because the store is full and their sender or origin holds the largest share.
        public var refusedOverShare = 0
        /// Messages whose recipient's delivery receipt we already held: taken, never forwarded.
        public var alreadyDelivered = 0
        /// Receipts that named no bundle we hold from the signer's correspondent: carried, suppress nothing.
        public var receiptsUnverified = 0
        /// Delivery receipts admitted by their proof (Docs/protocol.md, "Receipt proofs"), no
        /// signature checked; and held receipts replaced because their signature failed and a
        /// conflicting copy's verified.
        public var receiptsProven = 0
        public var receiptsReplaced = 0
        /// Frames dropped before the router queue because the link had too many waiting, and
        /// of those, frames other than bundles (offers, requests, answers, keep-alives).
        public var framesQueueFull = 0
        public var framesQueueFullOther = 0
        /// Offered IDs dropped because the link's offer backlog was full.
        public var offersDropped = 0
        /// Offers received from hubs, and `held` answers sent and received (IDs).
        public var offersReceived = 0
        /// Bundle IDs listed in offers (`summary`) sent to hubs.
        public var idsOffered = 0
        public var heldSent = 0
        public var heldReceived = 0
        /// Set reconciliation with hubs (Docs/protocol.md, reconcile): exchanges finished, the
        /// differences they found (IDs, both ways), exchanges that fell back to listing offers
        /// (abort, timeout, or a neighbour from before reconciliation), estimates refused as
        /// busy, and the bytes of `reconcile` records received and sent.
        public var reconciled = 0
        /// Of `reconciled`: exchanges in version 1 (with a neighbour that speaks no version 2).
        public var reconciledVersion1 = 0
        public var reconcileDifferences = 0
        public var reconcileFallbacks = 0
        public var reconcileRefused = 0
        public var reconcileBytesIn = 0
        public var reconcileBytesOut = 0
        /// Offers not sent again because the same ID went to the same link within the custody timeout.
        public var reoffersSuppressed = 0
        /// Attachment announcements refused (not from the hub they describe, bad time, bad signature).
        public var attachmentsRefused = 0
        /// `clock` frames taken as samples, and those ignored (an untrusted hub's; a relay
        /// plugin's without a measurement) or malformed.
        public var clockSamples = 0
        public var clockFramesIgnored = 0
        /// Links whose claimed role was not authorised (the relay role off the pinned relay, or a
        /// role the transport's `peer_roles` does not list), ignored.
        public var rolesRefused = 0
        /// Hub certificates that did not verify (wrong network, wrong hub key, outside their
        /// validity, bad signature, malformed, or sent by a non-hub).
        public var certificatesRefused = 0
        /// Hub certificates that verified and made a hub link trusted.
        public var certificatesAccepted = 0
        /// Frames an untrusted hub sent under `hub_trust: list|network` (bundles, offers,
        /// requests, registrations), dropped.
        public var untrustedHubFramesRefused = 0
        /// Custody acknowledgements from untrusted hubs (`hub_trust: open`): the bundle stayed ours.
        public var untrustedHandOvers = 0
        /// Of those, receipts: handed over here (kept, no longer retried), since a receipt has no receipt.
        public var untrustedReceiptHandOvers = 0
        /// Frames the link's role does not allow (offers and requests from an endpoint), dropped.
        public var framesRefusedForRole = 0
        /// Bundles the router declined to send to an endpoint they are not addressed to.
        public var endpointMisroutesPrevented = 0
        /// The hub's added latency per bundle since start, in µs (``HopLatency``'s buckets): from its
        /// frame reaching the router to its first onward send (which does not wait for the commit;
        /// between hubs it includes the neighbour's offer/request round trip). Bundles with no
        /// link at hand wait in the store and are not counted.
        public var hopLatencySamples = 0
        public var hopLatencyP50Us = 0
        public var hopLatencyP99Us = 0
        public var hopLatencyMaxUs = 0
        /// From a frame reaching the router to its custody answer (ack or refusal) leaving, after
        /// the commit that made the bundle durable, in µs: how long the sender keeps custody.
        public var custodyLatencySamples = 0
        public var custodyLatencyP50Us = 0
        public var custodyLatencyP99Us = 0
        public var custodyLatencyMaxUs = 0
        /// How long the store's group commits took (the write and fsync), in µs. A custody
        /// answer waits for one: on a disk whose flushes take seconds, so do the answers.
        public var commitDurationP50Us = 0
        public var commitDurationP99Us = 0
        public var commitDurationMaxUs = 0
        /// `custodyAcks` lists sent and received, and the acks they carried.
        public var ackListsSent = 0
        public var acksInListsSent = 0
        public var ackListsReceived = 0
        public var acksInListsReceived = 0
    }

    final class Link {
        let key: LinkKey
        let transport: any RouterTransport
        let info: LinkInfo
        let peerID: [UInt8]
        /// How status and the log name the peer (``Router/peerName(_:peerID:)``).
        var peerName: String { Router.peerName(info, peerID: peerID) }
        let upAtMs: Int64
        /// The fairness principal for what arrives on this link (see ``NewBundle/origin``).
        let origin: String
        /// Bundles sent on this link awaiting custody, with their deadline.
        var inFlight: [[UInt8]: Int64] = [:]
        /// Resends after a custody timeout on this (still up) link, per bundle.
        var resends: [[UInt8]: Int] = [:]
        /// When each bundle in flight was first sent (its round trip, if sent once).
        var firstSentMs: [[UInt8]: Int64] = [:]
        /// The custody timeout and window, learnt from this link's acknowledgements.
        var pacing: CustodyPacing
        /// IDs we asked this neighbour for, with a deadline; not asked elsewhere meanwhile.
        var requested: [[UInt8]: Int64] = [:]
        /// IDs this neighbour asked us for that did not fit the window yet, oldest first.
        var wanted: [[UInt8]] = []
        /// IDs this neighbour offered that we have not looked up yet, oldest first.
        var offered: [[UInt8]] = []
        var drainingOffers = false
        var framesIn = 0
        /// Bytes of the frames counted in `framesIn`.
        var bytesIn = 0
        /// Frames the transport accepted for this link, and their bytes.
        var framesOut = 0
        var bytesOut = 0
        /// Bundles this link's transport refused as too large: never offered to it again.
        var tooLarge = Set<[UInt8]>()
        /// Hub links: the peer's key is in `trusted_hubs`.
        var listed = false
        /// Hub links: the peer presented a valid certificate, valid until this time.
        var certifiedUntilMs: Int64?
        /// Hub links: trusted by list or certificate. Only a trusted hub's custody ends ours.
        var trusted: Bool { listed || certifiedUntilMs != nil }
        /// A hub link not (yet) trusted: its custody and its claims to hold bundles count for nothing.
        var isUntrustedHub: Bool { info.peerRole == .hub && !trusted }
        /// Bundles an untrusted hub acknowledged or claimed: not offered to it again, but
        /// never recorded in the store (its word counts for nothing elsewhere).
        var untrustedHolds = Set<[UInt8]>()
        /// When each ID was last offered on this link (bounded by ``Router/maxOfferedMemory``).
        var offeredAtMs: [[UInt8]: Int64] = [:]
        /// IDs to offer, sent as lists once the router's queue has drained (``Router/flushOffers()``).
        var offersToSend: [[UInt8]] = []
        /// Hub links: the reconciliation exchange under way (offers to the link wait for it),
        /// and when it gives up and falls back to listing offers.
        var sync: SyncPhase?
        var syncDeadlineMs: Int64 = 0
        /// Hub links: what the neighbour held when an exchange finished; never offered to it.
        var peerHoldings: PeerHoldings?
        /// Hub links: our exchanges this neighbour answered "busy".
        var syncBusyRetries = 0
        /// Hub links: the neighbour said it speaks version 1 only; exchanges we start use it.
        var peerReconcilesVersion1Only = false
        /// The peer announced that it reads `custodyAcks`: a commit's acks to it leave as one list.
        var peerReadsAckLists = false
        /// The peer sent a `clock` frame: it reads hop header version 2, so bundles to it carry
        /// their age (Docs/protocol.md §3).
        var peerReadsAge = false

        /// Takes `id` out of flight: whether it was in flight, and when it was first sent if
        /// it was sent only once (otherwise its round trip is ambiguous: Karn's rule).
        @discardableResult
        func endFlight(_ id: [UInt8]) -> (wasInFlight: Bool, sentOnceAtMs: Int64?) {
            let was = inFlight.removeValue(forKey: id) != nil
            let first = firstSentMs.removeValue(forKey: id)
            let resent = resends.removeValue(forKey: id) != nil
            return (was, resent ? nil : first)
        }

        init(key: LinkKey, transport: any RouterTransport, info: LinkInfo, peerID: [UInt8], now: Int64, custodyTimeoutMs: Int64) {
            self.key = key
            self.pacing = CustodyPacing(maxTimeoutMs: custodyTimeoutMs)
            self.transport = transport
            self.info = info
            self.peerID = peerID
            self.upAtMs = now
            self.origin = Router.origin(transport: transport.name, remote: info.remote, peerID: peerID)
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
    /// Store operations failing now, each logged as an error once until it works again.
    private var failingStoreOperations = Set<String>()
    /// What each neighbouring hub last announced about itself: hub ID → (attached users, timestamp).
    private var announcements: [[UInt8]: (users: Set<[UInt8]>, atMs: Int64)] = [:]
    /// Per-link admission before the router queue (rate and backlog), on plugin threads.
    private let admission: FrameAdmission
    /// The receipt commitments of messages stored lately, read on the transports' threads.
    private let receiptCommitments = ReceiptCommitments()
    private var senderWindow: (startMs: Int64, counts: [[UInt8]: Int]) = (0, [:])
    /// Bundles the relay refused for now (rate limited, full), until when it gets them again.
    private var relayRefusedUntil: [[UInt8]: Int64] = [:]
    /// The latest relay registration each attached endpoint gave us (the relay checks it).
    private var registrations: [[UInt8]: [UInt8]] = [:]
    private var timer: DispatchSourceTimer?
    /// Group commit: the open transaction, the frames waiting for it, the items it covers.
    private let group: GroupCommit<Router, WaitingFrame>
    /// A custody answer held for the open group's commit, and when the frame it answers arrived.
    private typealias WaitingFrame = (record: TLVRecord, link: Link, arrivedNs: UInt64)
    /// When the frame being handled reached the router (monotonic ns), and when each bundle it
    /// stored arrived, until the bundle first leaves: the hub's added latency (``HopLatency``).
    private var frameArrivedNs: UInt64 = 0
    private var arrivedNs: [[UInt8]: UInt64] = [:]
    private var hopLatency = HopLatency()
    /// A ``flushOffers()`` is queued.
    private var offerFlushQueued = false
    /// Transports holding frames for ``flushHeldSends()`` (queued when the first was held),
    /// and when each held bundle arrived (its hop latency ends when it is written).
    private var transportsHoldingSends: [ObjectIdentifier: any RouterTransport] = [:]
    private var heldArrivals: [UInt64] = []
    /// From a bundle's arrival to its custody answer (ack or refusal), which waits for the commit.
    private var custodyLatency = HopLatency()
    /// How long each group commit that changed the store took.
    private var commitDuration = HopLatency()
    /// Where the next tick's page of due bundles starts (nil: from the oldest).
    private var dueCursor: StoredBundle?
    static let duePage = 500
    /// Bundles an untrusted hub acknowledged (open trust), by the tick they were acknowledged
    /// in: `current` since the last tick, `previous` the tick before. Custody stays ours, and
    /// the retry the store schedules for each (``failAttemptIfStillInFlight(_:nowMs:)``) waits
    /// a full tick, by when most have their delivery receipt and need no store write at all:
    /// it was a page write per bundle at every hop of an open-trust line (issue 16). Until
    /// then the due walk passes them over, as it does bundles on the wire. Losing these in a
    /// crash loses nothing: the bundles are queued and due, and are offered again.
    private var untrustedAcks: (current: Set<[UInt8]>, previous: Set<[UInt8]>) = ([], [])
    static let maxUntrustedAcksDeferred = 16_384
    /// Offer times remembered per link.
    static let maxOfferedMemory = 100_000
    /// A group closes after this many work items even if more are queued.
    static let maxGroupItems = 1024
    /// Commits at least this far apart while work keeps coming. Only custody answers wait for
    /// a commit, so this is what they wait at most, never what a forwarded bundle waits; 5 ms
    /// rather than 2 cut the hub's CPU per message by about a third at 250 msg/s offered
    /// (Docs/performance.md, session 14).
    static let commitSpacingUs: UInt64 = 5_000
    /// A small group (``GroupCommit``'s `unwaitedMaxItems`, a light load's frame or two) that
    /// holds no custody answer when its commit comes up commits at most this long after it
    /// opened, or with the first answer held in it. What such a group changes (a peer took
    /// custody, a holder learnt, a retry scheduled, a sweep) is safe to lose in a crash: after
    /// a restart those bundles are queued again, resent, and the peer answers that it holds
    /// them. So at light load those changes share the next answer's fsync instead of costing
    /// one of their own (Docs/performance.md, session 18).
    static let unwaitedCommitBoundUs: UInt64 = 1_000_000
    private var lastSweepMs: Int64 = 0
    /// The timestamp of our last attachment announcement (they must increase).
    private var lastAnnouncementMs: Int64 = 0
    /// When we last tried to set the system clock (`clock.set_system_clock`).
    private var lastSystemClockSetMs: Int64?
    private var lastVacuumCheckMs: Int64 = 0
    /// When a group last committed a change, and when the store's WAL was last emptied.
    private var lastChangeMs: Int64 = 0
    private var walEmptiedMs: Int64 = 0
    private var maintenanceQueued = false
    /// The WAL keeps older images of the pages it holds (a delivered bundle's envelope among
    /// them) until it is checkpointed and truncated: whoever takes the hub with its key could
    /// read them. So it is emptied once the store has changed nothing for this long (a phone
    /// walked past, the burst is over), and at least every ``walMaxAgeMs`` while it keeps
    /// changing (Docs/store.md). Tests shorten it (``Settings/Testing/walQuietMs``).
    var walQuietMs: Int64 { settings.testing.walQuietMs }
    static let walMaxAgeMs: Int64 = 3_600_000
    /// The hub clock (every deadline) and the estimate of true time (Docs/protocol.md §2.2).
    public let time: HubTime
    private var lastClockPersistMs: Int64 = 0
    /// The hub clock joins a commit that happens anyway at most this often…
    static let clockPersistIntervalMs: Int64 = 60_000
    /// …and an idle hub commits it alone this often: within the 10 min that
    /// ``HubClockStart/resume(persisted:wallNowMs:)`` counts, without writing the SD card every minute.
    static let idleClockPersistIntervalMs: Int64 = 300_000

    /// Called (on the router queue) whenever something status-worthy changes.
    public var onChange: (@Sendable () -> Void)?

    /// The hub clock, ms: what every deadline in the store is kept on.
    private func now() -> Int64 { time.hubNowMs() }

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

    /// When the last tick ran, on the monotonic clock (a stopped or starved hub shows as a gap).
    private var lastTickMonotonicMs: Int64?
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
    private func work(_ body: @escaping @Sendable () -> Void) {
        queue.async { self.grouped(body) }
    }

    /// Every state change the router makes joins one transaction, opened by the first work item
    /// after a commit. The commit is queued behind whatever work is already waiting, so it covers
    /// all of it: one fsync for a burst of frames from every link, none when idle. Custody
    /// answers (acks, refusals) are held until the commit returns: custody is acknowledged only
    /// once durably taken. Other frames leave at once (``sendAfterCommit(_:on:)``).
    private func grouped(_ body: () -> Void) {
        group.run(self, body)
    }

    /// Commits the open group (if any), then sends the frames that waited for it.
    private func commitGroup() {
        group.commit(self)
    }

    /// The router's group commit: groups close after ``maxGroupItems`` work items; frames that
    /// waited go only on links still up.
    private static func groupCommit(on queue: DispatchQueue, testDelayUs: UInt32) -> GroupCommit<Router, WaitingFrame> {
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
                    if record.type == FrameType.custodyAck.rawValue, link.peerReadsAckLists {
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

    // MARK: TransportEventHandler (called from plugin threads; hop onto the queue)

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
    ///   waits its retry, as before.
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
            // check is the one per-bundle cost that must stay (issue 16).
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

    private func handleLinkUp(_ info: LinkInfo, transport: any RouterTransport) {
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
    private func handleRegistration(_ value: [UInt8], from link: Link) {
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
    private func handleRegistrationAnswer(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole == .relay, let answer = try? RegistrationAnswer(parsing: value) else {
            counters.refusedMalformed += 1
            return
        }
        for phone in links.values where phone.info.peerRole == .endpoint && phone.peerID == answer.userID {
            send(TLVRecord(.registrationAnswer, value: answer.encoded), on: phone)
        }
    }

    /// What this hub says to phones about its relay (Docs/protocol.md, relay).
    private var relayAnnouncement: RelayAnnouncement {
        guard let key = settings.relayKey else { return RelayAnnouncement(state: .none, relayKey: []) }
        return RelayAnnouncement(state: links.values.contains { $0.info.peerRole == .relay } ? .linked : .configured, relayKey: key)
    }

    private func announceRelay() {
        let record = TLVRecord(.relay, value: relayAnnouncement.encoded)
        for phone in links.values where phone.info.peerRole == .endpoint { send(record, on: phone) }
    }

    private func handleLinkDown(_ key: LinkKey, reason: String?) {
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
    private func sendAfterCommit(_ record: TLVRecord, on link: Link) {
        guard group.isOpen else {
            custodyLatency.record(nanoseconds: DispatchTime.now().uptimeNanoseconds &- frameArrivedNs)
            send(record, on: link)
            return
        }
        group.hold((record, link, frameArrivedNs))
    }

    /// Custody acks for one link: one frame per list if the peer reads lists (``CustodyAcks``).
    private func sendAcks(_ ids: [[UInt8]], on link: Link) {
        for record in CustodyAcks.records(for: ids, peerReadsLists: link.peerReadsAckLists) {
            guard send(record, on: link), record.type == FrameType.custodyAcks.rawValue else { continue }
            counters.ackListsSent += 1
            counters.acksInListsSent += (record.value.count - 2) / 16
        }
    }

    /// Sends a frame on a link; false if the transport refused it. The plugin process may
    /// hold it until the work queued now is done (``flushHeldSends()``): the frames of one
    /// pass over the queue cross the process boundary in one message. A refusal after that
    /// comes back through ``sendFailed(_:link:result:reason:on:)``.
    @discardableResult
    private func send(_ record: TLVRecord, on link: Link, arrivedNs: UInt64? = nil) -> Bool {
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
    private func flushHeldSends() {
        let transports = transportsHoldingSends.values
        transportsHoldingSends.removeAll(keepingCapacity: true)
        for t in transports { t.flushHeldSends() }
        let written = DispatchTime.now().uptimeNanoseconds
        for arrived in heldArrivals { hopLatency.record(nanoseconds: written &- arrived) }
        heldArrivals.removeAll(keepingCapacity: true)
    }

    // MARK: Frames

    private func handleFrame(_ frame: [UInt8], key: LinkKey, bundle: ReceivedBundleFrame?) {
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
        if record.type == FrameType.hubCertificate.rawValue {
            handleCertificate(record.value, from: link)
            return
        }
        if record.type == FrameType.clock.rawValue {
            handleClock(record.value, from: link)
            return
        }
        if !mayExchange(with: link) {
            // An untrusted hub under list/network trust: keep-alives only, until it proves itself.
            switch FrameType(rawValue: record.type) {
            case .ping: send(TLVRecord(.pong, value: record.value), on: link)
            case .pong, .linkClose, .custodyAck, .custodyRefused: break
            case .custodyAcks: if record.value == CustodyAcks.announcement.value { link.peerReadsAckLists = true }
            case .attachment: counters.attachmentsRefused += 1
            default: counters.untrustedHubFramesRefused += 1
            }
            return
        }
        switch FrameType(rawValue: record.type) {
        case .bundle: acceptBundle(record.value, from: link, checked: bundle?.checked)
        case .custodyAck: handleCustodyAck(record.value, from: link)
        case .custodyAcks: handleCustodyAcks(record.value, from: link)
        case .custodyRefused: handleCustodyRefusal(record.value, from: link)
        case .summary: handleOffer(record.value, from: link)
        case .held: handleHeld(record.value, from: link)
        case .reconcile: handleReconcile(record.value, from: link)
        case .request: handleRequest(record.value, from: link)
        case .attachment: handleAttachment(record.value, from: link)
        case .registration: handleRegistration(record.value, from: link)
        case .registrationAnswer: handleRegistrationAnswer(record.value, from: link)
        case .ping: send(TLVRecord(.pong, value: record.value), on: link)
        case .pong, .linkClose, .hubCertificate, .clock, .relay: break
        case .linkIdentity, .linkOutcome, .linkHello, .linkCookie, .linkReply, .sealed, .linkVersion, nil:
            // Link-session records never reach the host: a transport handing one up is broken.
            counters.unknownFrames += 1
            logger.debug("unknown frame type 0x\(String(record.type, radix: 16)) on \(key)")
        }
    }

    private func refuse(_ id: [UInt8]?, _ reason: CustodyRefusal.Reason, to link: Link) {
        guard let id, id.count == 16 else { return }
        sendAfterCommit(TLVRecord(.custodyRefused, value: CustodyRefusal(bundleID: id, reason: reason).encoded), on: link)
    }

    /// `checked`: the bundle as parsed and verified on the receiving thread
    /// (``ReceivedBundleFrame``); nil if it did not parse there, when it is parsed again here
    /// for the reason it is refused.
    private func acceptBundle(_ bytes: [UInt8], from link: Link, checked: ReceivedBundleFrame.Checked?) {
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
            // a holder would only cost a random page write per bundle (issue 16).
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
    /// receipt for a message we do not hold suppresses nothing now; it is stored like any
    /// bundle, and if the message arrives later `accept` finds it (`.alreadyDelivered`).
    /// Anybody else's receipt travels to its addressee and changes nothing here.
    ///
    /// `proven`: the receipt revealed the proof its message committed to
    /// (``ReceiptCommitments``), which only the recipient can compute: it counts without
    /// its signature having been checked.
    private func handleReceipt(_ receipt: Envelope, proven: Bool) {
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
    private func replaceForgedReceipt(with newBundle: NewBundle, envelope: Envelope) -> Bool {
        guard let held = storeCall("bundle", { try store.bundle(newBundle.bundleID) }),
              let bytes = held.bytes.held,
              let heldEnvelope = try? YaokWire.Bundle(parsing: bytes).envelope,
              !heldEnvelope.verifySignature(), envelope.verifySignature() else { return false }
        return storeCall("replaceEnvelope", { try store.replaceEnvelope(with: newBundle) }) ?? false
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
        custodyAcknowledged([ack.bundleID], by: link)
    }

    /// A list of acks (or, empty, the peer's announcement that it reads them). A list that
    /// does not parse is refused whole; each ID of one that does is checked on its own.
    private func handleCustodyAcks(_ value: [UInt8], from link: Link) {
        guard let list = try? SummaryVector(parsing: value) else { counters.refusedMalformed += 1; return }
        link.peerReadsAckLists = true
        guard !list.bundleIDs.isEmpty else { return }
        counters.ackListsReceived += 1
        counters.acksInListsReceived += list.bundleIDs.count
        custodyAcknowledged(list.bundleIDs, by: link)
    }

    /// The peer took custody of `ids`: each counts only if it is in flight on this link.
    private func custodyAcknowledged(_ ids: [[UInt8]], by link: Link) {
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
                // A receipt has no receipt to end it: it is handed over (kept for its addressee and
                // new neighbours) rather than retried until it expires (protocol.md, custodyAck).
                if storeCall("receiptTakenByUntrustedHub", { try store.receiptTakenByUntrustedHub(id) }) == true {
                    counters.untrustedReceiptHandOvers += 1
                    continue
                }
                if untrustedAcks.current.count + untrustedAcks.previous.count < Self.maxUntrustedAcksDeferred {
                    untrustedAcks.current.insert(id)
                } else {
                    failAttemptIfStillInFlight(id, nowMs: t)
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

    private func handleCustodyRefusal(_ value: [UInt8], from link: Link) {
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

    /// A send of `id` ended without custody: unless another link still carries it, a queued
    /// bundle counts a failed attempt and waits for its retry time (the store leaves a
    /// handed-over one, or one gone meanwhile, as it is).
    private func failAttemptIfStillInFlight(_ id: [UInt8], nowMs: Int64, notBeforeMs: Int64? = nil) {
        if isOnTheWire(id) { return }
        storeCall("markAttemptFailed") {
            do { try store.markAttemptFailed(id, nowMs: nowMs, notBeforeMs: notBeforeMs) } catch StoreError.bundleNotFound { /* evicted or expired meanwhile */ }
        }
    }

    /// Whether some link is sending `id`, custody not yet answered.
    private func isOnTheWire(_ id: [UInt8]) -> Bool {
        links.values.contains { $0.inFlight[id] != nil }
    }

    /// Bundles being sent on some link, custody not yet answered. The store does not record
    /// this (see ``BundleStore``): listings of queued bundles pass these over.
    private func onTheWire() -> Set<[UInt8]> {
        var ids = Set<[UInt8]>()
        for link in links.values { ids.formUnion(link.inFlight.keys) }
        return ids
    }

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
    private func handleOffer(_ value: [UInt8], from link: Link) {
        // A phone pushes its bundles; an offer from it would make the hub record it as holding
        // other people's bundles (fewer spray-and-wait copies, no offers to it).
        guard link.info.peerRole != .endpoint else { counters.framesRefusedForRole += 1; return }
        guard let offer = try? SummaryVector(parsing: value) else { counters.refusedMalformed += 1; return }
        counters.offersReceived += 1
        let room = max(0, Self.maxOfferedPerLink - link.offered.count)
        if offer.bundleIDs.count > room { counters.offersDropped += offer.bundleIDs.count - room }
        link.offered.append(contentsOf: offer.bundleIDs.prefix(room))
        drainOffers(link)
    }

    /// Looks up one slice of a link's offered IDs, requests what we lack, and yields the
    /// queue before the next slice.
    private func drainOffers(_ link: Link) {
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
        if !wanted.isEmpty, let vector = try? SummaryVector(bundleIDs: wanted) {
            send(TLVRecord(.request, value: vector.encoded), on: link)
        }
        // Say which ones we hold, so the neighbour stops offering them.
        let unknownSet = Set(unknown)
        let held = slice.filter { !unknownSet.contains($0) }
        if !held.isEmpty, mayExchange(with: link), let vector = try? SummaryVector(bundleIDs: held) {
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

    private func handleRequest(_ value: [UInt8], from link: Link) {
        guard let request = try? SummaryVector(parsing: value) else { counters.refusedMalformed += 1; return }
        // Only hubs and the relay take bundles by request; a phone gets its own mail pushed.
        guard link.info.peerRole != .endpoint else { counters.framesRefusedForRole += 1; return }
        let room = max(0, Self.maxWantedPerLink - link.wanted.count)
        link.wanted.append(contentsOf: request.bundleIDs.prefix(room))
        sendWanted(on: link)
    }

    /// Sends requested bundles while the link's window has room; the rest wait for acks.
    private func sendWanted(on link: Link) {
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

    private func offer(_ ids: [[UInt8]], to link: Link, duringSync: Bool = false) {
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
    private func flushOffers() {
        offerFlushQueued = false
        for link in links.values where !link.offersToSend.isEmpty {
            let ids = link.offersToSend
            link.offersToSend.removeAll()
            for vector in SummaryVector.chunked(ids) {
                counters.idsOffered += vector.bundleIDs.count
                send(TLVRecord(.summary, value: vector.encoded), on: link)
            }
        }
    }

    /// On contact: offer everything the policy lets this neighbour have.
    private func offerAll(to link: Link) {
        guard let bundles = storeCall("forwardable", { try store.forwardable(limit: 100_000, withBytes: false) }) else { return }
        var ids: [[UInt8]] = []
        let holdings = link.peerHoldings
        let wire = onTheWire()
        for b in bundles where !wire.contains(b.bundleID) && !(holdings?.peerHolds(b.bundleID) ?? false) && chosenHops(for: b).contains(link.key) {
            ids.append(b.bundleID)
        }
        offer(ids, to: link)
    }

    // MARK: Routing

    /// Links to an attached endpoint, newest first: a phone that reconnected is reachable
    /// on its new link while the old one may not have timed out yet.
    private func endpointLinks(for userID: [UInt8]) -> [Link] {
        links.values.filter { $0.info.peerRole == .endpoint && $0.peerID == userID }
            .sorted { ($0.upAtMs, -$0.info.cost) > ($1.upAtMs, -$1.info.cost) }
    }

    /// - Parameter justAccepted: `b` was stored by this work item, so the one holder the store
    ///   knows is its previous hop (``BundleStore/accept(_:nowMs:onTheWire:)`` records it with
    ///   the row): that is checked here instead of asking the store once per link.
    private func chosenHops(for b: StoredBundle, justAccepted: Bool = false) -> [LinkKey] {
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
    private func route(_ b: StoredBundle, justAccepted: Bool = false) {
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
    private func transmit(_ listed: StoredBundle, on link: Link, resend: Bool = false) -> Bool {
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
            if let age, let parsed = try? YaokWire.Bundle(parsing: bytes) { outgoing = parsed.withAge(age).encoded }
        } else {
            guard let parsed = try? YaokWire.Bundle(parsing: bytes) else { return true }
            do {
                outgoing = try parsed.forwarded(by: hubID, ageMs: age).encoded
            } catch {
                counters.refusedHopLimit += 1
                storeCall("recordPeerHas", { try store.recordPeerHas(b.bundleID, peer: link.peerID) })
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

    /// An endpoint attached: hand it everything queued for it.
    private func pushPending(to link: Link) {
        let room = link.pacing.window - link.inFlight.count
        guard room > 0, let pending = storeCall("pending", { try store.pending(destination: link.peerID, limit: link.pacing.window + room, withBytes: false) }) else { return }
        for b in pending where b.state != .delivered && b.state != .expired && link.inFlight[b.bundleID] == nil {
            if !transmit(b, on: link) { break }
        }
    }

    /// The relay came up: hand it what the policy routes there.
    /// Bundles for the relay: not those it refused for now until their time (its hint, or the
    /// backoff), nor those it refused for good (recorded as held by it).
    private func pushForwardable(to link: Link) {
        guard let bundles = storeCall("forwardable", { try store.forwardable(limit: 100_000, excludingPeer: link.peerID, withBytes: false) }) else { return }
        let wire = onTheWire()
        let t = now()
        for b in bundles where (relayRefusedUntil[b.bundleID] ?? 0) <= t && !wire.contains(b.bundleID) && endpointLinks(for: b.destination).isEmpty && chosenHops(for: b).contains(link.key) {
            if !transmit(b, on: link) { break }
        }
    }

    // MARK: Attachment announcements

    private func attachedEndpoints() -> [[UInt8]] {
        Array(Set(links.values.filter { $0.info.peerRole == .endpoint }.map(\.peerID))).sorted { $0.lexicographicallyPrecedes($1) }
    }

    private func makeAnnouncement() -> AttachmentAnnouncement? {
        let users = Array(attachedEndpoints().prefix(AttachmentAnnouncement.maxCount))
        // Dated by our best estimate of true time (peers judge it by theirs), and always later
        // than our last one, which a peer requires even when our estimate moved back.
        lastAnnouncementMs = max(lastAnnouncementMs + 1, time.bestTrueTimeMs().timeMs)
        return try? AttachmentAnnouncement.make(hubSigningKey: hubSigningKey, timestampMs: lastAnnouncementMs, userIDs: users, sign: sign)
    }

    private func sendAttachmentAnnouncement(to link: Link) {
        guard let a = makeAnnouncement() else { return }
        send(TLVRecord(.attachment, value: a.encoded), on: link)
    }

    private func announceAttachments() {
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
    private func handleAttachment(_ value: [UInt8], from link: Link) {
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
    private var lastSyncAnsweredMs: Int64?

    /// A hub link may now exchange bundles: reconcile first when both sides can (the hub with
    /// the lower ID initiates, the other answers), else offer everything.
    private func startSync(with link: Link) {
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

    private func initiateSync(with link: Link) {
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

    private func handleReconcile(_ value: [UInt8], from link: Link) {
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
            let reconciled: [ReconcileID]
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
    private var exchangesUnderWay: Int {
        links.values.filter { link in
            switch link.sync {
            case .initiating?, .responding?: true
            case .awaitingEstimate?, nil: false
            }
        }.count
    }

    /// The exchange ended without a result: list offers, as with a hub from before it.
    private func endSync(_ link: Link, _ why: String) {
        link.sync = nil
        counters.reconcileFallbacks += 1
        logger.info("reconciliation with hub \(link.peerName) on \(link.key) fell back to listing offers: \(why)")
        offerAll(to: link)
    }

    private func sendReconcile(_ messages: [ReconcileMessage], on link: Link) {
        for message in messages {
            let bytes = message.encoded
            counters.reconcileBytesOut += bytes.count
            send(TLVRecord(.reconcile, value: bytes), on: link)
        }
    }

    /// The store's flat ID list (16 bytes each) as reconciliation IDs.
    static func reconcileIDs(_ flat: [UInt8]) -> [ReconcileID] {
        var out: [ReconcileID] = []
        out.reserveCapacity(flat.count / BundleID.length)
        var i = 0
        while i + BundleID.length <= flat.count {
            if let id = ReconcileID(flat[i..<(i + BundleID.length)]) { out.append(id) }
            i += BundleID.length
        }
        return out
    }

    // MARK: Hub trust

    /// Whether bundles, offers and announcements may cross this link: always for endpoints
    /// and the relay; for a hub, if it is trusted or `hub_trust` is `open`.
    private func mayExchange(with link: Link) -> Bool {
        link.info.peerRole != .hub || link.trusted || settings.trust.mode == .open
    }

    /// Largest number of bundle IDs remembered per untrusted link.
    static let maxUntrustedHolds = 20_000

    /// A neighbour holds these offered bundles: offer them to it no more. A trusted hub's word
    /// is recorded in the store; an untrusted hub's is remembered for its link only.
    private func handleHeld(_ value: [UInt8], from link: Link) {
        guard link.info.peerRole != .endpoint else { counters.framesRefusedForRole += 1; return }
        guard let held = try? SummaryVector(parsing: value) else { counters.refusedMalformed += 1; return }
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

    private func noteUntrustedHolds(_ ids: [[UInt8]], on link: Link) {
        for id in ids where link.untrustedHolds.count < Self.maxUntrustedHolds { link.untrustedHolds.insert(id) }
    }

    /// A hub's certificate: it names the hub key this link proved, is signed by the
    /// configured network key and is valid now (give or take the clock skew). The frame
    /// arrives over the link itself, so naming the proven key binds it to this peer.
    private func handleCertificate(_ value: [UInt8], from link: Link) {
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
    private func becameTrusted(_ link: Link) {
        link.untrustedHolds.removeAll()
        guard settings.trust.mode != .open else { return }
        startSync(with: link)
        sendAttachmentAnnouncement(to: link)
    }

    // MARK: Time (Docs/protocol.md, clock 0x0C)

    /// A peer's `clock` frame: it reads version-2 hop headers; its time is a sample if the
    /// link is the pinned relay (with a measurement), a trusted hub, or a phone.
    private func handleClock(_ value: [UInt8], from link: Link) {
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
    private func tickClock(hubNowMs t: Int64) {
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

    private func persistClock(hubNowMs t: Int64) {
        lastClockPersistMs = t
        storeCall("persistHubClock", { try store.persistHubClock(hubMs: t, wallMs: Clock.nowMilliseconds()) })
    }

    /// Our estimate now comes from another source: say so, and tell the peers that read it.
    private func clockSourceChanged() {
        logger.notice("clock: \(time.estimate.summary)")
        let frame = time.frame().record
        for link in links.values where link.info.peerRole != .relay && link.peerReadsAge { send(frame, on: link) }
        onChange?()
    }

    // MARK: Timers

    /// How long a bundle is resent on a live link before it counts as a failed attempt (and
    /// waits out the store's backoff, a minute at first): this many custody timeouts' worth.
    /// A lost frame on a working link is not an absent next hop; resends come after the
    /// link's measured timeout, doubling (``CustodyPacing``), so a count of resends would give
    /// up after seconds on a link that is merely slow to answer.
    static let custodyTimeoutsBeforeBackoff: Int64 = 3

    private func tick() {
        let t = now()
        tickClock(hubNowMs: t)
        // A tick much later than its 1 s means this hub itself did not run meanwhile: the
        // acknowledgements that came in are still queued behind this tick, so a deadline that
        // passed while we were not running says nothing about the peer. Move every deadline on
        // by the time we lost; otherwise each stall resends what the peer already took.
        let mono = Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000)
        if let last = lastTickMonotonicMs, mono - last > Self.stallThresholdMs {
            let lost = mono - last - 1_000
            for link in links.values { for (id, deadline) in link.inFlight { link.inFlight[id] = deadline + lost } }
            counters.stallsDeferred += 1
        }
        lastTickMonotonicMs = mono
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
        // Untrusted hubs' acknowledgements a tick old whose receipt has not come: their retries.
        for id in untrustedAcks.previous { failAttemptIfStillInFlight(id, nowMs: t) }
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

    private func walEmptyingDue(_ t: Int64) -> Bool {
        (t - lastChangeMs >= walQuietMs || t - walEmptiedMs >= Self.walMaxAgeMs) && store.database.walFileBytes > 0
    }

    /// The store's maintenance, on the router queue outside any group: the hourly vacuum check
    /// and emptying the WAL (``walQuietMs``).
    private func maintainStore(vacuum: Bool) {
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

    // MARK: Status

    /// A status snapshot (runs on the router queue).
    public func statusSnapshot() -> RouterStatus {
        queue.sync {
            // Status reports what is durable: the open group commits first.
            commitGroup()
            let counts = (storeCall("counts", { try store.counts() })) ?? [:]
            // Being sent is known here, not stored: of the queued bundles, those on the wire.
            let sending = (storeCall("queuedCount", { try store.queuedCount(of: Array(onTheWire())) })) ?? 0
            let last = (storeCall("lastDelivery", { try store.lastDelivery() })) ?? []
            // Times shown to people are on our best estimate of true time, not the hub clock.
            let clock = time.estimate
            let shown = { (hubMs: Int64) in hubMs &+ clock.trueMinusHubMs }
            return RouterStatus(
                policy: policy.name,
                queue: RouterStatus.Queue(
                    queued: (counts[.queued] ?? 0) - sending, inFlight: (counts[.inFlight] ?? 0) + sending, handedOver: counts[.handedOver] ?? 0,
                    delivered: counts[.delivered] ?? 0, expired: counts[.expired] ?? 0,
                    bytes: (storeCall("totalBytes", { try store.totalBytes() })) ?? 0),
                store: RouterStatus.StoreCounters(duplicatesDropped: store.statistics.duplicatesDropped,
                                                  evicted: store.statistics.evicted, expired: store.statistics.expired,
                                                  evictedHeaviestSender: store.statistics.evictedHeaviestSender,
                                                  evictedHeaviestOrigin: store.statistics.evictedHeaviestOrigin,
                                                  conflicts: store.statistics.conflicts),
                counters: countersWithAdmission(),
                links: links.values.sorted { $0.key.description < $1.key.description }.map {
                    RouterStatus.LinkView(link: $0.key.description, role: $0.info.peerRole.description, peer: $0.peerName,
                                          kind: $0.info.kind, remote: $0.info.remote, inFlight: $0.inFlight.count, trust: Self.trustLabel($0),
                                          window: $0.pacing.window, roundTripMs: $0.pacing.smoothedRTTMs.map { Int($0.rounded()) },
                                          custodyTimeoutMs: $0.pacing.timeoutMs(),
                                          mtu: $0.info.mtu, upAtMs: shown($0.upAtMs), framesIn: $0.framesIn, bytesIn: $0.bytesIn,
                                          framesOut: $0.framesOut, bytesOut: $0.bytesOut)
                },
                lastDelivery: last.prefix(50).map { RouterStatus.Delivery(destination: Self.shortID($0.destination), atMs: shown($0.atMs)) },
                clock: clock)
        }
    }

    /// The one place the router's store calls fail: the operation is counted
    /// (`storeFailures`, in `yaok-hub status`) and logged — as an error the first time it fails
    /// after working, at debug while it keeps failing — and the caller gets nil and carries on
    /// as if the answer were "nothing": a bundle stays where it is and is tried again on a
    /// later tick, so a full or failing disk costs progress, never a message.
    @discardableResult
    private func storeCall<T>(_ operation: StaticString, _ body: () throws -> T?) -> T? {
        do {
            let value = try body()
            if !failingStoreOperations.isEmpty { failingStoreOperations.remove("\(operation)") }
            return value
        } catch {
            counters.storeFailures += 1
            if failingStoreOperations.insert("\(operation)").inserted {
                logger.error("store: \(operation) failed: \(error); the router carries on and tries again on later ticks")
            } else {
                logger.debug("store: \(operation) failed again: \(error)")
            }
            return nil
        }
    }

    private func countersWithAdmission() -> Counters {
        var c = counters
        let dropped = admission.dropped
        c.framesRateLimited += dropped.rateLimited
        c.framesQueueFull += dropped.backlogFull
        c.framesQueueFullOther += dropped.backlogFullOther
        c.hopLatencySamples = hopLatency.samples
        c.hopLatencyP50Us = hopLatency.percentileUs(0.5)
        c.hopLatencyP99Us = hopLatency.percentileUs(0.99)
        c.hopLatencyMaxUs = hopLatency.maxUs
        c.custodyLatencySamples = custodyLatency.samples
        c.custodyLatencyP50Us = custodyLatency.percentileUs(0.5)
        c.custodyLatencyP99Us = custodyLatency.percentileUs(0.99)
        c.custodyLatencyMaxUs = custodyLatency.maxUs
        c.commitDurationP50Us = commitDuration.percentileUs(0.5)
        c.commitDurationP99Us = commitDuration.percentileUs(0.99)
        c.commitDurationMaxUs = commitDuration.maxUs
        return c
    }

    static func trustLabel(_ link: Link) -> String? {
        guard link.info.peerRole == .hub else { return nil }
        return link.listed ? "listed" : link.certifiedUntilMs != nil ? "certified" : "untrusted"
    }

    /// Whether a link is the relay this hub pinned: it belongs to a transport of the relay
    /// plugin, and its peer key is that section's `relay_key`.
    static func isPinnedRelay(_ info: LinkInfo, on transport: any RouterTransport) -> Bool {
        guard let pinned = transport.pinnedRelayKey else { return false }
        return pinned == info.peerSigningKey
    }

    /// The first 8 hex digits of an ID: enough for an operator, not a full identifier in logs.
    static func shortID(_ id: [UInt8]) -> String { YaokPluginKit.Hex.encode(id.prefix(4)) }

    /// A peer by the name its people know it by: a phone by its user ID (what `yaok` shows for
    /// a contact), a hub or the relay by its Ed25519 key (what `trusted_hubs` and `relay_key`
    /// hold), each as its first 8 hex digits.
    static func peerName(_ info: LinkInfo, peerID: [UInt8]) -> String {
        info.peerRole == .endpoint ? shortID(peerID) : shortID(info.peerSigningKey)
    }

    /// The fairness principal of a link: the transport and the network of the remote address
    /// (``IPEndpoint/crowd``: its /24 or /64 — a device picks ports freely and addresses within
    /// its network nearly so), the remote text for other transports (a BLE address), or the
    /// peer's key if the transport reports no address.
    static func origin(transport: String, remote: String?, peerID: [UInt8]) -> String {
        guard var host = remote, !host.isEmpty else { return "\(transport):\(YaokPluginKit.Hex.encode(peerID.prefix(8)))" }
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") {
            host = String(host[host.index(after: host.startIndex)..<close])
        } else if host.filter({ $0 == ":" }).count == 1, let colon = host.lastIndex(of: ":"),
                  host[host.index(after: colon)...].allSatisfy(\.isNumber) {
            host = String(host[..<colon])
        }
        if let percent = host.firstIndex(of: "%") { host = String(host[..<percent]) }   // fe80::1%wlan0
        return "\(transport):\(IPEndpoint(host: host, port: 0).crowd)"
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
        /// Evictions taken from the heaviest sender key, and from the heaviest origin.
        public var evictedHeaviestSender, evictedHeaviestOrigin: Int64
        public var conflicts: Int64
    }
    public struct LinkView: Sendable, Codable, Equatable {
        public var link, role, peer, kind: String
        public var remote: String?
        public var inFlight: Int
        /// Hub links: `listed` (trusted_hubs), `certified` (network certificate) or `untrusted`.
        public var trust: String?
        /// Bundles this link may have in flight now (``CustodyPacing``), its smoothed custody
        /// round trip (nil before the first answer) and the wait before a resend.
        public var window: Int?
        public var roundTripMs: Int?
        public var custodyTimeoutMs: Int64?
        /// Largest frame the link carries, when it came up (ms since 1970), what arrived on it
        /// and what its transport accepted to send on it.
        public var mtu: Int?
        public var upAtMs: Int64?
        public var framesIn: Int?
        public var bytesIn: Int?
        public var framesOut: Int?
        public var bytesOut: Int?
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
    /// What the hub believes about the time (Docs/protocol.md, clock 0x0C).
    public var clock: ClockEstimate?
}

/// A bundle frame as the receiving plugin thread leaves it for the router: its record, and
/// the bundle parsed with its sender's signature checked. Checking there runs the
/// verification, the costliest step of taking a bundle, in parallel with the router's serial
/// queue (on the plugin's thread, one per transport). It costs no more than before for
/// a forged flood: admission has already bounded the frames of each link, and an endpoint
/// link, which anyone may open, already had every bundle it sent verified.
struct ReceivedBundleFrame: Sendable {
    struct Checked: Sendable {
        let bundle: YaokWire.Bundle
        let signatureValid: Bool
        /// A delivery receipt whose proof matched a recorded commitment: its signature was
        /// not checked (``signatureValid`` is false) and need not be.
        let proven: Bool
    }
    let record: TLVRecord
    /// nil when the record is not a well-formed bundle: the router parses it again for the reason.
    let checked: Checked?

    /// nil when the frame is not a TLV record at all (the router counts it as malformed).
    init?(_ frame: [UInt8], commitments: ReceiptCommitments) {
        guard let record = try? TLVRecord(parsing: frame) else { return nil }
        self.record = record
        if record.type == FrameType.bundle.rawValue, let bundle = try? YaokWire.Bundle(parsing: record.value) {
            if commitments.proves(bundle.envelope) {
                checked = Checked(bundle: bundle, signatureValid: false, proven: true)
            } else {
                checked = Checked(bundle: bundle, signatureValid: bundle.envelope.verifySignature(), proven: false)
            }
        } else {
            checked = nil
        }
    }
}

/// Per-link admission of received frames, before they are queued to the router: a token
/// bucket of `framesPerSecond` (burst of one second's worth) and at most ``maxBacklog``
/// bundles and, apart, ``maxBacklog`` other frames waiting in the router queue per link.
/// Apart, because a backlog of bundles must not crowd out the small frames that move it: a
/// dropped bundle is resent after the link's custody wait (seconds), but a dropped offer or
/// request is repeated only after `custody_timeout_s` (30 s by default; a 27 s stall on the
/// line of four in session 13). Called on plugin threads.
// @unchecked: the per-link entries and drop counters only under `lock`.
final class FrameAdmission: @unchecked Sendable {
    enum Decision { case admitted, rateLimited, backlogFull }
    /// Which backlog a frame waits in: bundles, or everything else (answers, offers, keep-alives).
    enum Kind { case bundle, other }
    /// Frames of one kind one link may have waiting in the router's queue.
    static let maxBacklog = 256

    private struct Entry {
        var bucket: TokenBucket
        var backlog: (bundles: Int, other: Int) = (0, 0)
        subscript(_ kind: Kind) -> Int {
            get { kind == .bundle ? backlog.bundles : backlog.other }
            set { if kind == .bundle { backlog.bundles = newValue } else { backlog.other = newValue } }
        }
    }
    private let lock = NSLock()
    private var rate: Double
    private var entries: [LinkKey: Entry] = [:]
    private var droppedRate = 0, droppedBacklog = 0, droppedBacklogOther = 0

    init(framesPerSecond: Int) { rate = Double(max(1, framesPerSecond)) }

    func setRate(_ framesPerSecond: Int) { lock.withLock { rate = Double(max(1, framesPerSecond)) } }

    func admit(_ key: LinkKey, _ kind: Kind = .bundle) -> Decision {
        let nowNs = Int64(DispatchTime.now().uptimeNanoseconds)
        return lock.withLock {
            var e = entries[key] ?? Entry(bucket: TokenBucket(capacity: rate, nowNs: nowNs))
            e.bucket.refill(capacity: rate, perSecond: rate, nowNs: nowNs)
            let decision: Decision
            if e.bucket.tokens < 1 {
                droppedRate += 1
                decision = .rateLimited
            } else if e[kind] >= Self.maxBacklog {
                droppedBacklog += 1
                if kind == .other { droppedBacklogOther += 1 }
                decision = .backlogFull
            } else {
                e.bucket.tokens -= 1
                e[kind] += 1
                decision = .admitted
            }
            entries[key] = e
            return decision
        }
    }

    /// A queued frame was taken off the router queue.
    func done(_ key: LinkKey, _ kind: Kind = .bundle) {
        lock.withLock { if entries[key] != nil { entries[key]![kind] = max(0, entries[key]![kind] - 1) } }
    }

    /// The link is gone; frames still queued for it are dropped by the router.
    func forget(_ key: LinkKey) { lock.withLock { _ = entries.removeValue(forKey: key) } }

    var dropped: (rateLimited: Int, backlogFull: Int, backlogFullOther: Int) {
        lock.withLock { (droppedRate, droppedBacklog, droppedBacklogOther) }
    }
}
