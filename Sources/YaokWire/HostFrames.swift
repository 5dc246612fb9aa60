import YaokCrypto
import YaokPluginKit

/// The value of a ``RoutingFrameType/custodyAck`` frame: the receiver durably stored
/// the bundle with this ``YaokCrypto/BundleID``. Layout: `bundleID(16)`.
public struct CustodyAck: Sendable, Equatable {
    public var bundleID: [UInt8]

    public init(bundleID: [UInt8]) { self.bundleID = bundleID }

    public init(parsing value: [UInt8]) throws {
        guard value.count == 16 else { throw WireError.badLength(what: "custody ack", detail: "must be 16 bytes, got \(value.count)") }
        bundleID = value
    }

    public var encoded: [UInt8] { bundleID }
    /// The whole TLV frame.
    public var frame: [UInt8] { TLVRecord(.custodyAck, value: encoded).encoded }
}

/// Custody acks for one link, as frames (Docs/protocol.md, custodyAcks): one ack is a
/// ``RoutingFrameType/custodyAck``; more, to a peer that announced it reads lists, are
/// ``RoutingFrameType/custodyAcks`` lists of at most ``BundleIDList/maxCount``.
public enum CustodyAcks {
    /// The empty list: "I read lists", sent right after link up.
    public static let announcement = TLVRecord(.custodyAcks, value: [0, 0])

    /// The frames that acknowledge `bundleIDs` (16 bytes each).
    public static func records(for bundleIDs: [[UInt8]], peerReadsLists: Bool) -> [TLVRecord] {
        guard peerReadsLists, bundleIDs.count > 1 else {
            return bundleIDs.map { TLVRecord(.custodyAck, value: CustodyAck(bundleID: $0).encoded) }
        }
        return BundleIDList.chunked(bundleIDs).map { TLVRecord(.custodyAcks, value: $0.encoded) }
    }
}

/// The value of a ``RoutingFrameType/custodyRefused`` frame.
/// Layout: `bundleID(16) reason(1) [retryAfterS(4)]`.
public struct CustodyRefusal: Sendable, Equatable {
    /// Why a bundle was refused.
    public enum Reason: UInt8, Sendable, CaseIterable, CustomStringConvertible {
        case badSignature = 1
        case expired = 2
        case hopLimit = 3
        case storeFull = 4
        case malformed = 5
        case rateLimited = 6
        /// `expires − created` above the maximum TTL, or `created` too far in the future.
        case badLifetime = 7
        /// A different bundle with this bundle ID is already held (only the sender's key can
        /// make one: the sender signed two envelopes under one message ID).
        case conflict = 8

        public var description: String {
            switch self {
            case .badSignature: return "bad signature"
            case .expired: return "expired"
            case .hopLimit: return "hop limit reached"
            case .storeFull: return "store full"
            case .malformed: return "malformed"
            case .rateLimited: return "rate limited"
            case .badLifetime: return "lifetime out of bounds"
            case .conflict: return "conflicting content for this bundle ID"
            }
        }
    }

    public var bundleID: [UInt8]
    public var reason: Reason
    /// When to offer it again at the earliest, in seconds, if the refuser said (the relay's
    /// rate limit does): 4 more bytes, big-endian. Docs/protocol.md, custodyRefused.
    public var retryAfterS: UInt32?

    public init(bundleID: [UInt8], reason: Reason, retryAfterS: UInt32? = nil) {
        self.bundleID = bundleID
        self.reason = reason
        self.retryAfterS = retryAfterS
    }

    public init(parsing value: [UInt8]) throws {
        guard value.count == 17 || value.count == 21 else {
            throw WireError.badLength(what: "custody refusal", detail: "must be 17 or 21 bytes, got \(value.count)")
        }
        guard let reason = Reason(rawValue: value[16]) else { throw WireError.unknownReason(value[16]) }
        self.retryAfterS = value.count == 21 ? value[17..<21].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } : nil
        self.bundleID = Array(value[0..<16])
        self.reason = reason
    }

    public var encoded: [UInt8] {
        guard let s = retryAfterS else { return bundleID + [reason.rawValue] }
        return bundleID + [reason.rawValue, UInt8(s >> 24), UInt8(s >> 16 & 0xff), UInt8(s >> 8 & 0xff), UInt8(s & 0xff)]
    }
    /// The whole TLV frame.
    public var frame: [UInt8] { TLVRecord(.custodyRefused, value: encoded).encoded }
}

