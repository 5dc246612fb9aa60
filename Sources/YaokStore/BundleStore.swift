import YaokCrypto
import YaokWire

/// The hub's store of carried bundles: accept with dedupe, retry scheduling with backoff,
/// custody states, a per-peer "already has it" table, expiry and a size cap.
///
/// One file of ~1,100 lines on purpose: every statement on the bundle tables is here, beside the
/// schema and the indexes whose query plans those statements rely on (Docs/store.md).
///
/// Every state change is one transaction and is durable when the call returns. Being sent is
/// not one of them: a bundle on the wire stays queued here (the router's links know which are
/// being sent), since a crash would make it queued again anyway, and writing it cost one
/// update of the row and five or six of its index entries per bundle. Bundle bytes
/// are opaque. Times are milliseconds since the Unix epoch, passed in by the caller so that
/// tests (and the router) control the clock.
// @unchecked: its state is the database (serialised by its lock), and `cachedStatistics` and
// `unpersistedDeliveries`, under `statsLock`.
public final class BundleStore: @unchecked Sendable {
    /// The database component name under which this store's schema version is kept.
    public static let schemaComponent = "bundles"

    public let database: SQLCipherDatabase
    /// Carried bytes (queued, handed over) are kept at or below this.
    public let sizeCapBytes: Int64
    /// Retry delays after the 1st, 2nd, … failed attempt; the last one repeats.
    public let backoffMs: [Int64]

    private let statsLock = RecursiveLock()
    private var cachedStatistics = StoreStatistics()
    /// Deliveries newer than their recipient's persisted one by less than
    /// ``deliveryPersistenceMs``, by recipient (under `statsLock`): at most
    /// ``unpersistedDeliveriesLimit`` recipients.
    private var unpersistedDeliveries: [[UInt8]: Int64] = [:]

    /// Running counters (persisted; loaded when the store is opened).
    public var statistics: StoreStatistics {
        statsLock.withLock { cachedStatistics }
    }

    /// Opens the store in `database`, creating or migrating its tables.
    public init(database: SQLCipherDatabase, sizeCapBytes: Int64 = 500_000_000,
                backoffMs: [Int64] = [60_000, 300_000, 900_000, 3_600_000, 21_600_000]) throws {
        guard !backoffMs.isEmpty, backoffMs.allSatisfy({ $0 >= 0 }) else {
            throw StoreError.invalidBundle("backoff schedule must be non-empty and non-negative")
        }
        self.database = database
        self.sizeCapBytes = sizeCapBytes
        self.backoffMs = backoffMs
        try database.migrate(component: Self.schemaComponent, BundleSchema.migrations)
        try database.executeScript(BundleSchema.carriedBytesInMemory, purpose: "counting the carried bytes")
        cachedStatistics = try readStatistics()
    }

    // MARK: Accepting

    /// Stores a bundle durably, or says why not.
    ///
    /// Identity is the bundle ID (bound to the sender's key). A bundle ID already present
    /// with the same envelope (hop header aside) — or remembered as a delivered/expired
    /// tombstone — is a `.duplicate`; with a different envelope it is a `.conflict` and the
    /// held copy is untouched. A message whose recipient's delivery receipt is already held is
    /// stored as a delivered tombstone (`.alreadyDelivered`).
    ///
    /// When the bundle does not fit under the cap, space is taken from whoever uses the most:
    /// the sender key or the origin (``NewBundle/origin``) with the largest share of evictable
    /// bytes (queued or handed over) loses its soonest-expiring bundle, again and again. If the
    /// newcomer's own sender or origin holds (or ties for) the largest share, or its origin
    /// holds nothing yet (a newcomer earns space while there is room, it never takes any),
    /// nothing is evicted and it is `.rejectedOverShare`: a flood from one place pays for
    /// itself, and a flood from ever new places finds the store full.
    ///
    /// - Throws: `StoreError.invalidBundle` for wrong field lengths, `.sqlite` on I/O errors.
    /// `onTheWire` says which bundles are being sent right now (the router's links know; the
    /// store keeps no durable "in flight" state): eviction passes them over, because a
    /// transfer is under way.
    public func accept(_ b: NewBundle, nowMs: Int64, onTheWire: ([UInt8]) -> Bool = { _ in false }) throws -> AcceptResult {
        try Self.validate(b)
        guard b.expiresMs > nowMs else { return .rejectedExpired }
        let size = Int64(b.bytes.count)
        guard size <= sizeCapBytes else { return .rejectedTooLarge }

        var statsDelta = StoreStatistics()
        let result: AcceptResult = try database.transaction {
            if let held = try database.query(SQL.heldBytes, [.blob(b.bundleID)], purpose: "checking for a duplicate bundle").first {
                if let heldBytes = held[0].blobValue, !YaokWire.Bundle.sameEnvelope(heldBytes, b.bytes) {
                    try bumpCounter("conflicts", by: 1)
                    statsDelta.conflicts = 1
                    return .conflict
                }
                if let hop = b.previousHop {
                    try database.execute(SQL.recordPeer, [.blob(b.bundleID), .blob(hop)],
                                         purpose: "recording the peer that holds a bundle")
                }
                try bumpCounter("duplicates_dropped", by: 1)
                statsDelta.duplicatesDropped = 1
                return .duplicate
            }
            if b.kind == Envelope.Kind.message.rawValue,
               try database.scalar(SQL.deliveryReceiptHeld, [.blob(b.bundleID), .blob(b.destination)],
                                   purpose: "looking for a held delivery receipt") != nil {
                try insert(b, state: .delivered, bytes: nil, reference: nil, nowMs: nowMs)
                try recordDelivery(to: b.destination, nowMs: nowMs)
                return .alreadyDelivered
            }
            let carried = try carriedBytes()
            if carried + size > sizeCapBytes {
                guard let plan = try fairEvictionPlan(needed: carried + size - sizeCapBytes, for: b, onTheWire: onTheWire) else {
                    try bumpCounter("refused_over_share", by: 1)
                    statsDelta.refusedOverShare = 1
                    return .rejectedOverShare
                }
                for v in plan.victims {
                    try database.execute(SQL.deleteBundle, [.blob(v.id)], purpose: "evicting a bundle")
                }
                let freed = plan.victims.reduce(Int64(0)) { $0 + $1.size }
                try bumpCounter("evicted", by: Int64(plan.victims.count))
                try bumpCounter("evicted_bytes", by: freed)
                try bumpCounter("evicted_heaviest_sender", by: plan.bySender)
                try bumpCounter("evicted_heaviest_origin", by: plan.byOrigin)
                statsDelta.evicted = Int64(plan.victims.count)
                statsDelta.evictedBytes = freed
                statsDelta.evictedHeaviestSender = plan.bySender
                statsDelta.evictedHeaviestOrigin = plan.byOrigin
            }
            // A delivery receipt keeps the ID it acknowledges (indexed, so the message finds it
            // on arrival) only while that message is not held. Once it is, every later copy
            // of the message is a duplicate and the reference is never read: leaving it out
            // spares a random page of `bundles_by_ref` per receipt (schema version 6).
            var reference = b.kind == Envelope.Kind.deliveryReceipt.rawValue ? b.acknowledgedBundleID : nil
            if let ref = reference,
               try database.scalar(SQL.exists, [.blob(ref)], purpose: "looking up an acknowledged bundle") != nil {
                reference = nil
            }
            try insert(b, state: .queued, bytes: b.bytes, reference: reference, nowMs: nowMs)
            if let hop = b.previousHop {
                try database.execute(SQL.recordPeer, [.blob(b.bundleID), .blob(hop)],
                                     purpose: "recording the peer that holds a bundle")
            }
            return .stored
        }
        addStatistics(statsDelta)
        return result
    }

