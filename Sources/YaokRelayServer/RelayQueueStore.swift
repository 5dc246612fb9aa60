import YaokStore

/// The relay's durable state on SQLCipher: queued bundles, phone → hub attachments, and
/// the registration replay cache. Every write commits durably before it returns
/// (`synchronous=FULL`), so QUEUED is only sent for bundles that survive a crash.
///
/// Not thread-safe by itself beyond what ``SQLCipherDatabase`` serialises; the engine calls
/// it from one queue.
public final class RelayQueueStore: @unchecked Sendable {
    public let database: SQLCipherDatabase

    static let migrations: [Migration] = [
        Migration(version: 1, script: """
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
            """),
    ]

    /// Opens the store on `database`, creating or migrating its tables.
    public init(database: SQLCipherDatabase) throws {
        self.database = database
        try database.migrate(component: "relay", Self.migrations)
    }

    /// Inserts a bundle; false when the message ID is already queued.
    public func insert(messageID: [UInt8], recipient: [UInt8], sender: [UInt8], bundle: [UInt8], queuedMs: Int64, expiresMs: Int64) throws -> Bool {
        try database.withExclusiveAccess {
            try database.execute("INSERT OR IGNORE INTO relay_queue (message_id, recipient, sender, bundle, queued_ms, expires_ms) VALUES (?, ?, ?, ?, ?, ?)",
                                 [.blob(messageID), .blob(recipient), .blob(sender), .blob(bundle), .integer(queuedMs), .integer(expiresMs)],
                                 purpose: "queueing a bundle")
            return database.changes == 1
        }
    }

    /// Whether a message ID is queued.
    public func contains(_ messageID: [UInt8]) throws -> Bool {
        try database.scalar("SELECT 1 FROM relay_queue WHERE message_id = ?", [.blob(messageID)], purpose: "looking up a bundle") != nil
    }

    /// The recipient of a queued message, or nil.
    public func recipient(of messageID: [UInt8]) throws -> [UInt8]? {
        try database.scalar("SELECT recipient FROM relay_queue WHERE message_id = ?", [.blob(messageID)], purpose: "looking up a recipient")?.blobValue
    }

    /// Deletes a message; true if it was there.
    public func delete(_ messageID: [UInt8]) throws -> Bool {
        try database.withExclusiveAccess {
            try database.execute("DELETE FROM relay_queue WHERE message_id = ?", [.blob(messageID)], purpose: "deleting an acknowledged bundle")
            return database.changes == 1
        }
    }

    /// Message IDs queued for `recipient`, oldest first.
    public func messageIDs(for recipient: [UInt8], nowMs: Int64, limit: Int) throws -> [[UInt8]] {
        try database.query("SELECT message_id FROM relay_queue WHERE recipient = ? AND expires_ms > ? ORDER BY queued_ms LIMIT ?",
                           [.blob(recipient), .integer(nowMs), .int(limit)], purpose: "listing queued bundles")
            .compactMap { $0.first?.blobValue }
    }

    /// A queued bundle's bytes.
    public func bundle(_ messageID: [UInt8]) throws -> [UInt8]? {
        try database.scalar("SELECT bundle FROM relay_queue WHERE message_id = ?", [.blob(messageID)], purpose: "reading a bundle")?.blobValue
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

    /// Unexpired nonce keys.
    public func nonces(nowMs: Int64) throws -> [[UInt8]: Int64] {
        var out: [[UInt8]: Int64] = [:]
        for row in try database.query("SELECT nonce_key, expires_ms FROM relay_nonces WHERE expires_ms > ?", [.integer(nowMs)], purpose: "loading nonces") {
            if let k = row[0].blobValue, let e = row[1].int64Value { out[k] = e }
        }
        return out
    }
}