/// The value of a ``RoutingFrameType/offer`` or ``RoutingFrameType/request``
/// frame: bundle IDs, sorted ascending and unique. Layout: `count(2) bundleID(16) × count`.
public struct BundleIDList: Sendable, Equatable {
    public static let maxCount = 4000

    /// Sorted, unique 16-byte bundle IDs.
    public let bundleIDs: [[UInt8]]

    /// Sorts and de-duplicates `bundleIDs`. Throws if one is not 16 bytes or there are more than 4000.
    public init(bundleIDs: [[UInt8]]) throws {
        for id in bundleIDs { try checkLength(id, 16, "bundle ID") }
        let sorted = bundleIDs.sorted { $0.lexicographicallyPrecedes($1) }
        var unique: [[UInt8]] = []
        unique.reserveCapacity(sorted.count)
        for id in sorted where unique.last != id { unique.append(id) }
        guard unique.count <= Self.maxCount else { throw WireError.tooMany(what: "bundle IDs", count: unique.count, limit: Self.maxCount) }
        self.bundleIDs = unique
    }

    public init(parsing value: [UInt8]) throws {
        let what = "bundle ID list"
        var r = ByteReader(value, what: what)
        let count = Int(try r.u16())
        guard count <= Self.maxCount else { throw WireError.tooMany(what: "bundle IDs", count: count, limit: Self.maxCount) }
        guard value.count == 2 + 16 * count else {
            throw WireError.badLength(what: what, detail: "count \(count) implies \(2 + 16 * count) bytes, got \(value.count)")
        }
        var ids: [[UInt8]] = []
        ids.reserveCapacity(count)
        for _ in 0..<count {
            let id = try r.take(16)
            if let last = ids.last, !last.lexicographicallyPrecedes(id) { throw WireError.notSortedUnique }
            ids.append(id)
        }
        bundleIDs = ids
    }

    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: 2 + 16 * bundleIDs.count)
        w.u16(UInt16(bundleIDs.count))
        for id in bundleIDs { w.raw(id) }
        return w.bytes
    }

    /// `bundleIDs` (16 bytes each) in order, as lists of at most ``maxCount``: what one frame
    /// can carry. An ID of another length drops its whole list (callers pass bundle IDs).
    public static func chunked(_ bundleIDs: [[UInt8]]) -> [BundleIDList] {
        stride(from: 0, to: bundleIDs.count, by: maxCount).compactMap { start in
            try? BundleIDList(bundleIDs: Array(bundleIDs[start..<min(start + maxCount, bundleIDs.count)]))
        }
    }

    /// The whole TLV frame, as an ``RoutingFrameType/offer`` or a ``RoutingFrameType/request``.
    public func frame(_ type: RoutingFrameType = .offer) -> [UInt8] { TLVRecord(type, value: encoded).encoded }
}

/// The value of a ``RoutingFrameType/attachment`` frame: a hub's signed list of the
/// endpoints (user IDs) attached to it.
/// Layout: `hubKey(32) timestampMs(8) count(2) userID(32) × count signature(64)`; the Ed25519
/// signature by `hubKey` covers every byte before it.
public struct AttachmentAnnouncement: Sendable, Equatable {
    public static let maxCount = 500
    public static let maxEncodedLength = 32 + 8 + 2 + 32 * maxCount + 64

    public let hubSigningKey: [UInt8]
    public let timestampMs: Int64
    public let userIDs: [[UInt8]]
    public let signature: [UInt8]

    /// Builds and signs an announcement with a signing function (the router's, with the hub's
    /// key; the hub never signs one for a plugin).
    public static func make(hubSigningKey: [UInt8], timestampMs: Int64, userIDs: [[UInt8]],
                            sign: ([UInt8]) throws -> [UInt8]) throws -> AttachmentAnnouncement {
        try checkLength(hubSigningKey, 32, "hub signing key")
        guard timestampMs >= 0 else { throw WireError.invalidArgument("timestampMs must not be negative") }
        guard userIDs.count <= maxCount else { throw WireError.tooMany(what: "user IDs", count: userIDs.count, limit: maxCount) }
        for id in userIDs { try checkLength(id, 32, "user ID") }
        let body = signedBody(hubSigningKey: hubSigningKey, timestampMs: timestampMs, userIDs: userIDs)
        let signature = try sign(body)
        try checkLength(signature, 64, "signature")
        return AttachmentAnnouncement(hubSigningKey: hubSigningKey, timestampMs: timestampMs, userIDs: userIDs, signature: signature)
    }