    private func insert(_ b: NewBundle, state: BundleState, bytes: [UInt8]?, reference: [UInt8]?, nowMs: Int64) throws {
        if state.isTombstone {
            // Born a tombstone (its receipt came first): blanked as SQL.blankedForTombstone.
            try database.execute(SQL.insert, [
                .blob(b.bundleID), .blob([]), .int(Int(b.kind)), .blob([]), .int(b.hopCount), .int(b.hopLimit), .null,
                .integer(0), .integer(b.expiresMs), .null, .integer(Int64(b.bytes.count)), .null, .int(state.rawValue),
                .integer(0), .integer(0), .null, .null,
            ], purpose: "storing a tombstone")
            return
        }
        try database.execute(SQL.insert, [
            .blob(b.bundleID), .blob(b.destination), .int(Int(b.kind)), .blob(b.sourceUserID),
            .int(b.hopCount), .int(b.hopLimit), .optionalBlob(b.previousHop),
            .integer(b.createdMs), .integer(b.expiresMs), .optionalBlob(bytes), .integer(Int64(b.bytes.count)),
            .optionalText(b.receivedFrom), .int(state.rawValue),
            .integer(nowMs), .integer(nowMs), .optionalText(b.origin), .optionalBlob(reference),
        ], purpose: "storing a bundle")
    }

    /// Who holds evictable space: a sender key or an origin.
    private enum Principal: Hashable { case sender([UInt8]), origin(String) }

    /// Chooses bundles to evict so that `needed` bytes are freed, always from the principal
    /// (sender or origin) with the most evictable bytes, counting the newcomer as already
    /// stored. Nil when the newcomer's own sender or origin is (or ties for) the heaviest,
    /// when its origin holds nothing yet, or when nothing evictable is left.
    private func fairEvictionPlan(needed: Int64, for b: NewBundle, onTheWire: ([UInt8]) -> Bool) throws
        -> (victims: [(id: [UInt8], size: Int64)], bySender: Int64, byOrigin: Int64)? {
        var usage: [Principal: Int64] = [:]
        for row in try database.query(SQL.usageBySender, purpose: "measuring each sender's share") {
            guard let who = row[0].blobValue, let bytes = row[1].int64Value else { continue }
            usage[.sender(who)] = bytes
        }
        for row in try database.query(SQL.usageByOrigin, purpose: "measuring each origin's share") {
            guard let who = row[0].textValue, let bytes = row[1].int64Value else { continue }
            usage[.origin(who)] = bytes
        }
        let size = Int64(b.bytes.count)
        // A newcomer from an origin that holds nothing here is refused rather than given
        // anyone's space: addresses (a /64, random BLE addresses, throwaway keys) are free, and
        // each fresh one would otherwise be the lightest principal and evict the heaviest — a
        // real user's queue. Its previous hop keeps the bundle (custody refused).
        if let origin = b.origin, usage[.origin(origin), default: 0] == 0 { return nil }
        let own: [Principal] = [.sender(b.sourceUserID)] + (b.origin.map { [.origin($0)] } ?? [])
        for p in own { usage[p, default: 0] += size }
        var victims: [(id: [UInt8], size: Int64)] = []
        var taken = Set<[UInt8]>()
        var freed: Int64 = 0
        var bySender: Int64 = 0, byOrigin: Int64 = 0
        while freed < needed {
            guard let heaviest = usage.max(by: { $0.value < $1.value }), heaviest.value > 0 else { return nil }
            if own.contains(where: { usage[$0, default: 0] >= heaviest.value }) { return nil }
            // Victims already chosen are still in the table (nothing is deleted until the plan
            // holds), and bundles on the wire are passed over: read one row more than were
            // taken, then twice as many while every row read is one of those.
            var row: [SQLValue]?
            var limit = victims.count + 1
            while row == nil {
                let rows: [[SQLValue]]
                switch heaviest.key {
                case .sender(let who):
                    rows = try database.query(SQL.victimsOfSender, [.blob(who), .int(limit)], purpose: "choosing a bundle to evict")
                case .origin(let who):
                    rows = try database.query(SQL.victimsOfOrigin, [.text(who), .int(limit)], purpose: "choosing a bundle to evict")
                }
                row = rows.first { r in r[0].blobValue.map { !taken.contains($0) && !onTheWire($0) } ?? false }
                if rows.count < limit { break }
                limit *= 2
            }
            guard let row, let id = row[0].blobValue, let vsize = row[1].int64Value, let sender = row[2].blobValue else {
                usage[heaviest.key] = 0  // nothing of it is evictable (all on the wire)
                continue
            }
            if case .sender = heaviest.key { bySender += 1 } else { byOrigin += 1 }
            taken.insert(id)
            victims.append((id, vsize))
            freed += vsize
            usage[.sender(sender), default: 0] -= vsize
            if let origin = row[3].textValue { usage[.origin(origin), default: 0] -= vsize }
        }
        return (victims, bySender, byOrigin)
    }

    static func validate(_ b: NewBundle) throws {
        guard b.bundleID.count == 16 else { throw StoreError.invalidBundle("bundle ID must be 16 bytes, got \(b.bundleID.count)") }
        if let r = b.acknowledgedBundleID, r.count != 16 {
            throw StoreError.invalidBundle("acknowledged bundle ID must be 16 bytes, got \(r.count)")
        }
        guard b.destination.count == 32 else { throw StoreError.invalidBundle("destination must be 32 bytes, got \(b.destination.count)") }
        guard b.sourceUserID.count == 32 else { throw StoreError.invalidBundle("source user ID must be 32 bytes, got \(b.sourceUserID.count)") }
        if let hop = b.previousHop, hop.count != 32 {
            throw StoreError.invalidBundle("previous hop must be 32 bytes, got \(hop.count)")
        }
        guard b.hopCount >= 0, b.hopLimit >= 0 else { throw StoreError.invalidBundle("hop count and limit must be non-negative") }
    }

    // MARK: Reading

    /// The stored bundle (or tombstone) with that bundle ID.
    public func bundle(_ id: [UInt8]) throws -> StoredBundle? {
        try database.query(SQL.selectByID, [.blob(id)], purpose: "reading a bundle").first.map(Self.decode)
    }

    // The listings below take `withBytes`: pass false to get everything but the bundle bytes
    // (`bytes` is then `.notRead`, `size` is set), e.g. to choose what to offer among thousands of
    // bundles without reading hundreds of megabytes; fetch the chosen ones with `bundle(_:)`.

    /// Queued bundles whose retry time has come, oldest accepted first (ties by bundle ID),
    /// starting after `cursor` (the last bundle of the previous page) when given. A caller
    /// that looks at a page a tick must walk on with the cursor: bundles that stay queued and
    /// due (a copy kept after handing one over) would otherwise fill every first page, and
    /// the ones behind them would never be looked at again (on a line of hubs, 39 bundles
    /// whose offer was dropped once sat behind 20,000 such copies).
    public func due(nowMs: Int64, limit: Int, withBytes: Bool = true, after cursor: StoredBundle? = nil) throws -> [StoredBundle] {
        // No cursor: start before every acceptance time (no bundle is accepted at Int64.min).
        try database.query(SQL.due(withBytes), [.integer(nowMs), .int(max(0, limit)),
                                                .integer(cursor?.acceptedMs ?? Int64.min), .blob(cursor?.bundleID ?? [])],
                           purpose: "listing due bundles").map(Self.decode)
    }

    /// Carried bundles (queued, in flight, handed over) for one recipient, oldest first.
    public func pending(destination: [UInt8], limit: Int, withBytes: Bool = true) throws -> [StoredBundle] {
        try database.query(SQL.pending(withBytes), [.blob(destination), .int(max(0, limit))],
                           purpose: "listing a recipient's bundles").map(Self.decode)
    }

    /// Queued or handed-over bundles to offer a neighbour that just came up, oldest first,
    /// leaving out those the neighbour (if given) is already known to hold.
    public func forwardable(limit: Int, excludingPeer peer: [UInt8]? = nil, withBytes: Bool = true) throws -> [StoredBundle] {
        if let peer {
            return try database.query(SQL.forwardableExcluding(withBytes), [.blob(peer), .int(max(0, limit))],
                                      purpose: "listing bundles to offer a peer").map(Self.decode)
        }
        return try database.query(SQL.forwardable(withBytes), [.int(max(0, limit))],
                                  purpose: "listing bundles to offer").map(Self.decode)
    }

