/// The relay's durable state, behind one interface so that ``RelayEngine`` runs unchanged on
/// SQLCipher (one node, ``RelayQueueStore``, the default) or on PostgreSQL (a cluster of nodes
/// sharing one database, ``RelayPostgresStore``).
///
/// Contract every implementation keeps:
/// - Writes made inside ``transaction(_:)`` are durable when it returns, and not before: the
///   engine sends QUEUED only after that.
/// - Bundles are keyed by bundle ID; ``insert(bundleID:recipient:sender:bundle:queuedMs:expiresMs:)``
///   never overwrites.
/// - Expired rows are never returned (bundles, attachments, nonces).
///
/// The engine calls a store from one serial queue; implementations need not be re-entrant.
public protocol RelayStore: AnyObject, Sendable {
    /// Whether other relay nodes write this store too. When true the engine asks the store
    /// for what another node may have changed (queue contents, leases, attachments, the
    /// replay cache, hourly send counters) instead of trusting its own memory alone.
    var isShared: Bool { get }

    /// Runs `body` in one transaction (group commit); nothing in it is durable before it returns.
    func transaction<T>(_ body: () throws -> T) throws -> T

    /// Inserts a bundle under its bundle ID; false when that bundle ID is already queued.
    /// A shared store also tells the other nodes that `recipient` has mail (on commit).
    func insert(bundleID: [UInt8], recipient: [UInt8], sender: [UInt8], bundle: [UInt8], queuedMs: Int64, expiresMs: Int64) throws -> Bool

    /// The recipient and the sender of a queued bundle, or nil.
    func recipientAndSender(of bundleID: [UInt8]) throws -> (recipient: [UInt8], sender: [UInt8])?

    /// Deletes a queued bundle (its recipient acknowledged it) and remembers its bundle ID as
    /// delivered until the bundle's expiry (``isDelivered(_:)``); true if it was there.
    func delete(_ bundleID: [UInt8]) throws -> Bool

    /// Whether a bundle with this ID was delivered (acknowledged) and has not expired: a copy
    /// sent again (a hub's retry that crossed the ACK, a node resumed after a freeze) is a
    /// duplicate, never queued again.
    func isDelivered(_ bundleID: [UInt8]) throws -> Bool

    /// Bundle IDs queued for `recipient`, oldest first, unexpired. A shared store leaves out
    /// bundles leased to any node until `nowMs`.
    func bundleIDs(for recipient: [UInt8], nowMs: Int64, limit: Int) throws -> [[UInt8]]

    /// A queued bundle's bytes.
    func bundle(_ bundleID: [UInt8]) throws -> [UInt8]?

    /// Queued bundles per envelope sender.
    func countsBySender() throws -> [[UInt8]: Int]

    /// Queue length per recipient.
    func countsByRecipient() throws -> [[UInt8]: Int]

    /// Deletes expired bundles, attachments and nonces; returns the bundles deleted.
    func expire(nowMs: Int64) throws -> Int

    /// Records that `user` is reachable through `owner` until `expiresMs`.
    func saveAttachment(user: [UInt8], owner: [UInt8], expiresMs: Int64) throws

    /// Live attachments: user → (owner, expiry).
    func attachments(nowMs: Int64) throws -> [[UInt8]: (owner: [UInt8], expiresMs: Int64)]

    /// Live attachments whose owner is `owner`: user → expiry (a shared store: made on any node).
    func attachments(ownedBy owner: [UInt8], nowMs: Int64) throws -> [[UInt8]: Int64]

    /// Records a used registration nonce unless an unexpired one is recorded; false when it
    /// was (a replay, possibly to another node).
    func claimNonce(_ key: [UInt8], expiresMs: Int64, nowMs: Int64) throws -> Bool

    /// Unexpired nonce keys.
    func nonces(nowMs: Int64) throws -> [[UInt8]: Int64]

    /// Leases a queued bundle to this node until `untilMs`; false when another node holds an
    /// unexpired lease on it (or it is gone). A store that is not shared always grants (the
    /// engine's own lease table is then the only one).
    func lease(_ bundleID: [UInt8], untilMs: Int64, nowMs: Int64) throws -> Bool

    /// Recipients of bundles whose lease ran out in (`afterMs`, `untilMs`]: what a node that
    /// died was holding, for another node to deliver. Empty for a store that is not shared.
    func recipientsWithLeasesExpired(afterMs: Int64, untilMs: Int64) throws -> [[UInt8]]

    /// Counts one accepted message for `sender` in the current hour; returns the milliseconds
    /// to wait when `sender` has used `limit` this hour, else nil. A store that is not shared
    /// returns nil without counting (the engine's in-memory token bucket applies).
    func chargeSend(sender: [UInt8], nowMs: Int64, limit: Int) throws -> Int64?

    /// Leases several bundles at once (see the extension's default, which calls
    /// ``lease(_:untilMs:nowMs:)`` and ``bundle(_:)`` for each).
    func leaseBundles(_ bundleIDs: [[UInt8]], untilMs: Int64, nowMs: Int64) throws -> [(id: [UInt8], bundle: [UInt8])]

    /// Recipient and sender of several bundles at once (default: ``recipientAndSender(of:)`` for each).
    func recipientsAndSenders(of bundleIDs: [[UInt8]]) throws -> [[UInt8]: (recipient: [UInt8], sender: [UInt8])]

    /// Deletes several bundles at once (default: the single delete for each); the IDs that were there.
    func delete(_ bundleIDs: [[UInt8]]) throws -> Set<[UInt8]>

    /// Closes the database connection(s).
    func close()
}

extension RelayStore {
    /// Leases each of `bundleIDs` as ``lease(_:untilMs:nowMs:)`` does and returns the leased
    /// ones with their bytes, in the order given (a bundle another node holds, or that is
    /// gone, is left out). A store on a server overrides it with one round trip for all.
    public func leaseBundles(_ bundleIDs: [[UInt8]], untilMs: Int64, nowMs: Int64) throws -> [(id: [UInt8], bundle: [UInt8])] {
        var out: [(id: [UInt8], bundle: [UInt8])] = []
        for id in bundleIDs {
            guard try lease(id, untilMs: untilMs, nowMs: nowMs), let bundle = try bundle(id) else { continue }
            out.append((id, bundle))
        }
        return out
    }

    /// Recipient and sender of each queued bundle among `bundleIDs` (those not queued are
    /// left out). A store on a server overrides it with one round trip for all.
    public func recipientsAndSenders(of bundleIDs: [[UInt8]]) throws -> [[UInt8]: (recipient: [UInt8], sender: [UInt8])] {
        var out: [[UInt8]: (recipient: [UInt8], sender: [UInt8])] = [:]
        for id in bundleIDs { if let held = try recipientAndSender(of: id) { out[id] = held } }
        return out
    }

    /// Deletes the queued bundles among `bundleIDs`; returns the IDs that were there. A store
    /// on a server overrides it with one round trip for all.
    public func delete(_ bundleIDs: [[UInt8]]) throws -> Set<[UInt8]> {
        var out = Set<[UInt8]>()
        for id in bundleIDs { if try delete(id) { out.insert(id) } }
        return out
    }
}
