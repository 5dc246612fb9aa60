import YaokCrypto
import Foundation
import YaokStore
import YaokWire
import enum YaokPluginKit.Hex

/// A contact: someone this endpoint accepts messages from and can write to.
public struct Contact: Sendable, Equatable, Codable {
    public var userID: [UInt8]
    public var name: String
    public var signingKey: [UInt8]
    public var kxKey: [UInt8]
    /// The owner compared fingerprints out of band.
    public var verified: Bool
    public var addedMs: Int64
}

/// A received message.
public struct InboxMessage: Sendable, Equatable, Codable {
    public var messageID: [UInt8]
    public var senderUserID: [UInt8]
    public var senderName: String
    public var createdMs: Int64
    public var receivedMs: Int64
    public var text: String
}

/// Something this endpoint sent (a message or a receipt) and what became of it.
public struct OutboxItem: Sendable, Equatable, Codable {
    public enum State: String, Sendable, Codable {
        /// Not yet taken by a hub or relay.
        case pending
        /// A hub or relay took custody.
        case handedOver = "handed_over"
        /// The recipient's delivery receipt arrived.
        case delivered
        /// The recipient's read receipt arrived.
        case read
        /// A hub refused it for good.
        case refused
    }
    public var messageID: [UInt8]
    public var recipientUserID: [UInt8]
    public var kind: UInt8
    public var createdMs: Int64
    public var expiresMs: Int64
    public var bundle: [UInt8]
    public var state: State
}

/// A security-relevant event, recorded without message content.
public struct SecurityEvent: Sendable, Equatable, Codable {
    public enum Kind: String, Sendable, Codable {
        case nonContact = "non_contact"
        case badSignature = "bad_signature"
        case decryptFailed = "decrypt_failed"
        case duplicate
        case replay
        case wrongRecipient = "wrong_recipient"
        case expired
        case forgedReceipt = "forged_receipt"
    }
    public var atMs: Int64
    public var kind: Kind
    /// The first 8 hex digits of the sender's user ID.
    public var sender: String
    public var messageID: [UInt8]
}

/// Keeps a session's group transaction to itself (see ``EndpointStore/beginGroup(owner:)``).
///
/// While a group is open every statement on the connection joins it, and nothing in it is
/// durable until the group commits. A caller on another thread (a UI composing, a test
/// reading the inbox) must neither join it (its "durable when it returns" would be false,
/// and a failed group would undo its change) nor read rows the group may still roll back:
/// it waits until the group commits, and no group opens while such a call is in progress.
// @unchecked: `owner` and `outside` only under `cond`.
final class GroupGate: @unchecked Sendable {
    /// Set on the owning session's serial queue: names the owner for calls made on it.
    static let ownerKey = DispatchSpecificKey<ObjectIdentifier>()
    private let cond = NSCondition()
    private var owner: ObjectIdentifier?
    private var outside = 0

    /// Whether the caller runs on the queue of the open group's owner.
    var callerOwnsGroup: Bool {
        cond.lock()
        defer { cond.unlock() }
        return owner != nil && DispatchQueue.getSpecific(key: Self.ownerKey) == owner
    }

    func run<T>(_ body: () throws -> T) rethrows -> T {
        cond.lock()
        if let o = owner, DispatchQueue.getSpecific(key: Self.ownerKey) == o {
            cond.unlock()
            return try body()
        }
        while owner != nil { cond.wait() }
        outside += 1
        cond.unlock()
        defer {
            cond.lock()
            outside -= 1
            if outside == 0 { cond.broadcast() }
            cond.unlock()
        }
        return try body()
    }

    func open(_ id: ObjectIdentifier, _ begin: () throws -> Void) throws {
        cond.lock()
        guard owner != id else {
            cond.unlock()
            throw StoreError.sqlite(code: 21, message: "a group is already open", purpose: "beginning a group transaction")
        }
        while owner != nil || outside > 0 { cond.wait() }
        owner = id
        cond.unlock()
        do {
            try begin()
        } catch {
            close()
            throw error
        }
    }

    func close() {
        cond.lock()
        owner = nil
        cond.broadcast()
        cond.unlock()
    }
}

