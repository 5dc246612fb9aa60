/// The hub's store of carried bundles: accept with dedupe, retry scheduling with backoff,
/// custody states, a per-peer "already has it" table, expiry and a size cap.
///
/// Every state change is one transaction and is durable when the call returns. Bundle bytes
/// are opaque. Times are milliseconds since the Unix epoch, passed in by the caller so that
/// tests (and the router) control the clock.
public final class BundleStore: @unchecked Sendable {
    /// The database component name under which this store's schema version is kept.
    public static let schemaComponent = "bundles"

    public let database: SQLCipherDatabase
    /// Carried bytes (queued, in flight, handed over) are kept at or below this.
    public let sizeCapBytes: Int64
    /// Retry delays after the 1st, 2nd, … failed attempt; the last one repeats.
    public let backoffMs: [Int64]

    private let statsLock = RecursiveLock()
    private var cachedStatistics = StoreStatistics()

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
        cachedStatistics = try readStatistics()
    }

    // MARK: Accepting

    /// Stores a bundle durably, or says why not.
    ///
    /// A message ID already present — carried, or remembered as a delivered/expired tombstone
    /// — is a `.duplicate` (counted in `statistics.duplicatesDropped`). When the bundle does not
    /// fit under the cap, bundles that expire sooner than it are evicted, soonest first; if even
    /// that is not enough, nothing is evicted and it is `.rejectedTooLarge`.
    ///
    /// - Throws: `StoreError.invalidBundle` for wrong field lengths, `.sqlite` on I/O errors.
    public func accept(_ b: NewBundle, nowMs: Int64) throws -> AcceptResult {
        try Self.validate(b)
        guard b.expiresMs > nowMs else { return .rejectedExpired }
        let size = Int64(b.bytes.count)
        guard size <= sizeCapBytes else { return .rejectedTooLarge }

        var statsDelta = StoreStatistics()
        let result: AcceptResult = try database.transaction {
            if try database.scalar(SQL.exists, [.blob(b.messageID)], purpose: "checking for a duplicate bundle") != nil {
                if let hop = b.previousHop {
                    try database.execute(SQL.recordPeer, [.blob(b.messageID), .blob(hop)],
                                         purpose: "recording the peer that holds a bundle")
                }
                try bumpCounter("duplicates_dropped", by: 1)
                statsDelta.duplicatesDropped = 1
                return .duplicate
            }
            let carried = try counter("carried_bytes")
            if carried + size > sizeCapBytes {
                guard let victims = try evictionVictims(needed: carried + size - sizeCapBytes, before: b.expiresMs) else {
                    return .rejectedTooLarge
                }
                for v in victims {
                    try database.execute(SQL.deleteBundle, [.blob(v.id)], purpose: "evicting a bundle")
                }
                let freed = victims.reduce(Int64(0)) { $0 + $1.size }
                try bumpCounter("evicted", by: Int64(victims.count))
                try bumpCounter("evicted_bytes", by: freed)
                statsDelta.evicted = Int64(victims.count)
                statsDelta.evictedBytes = freed
            }
            try database.execute(SQL.insert, [
                .blob(b.messageID), .blob(b.destination), .int(b.kind), .blob(b.sourceUserID),
                .int(b.hopCount), .int(b.hopLimit), .optionalBlob(b.previousHop),
                .integer(b.createdMs), .integer(b.expiresMs), .blob(b.bytes), .integer(size),
                .optionalText(b.receivedFrom), .int(BundleState.queued.rawValue),
                .integer(nowMs), .integer(nowMs),
            ], purpose: "storing a bundle")
            if let hop = b.previousHop {
                try database.execute(SQL.recordPeer, [.blob(b.messageID), .blob(hop)],
                                     purpose: "recording the peer that holds a bundle")
            }
            return .stored
        }
        addStatistics(statsDelta)
        return result
    }

    /// Picks the carried, not-in-flight bundles expiring before `before`, soonest first, until
    /// `needed` bytes are covered; nil if they cannot cover it.
    private func evictionVictims(needed: Int64, before: Int64) throws -> [(id: [UInt8], size: Int64)]? {
        var victims: [(id: [UInt8], size: Int64)] = []
        var freed: Int64 = 0
        var cursor: (expires: Int64, row: Int64) = (Int64.min, Int64.min)
        let batch = 256
        while freed < needed {
            let rows = try database.query(SQL.evictionCandidates, [
                .integer(before), .integer(cursor.expires), .integer(cursor.expires), .integer(cursor.row),
                .int(batch),
            ], purpose: "choosing bundles to evict")
            for row in rows {
                guard let id = row[0].blobValue, let size = row[1].int64Value,
                      let expires = row[2].int64Value, let rowid = row[3].int64Value else {
                    throw StoreError.corruptRow(table: "bundles", column: "eviction candidate")
                }
                victims.append((id, size))
                freed += size
                cursor = (expires, rowid)
                if freed >= needed { return victims }
            }
            if rows.count < batch { return nil }
        }
        return victims
    }

    static func validate(_ b: NewBundle) throws {
        guard b.messageID.count == 16 else { throw StoreError.invalidBundle("message ID must be 16 bytes, got \(b.messageID.count)") }
        guard b.destination.count == 32 else { throw StoreError.invalidBundle("destination must be 32 bytes, got \(b.destination.count)") }
        guard b.sourceUserID.count == 32 else { throw StoreError.invalidBundle("source user ID must be 32 bytes, got \(b.sourceUserID.count)") }
        if let hop = b.previousHop, hop.count != 32 {
            throw StoreError.invalidBundle("previous hop must be 32 bytes, got \(hop.count)")
        }
        guard b.hopCount >= 0, b.hopLimit >= 0 else { throw StoreError.invalidBundle("hop count and limit must be non-negative") }
    }

    // MARK: Reading

    /// The stored bundle (or tombstone) with that message ID.
    public func bundle(_ id: [UInt8]) throws -> StoredBundle? {
        try database.query(SQL.selectByID, [.blob(id)], purpose: "reading a bundle").first.map(Self.decode)
    }

    // The listings below take `withBytes`: pass false to get everything but the bundle bytes
    // (`bytes` is then empty, `size` is set), e.g. to choose what to offer among thousands of
    // bundles without reading hundreds of megabytes; fetch the chosen ones with `bundle(_:)`.

    /// Queued bundles whose retry time has come, oldest accepted first.
    public func due(nowMs: Int64, limit: Int, withBytes: Bool = true) throws -> [StoredBundle] {
        try database.query(SQL.due(withBytes), [.integer(nowMs), .int(max(0, limit))],
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

    /// Message IDs in the given states, in ascending byte order (for summary vectors).
    public func ids(states: Set<BundleState>, limit: Int) throws -> [[UInt8]] {
        guard !states.isEmpty else { return [] }
        let list = states.map { String($0.rawValue) }.sorted().joined(separator: ",")
        let sql = "SELECT message_id FROM bundles WHERE state IN (\(list)) ORDER BY message_id LIMIT ?"
        return try database.query(sql, [.int(max(0, limit))], purpose: "listing message IDs").map { row in
            guard let id = row[0].blobValue else { throw StoreError.corruptRow(table: "bundles", column: "message_id") }
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

    /// Bytes of bundles currently carried (what the size cap applies to).
    public func totalBytes() throws -> Int64 {
        try counter("carried_bytes")
    }

    /// For each recipient that had something delivered, the latest delivery time, newest first.
    public func lastDelivery() throws -> [(destination: [UInt8], atMs: Int64)] {
        try database.query(SQL.lastDelivery, purpose: "listing deliveries").map { row in
            guard let d = row[0].blobValue, let at = row[1].int64Value else {
                throw StoreError.corruptRow(table: "deliveries", column: "destination")
            }
            return (d, at)
        }
    }

    // MARK: State changes

    /// Records that the bundle is being sent on `link`. A queued bundle becomes in flight;
    /// a handed-over one stays handed over (another hop already has custody); tombstones are
    /// left alone.
    public func markInFlight(_ id: [UInt8], link: String, nowMs: Int64) throws {
        try database.transaction {
            let state = try currentState(id)
            switch state {
            case .queued:
                try database.execute(SQL.setInFlight, [.text(link), .int(BundleState.inFlight.rawValue), .blob(id)],
                                     purpose: "marking a bundle in flight")
            case .inFlight, .handedOver:
                try database.execute(SQL.setLink, [.text(link), .blob(id)], purpose: "recording a bundle's link")
            case .delivered, .expired:
                break
            }
        }
    }

    /// Records that `peer` (its user ID) acknowledged custody: the bundle becomes handed
    /// over (unless already delivered/expired) and the peer is remembered as holding it.
    public func markHandedOver(_ id: [UInt8], to peer: [UInt8], nowMs: Int64) throws {
        try database.transaction {
            let state = try currentState(id)
            if state == .queued || state == .inFlight {
                try database.execute(SQL.setState, [.int(BundleState.handedOver.rawValue), .blob(id)],
                                     purpose: "marking a bundle handed over")
            }
            try database.execute(SQL.recordPeer, [.blob(id), .blob(peer)], purpose: "recording the peer that holds a bundle")
        }
    }

    /// Records a failed attempt: the bundle goes back to queued, `attempts` grows by one and
    /// it is due again after `backoffMs[min(attempts - 1, last)]`. Only queued and in-flight
    /// bundles are affected.
    public func markAttemptFailed(_ id: [UInt8], nowMs: Int64) throws {
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
            try database.execute(SQL.setRetry, [.int(BundleState.queued.rawValue), .int(next),
                                                 .integer(nowMs &+ delay), .blob(id)],
                                 purpose: "scheduling a bundle's retry")
        }
    }

    /// Records delivery to the recipient: the bytes are dropped and a tombstone (ID, state,
    /// expiry) stays until expiry so that copies still travelling are dropped as duplicates.
    public func markDelivered(_ id: [UInt8], nowMs: Int64) throws {
        try database.transaction {
            guard let row = try database.query(SQL.stateAndDestination, [.blob(id)], purpose: "reading a bundle").first else {
                throw StoreError.bundleNotFound
            }
            guard let raw = row[0].intValue, let state = BundleState(rawValue: raw), let destination = row[1].blobValue else {
                throw StoreError.corruptRow(table: "bundles", column: "state")
            }
            guard state != .delivered else { return }
            try database.execute(SQL.tombstone, [.int(BundleState.delivered.rawValue), .blob(id)],
                                 purpose: "marking a bundle delivered")
            try database.execute(SQL.recordDelivery, [.blob(destination), .integer(nowMs)],
                                 purpose: "recording a delivery")
        }
    }

    /// Records a delivery receipt for a bundle this hub never held (or no longer holds): a
    /// delivered tombstone is written so that copies still travelling are refused as
    /// duplicates until `expiresMs`. Such tombstones have `kind` 0, a zero source user ID and
    /// size 0. Does nothing if the message ID is already known. Returns whether it was added.
    @discardableResult
    public func rememberDelivered(_ id: [UInt8], destination: [UInt8], expiresMs: Int64, nowMs: Int64) throws -> Bool {
        guard id.count == 16 else { throw StoreError.invalidBundle("message ID must be 16 bytes, got \(id.count)") }
        guard destination.count == 32 else { throw StoreError.invalidBundle("destination must be 32 bytes, got \(destination.count)") }
        guard expiresMs > nowMs else { return false }
        return try database.transaction {
            try database.withExclusiveAccess {
                try database.execute(SQL.insertTombstone, [
                    .blob(id), .blob(destination), .blob([UInt8](repeating: 0, count: 32)), .integer(nowMs),
                    .integer(expiresMs), .int(BundleState.delivered.rawValue), .integer(nowMs), .integer(nowMs),
                ], purpose: "remembering a delivered bundle")
                let added = database.changes == 1
                if added {
                    try database.execute(SQL.recordDelivery, [.blob(destination), .integer(nowMs)],
                                         purpose: "recording a delivery")
                }
                return added
            }
        }
    }

    /// Remembers that `peer` holds the bundle (it offered it, or told us in a summary), so it
    /// is never sent to that peer. Unknown message IDs are ignored.
    public func recordPeerHas(_ id: [UInt8], peer: [UInt8]) throws {
        try database.execute(SQL.recordPeer, [.blob(id), .blob(peer)], purpose: "recording the peer that holds a bundle")
    }

    /// Whether `peer` is known to hold the bundle.
    public func peerHas(_ id: [UInt8], peer: [UInt8]) throws -> Bool {
        try database.scalar(SQL.peerHas, [.blob(id), .blob(peer)], purpose: "checking a peer's bundles") != nil
    }

    /// How many peers are known to hold the bundle.
    public func peersHolding(_ id: [UInt8]) throws -> Int {
        try database.scalar(SQL.peersHolding, [.blob(id)], purpose: "counting a bundle's holders")?.intValue ?? 0
    }

    /// On startup: bundles left in flight by the previous run never got their custody ack,
    /// so they go back to queued, due now (attempts unchanged). Returns how many.
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
    /// Returns whether anything was done.
    @discardableResult
    public func vacuumIfNeeded(nowMs: Int64, fullVacuumMaxBytes: Int64 = 64_000_000) throws -> Bool {
        let last = try counter("last_vacuum_ms")
        let lastFull = try counter("last_full_vacuum_ms")
        guard let pages = try database.pragma("page_count")?.int64Value,
              let free = try database.pragma("freelist_count")?.int64Value,
              let pageSize = try database.pragma("page_size")?.int64Value,
              let autoVacuum = try database.pragma("auto_vacuum")?.int64Value else {
            throw StoreError.corruptRow(table: "pragma", column: "page_count")
        }
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
            try database.execute("PRAGMA wal_checkpoint(TRUNCATE)", purpose: "checkpointing after vacuum")
        }
        return did
    }

    // MARK: Internals

    private func currentState(_ id: [UInt8]) throws -> BundleState {
        guard let value = try database.scalar(SQL.state, [.blob(id)], purpose: "reading a bundle's state") else {
            throw StoreError.bundleNotFound
        }
        guard let raw = value.intValue, let state = BundleState(rawValue: raw) else {
            throw StoreError.corruptRow(table: "bundles", column: "state")
        }
        return state
    }

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
                        evictedBytes: try counter("evicted_bytes"), expired: try counter("expired"))
    }

    private func addStatistics(_ d: StoreStatistics) {
        statsLock.withLock {
            cachedStatistics.duplicatesDropped += d.duplicatesDropped
            cachedStatistics.evicted += d.evicted
            cachedStatistics.evictedBytes += d.evictedBytes
            cachedStatistics.expired += d.expired
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
        return StoredBundle(
            messageID: try blob(0, "message_id"), destination: try blob(1, "destination"), kind: kind,
            sourceUserID: try blob(3, "source_user"), hopCount: Int(try int(4, "hop_count")),
            hopLimit: Int(try int(5, "hop_limit")), previousHop: row[6].blobValue,
            createdMs: try int(7, "created_ms"), expiresMs: try int(8, "expires_ms"),
            bytes: row[9].blobValue ?? [], receivedFrom: row[11].textValue, state: state,
            attempts: Int(try int(13, "attempts")), nextAttemptMs: try int(14, "next_attempt_ms"),
            acceptedMs: try int(15, "accepted_ms"), size: Int(try int(10, "size")), lastLink: row[16].textValue)
    }

    /// The store's SQL, fixed strings so the prepared statements are cached.
    private enum SQL {
        static let columns = """
            message_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, created_ms, \
            expires_ms, bytes, size, received_from, state, attempts, next_attempt_ms, accepted_ms, last_link
            """
        static let columnCount = 17
        static let exists = "SELECT 1 FROM bundles WHERE message_id = ?"
        static let insert = """
            INSERT INTO bundles (message_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, \
            created_ms, expires_ms, bytes, size, received_from, state, next_attempt_ms, accepted_ms) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
        static let evictionCandidates = """
            SELECT message_id, size, expires_ms, id FROM bundles \
            WHERE state IN (0, 2) AND expires_ms < ? AND (expires_ms > ? OR (expires_ms = ? AND id > ?)) \
            ORDER BY expires_ms, id LIMIT ?
            """
        static let insertTombstone = """
            INSERT OR IGNORE INTO bundles (message_id, destination, kind, source_user, hop_count, hop_limit, \
            created_ms, expires_ms, bytes, size, state, next_attempt_ms, accepted_ms) \
            VALUES (?, ?, 0, ?, 0, 0, ?, ?, NULL, 0, ?, ?, ?)
            """
        static let deleteBundle = "DELETE FROM bundles WHERE message_id = ?"
        static let selectByID = "SELECT \(columns) FROM bundles WHERE message_id = ?"
        /// The same columns with NULL in place of the bundle bytes.
        static let columnsWithoutBytes = """
            message_id, destination, kind, source_user, hop_count, hop_limit, previous_hop, created_ms, \
            expires_ms, NULL, size, received_from, state, attempts, next_attempt_ms, accepted_ms, last_link
            """
        static let dueWithBytes = dueSQL(columns)
        static let dueWithoutBytes = dueSQL(columnsWithoutBytes)
        static func due(_ withBytes: Bool) -> String { withBytes ? dueWithBytes : dueWithoutBytes }
        private static func dueSQL(_ c: String) -> String {
            "SELECT \(c) FROM bundles WHERE state = 0 AND next_attempt_ms <= ? ORDER BY accepted_ms, id LIMIT ?"
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
            (SELECT 1 FROM bundle_peers p WHERE p.message_id = b.message_id AND p.peer = ?1) \
            ORDER BY accepted_ms, id LIMIT ?2
            """
        }
        static let counts = "SELECT state, count(*) FROM bundles GROUP BY state"
        static let lastDelivery = "SELECT destination, at_ms FROM deliveries ORDER BY at_ms DESC, destination"
        static let state = "SELECT state FROM bundles WHERE message_id = ?"
        static let stateAndAttempts = "SELECT state, attempts FROM bundles WHERE message_id = ?"
        static let stateAndDestination = "SELECT state, destination FROM bundles WHERE message_id = ?"
        static let setInFlight = "UPDATE bundles SET last_link = ?, state = ? WHERE message_id = ?"
        static let setLink = "UPDATE bundles SET last_link = ? WHERE message_id = ?"
        static let setState = "UPDATE bundles SET state = ? WHERE message_id = ?"
        static let setRetry = "UPDATE bundles SET state = ?, attempts = ?, next_attempt_ms = ? WHERE message_id = ?"
        static let tombstone = "UPDATE bundles SET state = ?, bytes = NULL WHERE message_id = ?"
        static let recordDelivery = "INSERT OR REPLACE INTO deliveries (destination, at_ms) VALUES (?, ?)"
        static let recordPeer = """
            INSERT OR IGNORE INTO bundle_peers (message_id, peer) \
            SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM bundles WHERE message_id = ?1)
            """
        static let peerHas = "SELECT 1 FROM bundle_peers WHERE message_id = ? AND peer = ?"
        static let peersHolding = "SELECT count(*) FROM bundle_peers WHERE message_id = ?"
        static let requeue = "UPDATE bundles SET state = ?, next_attempt_ms = ? WHERE state = ?"
        static let deleteTombstones = "DELETE FROM bundles WHERE state IN (3, 4) AND expires_ms <= ?"
        static let expireCarried = "UPDATE bundles SET state = ?, bytes = NULL WHERE state IN (0, 1, 2) AND expires_ms <= ?"
        static let readCounter = "SELECT value FROM bundle_counters WHERE name = ?"
        static let bumpCounter = "UPDATE bundle_counters SET value = value + ? WHERE name = ?"
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

            -- carried_bytes follows the rows that still hold bytes, in the same transaction.
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
            """),
    ]
}
