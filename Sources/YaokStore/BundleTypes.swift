/// Where a carried bundle is in its life at this hub.
public enum BundleState: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// Waiting for a link (or for its retry time).
    case queued = 0
    /// Being sent; custody not yet acknowledged. Only stores older hubs wrote
    /// hold it (``BundleStore/requeueInFlight(nowMs:)`` turns it back into queued at startup):
    /// a bundle on the wire now stays queued in the store and the router's links know it is
    /// being sent, because after a crash it would be queued again anyway.
    case inFlight = 1
    /// A next hop acknowledged custody; the hub keeps its copy for direct delivery and for
    /// other neighbours until it is delivered or expires.
    case handedOver = 2
    /// The recipient got it: bytes dropped, a tombstone remains until expiry for dedupe.
    case delivered = 3
    /// Its lifetime ended before delivery: bytes dropped, the tombstone goes at the next sweep.
    case expired = 4

    /// States whose bundle bytes are still held.
    public static let carried: Set<BundleState> = [.queued, .inFlight, .handedOver]

    /// Delivered or expired: only the ID, kind, size and expiry are left (sender, recipient,
    /// times and links are blanked when a bundle becomes one).
    public var isTombstone: Bool { self == .delivered || self == .expired }

    public var description: String {
        switch self {
        case .queued: return "queued"
        case .inFlight: return "in-flight"
        case .handedOver: return "handed-over"
        case .delivered: return "delivered"
        case .expired: return "expired"
        }
    }
}

/// What the hub files about a bundle: its addressing, lifetime and where it came from. The same
/// for a bundle arriving (``NewBundle``) and one stored (``StoredBundle``); the bytes travel beside it.
public struct BundleRecord: Sendable, Equatable {
    /// 16 bytes: the bundle ID (`YaokCrypto.BundleID`, bound to the sender's key), the dedupe key.
    public var bundleID: [UInt8]
    /// 32 bytes: the recipient's user ID.
    public var destination: [UInt8]
    /// The envelope kind (message, receipt, …) as encoded on the wire.
    public var kind: UInt8
    /// 32 bytes: the sender's user ID.
    public var sourceUserID: [UInt8]
    public var hopCount: Int
    public var hopLimit: Int
    /// 32 bytes if known: the user ID of the hub or phone that handed it to us. That peer is
    /// recorded as already holding it, so it is never offered back.
    public var previousHop: [UInt8]?
    public var createdMs: Int64
    public var expiresMs: Int64
    /// Which link it came in on (for diagnostics), e.g. "udp:10.0.0.2:7400".
    public var receivedFrom: String?
    /// Who handed it to us, as a fairness principal: when the store is full, space is taken
    /// from the heaviest sender or origin (e.g. "udp:10.0.0.2"). Sender keys are free to
    /// make, so the origin bounds a flood from one place.
    public var origin: String?

    public init(bundleID: [UInt8], destination: [UInt8], kind: UInt8, sourceUserID: [UInt8],
                hopCount: Int, hopLimit: Int, previousHop: [UInt8]? = nil, createdMs: Int64,
                expiresMs: Int64, receivedFrom: String? = nil, origin: String? = nil) {
        self.bundleID = bundleID
        self.destination = destination
        self.kind = kind
        self.sourceUserID = sourceUserID
        self.hopCount = hopCount
        self.hopLimit = hopLimit
        self.previousHop = previousHop
        self.createdMs = createdMs
        self.expiresMs = expiresMs
        self.receivedFrom = receivedFrom
        self.origin = origin
    }
}

/// A value that carries a ``BundleRecord`` and reads and writes its fields as its own
/// (`bundle.bundleID`).
@dynamicMemberLookup
public protocol CarriesBundleRecord {
    var record: BundleRecord { get set }
}

extension CarriesBundleRecord {
    // Inlinable: a key-path literal then folds into a plain field access in the router.
    @inlinable
    public subscript<T>(dynamicMember field: WritableKeyPath<BundleRecord, T>) -> T {
        get { record[keyPath: field] }
        set { record[keyPath: field] = newValue }
    }
}

/// A bundle arriving at the hub (from a phone or another hub). The bytes are opaque here.
public struct NewBundle: CarriesBundleRecord, Sendable, Equatable {
    public var record: BundleRecord
    /// The encoded bundle, stored as is.
    public var bytes: [UInt8]
    /// Receipts: the bundle ID of the message acknowledged (sender = that message's recipient).
    public var acknowledgedBundleID: [UInt8]?

    public init(bundleID: [UInt8], destination: [UInt8], kind: UInt8, sourceUserID: [UInt8],
                hopCount: Int, hopLimit: Int, previousHop: [UInt8]? = nil, createdMs: Int64,
                expiresMs: Int64, bytes: [UInt8], receivedFrom: String? = nil, origin: String? = nil,
                acknowledgedBundleID: [UInt8]? = nil) {
        self.record = BundleRecord(bundleID: bundleID, destination: destination, kind: kind, sourceUserID: sourceUserID,
                                   hopCount: hopCount, hopLimit: hopLimit, previousHop: previousHop, createdMs: createdMs,
                                   expiresMs: expiresMs, receivedFrom: receivedFrom, origin: origin)
        self.bytes = bytes
        self.acknowledgedBundleID = acknowledgedBundleID
    }
}

