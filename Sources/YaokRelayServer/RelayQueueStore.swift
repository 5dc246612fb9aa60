import Logging
import YaokCrypto
import YaokStore
import YaokWire
import enum YaokPluginKit.Hex

/// The relay's durable state on SQLCipher: queued bundles, phone → hub attachments, and
/// the registration replay cache. Every write commits durably before it returns
/// (`synchronous=FULL`), so QUEUED is only sent for bundles that survive a crash.
///
/// Queued bundles are keyed by their ``YaokCrypto/BundleID`` (schema version 2): the message
/// ID alone is the sender's choice and visible to neighbours, so keying by it let anyone
/// squat a victim's ID with a bundle of their own.
///
/// Not thread-safe by itself beyond what ``SQLCipherDatabase`` serialises; the engine calls
/// it from one queue.
// @unchecked: no state but `database`, which serialises every statement; the engine calls it from one queue.
public final class RelayQueueStore: RelayStore, @unchecked Sendable {
    public let database: SQLCipherDatabase

    /// Version 1 of the queue, keyed by message ID. Kept verbatim: it is what older relays
    /// created, and what version 2 migrates from (the migration test keeps its own copy, so
    /// an edit here cannot make it test something older relays never wrote).
    static let version1Script = """
        CREATE TABLE relay_queue (
            message_id BLOB PRIMARY KEY,
            recipient BLOB NOT NULL,
            sender BLOB NOT NULL,
            bundle BLOB NOT NULL,
            queued_ms INTEGER NOT NULL,
            expires_ms INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX relay_queue_recipient ON relay_queue (recipient, queued_ms);
        CREATE INDEX relay_queue_expiry ON relay_queue (expires_ms);
        CREATE TABLE relay_attachments (
            user_id BLOB PRIMARY KEY,
            owner BLOB NOT NULL,
            expires_ms INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE relay_nonces (
            nonce_key BLOB PRIMARY KEY,
            expires_ms INTEGER NOT NULL
        ) WITHOUT ROWID;
        """

    /// Rows copied per step when re-keying (bounds memory: bundles are up to 10.5 KB).
    static let migrationBatch = 256