    /// Every bundle ID the store knows, carried or tombstone, concatenated (16 bytes each), in
    /// ascending byte order: the set a hub reconciles with a neighbour. One index-only scan.
    public func allBundleIDs() throws -> [UInt8] {
        var out: [UInt8] = []
        try database.forEachBlob("SELECT bundle_id FROM bundles ORDER BY bundle_id", purpose: "listing every bundle ID") { id in
            guard id.count == BundleID.length else { throw StoreError.corruptRow(table: "bundles", column: "bundle_id") }
            out.append(contentsOf: id)
        }
        return out
    }

    /// Bundle IDs in the given states, in ascending byte order (for offers).
    public func ids(states: Set<BundleState>, limit: Int) throws -> [[UInt8]] {
        guard !states.isEmpty else { return [] }
        let list = states.map { String($0.rawValue) }.sorted().joined(separator: ",")
        let sql = "SELECT bundle_id FROM bundles WHERE state IN (\(list)) ORDER BY bundle_id LIMIT ?"
        return try database.query(sql, [.int(max(0, limit))], purpose: "listing bundle IDs").map { row in
            guard let id = row[0].blobValue else { throw StoreError.corruptRow(table: "bundles", column: "bundle_id") }
            return id
        }
    }

    /// How many bundles are in each state (every state is present, zero if none).
    public func counts() throws -> [BundleState: Int] {
        var result: [BundleState: Int] = [:]
        for s in BundleState.allCases { result[s] = 0 }
        for row in try database.query(SQL.counts, purpose: "counting bundles") {
            guard let raw = row[0].intValue, let state = BundleState(rawValue: raw), let n = row[1].intValue else {
                throw StoreError.corruptRow(table: "bundles", column: "state")
            }
            result[state] = n
        }
        return result
    }

    /// How many of these bundle IDs are queued (the router asks about those it is sending).
    public func queuedCount(of ids: [[UInt8]]) throws -> Int {
        var n = 0
        for chunk in stride(from: 0, to: ids.count, by: SQL.queuedAmongSize) {
            // Always the same statement (one prepared, cached): the last chunk repeats an ID, which `IN` counts once.
            var part = Array(ids[chunk..<min(ids.count, chunk + SQL.queuedAmongSize)])
            part += Array(repeating: part[0], count: SQL.queuedAmongSize - part.count)
            n += try database.scalar(SQL.queuedAmong, part.map { .blob($0) }, purpose: "counting queued bundles")?.intValue ?? 0
        }
        return n
    }

    /// Bytes of bundles currently carried (what the size cap applies to).
    public func totalBytes() throws -> Int64 {
        try carriedBytes()
    }

    private func carriedBytes() throws -> Int64 {
        try database.scalar(SQL.carriedBytes, purpose: "reading the carried bytes")?.int64Value ?? 0
    }

    /// For each recipient that had something delivered, the latest delivery time, newest first.
    /// Since this store was opened it is exact; what was persisted before is exact to
    /// ``deliveryPersistenceMs``.
    public func lastDelivery() throws -> [(destination: [UInt8], atMs: Int64)] {
        var latest: [[UInt8]: Int64] = [:]
        for row in try database.query(SQL.lastDelivery, purpose: "listing deliveries") {
            guard let d = row[0].blobValue, let at = row[1].int64Value else {
                throw StoreError.corruptRow(table: "deliveries", column: "destination")
            }
            latest[d] = at
        }
        latest.merge(statsLock.withLock { unpersistedDeliveries }) { max($0, $1) }
        return latest.map { (destination: $0.key, atMs: $0.value) }
            .sorted { $0.atMs != $1.atMs ? $0.atMs > $1.atMs : $0.destination.lexicographicallyPrecedes($1.destination) }
    }

    // MARK: State changes

    /// Records a failed attempt: the bundle goes back to queued, `attempts` grows by one and
    /// it is due again after `backoffMs[min(attempts - 1, last)]`, or at `notBeforeMs` if that
    /// is later (a refuser's retry hint). Only queued and in-flight bundles are affected.
    public func markAttemptFailed(_ id: [UInt8], nowMs: Int64, notBeforeMs: Int64? = nil) throws {
        try database.transaction {
            guard let row = try database.query(SQL.stateAndAttempts, [.blob(id)], purpose: "reading a bundle's attempts").first else {
                throw StoreError.bundleNotFound
            }
            guard let raw = row[0].intValue, let state = BundleState(rawValue: raw), let attempts = row[1].intValue else {
                throw StoreError.corruptRow(table: "bundles", column: "state")
            }
            guard state == .queued || state == .inFlight else { return }
            let next = attempts + 1
            let delay = backoffMs[min(next - 1, backoffMs.count - 1)]
            let due = max(nowMs &+ delay, notBeforeMs ?? .min)
            try database.execute(SQL.setRetry, [.int(BundleState.queued.rawValue), .int(next),
                                                 .integer(due), .blob(id)],
                                 purpose: "scheduling a bundle's retry")
        }
    }

    /// What a custody acknowledgement changed (``custodyTaken(_:by:peerIsEndpoint:nowMs:)``).
    public enum CustodyTaken: Sendable, Equatable {
        /// The recipient itself took it: delivered, a tombstone now.
        case delivered
        /// Another hop took it: handed over (or it already was, or is a tombstone).
        case handedOver
    }

    /// A neighbour acknowledged custody of `id`, in one transaction with one read of the row:
    /// from the bundle's own recipient (`peerIsEndpoint` and `peer` its destination) it is
    /// delivered, as ``markDelivered(_:nowMs:)``; from anybody else a queued bundle becomes
    /// handed over and, unless the peer is an endpoint, the peer is remembered as holding it.
    /// Nil when the store does not hold the bundle (evicted or expired meanwhile).
    public func custodyTaken(_ id: [UInt8], by peer: [UInt8], peerIsEndpoint: Bool, nowMs: Int64) throws -> CustodyTaken? {
        try database.transaction {
            guard let (state, destination, _) = try stateDestinationAndKind(id) else { return nil }
            if state.isTombstone {
                // Its recipient is blanked; an endpoint is only ever sent its own bundles.
                return state == .delivered && peerIsEndpoint ? .delivered : .handedOver
            }
            if peerIsEndpoint && destination == peer {
                try tombstoneDelivered(id, state: state, destination: destination, nowMs: nowMs)
                return .delivered
            }
            if state == .queued || state == .inFlight {
                try database.execute(SQL.setState, [.int(BundleState.handedOver.rawValue), .blob(id)],
                                     purpose: "marking a bundle handed over")
            }
            if !peerIsEndpoint {
                try database.execute(SQL.recordPeer, [.blob(id), .blob(peer)], purpose: "recording the peer that holds a bundle")
            }
            return .handedOver
        }
    }

    /// A hub we do not trust (`hub_trust: open`) acknowledged custody of `id`. A message stays
    /// ours, queued: only its verified delivery receipt ends it. A receipt has no receipt of its
    /// own, so nothing would ever end it: a queued one becomes handed over (kept for its
    /// addressee and offered to each new neighbour, no longer retried on a timer), without
    /// recording the untrusted hub as its holder. Returns whether `id` is a receipt we hold.
    public func receiptTakenByUntrustedHub(_ id: [UInt8]) throws -> Bool {
        try database.transaction {
            guard let (state, _, kind) = try stateDestinationAndKind(id), kind != Int(Envelope.Kind.message.rawValue) else { return false }
            if state == .queued || state == .inFlight {
                try database.execute(SQL.setState, [.int(BundleState.handedOver.rawValue), .blob(id)],
                                     purpose: "marking a receipt handed over")
            }
            return true
        }
    }

