import Foundation
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire

/// Errors from the endpoint.
public enum EndpointError: Error, CustomStringConvertible, Sendable {
    case notInitialised(String)
    case alreadyInitialised(String)
    case unknownContact(String)
    case ambiguousContact(String, [String])
    case ownContactCode
    case badHubAddress(String)
    case emptyMessage
    case noOutboxMessage(String)
    case contactExists(String, verified: Bool)
    case ambiguousOutboxMessage(String, Int)
    case outboxMessageAlreadyTaken(String, String)

    public var description: String {
        switch self {
        case .notInitialised(let home): return "no Ya OK identity in \(home); run `yaok init --name NAME` first"
        case .alreadyInitialised(let home): return "\(home) already holds a Ya OK identity"
        case .unknownContact(let c): return "no contact matches \"\(c)\" (use a name or at least 4 hex digits of the ID)"
        case .ambiguousContact(let c, let names): return "\"\(c)\" matches several contacts: \(names.joined(separator: ", "))"
        case .ownContactCode: return "that contact code is your own"
        case .badHubAddress(let a): return "hub address \"\(a)\" is not of the form udp://HOST:PORT"
        case .emptyMessage: return "the message is empty"
        case .contactExists(let name, let verified):
            return "\(name) is already a contact\(verified ? " (fingerprint verified)" : ""); nothing changed (`yaok contacts remove \(name)` first to replace it)"
        case .noOutboxMessage(let p): return "no sent message has an ID starting with \"\(p)\" (see `yaok outbox`)"
        case .ambiguousOutboxMessage(let p, let n): return "\(n) sent messages have IDs starting with \"\(p)\"; give more digits"
        case .outboxMessageAlreadyTaken(let id, let state):
            return "message \(id) is \(state.replacingOccurrences(of: "_", with: " ")): a hub or the relay has it, it can no longer be dropped"
        }
    }
}

/// A Ya OK user on Linux: identity, contacts, inbox and outbox in an encrypted store.
///
/// It accepts messages only from contacts, verifies every signature, rejects tampered
/// messages, duplicates, replays and future-dated envelopes, and records such events
/// without message content.
// @unchecked: every stored property is a `let`; its state is the store's, which serialises access.
public final class Endpoint: @unchecked Sendable {
    /// Test hook, run right after a received message and its receipt are committed and
    /// before custody is acknowledged: `YAOK_FAULT=exit-after-receive` makes `yaok` exit
    /// there, as a crash would (the receipt-survives-crash test). Inside a session's group
    /// (``HubSession``) that is after the group's commit, before its answers leave.
    // nonisolated(unsafe): a test hook, set once by `yaok listen` before any session starts, only read after.
    nonisolated(unsafe) public static var faultAfterReceive: (() -> Void)?

    public let home: String
    public let identity: Identity
    public let store: EndpointStore
    let database: SQLCipherDatabase
    let now: @Sendable () -> Int64

    static func paths(_ home: String) -> (identity: String, key: String, db: String) {
        (home + "/identity.key", home + "/store.key", home + "/endpoint.db")
    }

    /// The default home: `$YAOK_HOME`, else `~/.yaok`.
    public static func defaultHome() -> String {
        if let h = ProcessInfo.processInfo.environment["YAOK_HOME"], !h.isEmpty { return h }
        return (ProcessInfo.processInfo.environment["HOME"] ?? "/root") + "/.yaok"
    }

    init(home: String, identity: Identity, now: @escaping @Sendable () -> Int64) throws {
        self.home = home
        self.identity = identity
        self.now = now
        let p = Self.paths(home)
        database = try SQLCipherDatabase(path: p.db, key: try DatabaseKey.load(keyFile: p.key))
        store = try EndpointStore(database: database)
    }

    /// Creates a new identity in `home`.
    public static func initialize(home: String, name: String, now: @escaping @Sendable () -> Int64 = Endpoint.wallClock) throws -> Endpoint {
        let p = paths(home)
        if FileManager.default.fileExists(atPath: p.identity) { throw EndpointError.alreadyInitialised(home) }
        // Validate the name before creating anything (a throwaway identity costs microseconds).
        _ = try ContactCode.make(identity: Identity.generate(), name: name)
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let endpoint = try Endpoint(home: home, identity: try IdentityFile.loadOrCreate(path: p.identity), now: now)
        try endpoint.store.setProfile("name", name)
        return endpoint
    }

    /// Opens an existing identity in `home`.
    public static func open(home: String, now: @escaping @Sendable () -> Int64 = Endpoint.wallClock) throws -> Endpoint {
        guard let identity = try IdentityFile.load(path: paths(home).identity) else { throw EndpointError.notInitialised(home) }
        return try Endpoint(home: home, identity: identity, now: now)
    }