    static func migrations(logger: Logger) -> [Migration] {
        [
            Migration(version: 1, script: version1Script),
            // Version 2: the queue keyed by bundle ID, computed from each stored bundle. A row
            // whose bundle does not parse has no bundle ID, so it cannot be routed or
            // deduplicated: dropped, with a log line (short message ID only).
            Migration(version: 2) { db in
                try db.executeScript("""
                    CREATE TABLE relay_queue_v2 (
                        bundle_id BLOB PRIMARY KEY,
                        recipient BLOB NOT NULL,
                        sender BLOB NOT NULL,
                        bundle BLOB NOT NULL,
                        queued_ms INTEGER NOT NULL,
                        expires_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    """, purpose: "creating the queue keyed by bundle ID")
                let total = try db.scalar("SELECT count(*) FROM relay_queue", purpose: "counting the old queue")?.intValue ?? 0
                var after: [UInt8] = []
                var moved = 0, dropped = 0
                while true {
                    let rows = try db.query("""
                        SELECT message_id, recipient, sender, bundle, queued_ms, expires_ms FROM relay_queue
                        WHERE message_id > ? ORDER BY message_id LIMIT ?
                        """, [.blob(after), .int(migrationBatch)], purpose: "reading the old queue")
                    guard !rows.isEmpty else { break }
                    for row in rows {
                        let messageID = row[0].blobValue ?? []
                        after = messageID
                        let short = Hex.encode(messageID.prefix(4))
                        guard let bytes = row[3].blobValue, let queued = row[4].int64Value, let expires = row[5].int64Value else {
                            dropped += 1
                            logger.warning("relay queue migration: dropped queued row \(short): incomplete row")
                            continue
                        }
                        let envelope: Envelope
                        do { envelope = try YaokWire.Bundle(parsing: bytes).envelope } catch {
                            dropped += 1
                            logger.warning("relay queue migration: dropped queued row \(short): the bundle does not parse: \(error)")
                            continue
                        }
                        // Recipient and sender from the envelope itself: they are what the row was routed by.
                        try db.execute("""
                            INSERT OR IGNORE INTO relay_queue_v2 (bundle_id, recipient, sender, bundle, queued_ms, expires_ms)
                            VALUES (?, ?, ?, ?, ?, ?)
                            """, [.blob(envelope.bundleID), .blob(envelope.recipientUserID), .blob(envelope.senderUserID),
                                  .blob(bytes), .integer(queued), .integer(expires)], purpose: "re-keying a queued bundle")
                        moved += 1
                    }
                }
                // Keys that are not blobs never compare greater than one: say so rather than lose them silently.
                let unread = total - moved - dropped
                if unread > 0 {
                    dropped += unread
                    logger.warning("relay queue migration: dropped \(unread) queued rows whose message ID is not a blob")
                }
                try db.executeScript("""
                    DROP TABLE relay_queue;
                    ALTER TABLE relay_queue_v2 RENAME TO relay_queue;
                    CREATE INDEX relay_queue_recipient ON relay_queue (recipient, queued_ms);
                    CREATE INDEX relay_queue_expiry ON relay_queue (expires_ms);
                    """, purpose: "replacing the queue keyed by message ID")
                if moved + dropped > 0 {
                    logger.notice("relay queue migration: re-keyed \(moved) queued bundles by bundle ID, dropped \(dropped)")
                }
            },
            // Version 3: registrations v2. Attachments recorded from v1 registrations (bearer
            // tokens: "owner" was whoever registered first on the session, possibly an
            // attacker) are forgotten; hubs re-carry their phones' v2 registrations within
            // minutes (phones renew every 4 minutes while linked).
            Migration(version: 3) { db in
                let n = try db.scalar("SELECT count(*) FROM relay_attachments", purpose: "counting v1 attachments")?.intValue ?? 0
                try db.execute("DELETE FROM relay_attachments", purpose: "forgetting attachments made from v1 registrations")
                if n > 0 { logger.notice("relay registration migration: forgot \(n) phone attachments made from v1 registrations") }
            },
            // Version 4: delivered bundle IDs, kept until the bundle's expiry, so a copy sent
            // again after its ACK is a duplicate and not queued (and delivered) a second time.
            Migration(version: 4, script: """
                CREATE TABLE relay_delivered (
                    bundle_id BLOB PRIMARY KEY,
                    expires_ms INTEGER NOT NULL
                ) WITHOUT ROWID;
                """),
        ]
    }

    /// Opens the store on `database`, creating or migrating its tables; `logger` hears about
    /// rows a migration had to drop.
    public init(database: SQLCipherDatabase, logger: Logger = Logger(label: "yaok-relay.store")) throws {
        self.database = database
        try database.migrate(component: "relay", Self.migrations(logger: logger))
    }

    /// Inserts a bundle under its bundle ID; false when that bundle ID is already queued.
    public func insert(bundleID: [UInt8], recipient: [UInt8], sender: [UInt8], bundle: [UInt8], queuedMs: Int64, expiresMs: Int64) throws -> Bool {
        try database.withExclusiveAccess {
            try database.execute("INSERT OR IGNORE INTO relay_queue (bundle_id, recipient, sender, bundle, queued_ms, expires_ms) VALUES (?, ?, ?, ?, ?, ?)",
                                 [.blob(bundleID), .blob(recipient), .blob(sender), .blob(bundle), .integer(queuedMs), .integer(expiresMs)],
                                 purpose: "queueing a bundle")
            return database.changes == 1
        }
    }

    /// Whether a bundle ID is queued.
    public func contains(_ bundleID: [UInt8]) throws -> Bool {
        try database.scalar("SELECT 1 FROM relay_queue WHERE bundle_id = ?", [.blob(bundleID)], purpose: "looking up a bundle") != nil
    }

    /// The recipient of a queued bundle, or nil.
    public func recipient(of bundleID: [UInt8]) throws -> [UInt8]? {
        try database.scalar("SELECT recipient FROM relay_queue WHERE bundle_id = ?", [.blob(bundleID)], purpose: "looking up a recipient")?.blobValue
    }