    /// What deciding a delivery needs of a row, without its bytes; nil when it is not held.
    private func stateDestinationAndKind(_ id: [UInt8]) throws -> (BundleState, [UInt8], Int)? {
        guard let row = try database.query(SQL.stateDestinationAndKind, [.blob(id)], purpose: "reading a bundle").first else { return nil }
        guard let raw = row[0].intValue, let state = BundleState(rawValue: raw), let destination = row[1].blobValue,
              let kind = row[2].intValue else {
            throw StoreError.corruptRow(table: "bundles", column: "state")
        }
        return (state, destination, kind)
    }

    private func tombstoneDelivered(_ id: [UInt8], state: BundleState, destination: [UInt8], nowMs: Int64) throws {
        guard !state.isTombstone else { return }   // its recipient is blanked: nothing to record
        try database.execute(SQL.forgetHolders, [.blob(id)], purpose: "forgetting a delivered bundle's holders")
        try database.execute(SQL.tombstone, [.int(BundleState.delivered.rawValue), .blob(id)], purpose: "marking a bundle delivered")
        try recordDelivery(to: destination, nowMs: nowMs)
    }

    /// Records delivery to the recipient: the bytes are dropped and a tombstone (ID, state,
    /// expiry) stays until expiry so that copies still travelling are dropped as duplicates.
    public func markDelivered(_ id: [UInt8], nowMs: Int64) throws {
        try database.transaction {
            guard let (state, destination, _) = try stateDestinationAndKind(id) else { throw StoreError.bundleNotFound }
            try tombstoneDelivered(id, state: state, destination: destination, nowMs: nowMs)
        }
    }

    /// A verified delivery receipt, signed by `recipient`, acknowledges the bundle `id`. It counts
    /// only for a message held here whose destination is `recipient`: that message becomes a
    /// delivered tombstone (it may be one already). One read of the row, in one transaction.
    /// `recipient` nil: the caller checked the receipt's proof against this message's
    /// commitment (Docs/protocol.md, "Receipt proofs"), which only its recipient can answer.
    /// - Returns: whether it counted; false when no such message is held, or it is addressed
    ///   to somebody else.
    public func deliveryReceipt(for id: [UInt8], signedBy recipient: [UInt8]?, nowMs: Int64) throws -> Bool {
        try database.transaction {
            guard let (state, destination, kind) = try stateDestinationAndKind(id),
                  kind == Int(Envelope.Kind.message.rawValue) else { return false }
            // A delivered tombstone's recipient is blanked; the receipt changes nothing there.
            if state.isTombstone { return state == .delivered }
            guard recipient == nil || destination == recipient else { return false }
            try tombstoneDelivered(id, state: state, destination: destination, nowMs: nowMs)
            return true
        }
    }

    /// Puts `b`'s envelope in place of the held bundle's under the same bundle ID (its bytes,
    /// size and times; its state stays). The router does this only when the held envelope's
    /// signature fails and `b`'s verifies: a delivery receipt admitted by its proof alone may
    /// be an on-path hub's re-dated copy of the real one (Docs/protocol.md, "Receipt
    /// proofs"). The bundle's holders are forgotten: a neighbour recorded as holding the old
    /// envelope may only have refused it (a bad signature is refused for good), and must be
    /// offered the real one. Whether a held (not tombstoned) bundle was changed.
    public func replaceEnvelope(with b: NewBundle) throws -> Bool {
        try Self.validate(b)
        return try database.transaction {
            try database.execute(SQL.replaceEnvelope, [.blob(b.bundleID), .blob(b.bytes), .integer(Int64(b.bytes.count)),
                                                       .integer(b.createdMs), .integer(b.expiresMs)],
                                 purpose: "replacing a held envelope")
            guard database.changes > 0 else { return false }
            try database.execute(SQL.forgetHolders, [.blob(b.bundleID)], purpose: "forgetting the holders of a replaced envelope")
            return true
        }
    }

    /// How stale a recipient's persisted last delivery may get: a delivery within this long of
    /// the persisted one is kept in memory only (``lastDelivery()`` still shows it). Written on
    /// every delivery, `deliveries` cost a page of every light-load commit, about a tenth of
    /// the hub's disk writes per message (Docs/performance.md); after a crash the
    /// status shows a delivery up to this much older than the last one.
    static let deliveryPersistenceMs: Int64 = 60_000
    /// The most recipients whose last delivery is kept in memory only. Anyone who can make
    /// identities can be many recipients; past this, a new recipient's delivery is written.
    static let unpersistedDeliveriesLimit = 4_096

    /// The latest delivery to `destination` (inside the caller's transaction). The row is
    /// written only when it is ``deliveryPersistenceMs`` older than this delivery (one
    /// update), or absent (an insert, for a recipient's first delivery), or memory holds
    /// ``unpersistedDeliveriesLimit`` others; otherwise the time is kept in
    /// ``unpersistedDeliveries``.
    private func recordDelivery(to destination: [UInt8], nowMs: Int64) throws {
        let roomInMemory = statsLock.withLock {
            unpersistedDeliveries.count < Self.unpersistedDeliveriesLimit || unpersistedDeliveries[destination] != nil
        }
        let writeIfBefore = roomInMemory ? nowMs - Self.deliveryPersistenceMs : Int64.max
        let values: [SQLValue] = [.blob(destination), .integer(nowMs), .integer(writeIfBefore)]
        let updated = try database.withExclusiveAccess {
            try database.execute(SQL.updateDelivery, values, purpose: "recording a delivery")
            return database.changes
        }
        let inserted = try updated > 0 ? 0 : database.withExclusiveAccess {
            try database.execute(SQL.recordDelivery, Array(values.prefix(2)), purpose: "recording a delivery")
            return database.changes
        }
        statsLock.withLock {
            if updated + inserted > 0 {
                unpersistedDeliveries[destination] = nil
            } else {
                unpersistedDeliveries[destination] = max(nowMs, unpersistedDeliveries[destination] ?? nowMs)
            }
        }
    }

    /// Remembers that `peer` holds the bundle (it offered it, or said it holds it), so it
    /// is never sent to that peer. Unknown bundle IDs are ignored.
    public func recordPeerHas(_ id: [UInt8], peer: [UInt8]) throws {
        try database.execute(SQL.recordPeer, [.blob(id), .blob(peer)], purpose: "recording the peer that holds a bundle")
    }

    /// A neighbour offered these bundle IDs: in one transaction, records it as holding the
    /// ones we have and returns the ones we do not, in the order given.
    public func noteOffered(_ ids: [[UInt8]], by peer: [UInt8]) throws -> [[UInt8]] {
        try database.transaction {
            var unknown: [[UInt8]] = []
            for id in ids {
                if try database.scalar(SQL.exists, [.blob(id)], purpose: "looking up an offered bundle") != nil {
                    try database.execute(SQL.recordPeer, [.blob(id), .blob(peer)], purpose: "recording the peer that holds a bundle")
                } else {
                    unknown.append(id)
                }
            }
            return unknown
        }
    }

    /// The IDs among `ids` that the store does not hold, in one read transaction. Unlike
    /// ``noteOffered(_:by:)`` nothing is recorded: for offers from a peer whose word must not
    /// count (an untrusted hub).
    public func unknownIDs(_ ids: [[UInt8]]) throws -> [[UInt8]] {
        try database.transaction {
            try ids.filter { try database.scalar(SQL.exists, [.blob($0)], purpose: "looking up an offered bundle") == nil }
        }
    }

    /// Whether `peer` is known to hold the bundle.
    public func peerHas(_ id: [UInt8], peer: [UInt8]) throws -> Bool {
        try database.scalar(SQL.peerHas, [.blob(id), .blob(peer)], purpose: "checking a peer's bundles") != nil
    }

    /// How many peers are known to hold the bundle.
    public func peersHolding(_ id: [UInt8]) throws -> Int {
        try database.scalar(SQL.peersHolding, [.blob(id)], purpose: "counting a bundle's holders")?.intValue ?? 0
    }