    public static let wallClock: @Sendable () -> Int64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    public func close() { database.close() }

    public var name: String { (try? store.profile("name")) ?? "" }

    /// This user's contact code URI.
    public func contactCode() throws -> String {
        try ContactCode.make(identity: identity, name: name).uri
    }

    /// Adds a contact from its code; `name` overrides the name in the code.
    @discardableResult
    public func addContact(uri: String, name: String? = nil) throws -> Contact {
        let code = try ContactCode(parsing: uri)
        guard code.userID != identity.userID else { throw EndpointError.ownContactCode }
        // Adding again would overwrite the name and the fingerprint check the owner made.
        if let known = try store.contacts().first(where: { $0.userID == code.userID }) {
            throw EndpointError.contactExists(known.name, verified: known.verified)
        }
        let contact = Contact(userID: code.userID, name: name ?? code.name, signingKey: code.signingKey, kxKey: code.kxKey,
                              verified: false, addedMs: now())
        try store.addContact(contact)
        return contact
    }

    /// Finds a contact by exact name or by a hex prefix (4+ digits) of its user ID.
    public func resolveContact(_ text: String) throws -> Contact {
        let all = try store.contacts()
        if let exact = all.first(where: { $0.name == text }) { return exact }
        let lower = text.lowercased().replacingOccurrences(of: " ", with: "")
        let matches = lower.count >= 4 ? all.filter { YaokPluginKit.Hex.encode($0.userID).hasPrefix(lower) } : []
        if matches.count == 1 { return matches[0] }
        if matches.count > 1 { throw EndpointError.ambiguousContact(text, matches.map(\.name)) }
        throw EndpointError.unknownContact(text)
    }

    /// Encrypts, signs and queues a message for a contact.
    public func compose(to contact: Contact, text: String) throws -> OutboxItem {
        guard !text.isEmpty else { throw EndpointError.emptyMessage }
        let envelope = try Envelope.sealMessage(plaintext: Array(text.utf8), from: identity, toSigningKey: contact.signingKey,
                                                recipientKXKey: contact.kxKey, createdMs: now())
        return try enqueue(envelope)
    }

    /// Encrypts, signs and queues many messages for a contact in one transaction.
    public func compose(to contact: Contact, texts: [String]) throws -> [OutboxItem] {
        let items = try texts.map { text -> OutboxItem in
            guard !text.isEmpty else { throw EndpointError.emptyMessage }
            return Self.outboxItem(try Envelope.sealMessage(plaintext: Array(text.utf8), from: identity, toSigningKey: contact.signingKey,
                                                            recipientKXKey: contact.kxKey, createdMs: now()))
        }
        try store.enqueue(items)
        return items
    }

    static func outboxItem(_ envelope: Envelope) -> OutboxItem {
        OutboxItem(messageID: envelope.messageID, recipientUserID: envelope.recipientUserID, kind: envelope.kind.rawValue,
                   createdMs: envelope.createdMs, expiresMs: envelope.expiresMs,
                   bundle: YaokWire.Bundle(envelope: envelope).encoded, state: .pending)
    }

    func enqueue(_ envelope: Envelope) throws -> OutboxItem {
        let item = Self.outboxItem(envelope)
        try store.enqueue(item)
        return item
    }

    /// What happened to an incoming bundle.
    public enum Incoming: Sendable, Equatable {
        case message(InboxMessage)
        case receipt(kind: Envelope.Kind, for: [UInt8])
        case duplicate([UInt8])
        case rejected(SecurityEvent.Kind, [UInt8])
        case malformed(String)
    }

    /// The answer to send back on the link, if any.
    public enum Answer: Sendable, Equatable {
        case custody([UInt8])
        case refuse([UInt8], CustodyRefusal.Reason)
        case none
    }

    /// The bundle ID of something this user sent (what hubs and the relay name in answers).
    public func bundleID(of item: OutboxItem) -> [UInt8] {
        BundleID.of(senderUserID: identity.userID, messageID: item.messageID)
    }

    /// The message ID of the outbox item with this bundle ID, if any is still unacknowledged.
    public func outboxMessageID(bundleID: [UInt8]) -> [UInt8]? {
        let items = (try? store.outbox(states: [.pending, .refused], limit: 100_000)) ?? []
        return items.first { self.bundleID(of: $0) == bundleID }?.messageID
    }

    /// Lifetime rules for what we accept: the protocol's (Docs/protocol.md §2.2). A phone keeps
    /// true time, so its clock is `T`; a sender's clock may lead it by up to a lifetime.
    public static let lifetime = EnvelopeLifetime()