    /// Builds and signs an announcement with `hub`'s Ed25519 key.
    public static func signed(by hub: Identity, timestampMs: Int64, userIDs: [[UInt8]]) throws -> AttachmentAnnouncement {
        try make(hubSigningKey: hub.signingKey, timestampMs: timestampMs, userIDs: userIDs, sign: hub.sign)
    }

    private init(hubSigningKey: [UInt8], timestampMs: Int64, userIDs: [[UInt8]], signature: [UInt8]) {
        self.hubSigningKey = hubSigningKey
        self.timestampMs = timestampMs
        self.userIDs = userIDs
        self.signature = signature
    }

    /// Parses (structure only; call ``verifySignature()``).
    public init(parsing value: [UInt8]) throws {
        let what = "attachment announcement"
        guard value.count <= Self.maxEncodedLength else {
            throw WireError.oversized(what: what, size: value.count, limit: Self.maxEncodedLength)
        }
        var r = ByteReader(value, what: what)
        let key = try r.take(32)
        let ts = try r.u64()
        let count = Int(try r.u16())
        guard count <= Self.maxCount else { throw WireError.tooMany(what: "user IDs", count: count, limit: Self.maxCount) }
        let expected = 32 + 8 + 2 + 32 * count + 64
        guard value.count == expected else {
            throw WireError.badLength(what: what, detail: "count \(count) implies \(expected) bytes, got \(value.count)")
        }
        guard ts <= UInt64(Int64.max) else { throw WireError.badTimestamp("above Int64.max") }
        var ids: [[UInt8]] = []
        ids.reserveCapacity(count)
        for _ in 0..<count { ids.append(try r.take(32)) }
        let signature = try r.take(64)
        self.init(hubSigningKey: key, timestampMs: Int64(ts), userIDs: ids, signature: signature)
    }

    private static func signedBody(hubSigningKey: [UInt8], timestampMs: Int64, userIDs: [[UInt8]]) -> [UInt8] {
        var w = ByteWriter(capacity: 42 + 32 * userIDs.count + 64)
        w.raw(hubSigningKey)
        w.u64(UInt64(timestampMs))
        w.u16(UInt16(userIDs.count))
        for id in userIDs { w.raw(id) }
        return w.bytes
    }

    /// Whether the hub's signature verifies.
    public func verifySignature() -> Bool {
        SigningKeyPair.verify(signature: signature,
                              message: Self.signedBody(hubSigningKey: hubSigningKey, timestampMs: timestampMs, userIDs: userIDs),
                              publicKey: hubSigningKey)
    }

    /// Returns `self` if the signature verifies; throws ``WireError/badSignature`` otherwise.
    @discardableResult
    public func verified() throws -> AttachmentAnnouncement {
        guard verifySignature() else { throw WireError.badSignature }
        return self
    }

    /// The hub's user ID (SHA-256 of its key).
    public var hubUserID: [UInt8] { Hash.sha256(hubSigningKey) }

    public var encoded: [UInt8] {
        Self.signedBody(hubSigningKey: hubSigningKey, timestampMs: timestampMs, userIDs: userIDs) + signature
    }

    /// The whole TLV frame.
    public var frame: [UInt8] { TLVRecord(.attachment, value: encoded).encoded }
}

extension Bundle {
    /// The whole ``YaokPluginKit/FrameType/bundle`` TLV frame.
    public var frame: [UInt8] { TLVRecord(.bundle, value: encoded).encoded }
}