    /// On startup: bundles an older hub left in flight (the state it kept) never got their custody
    /// ack, so they go back to queued, due now (attempts unchanged). Returns how many.
    @discardableResult
    public func requeueInFlight(nowMs: Int64) throws -> Int {
        try database.transaction {
            try database.withExclusiveAccess {
                try database.execute(SQL.requeue, [.int(BundleState.queued.rawValue), .integer(nowMs),
                                                   .int(BundleState.inFlight.rawValue)],
                                     purpose: "requeueing in-flight bundles")
                return database.changes
            }
        }
    }

    /// The expiry sweep. First deletes tombstones (delivered/expired) whose expiry has passed —
    /// by then `accept` refuses the bundle as expired anyway — then turns carried bundles past
    /// expiry into expired tombstones (bytes dropped), which the next sweep deletes.
    /// Returns how many carried bundles expired.
    @discardableResult
    public func expire(nowMs: Int64) throws -> Int {
        let expired: Int = try database.transaction {
            try database.execute(SQL.deleteTombstones, [.integer(nowMs)], purpose: "deleting old tombstones")
            try database.execute(SQL.forgetHoldersOfExpiring, [.integer(nowMs)], purpose: "forgetting expiring bundles' holders")
            let n: Int = try database.withExclusiveAccess {
                try database.execute(SQL.expireCarried, [.int(BundleState.expired.rawValue), .integer(nowMs)],
                                     purpose: "expiring bundles")
                return database.changes
            }
            if n > 0 { try bumpCounter("expired", by: Int64(n)) }
            return n
        }
        if expired > 0 { addStatistics(StoreStatistics(expired: Int64(expired))) }
        return expired
    }

    // MARK: Maintenance

    /// Gives free pages back to the file system when enough have accumulated.
    ///
    /// New databases use `auto_vacuum=INCREMENTAL`, so this runs `PRAGMA incremental_vacuum`
    /// (cheap, no copy) at most hourly when at least 10% of the pages (and 256 pages) are
    /// free. A full `VACUUM` — which rebuilds the file through an in-memory copy, because
    /// temporary files stay in memory for encryption's sake — runs at most daily, and only
    /// when a quarter of the file is free and the live data is at most `fullVacuumMaxBytes`.
    /// After either it empties the WAL. Returns whether anything was done. Not inside a
    /// transaction: SQLite refuses `VACUUM` and the checkpoint there.
    @discardableResult
    public func vacuumIfNeeded(nowMs: Int64, fullVacuumMaxBytes: Int64 = 64_000_000) throws -> Bool {
        let last = try counter("last_vacuum_ms")
        let lastFull = try counter("last_full_vacuum_ms")
        let pages = try database.integerPragma("page_count")
        let free = try database.integerPragma("freelist_count")
        let pageSize = try database.integerPragma("page_size")
        let autoVacuum = try database.integerPragma("auto_vacuum")
        let hour: Int64 = 3_600_000
        var did = false
        if free * 4 >= pages, (pages - free) * pageSize <= fullVacuumMaxBytes, nowMs - lastFull >= 24 * hour {
            try database.execute("VACUUM", purpose: "vacuuming the database")
            try setCounter("last_full_vacuum_ms", nowMs)
            did = true
        } else if autoVacuum == 2, free >= 256, free * 10 >= pages, nowMs - last >= hour {
            try database.execute("PRAGMA incremental_vacuum", purpose: "returning free pages")
            did = true
        }
        if did {
            try setCounter("last_vacuum_ms", nowMs)
            try database.emptyWAL()
        }
        return did
    }

    // MARK: Hub clock

    /// The hub clock's last persisted reading and the wall clock at that moment (Docs/store.md,
    /// "Hub clock"); nil in a store that never had one.
    public func persistedHubClock() throws -> (hubMs: Int64, wallMs: Int64)? {
        let hub = try counter("hub_clock_ms")
        return hub > 0 ? (hub, try counter("hub_clock_wall_ms")) : nil
    }

    /// Records the hub clock (and the wall clock now): see Docs/store.md, "Hub clock".
    public func persistHubClock(hubMs: Int64, wallMs: Int64) throws {
        try setCounter("hub_clock_ms", hubMs)
        try setCounter("hub_clock_wall_ms", wallMs)
    }

    // MARK: Internals

    private func counter(_ name: String) throws -> Int64 {
        try database.scalar(SQL.readCounter, [.text(name)], purpose: "reading a store counter")?.int64Value ?? 0
    }

    private func bumpCounter(_ name: String, by n: Int64) throws {
        try database.execute(SQL.bumpCounter, [.integer(n), .text(name)], purpose: "updating a store counter")
    }

    private func setCounter(_ name: String, _ value: Int64) throws {
        try database.execute(SQL.setCounter, [.text(name), .integer(value)], purpose: "updating a store counter")
    }

    private func readStatistics() throws -> StoreStatistics {
        StoreStatistics(duplicatesDropped: try counter("duplicates_dropped"), evicted: try counter("evicted"),
                        evictedBytes: try counter("evicted_bytes"), expired: try counter("expired"),
                        evictedHeaviestSender: try counter("evicted_heaviest_sender"),
                        evictedHeaviestOrigin: try counter("evicted_heaviest_origin"),
                        refusedOverShare: try counter("refused_over_share"), conflicts: try counter("conflicts"))
    }

    private func addStatistics(_ d: StoreStatistics) {
        statsLock.withLock {
            cachedStatistics.duplicatesDropped += d.duplicatesDropped
            cachedStatistics.evicted += d.evicted
            cachedStatistics.evictedBytes += d.evictedBytes
            cachedStatistics.expired += d.expired
            cachedStatistics.evictedHeaviestSender += d.evictedHeaviestSender
            cachedStatistics.evictedHeaviestOrigin += d.evictedHeaviestOrigin
            cachedStatistics.refusedOverShare += d.refusedOverShare
            cachedStatistics.conflicts += d.conflicts
        }
    }

    private static func decode(_ row: [SQLValue]) throws -> StoredBundle {
        func blob(_ i: Int, _ name: String) throws -> [UInt8] {
            guard let v = row[i].blobValue else { throw StoreError.corruptRow(table: "bundles", column: name) }
            return v
        }
        func int(_ i: Int, _ name: String) throws -> Int64 {
            guard let v = row[i].int64Value else { throw StoreError.corruptRow(table: "bundles", column: name) }
            return v
        }
        guard row.count == SQL.columnCount else { throw StoreError.corruptRow(table: "bundles", column: "*") }
        guard let kind = UInt8(exactly: try int(2, "kind")) else { throw StoreError.corruptRow(table: "bundles", column: "kind") }
        guard let state = BundleState(rawValue: Int(try int(12, "state"))) else {
            throw StoreError.corruptRow(table: "bundles", column: "state")
        }
        let record = BundleRecord(
            bundleID: try blob(0, "bundle_id"), destination: try blob(1, "destination"), kind: kind,
            sourceUserID: try blob(3, "source_user"), hopCount: Int(try int(4, "hop_count")),
            hopLimit: Int(try int(5, "hop_limit")), previousHop: row[6].blobValue,
            createdMs: try int(7, "created_ms"), expiresMs: try int(8, "expires_ms"),
            receivedFrom: row[11].textValue, origin: row[16].textValue)
        // NULL bytes mean one of two things: a tombstone's, dropped for good, or a listing that
        // left them out. The state tells which: only the writes that make a tombstone store
        // NULL, so for a carried bundle it is the listing's.
        let bytes: BundleBytes
        if let b = row[9].blobValue { bytes = .held(b) } else { bytes = BundleState.carried.contains(state) ? .notRead : .dropped }
        return StoredBundle(
            record: record, bytes: bytes, state: state,
            attempts: Int(try int(13, "attempts")), nextAttemptMs: try int(14, "next_attempt_ms"),
            acceptedMs: try int(15, "accepted_ms"), size: Int(try int(10, "size")))
    }