    /// Verifies, stores and acknowledges an incoming bundle; answers name its bundle ID.
    ///
    /// Identity is the bundle ID (sender key + message ID), so a non-contact's bundle under a
    /// contact's message ID is a different bundle and cannot make the real one look received.
    /// Whether `e` is a delivery receipt whose proof our own outbox message committed to.
    private func provedByItsMessage(_ e: Envelope) -> Bool {
        guard e.kind == .deliveryReceipt, e.recipientUserID == identity.userID,
              let item = try? store.outboxItem(e.refID), item.kind == Envelope.Kind.message.rawValue,
              let message = try? YaokWire.Bundle(parsing: item.bundle).envelope else { return false }
        return e.provesDelivery(of: message)
    }

    /// A new message and its delivery receipt are stored in one transaction: a crash leaves
    /// both or neither (then the hub sends it again, and the inbox row makes a second copy a
    /// duplicate). A receipt counts once per kind, and only from the item's recipient.
    public func receive(bundle bytes: [UInt8]) -> (Incoming, Answer) {
        let t = now()
        let bundle: YaokWire.Bundle
        do {
            bundle = try YaokWire.Bundle(parsing: bytes)
        } catch {
            return (.malformed("\(error)"), .none)
        }
        let e = bundle.envelope
        let id = e.bundleID
        let sender = YaokPluginKit.Hex.encode(e.senderUserID.prefix(4))
        func reject(_ kind: SecurityEvent.Kind, _ reason: CustodyRefusal.Reason?) -> (Incoming, Answer) {
            try? store.record(SecurityEvent(atMs: t, kind: kind, sender: sender, messageID: e.messageID))
            return (.rejected(kind, e.messageID), reason.map { .refuse(id, $0) } ?? .custody(id))
        }
        // A delivery receipt that reveals the proof our message committed to needs no
        // signature check: only the recipient could compute it (Docs/protocol.md, "Receipt
        // proofs"). Everything else is checked by its signature.
        guard provedByItsMessage(e) || e.verifySignature() else { return reject(.badSignature, .badSignature) }
        guard e.recipientUserID == identity.userID else { return reject(.wrongRecipient, .malformed) }
        do {
            _ = try Self.lifetime.judge(e, claimedAgeMs: bundle.hop.ageMs, trueTimeMs: t)
        } catch .expired {
            return reject(.expired, .expired)
        } catch {
            return reject(.replay, .badLifetime)
        }
        guard let contact = try? store.contact(userID: e.senderUserID), contact.signingKey == e.senderSigningKey else {
            // Taken (so the hub stops carrying it) but not stored: not from a contact. Its
            // bundle ID is bound to its own key, so nothing of a contact's is marked.
            return reject(.nonContact, nil)
        }
        func duplicate() -> (Incoming, Answer) {
            try? store.record(SecurityEvent(atMs: t, kind: .duplicate, sender: sender, messageID: e.messageID))
            return (.duplicate(e.messageID), .custody(id))
        }
        switch e.kind {
        case .message:
            if (try? store.hasMessage(bundleID: id)) == true { return duplicate() }
            let plaintext: [UInt8], proof: [UInt8]?
            do {
                (plaintext, proof) = try e.decryptVerifiedWithProof(with: identity)   // verified above
            } catch {
                return reject(.decryptFailed, .malformed)
            }
            let message = InboxMessage(messageID: e.messageID, senderUserID: e.senderUserID, senderName: contact.name, createdMs: e.createdMs,
                                       receivedMs: t, text: String(decoding: plaintext, as: UTF8.self))
            do {
                let receipt = try Envelope.receipt(kind: .deliveryReceipt, for: e.messageID, originalSenderUserID: e.senderUserID,
                                                   from: identity, createdMs: t, messageID: proof)
                try store.receive(message, bundleID: id, receipt: Self.outboxItem(receipt))
                if !store.callerInGroup { Self.faultAfterReceive?() }
            } catch {
                return (.malformed("store: \(error)"), .refuse(id, .storeFull))
            }
            return (.message(message), .custody(id))
        case .deliveryReceipt, .readReceipt:
            // Only the message's recipient may acknowledge it. A receipt is dated by its
            // signer: the same lifetime rules as any envelope apply (above).
            switch try? store.applyReceipt(read: e.kind == .readReceipt, for: e.refID, signer: e.senderUserID) {
            case .applied?: return (.receipt(kind: e.kind, for: e.refID), .custody(id))
            case .duplicate?: return duplicate()
            case .notFromItsRecipient?: return reject(.forgedReceipt, nil)
            case nil: return (.malformed("store: cannot record the receipt"), .refuse(id, .storeFull))
            }
        }
    }
}