/// A stored bundle's bytes, as a read returned them.
public enum BundleBytes: Sendable, Equatable {
    /// Read with the bundle.
    case held([UInt8])
    /// Held by the store but not read: a listing asked for everything but the bytes
    /// (`withBytes: false`). Fetch them with ``BundleStore/bundle(_:)``.
    case notRead
    /// Gone for good: the bundle was delivered or expired and only its tombstone remains.
    case dropped

    /// The bytes, when this read has them.
    public var held: [UInt8]? {
        if case .held(let b) = self { return b }
        return nil
    }
}

/// A bundle as stored: its record and bytes, and its forwarding state at this hub.
public struct StoredBundle: CarriesBundleRecord, Sendable, Equatable {
    public var record: BundleRecord
    /// Whether this read carries the bytes, and if not, why not. Tombstones (delivered,
    /// expired) are always `.dropped` and keep ``size``.
    public var bytes: BundleBytes
    public var state: BundleState
    /// Failed sending attempts so far.
    public var attempts: Int
    /// When `due` will next return it (if queued).
    public var nextAttemptMs: Int64
    /// When this hub accepted it.
    public var acceptedMs: Int64
    /// Size of the encoded bundle in bytes (kept after the bytes are dropped).
    public var size: Int

    public init(record: BundleRecord, bytes: BundleBytes, state: BundleState, attempts: Int,
                nextAttemptMs: Int64, acceptedMs: Int64, size: Int) {
        self.record = record
        self.bytes = bytes
        self.state = state
        self.attempts = attempts
        self.nextAttemptMs = nextAttemptMs
        self.acceptedMs = acceptedMs
        self.size = size
    }
}

extension StoredBundle {
    /// The row ``BundleStore/accept(_:nowMs:onTheWire:)`` writes when it answers `.stored` (queued, due
    /// at once, no attempts): the caller routes it without reading it back.
    public init(accepted b: NewBundle, nowMs: Int64) {
        self.init(record: b.record, bytes: .held(b.bytes), state: .queued, attempts: 0,
                  nextAttemptMs: nowMs, acceptedMs: nowMs, size: b.bytes.count)
    }
}

/// What `BundleStore.accept` did with a bundle.
public enum AcceptResult: Sendable, Equatable, CustomStringConvertible {
    /// Stored durably; the hub may acknowledge custody.
    case stored
    /// Already held with the same envelope, or delivered/expired and still remembered:
    /// dropped (and counted). The sender may be told we have it.
    case duplicate
    /// A bundle with this bundle ID but a different envelope is held: refused (and counted).
    /// Only the sender's key can make one, so the held copy stays as it is.
    case conflict
    /// A delivery receipt from this bundle's recipient is already held: stored as a
    /// delivered tombstone, so custody can be acknowledged and it is never forwarded.
    case alreadyDelivered
    /// Its expiry time has passed.
    case rejectedExpired
    /// It alone is larger than the cap.
    case rejectedTooLarge
    /// The store is full and the newcomer's sender or origin already uses the largest share:
    /// the flood pays for itself, nobody else is evicted.
    case rejectedOverShare

    public var description: String {
        switch self {
        case .stored: return "stored"
        case .duplicate: return "duplicate"
        case .conflict: return "conflict (another envelope has this bundle ID)"
        case .alreadyDelivered: return "already delivered"
        case .rejectedExpired: return "rejected (expired)"
        case .rejectedTooLarge: return "rejected (larger than the store)"
        case .rejectedOverShare: return "rejected (store full; its sender or origin holds the largest share)"
        }
    }
}

/// Running counters of the store, persisted in the database.
public struct StoreStatistics: Sendable, Equatable {
    /// Bundles offered again after we already had (or had delivered) them.
    public var duplicatesDropped: Int64 = 0
    /// Bundles dropped to stay under the size cap.
    public var evicted: Int64 = 0
    /// Bytes freed by those evictions.
    public var evictedBytes: Int64 = 0
    /// Bundles whose lifetime ended while carried.
    public var expired: Int64 = 0
    /// Of `evicted`: taken from the sender key holding the largest share.
    public var evictedHeaviestSender: Int64 = 0
    /// Of `evicted`: taken from the origin (link source) holding the largest share.
    public var evictedHeaviestOrigin: Int64 = 0
    /// Newcomers refused because their own sender or origin held the largest share.
    public var refusedOverShare: Int64 = 0
    /// Bundles refused because another envelope held their bundle ID.
    public var conflicts: Int64 = 0

    public init(duplicatesDropped: Int64 = 0, evicted: Int64 = 0, evictedBytes: Int64 = 0, expired: Int64 = 0,
                evictedHeaviestSender: Int64 = 0, evictedHeaviestOrigin: Int64 = 0, refusedOverShare: Int64 = 0,
                conflicts: Int64 = 0) {
        self.duplicatesDropped = duplicatesDropped
        self.evicted = evicted
        self.evictedBytes = evictedBytes
        self.expired = expired
        self.evictedHeaviestSender = evictedHeaviestSender
        self.evictedHeaviestOrigin = evictedHeaviestOrigin
        self.refusedOverShare = refusedOverShare
        self.conflicts = conflicts
    }
}