    /// The store's SQL, fixed strings so the prepared statements are cached.
    /// Every write names `OR FAIL` (or another conflict clause): with the default ABORT, a
    /// statement that might fail halfway (a NOT NULL column, a unique index, the carried-bytes
    /// triggers) keeps a statement journal inside a transaction, and SQLCipher encrypts every
    /// page it journals: ~5× the statement's cost, measured. No statement here
    /// relies on its own rollback: a failed write fails its whole transaction or group.
    enum SQL {
        static let columns = """
            bundle_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, created_ms, \
            expires_ms, bytes, size, received_from, state, attempts, next_attempt_ms, accepted_ms, origin
            """
        static let columnCount = 17
        static let heldBytes = "SELECT bytes FROM bundles WHERE bundle_id = ?"
        static let replaceEnvelope = """
            UPDATE bundles SET bytes = ?2, size = ?3, created_ms = ?4, expires_ms = ?5
            WHERE bundle_id = ?1 AND bytes IS NOT NULL
            """
        static let exists = "SELECT 1 FROM bundles WHERE bundle_id = ?"
        static let insert = """
            INSERT OR FAIL INTO bundles (bundle_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, \
            created_ms, expires_ms, bytes, size, received_from, state, next_attempt_ms, accepted_ms, origin, ref_bundle) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        /// A delivery receipt (kind 2) for the bundle, signed by its recipient (the receipt's sender).
        static let deliveryReceiptHeld = "SELECT 1 FROM bundles WHERE ref_bundle = ? AND kind = 2 AND source_user = ? LIMIT 1"
        /// Evictable (queued or handed-over) bytes per sender and per origin.
        static let usageBySender = "SELECT source_user, sum(size) FROM bundles WHERE state IN (0, 2) GROUP BY source_user"
        static let usageByOrigin = "SELECT origin, sum(size) FROM bundles WHERE state IN (0, 2) AND origin IS NOT NULL GROUP BY origin"
        static let victimsOfSender = """
            SELECT bundle_id, size, source_user, origin FROM bundles WHERE state IN (0, 2) AND source_user = ? \
            ORDER BY expires_ms, id LIMIT ?
            """
        static let victimsOfOrigin = """
            SELECT bundle_id, size, source_user, origin FROM bundles WHERE state IN (0, 2) AND origin = ? \
            ORDER BY expires_ms, id LIMIT ?
            """
        /// A deleted bundle's holders go with it (trigger `bundles_forget_holders`).
        static let deleteBundle = "DELETE FROM bundles WHERE bundle_id = ?"
        static let selectByID = "SELECT \(columns) FROM bundles WHERE bundle_id = ?"
        /// The same columns with NULL in place of the bundle bytes.
        static let columnsWithoutBytes = """
            bundle_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, created_ms, \
            expires_ms, NULL, size, received_from, state, attempts, next_attempt_ms, accepted_ms, origin
            """
        static let dueWithBytes = dueSQL(columns)
        static let dueWithoutBytes = dueSQL(columnsWithoutBytes)
        static func due(_ withBytes: Bool) -> String { withBytes ? dueWithBytes : dueWithoutBytes }
        private static func dueSQL(_ c: String) -> String {
            """
            SELECT \(c) FROM bundles WHERE state = 0 AND next_attempt_ms <= ?1 \
            AND (accepted_ms > ?3 OR (accepted_ms = ?3 AND bundle_id > ?4)) ORDER BY accepted_ms, bundle_id LIMIT ?2
            """
        }
        static let pendingWithBytes = pendingSQL(columns)
        static let pendingWithoutBytes = pendingSQL(columnsWithoutBytes)
        static func pending(_ withBytes: Bool) -> String { withBytes ? pendingWithBytes : pendingWithoutBytes }
        private static func pendingSQL(_ c: String) -> String {
            "SELECT \(c) FROM bundles WHERE destination = ? AND state IN (0, 1, 2) ORDER BY accepted_ms, id LIMIT ?"
        }
        static let forwardableWithBytes = forwardableSQL(columns)
        static let forwardableWithoutBytes = forwardableSQL(columnsWithoutBytes)
        static func forwardable(_ withBytes: Bool) -> String { withBytes ? forwardableWithBytes : forwardableWithoutBytes }
        private static func forwardableSQL(_ c: String) -> String {
            "SELECT \(c) FROM bundles WHERE state IN (0, 2) ORDER BY accepted_ms, id LIMIT ?"
        }
        static let forwardableExcludingWithBytes = forwardableExcludingSQL(columns)
        static let forwardableExcludingWithoutBytes = forwardableExcludingSQL(columnsWithoutBytes)
        static func forwardableExcluding(_ withBytes: Bool) -> String {
            withBytes ? forwardableExcludingWithBytes : forwardableExcludingWithoutBytes
        }
        private static func forwardableExcludingSQL(_ c: String) -> String {
            """
            SELECT \(c) FROM bundles b WHERE state IN (0, 2) AND NOT EXISTS \
            (SELECT 1 FROM bundle_holders h WHERE h.bundle_row = b.id AND h.peer = ?1) \
            ORDER BY accepted_ms, id LIMIT ?2
            """
        }
        static let counts = "SELECT state, count(*) FROM bundles GROUP BY state"
        static let queuedAmongSize = 64
        static let queuedAmong = "SELECT count(*) FROM bundles WHERE state = 0 AND bundle_id IN ("
            + Array(repeating: "?", count: queuedAmongSize).joined(separator: ",") + ")"
        static let lastDelivery = "SELECT destination, at_ms FROM deliveries"
        static let stateAndAttempts = "SELECT state, attempts FROM bundles WHERE bundle_id = ?"
        static let stateDestinationAndKind = "SELECT state, destination, kind FROM bundles WHERE bundle_id = ?"
        static let setState = "UPDATE OR FAIL bundles SET state = ? WHERE bundle_id = ?"
        static let setRetry = "UPDATE OR FAIL bundles SET state = ?, attempts = ?, next_attempt_ms = ? WHERE bundle_id = ?"
        /// What a tombstone keeps: its ID (for dedupe), kind, state, size and expiry (for the
        /// sweep). Sender, recipient, times, hops and the link it came in on are blanked, so a
        /// hub seized with its key does not give up who wrote to whom (Docs/protocol.md §9). A
        /// receipt that came ahead of its message keeps its signer: `deliveryReceiptHeld`
        /// matches it against the message when that arrives.
        static let blankedForTombstone = """
            bytes = NULL, destination = X'', source_user = CASE WHEN ref_bundle IS NULL THEN X'' ELSE source_user END, \
            previous_hop = NULL, created_ms = 0, accepted_ms = 0, next_attempt_ms = 0, attempts = 0, \
            received_from = NULL, last_link = NULL, origin = NULL
            """
        /// A tombstone keeps no holders either: they are the hubs it came through.
        static let forgetHolders = "DELETE FROM bundle_holders WHERE bundle_row = (SELECT id FROM bundles WHERE bundle_id = ?)"
        static let forgetHoldersOfExpiring = """
            DELETE FROM bundle_holders WHERE bundle_row IN (SELECT id FROM bundles WHERE state IN (0, 1, 2) AND expires_ms <= ?)
            """
        static let tombstone = "UPDATE OR FAIL bundles SET state = ?, \(blankedForTombstone) WHERE bundle_id = ?"
        // Two journal-free statements, not `INSERT OR REPLACE`: REPLACE on a NOT NULL table may
        // abort halfway, so SQLite opens a statement journal for it, which SQLCipher encrypts
        // page by page (it was 5 % of the router thread; Docs/performance.md).
        static let recordDelivery = "INSERT OR IGNORE INTO deliveries (destination, at_ms) VALUES (?1, ?2)"
        static let updateDelivery = "UPDATE OR FAIL deliveries SET at_ms = ?2 WHERE destination = ?1 AND at_ms <= ?3"
        /// Holders of carried bundles only: a tombstone keeps none.
        static let recordPeer = "INSERT OR IGNORE INTO bundle_holders (bundle_row, peer) SELECT id, ?2 FROM bundles WHERE bundle_id = ?1 AND state IN (0, 1, 2)"
        static let peerHas = "SELECT 1 FROM bundle_holders WHERE bundle_row = (SELECT id FROM bundles WHERE bundle_id = ?) AND peer = ?"
        static let peersHolding = "SELECT count(*) FROM bundle_holders WHERE bundle_row = (SELECT id FROM bundles WHERE bundle_id = ?)"
        static let requeue = "UPDATE OR FAIL bundles SET state = ?, next_attempt_ms = ? WHERE state = ?"
        static let deleteTombstones = "DELETE FROM bundles WHERE state IN (3, 4) AND expires_ms <= ?"
        static let expireCarried = "UPDATE OR FAIL bundles SET state = ?, \(blankedForTombstone) WHERE state IN (0, 1, 2) AND expires_ms <= ?"
        static let carriedBytes = "SELECT bytes FROM temp.carried"
        static let readCounter = "SELECT value FROM bundle_counters WHERE name = ?"
        static let bumpCounter = "UPDATE OR FAIL bundle_counters SET value = value + ? WHERE name = ?"
        static let setCounter = "INSERT OR REPLACE INTO bundle_counters (name, value) VALUES (?, ?)"
    }
}

/// The bundle store's schema history.
enum BundleSchema {
    static let migrations: [Migration] = [
        Migration(version: 1, script: """
            CREATE TABLE bundles (
                id INTEGER PRIMARY KEY,
                message_id BLOB NOT NULL UNIQUE,
                destination BLOB NOT NULL,
                kind INTEGER NOT NULL,
                source_user BLOB NOT NULL,
                hop_count INTEGER NOT NULL,
                hop_limit INTEGER NOT NULL,
                previous_hop BLOB,
                created_ms INTEGER NOT NULL,
                expires_ms INTEGER NOT NULL,
                bytes BLOB,                 -- NULL once delivered/expired (tombstone)
                size INTEGER NOT NULL,
                received_from TEXT,
                state INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_ms INTEGER NOT NULL,
                accepted_ms INTEGER NOT NULL,
                last_link TEXT
            );
            CREATE INDEX bundles_by_due ON bundles (state, next_attempt_ms);
            CREATE INDEX bundles_by_destination ON bundles (destination, state);
            CREATE INDEX bundles_by_expiry ON bundles (state, expires_ms);

