import Foundation
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire

// The router's settings and counters.
extension Router {
    /// Router tuning, from the config's `router` section.
    public struct Settings: Sendable {
        public var hopLimit: Int
        public var linkFramesPerSecond: Int
        public var senderEnvelopesPerMinute: Int
        public var custodyTimeoutMs: Int64
        /// Envelope lifetime rules (maximum TTL, clock skew) checked before anything is stored.
        public var lifetime: EnvelopeLifetime
        /// Which hub peers are trusted, and what the others get.
        public var trust: HubTrustSettings
        /// This hub's own certificate (``HubCertificate`` bytes), sent on every hub link.
        public var ownCertificate: [UInt8]?
        /// `clock.set_system_clock`: step the system clock to a known true time when the kernel
        /// says it is unsynchronised (needs CAP_SYS_TIME).
        public var setSystemClock = false
        /// The relay key an enabled relay transport pins (`relay_key`): what phones are told
        /// and their registrations are checked against; nil when the hub has no relay.
        public var relayKey: [UInt8]?
        /// Switches only tests set; a debug build of the daemon takes them from `YAOK_TEST_*`
        /// variables (`Hub.testSwitches`), so no routing code reads the environment.
        public var testing = Testing()
        public init(hopLimit: Int = 10, linkFramesPerSecond: Int = 2000, senderEnvelopesPerMinute: Int = 600, custodyTimeoutMs: Int64 = 30_000,
                    lifetime: EnvelopeLifetime = EnvelopeLifetime(),
                    trust: HubTrustSettings = .init(), ownCertificate: [UInt8]? = nil, setSystemClock: Bool = false) {
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
        /// then list offers (in-memory tests only).
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
        /// Bundle IDs listed in offers sent to hubs.
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
}