    /// The recipient and the sender of a queued bundle, or nil.
    public func recipientAndSender(of bundleID: [UInt8]) throws -> (recipient: [UInt8], sender: [UInt8])? {
        let rows = try database.query("SELECT recipient, sender FROM relay_queue WHERE bundle_id = ?", [.blob(bundleID)], purpose: "looking up a recipient")
        guard let row = rows.first, let r = row[0].blobValue, let s = row[1].blobValue else { return nil }
        return (r, s)
    }

    /// Deletes a queued bundle; true if it was there.
    public func delete(_ bundleID: [UInt8]) throws -> Bool {
        try database.transaction {
            try database.execute("INSERT OR IGNORE INTO relay_delivered (bundle_id, expires_ms) SELECT bundle_id, expires_ms FROM relay_queue WHERE bundle_id = ?",
                                 [.blob(bundleID)], purpose: "remembering a delivered bundle")
            return try database.withExclusiveAccess {
                try database.execute("DELETE FROM relay_queue WHERE bundle_id = ?", [.blob(bundleID)], purpose: "deleting an acknowledged bundle")
                return database.changes == 1
            }
        }
    }

    public func isDelivered(_ bundleID: [UInt8]) throws -> Bool {
        try database.scalar("SELECT 1 FROM relay_delivered WHERE bundle_id = ?", [.blob(bundleID)], purpose: "looking up a delivered bundle") != nil
    }

    /// Bundle IDs queued for `recipient`, oldest first.
    public func bundleIDs(for recipient: [UInt8], nowMs: Int64, limit: Int) throws -> [[UInt8]] {
        try database.query("SELECT bundle_id FROM relay_queue WHERE recipient = ? AND expires_ms > ? ORDER BY queued_ms LIMIT ?",
                           [.blob(recipient), .integer(nowMs), .int(limit)], purpose: "listing queued bundles")
            .compactMap { $0.first?.blobValue }
    }

    /// A queued bundle's bytes.
    public func bundle(_ bundleID: [UInt8]) throws -> [UInt8]? {
        try database.scalar("SELECT bundle FROM relay_queue WHERE bundle_id = ?", [.blob(bundleID)], purpose: "reading a bundle")?.blobValue
    }

    /// Queued bundles per envelope sender (the per-sender share of the total).
    public func countsBySender() throws -> [[UInt8]: Int] {
        var out: [[UInt8]: Int] = [:]
        for row in try database.query("SELECT sender, count(*) FROM relay_queue GROUP BY sender", purpose: "counting senders") {
            if let r = row[0].blobValue, let n = row[1].intValue { out[r] = n }
        }
        return out
    }

    /// Queue length per recipient.
    public func countsByRecipient() throws -> [[UInt8]: Int] {
        var out: [[UInt8]: Int] = [:]
        for row in try database.query("SELECT recipient, count(*) FROM relay_queue GROUP BY recipient", purpose: "counting queues") {
            if let r = row[0].blobValue, let n = row[1].intValue { out[r] = n }
        }
        return out
    }

    /// Deletes expired bundles, attachments and nonces; returns the bundles deleted.
    public func expire(nowMs: Int64) throws -> Int {
        try database.transaction {
            try database.execute("DELETE FROM relay_queue WHERE expires_ms <= ?", [.integer(nowMs)], purpose: "expiring bundles")
            let n = database.changes
            try database.execute("DELETE FROM relay_attachments WHERE expires_ms <= ?", [.integer(nowMs)], purpose: "expiring attachments")
            try database.execute("DELETE FROM relay_nonces WHERE expires_ms <= ?", [.integer(nowMs)], purpose: "expiring nonces")
            try database.execute("DELETE FROM relay_delivered WHERE expires_ms <= ?", [.integer(nowMs)], purpose: "forgetting expired deliveries")
            return n
        }
    }