/// The endpoint's SQLCipher database: contacts, inbox, outbox, security events.
///
/// What was already received is known from the rows a bundle leaves, not from a list of seen
/// IDs: a message is in the inbox under its bundle ID, and a receipt has set its bit in the
/// outbox row of the message it acknowledges. (A separate seen list keyed by the random
/// bundle ID cost a b-tree page per bundle per commit: about a third of a sender's writes.)
///
/// Every write carries a conflict clause (OR FAIL / OR IGNORE / OR REPLACE): with SQLite's
/// default (ABORT) a statement inside a transaction keeps a statement journal, and SQLCipher
/// encrypts every page it journals, several times the statement's own cost.
// @unchecked: only `let`s: the database (serialised by its lock) and the gate (under its condition).
public final class EndpointStore: @unchecked Sendable {
    let db: SQLCipherDatabase
    let gate = GroupGate()

    // MARK: Group commit

    /// Opens a group transaction owned by `owner`, a session whose serial `queue` makes every
    /// store call until ``commitGroup()`` (``SQLCipherDatabase/beginGroup()``: they share one
    /// durable commit). Calls from anywhere else wait until the group commits. Waits first
    /// for calls in progress elsewhere to finish.
    func beginGroup(owner: ObjectIdentifier) throws {
        try gate.open(owner) { try db.beginGroup() }
    }

    /// Commits the open group durably, or rolls it back whole and throws (none of its changes
    /// happened). Call it from the owner's queue. Returns whether the group changed anything.
    @discardableResult
    func commitGroup() throws -> Bool {
        defer { gate.close() }
        return try db.commitGroup()
    }

    /// Whether the open group has changed anything yet (call it from the owner's queue).
    var groupHasChanges: Bool { db.groupHasChanges }

    /// Whether the caller is inside its own open group (its changes are not durable yet).
    var callerInGroup: Bool { gate.callerOwnsGroup }