            -- Peers known to hold a bundle: it crosses each link at most once.
            CREATE TABLE bundle_peers (
                message_id BLOB NOT NULL REFERENCES bundles (message_id) ON DELETE CASCADE,
                peer BLOB NOT NULL,
                PRIMARY KEY (message_id, peer)
            ) WITHOUT ROWID;

            -- Latest delivery per recipient (outlives the tombstones).
            CREATE TABLE deliveries (
                destination BLOB PRIMARY KEY,
                at_ms INTEGER NOT NULL
            ) WITHOUT ROWID;

            CREATE TABLE bundle_counters (
                name TEXT PRIMARY KEY,
                value INTEGER NOT NULL
            ) WITHOUT ROWID;
            INSERT INTO bundle_counters (name, value) VALUES
                ('carried_bytes', 0), ('duplicates_dropped', 0), ('evicted', 0), ('evicted_bytes', 0),
                ('expired', 0), ('last_vacuum_ms', 0), ('last_full_vacuum_ms', 0);

            """ + carriedBytesTriggers),
        // Version 2: bundles are keyed by bundle ID (sender-bound), not by the sender-chosen
        // message ID; receipts remember which bundle they acknowledge; each bundle records its
        // fairness origin. Tombstones made from unverified receipts (zero source user) are
        // dropped: they were how a forged receipt suppressed a message.
        Migration(version: 2) { db in try migrateToBundleIDs(db) },
        // Version 3: a recipient's carried bundles in acceptance order, so "the oldest pending
        // for this phone" (asked after every acknowledgement) reads the rows it returns and no
        // others; before, it read and sorted every bundle the recipient had.
        Migration(version: 3, script: """
            CREATE INDEX bundles_carried_by_destination ON bundles (destination, accepted_ms, id) WHERE state IN (0, 1, 2);
            """),
        // Version 4: `bundles_by_destination (destination, state)` served only that question;
        // version 3's index answers it, and every insert and state change wrote both.
        Migration(version: 4, script: """
            DROP INDEX bundles_by_destination;
            """),
        // Version 5: the eviction indexes hold only evictable rows (queued or handed over), in
        // the order eviction takes them. Before, `state` was part of their keys, so every
        // state change of every bundle moved its entry in both, and tombstones stayed in them:
        // about 0.9 of the 5 pages a message dirtied per commit (Docs/performance.md).
        Migration(version: 5, script: """
            DROP INDEX bundles_by_sender;
            DROP INDEX bundles_by_origin;
            CREATE INDEX bundles_evictable_by_sender ON bundles (source_user, expires_ms, id) WHERE state IN (0, 2);
            CREATE INDEX bundles_evictable_by_origin ON bundles (origin, expires_ms, id) WHERE state IN (0, 2);
            """),
        // Version 6: fewer pages per commit (Tests/bench/store-pages.py broke a line hub's
        // writes down by b-tree; Docs/performance.md).
        // - A bundle's holders are keyed by its row, which follows acceptance order, instead
        //   of its random bundle ID: a relay records a holder for nearly every bundle, and
        //   each cost a random leaf page (27-30 % of a middle hub's pages). Deleting a bundle
        //   deletes its holders in the same statement (a trigger), so a row number reused
        //   after the newest row is deleted never inherits them.
        // - `bundles_by_due` holds queued rows only, and `bundles_by_expiry` leads with the
        //   expiry: before, `state` led both keys, so every state change moved the row's
        //   entries to another part of both indexes.
        Migration(version: 6, script: """
            CREATE TABLE bundle_holders (
                bundle_row INTEGER NOT NULL,   -- bundles.id
                peer BLOB NOT NULL,
                PRIMARY KEY (bundle_row, peer)
            ) WITHOUT ROWID;
            INSERT OR IGNORE INTO bundle_holders (bundle_row, peer)
                SELECT b.id, p.peer FROM bundle_peers p JOIN bundles b ON b.bundle_id = p.bundle_id;
            DROP TABLE bundle_peers;
            CREATE TRIGGER bundles_forget_holders AFTER DELETE ON bundles
            BEGIN
                DELETE FROM bundle_holders WHERE bundle_row = OLD.id;
            END;
            DROP INDEX bundles_by_due;
            CREATE INDEX bundles_queued_by_due ON bundles (next_attempt_ms) WHERE state = 0;
            DROP INDEX bundles_by_expiry;
            CREATE INDEX bundles_by_expiry ON bundles (expires_ms, state);
            """),
        // Version 7: the carried bytes are counted in memory (``carriedBytesInMemory``), not in
        // `bundle_counters`: the persisted counter row cost a page of nearly every commit, as
        // every message changes it twice (Docs/performance.md). The carried index
        // takes `size`, so counting them at open reads only that index.
        Migration(version: 7, script: """
            DROP TRIGGER bundles_carried_insert;
            DROP TRIGGER bundles_carried_update;
            DROP TRIGGER bundles_carried_delete;
            DELETE FROM bundle_counters WHERE name = 'carried_bytes';
            DROP INDEX bundles_carried_by_destination;
            CREATE INDEX bundles_carried_by_destination ON bundles (destination, accepted_ms, id, size) WHERE state IN (0, 1, 2);
            """),
        // Version 8: tombstones name no sender, recipient, times, links or holders, so a hub
        // seized with its key does not say who wrote to whom (SQL.blankedForTombstone, written
        // out here so that this version's meaning never changes); this blanks the ones already
        // on disk (secure_delete zeroes what they held).
        Migration(version: 8, script: """
            UPDATE OR FAIL bundles SET
                destination = X'', source_user = CASE WHEN ref_bundle IS NULL THEN X'' ELSE source_user END,
                previous_hop = NULL, created_ms = 0, accepted_ms = 0, next_attempt_ms = 0, attempts = 0,
                received_from = NULL, last_link = NULL, origin = NULL
            WHERE state IN (3, 4);
            DELETE FROM bundle_holders WHERE bundle_row IN (SELECT id FROM bundles WHERE state IN (3, 4));
            """),
    ]

    /// The carried bytes (what the size cap applies to), run at every open: counted from the
    /// carried index (carried rows, in states 0-2, are exactly those that hold bytes), then
    /// kept by triggers in a table of this connection's in-memory temp database. Those
    /// changes are part of the same transactions as the rows', so a rollback undoes both,
    /// and they never reach the disk.
    static let carriedBytesInMemory = """
        CREATE TEMP TABLE IF NOT EXISTS carried (bytes INTEGER NOT NULL);
        DELETE FROM temp.carried;
        INSERT INTO temp.carried (bytes)
            SELECT coalesce(sum(size), 0) FROM main.bundles INDEXED BY bundles_carried_by_destination WHERE state IN (0, 1, 2);
        CREATE TEMP TRIGGER IF NOT EXISTS carried_insert AFTER INSERT ON main.bundles WHEN NEW.bytes IS NOT NULL
        BEGIN
            UPDATE carried SET bytes = bytes + NEW.size;
        END;
        CREATE TEMP TRIGGER IF NOT EXISTS carried_update AFTER UPDATE OF bytes ON main.bundles
        BEGIN
            UPDATE carried
            SET bytes = bytes - (CASE WHEN OLD.bytes IS NULL THEN 0 ELSE OLD.size END)
                              + (CASE WHEN NEW.bytes IS NULL THEN 0 ELSE NEW.size END);
        END;
        CREATE TEMP TRIGGER IF NOT EXISTS carried_delete AFTER DELETE ON main.bundles WHEN OLD.bytes IS NOT NULL
        BEGIN
            UPDATE carried SET bytes = bytes - OLD.size;
        END;
        """

    static let tablesV2 = """
        CREATE TABLE bundles (
            id INTEGER PRIMARY KEY,
            bundle_id BLOB NOT NULL UNIQUE,
            destination BLOB NOT NULL,
            kind INTEGER NOT NULL,
            source_user BLOB NOT NULL,
            hop_count INTEGER NOT NULL,
            hop_limit INTEGER NOT NULL,
            previous_hop BLOB,
            created_ms INTEGER NOT NULL,
            expires_ms INTEGER NOT NULL,
            bytes BLOB,                 -- NULL once delivered/expired (tombstone)
            size INTEGER NOT NULL,
            received_from TEXT,
            state INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_ms INTEGER NOT NULL,
            accepted_ms INTEGER NOT NULL,
            last_link TEXT,
            origin TEXT,                -- fairness principal: where it came from
            ref_bundle BLOB             -- receipts: the bundle ID acknowledged
        );
        """

    /// carried_bytes followed the rows that still hold bytes, in the same transaction (the
    /// same triggers in versions 1-6; version 2 re-creates them on its new table, version 7
    /// drops them for ``carriedBytesInMemory``).
    static let carriedBytesTriggers = """
        CREATE TRIGGER bundles_carried_insert AFTER INSERT ON bundles WHEN NEW.bytes IS NOT NULL
        BEGIN
            UPDATE bundle_counters SET value = value + NEW.size WHERE name = 'carried_bytes';
        END;
        CREATE TRIGGER bundles_carried_update AFTER UPDATE OF bytes ON bundles
        BEGIN
            UPDATE bundle_counters
            SET value = value - (CASE WHEN OLD.bytes IS NULL THEN 0 ELSE OLD.size END)
                              + (CASE WHEN NEW.bytes IS NULL THEN 0 ELSE NEW.size END)
            WHERE name = 'carried_bytes';
        END;
        CREATE TRIGGER bundles_carried_delete AFTER DELETE ON bundles WHEN OLD.bytes IS NOT NULL
        BEGIN
            UPDATE bundle_counters SET value = value - OLD.size WHERE name = 'carried_bytes';
        END;

