import Foundation
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokStore
import YaokWire

// A link as the router sees it.
extension Router {
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
        /// Bundles whose sends on this link went unanswered until they became a failed attempt:
        /// pushed here again only once the store's backoff says they are due.
        var unanswered = Set<[UInt8]>()
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
}