    public init(database: SQLCipherDatabase) throws {
        db = database
        try db.execute("""
            CREATE TABLE IF NOT EXISTS profile (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """)
        try db.execute("""
            CREATE TABLE IF NOT EXISTS contacts (user_id BLOB PRIMARY KEY, name TEXT NOT NULL, signing_key BLOB NOT NULL,
                kx_key BLOB NOT NULL, verified INTEGER NOT NULL DEFAULT 0, added_ms INTEGER NOT NULL);
            """)
        // Keyed by bundle ID (sender + message ID): contacts cannot collide with each other.
        try db.execute("""
            CREATE TABLE IF NOT EXISTS inbox_messages (bundle_id BLOB PRIMARY KEY, message_id BLOB NOT NULL, sender BLOB NOT NULL,
                created_ms INTEGER NOT NULL, received_ms INTEGER NOT NULL, text TEXT NOT NULL);
            """)
        // receipts_seen: one bit per receipt kind that arrived for this item (ReceiptKindBit).
        try db.execute("""
            CREATE TABLE IF NOT EXISTS outbox (message_id BLOB PRIMARY KEY, recipient BLOB NOT NULL, kind INTEGER NOT NULL,
                created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL, bundle BLOB NOT NULL, state TEXT NOT NULL,
                receipts_seen INTEGER NOT NULL DEFAULT 0, resend_after_ms INTEGER);
            """)
        let tables = Set(try db.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0.first?.textValue })
        try migrateMessageIDTables(tables)
        try migrateSeenListToReceiptBits(tables)
        // resend_after_ms: an item an untrusted hub acknowledged goes back to pending then.
        let outboxColumns = Set(try db.query("PRAGMA table_info(outbox)").compactMap { $0.count > 1 ? $0[1].textValue : nil })
        if !outboxColumns.contains("resend_after_ms") { try db.execute("ALTER TABLE outbox ADD COLUMN resend_after_ms INTEGER") }
        // The session asks for the oldest pending items after every acknowledgement: without
        // this index each ask read (and decrypted) the whole outbox, bundles and all.
        try db.execute("CREATE INDEX IF NOT EXISTS outbox_by_state ON outbox (state, created_ms);")
        try db.execute("""
            CREATE TABLE IF NOT EXISTS security_events (id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL,
                kind TEXT NOT NULL, sender TEXT NOT NULL, message_id BLOB NOT NULL);
            """)
    }

    // MARK: Profile

    public func profile(_ key: String) throws -> String? {
        try gate.run {
            try db.query("SELECT value FROM profile WHERE key = ?", [.text(key)]).first?.first?.textValue
        }
    }

    public func setProfile(_ key: String, _ value: String) throws {
        try gate.run {
            try db.execute("INSERT OR REPLACE INTO profile (key, value) VALUES (?, ?)", [.text(key), .text(value)])
        }
    }

    // MARK: Contacts

    public func addContact(_ c: Contact) throws {
        try gate.run {
            try db.execute("INSERT OR REPLACE INTO contacts (user_id, name, signing_key, kx_key, verified, added_ms) VALUES (?, ?, ?, ?, ?, ?)",
                           [.blob(c.userID), .text(c.name), .blob(c.signingKey), .blob(c.kxKey), .integer(c.verified ? 1 : 0), .integer(c.addedMs)])
        }
    }

    public func contacts() throws -> [Contact] {
        try gate.run {
            try db.query("SELECT user_id, name, signing_key, kx_key, verified, added_ms FROM contacts ORDER BY name", []).map(Self.contact)
        }
    }

    public func contact(userID: [UInt8]) throws -> Contact? {
        try gate.run {
            try db.query("SELECT user_id, name, signing_key, kx_key, verified, added_ms FROM contacts WHERE user_id = ?", [.blob(userID)]).first.map(Self.contact)
        }
    }

    public func setVerified(_ userID: [UInt8]) throws {
        try gate.run {
            try db.execute("UPDATE OR FAIL contacts SET verified = 1 WHERE user_id = ?", [.blob(userID)])
        }
    }

    public func removeContact(_ userID: [UInt8]) throws {
        try gate.run {
            try db.execute("DELETE FROM contacts WHERE user_id = ?", [.blob(userID)])
        }
    }

    static func contact(_ r: [SQLValue]) -> Contact {
        Contact(userID: r[0].blobValue ?? [], name: r[1].textValue ?? "", signingKey: r[2].blobValue ?? [], kxKey: r[3].blobValue ?? [],
                verified: r[4].int64Value == 1, addedMs: r[5].int64Value ?? 0)
    }

    /// Files written before bundle IDs kept the inbox and seen list by message ID: move them
    /// over once (the bundle ID is computed from the stored sender and message ID).
    private func migrateMessageIDTables(_ tables: Set<String>) throws {
        guard tables.contains("inbox") || tables.contains("seen") else { return }
        try db.transaction {
            if tables.contains("inbox") {
                for r in try db.query("SELECT message_id, sender, created_ms, received_ms, text FROM inbox") {
                    guard let m = r[0].blobValue, let s = r[1].blobValue, m.count == 16, s.count == 32 else { continue }
                    let id = BundleID.of(senderUserID: s, messageID: m)
                    try db.execute("""
                        INSERT OR IGNORE INTO inbox_messages (bundle_id, message_id, sender, created_ms, received_ms, text) \
                        VALUES (?, ?, ?, ?, ?, ?)
                        """, [.blob(id), .blob(m), .blob(s), r[2], r[3], r[4]])
                }
                try db.execute("DROP TABLE inbox")
            }
            // Other seen entries (receipts, non-contacts) named no sender: they are dropped.
            if tables.contains("seen") { try db.execute("DROP TABLE seen") }
        }
    }

    /// Stores made before receipts left a bit in the outbox kept a list of seen bundle IDs:
    /// set the bits the items' states imply, once, and drop the list. Every message on it is
    /// in the inbox under the same ID; a receipt on it moved its item to `delivered` or `read`.
    private func migrateSeenListToReceiptBits(_ tables: Set<String>) throws {
        // PRAGMA, not pragma_table_info(): this SQLCipher's SQLite predates table-valued pragmas.
        let columns = Set(try db.query("PRAGMA table_info(outbox)").compactMap { $0.count > 1 ? $0[1].textValue : nil })
        guard !columns.contains("receipts_seen") || tables.contains("seen_bundles") else { return }
        try db.transaction {
            if !columns.contains("receipts_seen") {
                try db.execute("ALTER TABLE outbox ADD COLUMN receipts_seen INTEGER NOT NULL DEFAULT 0")
            }
            // A read item may or may not have had its delivery receipt: either way a later one
            // changes nothing, so both bits.
            try db.execute("UPDATE OR FAIL outbox SET receipts_seen = CASE state WHEN ? THEN ? WHEN ? THEN ? ELSE 0 END",
                           [.text(OutboxItem.State.delivered.rawValue), .integer(ReceiptKindBit.delivery),
                            .text(OutboxItem.State.read.rawValue), .integer(ReceiptKindBit.delivery | ReceiptKindBit.read)])
            try db.execute("DROP TABLE IF EXISTS seen_bundles")
        }
    }

    // MARK: Inbox and receipts

    /// Whether a message with this bundle ID is already in the inbox (a duplicate or a replay).
    public func hasMessage(bundleID: [UInt8]) throws -> Bool {
        try gate.run {
            try !db.query("SELECT 1 FROM inbox_messages WHERE bundle_id = ?", [.blob(bundleID)]).isEmpty
        }
    }

    /// Stores a received message and queues its delivery receipt, in one durable transaction
    /// (inside a session's group: both or neither, durable with the group's commit). The
    /// inbox row is what makes a second copy a duplicate.
    public func receive(_ m: InboxMessage, bundleID: [UInt8], receipt: OutboxItem) throws {
        try gate.run {
            try db.transaction {
                try db.execute("""
                    INSERT OR FAIL INTO inbox_messages (bundle_id, message_id, sender, created_ms, received_ms, text) VALUES (?, ?, ?, ?, ?, ?)
                    """, [.blob(bundleID), .blob(m.messageID), .blob(m.senderUserID), .integer(m.createdMs), .integer(m.receivedMs), .text(m.text)])
                try enqueue(receipt)
            }
        }
    }

    /// The bit an outbox item's `receipts_seen` keeps for each receipt kind.
    enum ReceiptKindBit {
        static let delivery: Int64 = 1
        static let read: Int64 = 2
    }

    /// What a verified receipt did to the item it acknowledges.
    public enum ReceiptOutcome: Sendable, Equatable {
        /// It moved the item forward (or found it already further on) and is now recorded.
        case applied
        /// A receipt of this kind for this item arrived before: nothing changed.
        case duplicate
        /// No item of ours with that message ID went to the receipt's signer.
        case notFromItsRecipient
    }

    /// Applies a receipt (a read receipt if `read`, else a delivery receipt) signed by `signer`
    /// to our item `messageID`, in one statement: sets the kind's bit and moves the state
    /// forward (never backwards).
    public func applyReceipt(read: Bool, for messageID: [UInt8], signer: [UInt8]) throws -> ReceiptOutcome {
        let bit = read ? ReceiptKindBit.read : ReceiptKindBit.delivery
        let target: OutboxItem.State = read ? .read : .delivered
        let earlier = Self.states(before: target).map { SQLValue.text($0.rawValue) }
        return try gate.run {
            guard let row = try db.query("SELECT recipient, receipts_seen FROM outbox WHERE message_id = ?", [.blob(messageID)]).first,
                  row[0].blobValue == signer else { return .notFromItsRecipient }
            guard (row[1].int64Value ?? 0) & bit == 0 else { return .duplicate }
            try db.execute("UPDATE OR FAIL outbox SET receipts_seen = receipts_seen | ?, state = CASE WHEN state IN ("
                           + earlier.map { _ in "?" }.joined(separator: ", ") + ") THEN ? ELSE state END WHERE message_id = ?",
                           [.integer(bit)] + earlier + [.text(target.rawValue), .blob(messageID)])
            return .applied
        }
    }

    public func inbox() throws -> [InboxMessage] {
        try gate.run {
            try db.query("""
                SELECT i.message_id, i.sender, COALESCE(c.name, ''), i.created_ms, i.received_ms, i.text
                FROM inbox_messages i LEFT JOIN contacts c ON c.user_id = i.sender ORDER BY i.received_ms, i.created_ms
                """, []).map {
                InboxMessage(messageID: $0[0].blobValue ?? [], senderUserID: $0[1].blobValue ?? [], senderName: $0[2].textValue ?? "",
                             createdMs: $0[3].int64Value ?? 0, receivedMs: $0[4].int64Value ?? 0, text: $0[5].textValue ?? "")
            }
        }
    }

    // MARK: Outbox

    public func enqueue(_ item: OutboxItem) throws {
        try gate.run {
            try db.execute("INSERT OR IGNORE INTO outbox (message_id, recipient, kind, created_ms, expires_ms, bundle, state) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [.blob(item.messageID), .blob(item.recipientUserID), .integer(Int64(item.kind)), .integer(item.createdMs),
                            .integer(item.expiresMs), .blob(item.bundle), .text(item.state.rawValue)])
        }
    }

    /// Outbox items, oldest first, optionally only in `states` and at most `limit`.
    public func outbox(states: [OutboxItem.State]? = nil, limit: Int = Int.max) throws -> [OutboxItem] {
        try gate.run {
            var sql = "SELECT message_id, recipient, kind, created_ms, expires_ms, bundle, state FROM outbox"
            var params: [SQLValue] = []
            if let states {
                sql += " WHERE state IN (" + states.map { _ in "?" }.joined(separator: ", ") + ")"
                params = states.map { .text($0.rawValue) }
            }
            sql += " ORDER BY created_ms, rowid LIMIT ?"
            params.append(.integer(Int64(min(limit, Int(Int64.max)))))
            return try db.query(sql, params).map(Self.outboxItem)
        }
    }

    static func outboxItem(_ r: [SQLValue]) -> OutboxItem {
        OutboxItem(messageID: r[0].blobValue ?? [], recipientUserID: r[1].blobValue ?? [], kind: UInt8(r[2].int64Value ?? 1),
                   createdMs: r[3].int64Value ?? 0, expiresMs: r[4].int64Value ?? 0, bundle: r[5].blobValue ?? [],
                   state: OutboxItem.State(rawValue: r[6].textValue ?? "") ?? .pending)
    }

    /// The message IDs and expiry times of pending items, oldest first, without their bundles
    /// (the session reads a bundle only when it sends it).
    public func pendingOutbox(limit: Int) throws -> [(messageID: [UInt8], expiresMs: Int64)] {
        try gate.run {
            try db.query("SELECT message_id, expires_ms FROM outbox WHERE state = ? ORDER BY created_ms, rowid LIMIT ?",
                         [.text(OutboxItem.State.pending.rawValue), .integer(Int64(max(0, limit)))]).map { ($0[0].blobValue ?? [], $0[1].int64Value ?? 0) }
        }
    }

    public func outboxItem(_ id: [UInt8]) throws -> OutboxItem? {
        try gate.run {
            try db.query("SELECT message_id, recipient, kind, created_ms, expires_ms, bundle, state FROM outbox WHERE message_id = ?",
                         [.blob(id)]).first.map(Self.outboxItem)
        }
    }

    /// Queues many items in one durable transaction.
    public func enqueue(_ items: [OutboxItem]) throws {
        try gate.run {
            try db.transaction { for item in items { try enqueue(item) } }
        }
    }

    /// Moves an outbox item forward; never backwards (a late custody ack does not undo delivery).
    /// One statement: the state it may move from is in its WHERE clause.
    public func advance(_ id: [UInt8], to state: OutboxItem.State) throws {
        let earlier = Self.states(before: state)
        guard !earlier.isEmpty else { return }
        try gate.run {
            try db.execute("UPDATE OR FAIL outbox SET state = ?, resend_after_ms = NULL WHERE message_id = ? AND state IN (" + earlier.map { _ in "?" }.joined(separator: ", ") + ")",
                           [.text(state.rawValue), .blob(id)] + earlier.map { .text($0.rawValue) })
        }
    }

    /// An untrusted hub acknowledged a pending item: it counts as handed over, but goes back
    /// to pending at `resendAfterMs` (``requeueUntrustedHandovers(nowMs:)``) unless a
    /// receipt moved it on first (Docs/protocol.md §5, "Which hubs a phone trusts").
    public func handedToUntrustedHub(_ id: [UInt8], resendAfterMs: Int64) throws {
        try gate.run {
            try db.execute("UPDATE OR FAIL outbox SET state = ?, resend_after_ms = ? WHERE message_id = ? AND state IN (?, ?)",
                           [.text(OutboxItem.State.handedOver.rawValue), .integer(resendAfterMs), .blob(id),
                            .text(OutboxItem.State.pending.rawValue), .text(OutboxItem.State.refused.rawValue)])
        }
    }

    /// Items untrusted hubs acknowledged whose resend time has come go back to pending;
    /// returns how many.
    @discardableResult
    public func requeueUntrustedHandovers(nowMs: Int64) throws -> Int {
        try gate.run {
            try db.withExclusiveAccess {
                try db.execute("UPDATE OR FAIL outbox SET state = ?, resend_after_ms = NULL WHERE state = ? AND resend_after_ms <= ?",
                               [.text(OutboxItem.State.pending.rawValue), .text(OutboxItem.State.handedOver.rawValue), .integer(nowMs)])
                return db.changes
            }
        }
    }

    /// When an item handed to an untrusted hub goes back to pending (nil: not scheduled).
    public func resendAfterMs(_ id: [UInt8]) throws -> Int64? {
        try gate.run {
            try db.query("SELECT resend_after_ms FROM outbox WHERE message_id = ?", [.blob(id)]).first?[0].int64Value
        }
    }

    /// Deletes the message whose ID starts with `prefix` (lowercase hex) if nobody took it yet
    /// (pending or refused); returns its ID. Receipts are not listed and cannot be dropped.
    public func dropUnsentMessage(prefix: String) throws -> [UInt8] {
        try gate.run {
            let matches = try outbox().filter {
                $0.kind == Envelope.Kind.message.rawValue && Hex.encode($0.messageID).hasPrefix(prefix)
            }
            guard prefix.count >= 4, !matches.isEmpty else { throw EndpointError.noOutboxMessage(prefix) }
            guard matches.count == 1, let item = matches.first else { throw EndpointError.ambiguousOutboxMessage(prefix, matches.count) }
            guard item.state == .pending || item.state == .refused else {
                throw EndpointError.outboxMessageAlreadyTaken(String(Hex.encode(item.messageID).prefix(8)), item.state.rawValue)
            }
            try db.execute("DELETE FROM outbox WHERE message_id = ? AND state IN (?, ?)",
                           [.blob(item.messageID), .text(OutboxItem.State.pending.rawValue), .text(OutboxItem.State.refused.rawValue)])
            return item.messageID
        }
    }

    /// Outbox states in the order an item moves through them.
    static let stateOrder: [OutboxItem.State] = [.pending, .refused, .handedOver, .delivered, .read]

    /// The states an item may move to `state` from (every earlier one in ``stateOrder``).
    static func states(before state: OutboxItem.State) -> ArraySlice<OutboxItem.State> {
        Self.stateOrder.prefix { $0 != state }
    }

    // MARK: Security events

    public func record(_ e: SecurityEvent) throws {
        try gate.run {
            try db.execute("INSERT OR FAIL INTO security_events (at_ms, kind, sender, message_id) VALUES (?, ?, ?, ?)",
                           [.integer(e.atMs), .text(e.kind.rawValue), .text(e.sender), .blob(e.messageID)])
        }
    }

    public func securityEvents() throws -> [SecurityEvent] {
        try gate.run {
            try db.query("SELECT at_ms, kind, sender, message_id FROM security_events ORDER BY id", []).map {
                SecurityEvent(atMs: $0[0].int64Value ?? 0, kind: SecurityEvent.Kind(rawValue: $0[1].textValue ?? "") ?? .replay,
                              sender: $0[2].textValue ?? "", messageID: $0[3].blobValue ?? [])
            }
        }
    }
}