        """

    static let indexesV2 = """
        CREATE INDEX bundles_by_due ON bundles (state, next_attempt_ms);
        CREATE INDEX bundles_by_destination ON bundles (destination, state);
        CREATE INDEX bundles_by_expiry ON bundles (state, expires_ms);
        CREATE INDEX bundles_by_sender ON bundles (source_user, state);
        CREATE INDEX bundles_by_origin ON bundles (origin, state);
        CREATE INDEX bundles_by_ref ON bundles (ref_bundle) WHERE ref_bundle IS NOT NULL;
        CREATE TABLE bundle_peers (
            bundle_id BLOB NOT NULL REFERENCES bundles (bundle_id) ON DELETE CASCADE,
            peer BLOB NOT NULL,
            PRIMARY KEY (bundle_id, peer)
        ) WITHOUT ROWID;
        INSERT OR IGNORE INTO bundle_counters (name, value) VALUES
            ('evicted_heaviest_sender', 0), ('evicted_heaviest_origin', 0), ('refused_over_share', 0), ('conflicts', 0);
        """

    /// Rebuilds the version-1 tables under bundle IDs, row by row (the ID is a hash, so SQL
    /// alone cannot compute it), keeping every carried bundle and its peers.
    static func migrateToBundleIDs(_ db: SQLCipherDatabase) throws {
        let purpose = "migrating the bundle store to bundle IDs"
        try db.executeScript("""
            DROP TRIGGER bundles_carried_insert;
            DROP TRIGGER bundles_carried_update;
            DROP TRIGGER bundles_carried_delete;
            DROP INDEX bundles_by_due;
            DROP INDEX bundles_by_destination;
            DROP INDEX bundles_by_expiry;
            ALTER TABLE bundles RENAME TO bundles_v1;
            CREATE TABLE peers_v1 (message_id BLOB NOT NULL, peer BLOB NOT NULL);
            INSERT INTO peers_v1 SELECT message_id, peer FROM bundle_peers;
            DROP TABLE bundle_peers;
            CREATE INDEX peers_v1_by_id ON peers_v1 (message_id);
            """ + tablesV2 + indexesV2 + carriedBytesTriggers, purpose: purpose)
        let zeroUser = [UInt8](repeating: 0, count: 32)
        let rows = try db.query("""
            SELECT id, message_id, source_user, kind, substr(bytes, 86, 32), substr(bytes, 134, 16) FROM bundles_v1
            """, purpose: purpose)
        for row in rows {
            guard let rowid = row[0].int64Value, let messageID = row[1].blobValue, let sender = row[2].blobValue,
                  let kind = row[3].int64Value, messageID.count == 16, sender.count == 32, sender != zeroUser else { continue }
            let id = BundleID.of(senderUserID: sender, messageID: messageID)
            var ref: SQLValue = .null
            if kind != 1, let recipient = row[4].blobValue, let refID = row[5].blobValue, recipient.count == 32, refID.count == 16 {
                ref = .blob(BundleID.of(senderUserID: recipient, messageID: refID))
            }
            try db.execute("""
                INSERT INTO bundles (id, bundle_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, \
                created_ms, expires_ms, bytes, size, received_from, state, attempts, next_attempt_ms, accepted_ms, last_link, \
                origin, ref_bundle) \
                SELECT id, ?, destination, kind, source_user, hop_count, hop_limit, previous_hop, created_ms, expires_ms, \
                bytes, size, received_from, state, attempts, next_attempt_ms, accepted_ms, last_link, received_from, ? \
                FROM bundles_v1 WHERE id = ?
                """, [.blob(id), ref, .integer(rowid)], purpose: purpose)
            try db.execute("INSERT OR IGNORE INTO bundle_peers (bundle_id, peer) SELECT ?, peer FROM peers_v1 WHERE message_id = ?",
                           [.blob(id), .blob(messageID)], purpose: purpose)
        }
        try db.executeScript("""
            DROP TABLE peers_v1;
            DROP TABLE bundles_v1;
            UPDATE bundle_counters SET value = (SELECT coalesce(sum(size), 0) FROM bundles WHERE bytes IS NOT NULL)
                WHERE name = 'carried_bytes';
            """, purpose: purpose)
    }
}