/// The value of a ``RoutingFrameType/registrationAnswer`` frame (Docs/protocol.md,
/// registrationAnswer): what became of a phone's relay registration.
/// Layout: `status(1) userID(32) relayKey(32) untilMs(8) reason(0–96)`.
public struct RegistrationAnswer: Sendable, Equatable {
    /// 0–7: the relay's REGISTERED status; 16–19: the hub's own (``hubHasNoRelay`` …).
    public var status: UInt8
    public var userID: [UInt8]
    /// The relay key the registration was checked against; zeros when the hub has none.
    public var relayKey: [UInt8]
    /// When the collection ends (accepted), Unix ms; 0 otherwise.
    public var untilMs: Int64
    public var reason: String

    public static let accepted: UInt8 = 0
    public static let replayed: UInt8 = 3
    public static let hubHasNoRelay: UInt8 = 16
    public static let relayNotReachable: UInt8 = 17
    public static let notCarried: UInt8 = 18
    public static let otherRelayKey: UInt8 = 19
    public static let maxReasonLength = 96
    static let fixedLength = 1 + 32 + 32 + 8

    public init(status: UInt8, userID: [UInt8], relayKey: [UInt8], untilMs: Int64 = 0, reason: String = "") {
        self.status = status
        self.userID = userID
        self.relayKey = relayKey
        self.untilMs = untilMs
        self.reason = reason.utf8Prefix(maxBytes: Self.maxReasonLength)
    }

    public init(parsing value: [UInt8]) throws {
        guard value.count >= Self.fixedLength, value.count <= Self.fixedLength + Self.maxReasonLength else {
            throw WireError.badLength(what: "registration answer", detail: "must be \(Self.fixedLength)–\(Self.fixedLength + Self.maxReasonLength) bytes, got \(value.count)")
        }
        status = value[0]
        userID = Array(value[1..<33])
        relayKey = Array(value[33..<65])
        untilMs = value[65..<73].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        reason = String(decoding: value[73...], as: UTF8.self)
    }

    public var encoded: [UInt8] {
        var out = [status] + userID + relayKey
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: untilMs >> Int64(shift))) }
        return out + Array(reason.utf8)
    }

    public var frame: [UInt8] { TLVRecord(.registrationAnswer, value: encoded).encoded }

    /// What the status says, in words.
    public var meaning: String {
        switch status {
        case 0: return "accepted by the relay"
        case 1: return "refused by the relay: bad signature"
        case 2: return "refused by the relay: the phone's clock is more than 5 minutes off the relay's"
        case 3: return "refused by the relay: already used"
        case 4: return "refused by the relay: too many registrations"
        case 5: return "refused by the relay: wrong channel"
        case 6: return "refused by the relay: this hub is not the collector it knows"
        case 7: return "refused by the relay: until is past or more than 7 days ahead"
        case Self.hubHasNoRelay: return "this hub has no relay"
        case Self.relayNotReachable: return "kept: the hub's relay is not reachable now"
        case Self.notCarried: return "not carried: not this link's own user, or another collector"
        case Self.otherRelayKey: return "not carried: signed for another relay than this hub's"
        default: return "status \(status)"
        }
    }
}

/// The value of a ``RoutingFrameType/relay`` frame (Docs/protocol.md, relay): whether
/// the hub has an internet relay, its pinned key, and whether the hub is linked to it now.
/// Layout: `state(1) relayKey(32)`.
public struct RelayAnnouncement: Sendable, Equatable {
    public enum State: UInt8, Sendable, CustomStringConvertible {
        case none = 0, configured = 1, linked = 2
        public var description: String {
            switch self {
            case .none: return "no relay"
            case .configured: return "relay not reachable now"
            case .linked: return "linked to its relay"
            }
        }
    }
    public var state: State
    public var relayKey: [UInt8]

    public init(state: State, relayKey: [UInt8]) {
        self.state = state
        self.relayKey = state == .none ? [UInt8](repeating: 0, count: 32) : relayKey
    }

    public init(parsing value: [UInt8]) throws {
        guard value.count == 33 else { throw WireError.badLength(what: "relay announcement", detail: "must be 33 bytes, got \(value.count)") }
        guard let state = State(rawValue: value[0]) else { throw WireError.badLength(what: "relay announcement", detail: "unknown state \(value[0])") }
        self.state = state
        relayKey = Array(value[1...])
    }

    public var encoded: [UInt8] { [state.rawValue] + relayKey }
    public var frame: [UInt8] { TLVRecord(.relay, value: encoded).encoded }
}