    /// Records that `user` is reachable through `owner` until `expiresMs`.
    public func saveAttachment(user: [UInt8], owner: [UInt8], expiresMs: Int64) throws {
        try database.execute("INSERT OR REPLACE INTO relay_attachments (user_id, owner, expires_ms) VALUES (?, ?, ?)",
                             [.blob(user), .blob(owner), .integer(expiresMs)], purpose: "saving an attachment")
    }

    /// Live attachments: user → (owner, expiry).
    public func attachments(nowMs: Int64) throws -> [[UInt8]: (owner: [UInt8], expiresMs: Int64)] {
        var out: [[UInt8]: (owner: [UInt8], expiresMs: Int64)] = [:]
        for row in try database.query("SELECT user_id, owner, expires_ms FROM relay_attachments WHERE expires_ms > ?", [.integer(nowMs)], purpose: "loading attachments") {
            if let u = row[0].blobValue, let o = row[1].blobValue, let e = row[2].int64Value { out[u] = (o, e) }
        }
        return out
    }

    /// Remembers a used registration nonce (so a replay after a restart is still refused).
    public func saveNonce(_ key: [UInt8], expiresMs: Int64) throws {
        try database.execute("INSERT OR REPLACE INTO relay_nonces (nonce_key, expires_ms) VALUES (?, ?)",
                             [.blob(key), .integer(expiresMs)], purpose: "saving a registration nonce")
    }

    /// Records a nonce unless an unexpired one is recorded (an expired one is replaced);
    /// false when it is (a replay).
    public func claimNonce(_ key: [UInt8], expiresMs: Int64, nowMs: Int64) throws -> Bool {
        try database.withExclusiveAccess {
            // SQLite 3.15 (this SQLCipher) has no UPSERT: drop an expired row, then insert if absent.
            try database.execute("DELETE FROM relay_nonces WHERE nonce_key = ? AND expires_ms <= ?",
                                 [.blob(key), .integer(nowMs)], purpose: "dropping an expired registration nonce")
            try database.execute("INSERT OR IGNORE INTO relay_nonces (nonce_key, expires_ms) VALUES (?, ?)",
                                 [.blob(key), .integer(expiresMs)], purpose: "claiming a registration nonce")
            return database.changes == 1
        }
    }

    /// Unexpired nonce keys.
    public func nonces(nowMs: Int64) throws -> [[UInt8]: Int64] {
        var out: [[UInt8]: Int64] = [:]
        for row in try database.query("SELECT nonce_key, expires_ms FROM relay_nonces WHERE expires_ms > ?", [.integer(nowMs)], purpose: "loading nonces") {
            if let k = row[0].blobValue, let e = row[1].int64Value { out[k] = e }
        }
        return out
    }

    // MARK: RelayStore (one node: the engine's memory is authoritative)

    /// False: this file belongs to one relay process.
    public var isShared: Bool { false }

    /// One SQLCipher transaction (`synchronous=FULL`: durable on return).
    public func transaction<T>(_ body: () throws -> T) throws -> T { try database.transaction(body) }

    /// Live attachments owned by `owner`.
    public func attachments(ownedBy owner: [UInt8], nowMs: Int64) throws -> [[UInt8]: Int64] {
        var out: [[UInt8]: Int64] = [:]
        for row in try database.query("SELECT user_id, expires_ms FROM relay_attachments WHERE owner = ? AND expires_ms > ?",
                                      [.blob(owner), .integer(nowMs)], purpose: "loading a hub's attachments") {
            if let u = row[0].blobValue, let e = row[1].int64Value { out[u] = e }
        }
        return out
    }

    /// Always granted: one node, whose engine keeps the leases.
    public func lease(_ bundleID: [UInt8], untilMs: Int64, nowMs: Int64) throws -> Bool { true }

    /// Empty: no other node can die holding leases.
    public func recipientsWithLeasesExpired(afterMs: Int64, untilMs: Int64) throws -> [[UInt8]] { [] }

    /// Nil: the engine's token bucket counts sends for one node.
    public func chargeSend(sender: [UInt8], nowMs: Int64, limit: Int) throws -> Int64? { nil }

    /// Closes the database.
    public func close() { database.close() }
}
