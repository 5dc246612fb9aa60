import CSodium
import YaokCrypto
import YaokWire
import enum YaokPluginKit.Hex

/// What a session's handshake fixed, as 32 bytes: BLAKE2b-256 of
/// `"yaok-relay-channel-v1" || sessionID(8) || clientKey(32) || relayEphemeralKey(32)`.
///
/// An owner ``Registration`` signs it, so the registration is good on this session only: the
/// relay's HELLO_REPLY signature binds the three values, and fresh ephemeral keys make every
/// session's binding different (Docs/relay-protocol.md §2, "Channel binding").
public struct ChannelBinding: Sendable, Equatable, CustomStringConvertible {
    public static let context = Array("yaok-relay-channel-v1".utf8)
    public let bytes: [UInt8]

    public init(sessionID: UInt64, clientKey: [UInt8], relayEphemeralKey: [UInt8]) {
        var w = ByteWriter(capacity: 96)
        w.raw(Self.context)
        w.u64(sessionID)
        w.raw(clientKey)
        w.raw(relayEphemeralKey)
        bytes = Blake2b.hash(w.bytes, length: 32)
    }

    /// A binding from its 32 bytes (tests, parsing).
    public init(bytes: [UInt8]) { self.bytes = bytes }

    public var description: String { "channel " + Hex.encode(bytes.prefix(4)) + "…" }
}

/// libsodium's `crypto_generichash` (BLAKE2b), plain or keyed.
enum Blake2b {
    static func hash(_ input: [UInt8], length: Int, key: [UInt8]? = nil) -> [UInt8] {
        _ = sodium_init()
        var out = [UInt8](repeating: 0, count: length)
        if let key {
            _ = crypto_generichash(&out, length, input, UInt64(input.count), key, key.count)
        } else {
            _ = crypto_generichash(&out, length, input, UInt64(input.count), nil, 0)
        }
        return out
    }
}

/// A user's signed registration with one relay, format v2 (161 bytes):
/// `kind(1) userSigningKey(32) timestampMs(8) nonce(16) binding(32) untilMs(8) signature(64)`.
///
/// The Ed25519 signature by `userSigningKey` covers
/// `"yaok-relay-register-v2" || relaySigningKey(32) || the first 97 bytes`. Unlike v1, a
/// registration is not a bearer token:
/// - ``Kind/owner``: `binding` is the session's ``ChannelBinding``; the relay accepts it on
///   that session only. A hub registers itself so, as does `yaok --relay`.
/// - ``Kind/carried``: `binding` is the **collector**, the Ed25519 key of the one hub allowed
///   to collect this user's mail, until `untilMs`; the relay accepts it only on a session an
///   owner of which has that key. A phone makes one for its hub (host frame 0x07).
public struct Registration: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        /// Bound to the session it is sent on (``ChannelBinding``).
        case owner = 1
        /// Carried by a hub, bound to that hub's signing key (the collector) and an expiry.
        case carried = 2
    }

    public static let context = Array("yaok-relay-register-v2".utf8)
    /// The v1 context, only to recognise (and refuse) old registrations in tests and tools.
    public static let v1Context = Array("yaok-relay-register-v1".utf8)
    public static let length = 161
    /// Length of a v1 registration: a REGISTER of `1 + n × 120` bytes is v1 and refused.
    public static let v1Length = 120
    /// The longest a carried registration may last after its timestamp.
    public static let maxCarriedLifetimeMs: Int64 = 7 * 24 * 3_600_000

    public let kind: Kind
    public let userSigningKey: [UInt8]
    public let timestampMs: Int64
    public let nonce: [UInt8]
    /// The channel binding (owner) or the collector's Ed25519 key (carried).
    public let binding: [UInt8]
    /// When a carried registration's permission ends; 0 for an owner registration.
    public let untilMs: Int64
    public let signature: [UInt8]

    /// The registering user's ID (SHA-256 of the key).
    public var userID: [UInt8] { Hash.sha256(userSigningKey) }
    /// The collector's key for a carried registration; nil for an owner registration.
    public var collectorSigningKey: [UInt8]? { kind == .carried ? binding : nil }

    /// The 97 bytes before the signature.
    var unsignedPart: [UInt8] {
        var w = ByteWriter(capacity: 97)
        w.u8(kind.rawValue)
        w.raw(userSigningKey)
        w.u64(UInt64(bitPattern: timestampMs))
        w.raw(nonce)
        w.raw(binding)
        w.u64(UInt64(bitPattern: untilMs))
        return w.bytes
    }

    /// What the user signs for `relaySigningKey`.
    public func signedBody(relaySigningKey: [UInt8]) -> [UInt8] { Self.context + relaySigningKey + unsignedPart }

    /// Builds a registration, signing with `sign` (the user's key, or a host callback).
    public static func make(kind: Kind, relaySigningKey: [UInt8], userSigningKey: [UInt8], timestampMs: Int64,
                            binding: [UInt8], untilMs: Int64, nonce: [UInt8]? = nil,
                            sign: ([UInt8]) throws -> [UInt8]) throws -> Registration {
        guard relaySigningKey.count == 32, userSigningKey.count == 32 else { throw RelayProtocolError.invalid("keys must be 32 bytes") }
        guard binding.count == 32 else { throw RelayProtocolError.invalid("registration binding must be 32 bytes") }
        let n = nonce ?? Random.bytes(16)
        guard n.count == 16 else { throw RelayProtocolError.invalid("registration nonce must be 16 bytes") }
        let unsigned = Registration(kind: kind, userSigningKey: userSigningKey, timestampMs: timestampMs, nonce: n,
                                    binding: binding, untilMs: untilMs, signature: [UInt8](repeating: 0, count: 64))
        let sig = try sign(unsigned.signedBody(relaySigningKey: relaySigningKey))
        guard sig.count == 64 else { throw RelayProtocolError.invalid("signature must be 64 bytes") }
        return Registration(kind: kind, userSigningKey: userSigningKey, timestampMs: timestampMs, nonce: n,
                            binding: binding, untilMs: untilMs, signature: sig)
    }

    /// An owner registration for the session with `channel`, signed with `sign`.
    public static func owner(userSigningKey: [UInt8], relaySigningKey: [UInt8], channel: ChannelBinding, timestampMs: Int64,
                             nonce: [UInt8]? = nil, sign: ([UInt8]) throws -> [UInt8]) throws -> Registration {
        try make(kind: .owner, relaySigningKey: relaySigningKey, userSigningKey: userSigningKey, timestampMs: timestampMs,
                 binding: channel.bytes, untilMs: 0, nonce: nonce, sign: sign)
    }

    /// An owner registration signed by `user` for the session with `channel`.
    public static func owner(_ user: Identity, relaySigningKey: [UInt8], channel: ChannelBinding, timestampMs: Int64,
                             nonce: [UInt8]? = nil) throws -> Registration {
        try owner(userSigningKey: user.signingKey, relaySigningKey: relaySigningKey, channel: channel, timestampMs: timestampMs,
                  nonce: nonce, sign: user.sign)
    }

    /// A registration `user` gives its hub to carry: the hub with signing key `collector` may
    /// collect the user's mail until `untilMs` (at most 7 days after `timestampMs`).
    public static func carried(by user: Identity, relaySigningKey: [UInt8], collector: [UInt8], timestampMs: Int64,
                               untilMs: Int64, nonce: [UInt8]? = nil) throws -> Registration {
        guard collector.count == 32 else { throw RelayProtocolError.invalid("collector key must be 32 bytes") }
        return try make(kind: .carried, relaySigningKey: relaySigningKey, userSigningKey: user.signingKey, timestampMs: timestampMs,
                        binding: collector, untilMs: untilMs, nonce: nonce, sign: user.sign)
    }

    public init(kind: Kind, userSigningKey: [UInt8], timestampMs: Int64, nonce: [UInt8], binding: [UInt8], untilMs: Int64, signature: [UInt8]) {
        self.kind = kind
        self.userSigningKey = userSigningKey
        self.timestampMs = timestampMs
        self.nonce = nonce
        self.binding = binding
        self.untilMs = untilMs
        self.signature = signature
    }

    public init(parsing bytes: [UInt8]) throws {
        if bytes.count == Self.v1Length { throw RelayProtocolError.registrationV1 }
        guard bytes.count == Self.length else { throw RelayProtocolError.badLength(what: "registration", detail: "must be \(Self.length) bytes, got \(bytes.count)") }
        var r = RelayReader(bytes, what: "registration")
        let raw = try r.u8()
        guard let kind = Kind(rawValue: raw) else { throw RelayProtocolError.invalid("unknown registration kind \(raw)") }
        self.kind = kind
        userSigningKey = try r.take(32)
        timestampMs = Int64(bitPattern: try r.u64())
        nonce = try r.take(16)
        binding = try r.take(32)
        untilMs = Int64(bitPattern: try r.u64())
        signature = try r.take(64)
    }

    public var encoded: [UInt8] { unsignedPart + signature }

    /// Whether the signature verifies for `relaySigningKey`.
    public func verifySignature(relaySigningKey: [UInt8]) -> Bool {
        SigningKeyPair.verify(signature: signature, message: signedBody(relaySigningKey: relaySigningKey), publicKey: userSigningKey)
    }
}

/// REGISTER: `count(1) registration(161) × count`, 1...8 registrations (one datagram).
public struct RegisterRequest: Sendable, Equatable {
    public static let maxCount = 8
    public let registrations: [Registration]

    public init(_ registrations: [Registration]) { self.registrations = registrations }

    /// Whether `payload` has the shape of a v1 REGISTER (`1 + count × 120` bytes, count
    /// 1...10). No v2 REGISTER has such a length (161 × m ≠ 120 × n for m ≤ 8).
    public static func isVersion1(_ payload: [UInt8]) -> Bool {
        guard let count = payload.first, (1...10).contains(count) else { return false }
        return payload.count == 1 + Int(count) * Registration.v1Length
    }

    public init(parsing payload: [UInt8]) throws {
        if Self.isVersion1(payload) { throw RelayProtocolError.registrationV1 }
        var r = RelayReader(payload, what: "REGISTER")
        let count = Int(try r.u8())
        guard (1...Self.maxCount).contains(count) else { throw RelayProtocolError.badLength(what: "REGISTER", detail: "count \(count) outside 1...\(Self.maxCount)") }
        guard payload.count == 1 + count * Registration.length else {
            throw RelayProtocolError.badLength(what: "REGISTER", detail: "count \(count) implies \(1 + count * Registration.length) bytes, got \(payload.count)")
        }
        var regs: [Registration] = []
        for _ in 0..<count { regs.append(try Registration(parsing: try r.take(Registration.length))) }
        registrations = regs
    }

    public var encoded: [UInt8] { [UInt8(registrations.count)] + registrations.flatMap(\.encoded) }
}

/// The outcome of one registration.
public enum RegistrationStatus: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case accepted = 0
    /// The signature does not verify (wrong key, or signed for another relay).
    case badSignature = 1
    /// The timestamp is more than 5 minutes from the relay's clock.
    case staleTimestamp = 2
    /// This registration (nonce) was already used on another session.
    case replayed = 3
    /// The relay or this session holds the maximum number of registrations.
    case tooManyRegistrations = 4
    /// An owner registration signed for another session's channel binding.
    case wrongChannel = 5
    /// A carried registration whose collector is not an authenticated owner of this session.
    case collectorMismatch = 6
    /// A carried registration whose `until` is past, or more than 7 days after its timestamp.
    case badUntil = 7

    public var description: String {
        switch self {
        case .accepted: return "accepted"
        case .badSignature: return "bad signature"
        case .staleTimestamp: return "timestamp outside the ±5 minute window"
        case .replayed: return "registration already used (replay)"
        case .tooManyRegistrations: return "too many registrations"
        case .wrongChannel: return "owner registration signed for another session"
        case .collectorMismatch: return "the collector is not this session's owner"
        case .badUntil: return "until is past or more than 7 days ahead"
        }
    }

    /// The label in `registrations_refused_total{reason}`.
    public var metricReason: String {
        switch self {
        case .accepted: return "accepted"
        case .badSignature: return "bad_signature"
        case .staleTimestamp: return "stale"
        case .replayed: return "replayed"
        case .tooManyRegistrations: return "too_many"
        case .wrongChannel: return "wrong_channel"
        case .collectorMismatch: return "collector_mismatch"
        case .badUntil: return "bad_until"
        }
    }
}

/// REGISTERED: `count(1) [userID(32) status(1)] × count`, in the order of the REGISTER.
public struct RegisteredResult: Sendable, Equatable {
    public let results: [(userID: [UInt8], status: RegistrationStatus)]

    public init(_ results: [(userID: [UInt8], status: RegistrationStatus)]) { self.results = results }

    public static func == (a: RegisteredResult, b: RegisteredResult) -> Bool {
        a.results.map(\.userID) == b.results.map(\.userID) && a.results.map(\.status) == b.results.map(\.status)
    }

    public init(parsing payload: [UInt8]) throws {
        var r = RelayReader(payload, what: "REGISTERED")
        let count = Int(try r.u8())
        guard count <= RegisterRequest.maxCount, payload.count == 1 + 33 * count else {
            throw RelayProtocolError.badLength(what: "REGISTERED", detail: "count \(count), \(payload.count) bytes")
        }
        var out: [(userID: [UInt8], status: RegistrationStatus)] = []
        for _ in 0..<count {
            let id = try r.take(32)
            let raw = try r.u8()
            guard let status = RegistrationStatus(rawValue: raw) else { throw RelayProtocolError.invalid("unknown registration status \(raw)") }
            out.append((id, status))
        }
        results = out
    }

    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: 1 + 33 * results.count)
        w.u8(UInt8(results.count))
        for r in results { w.raw(r.userID); w.u8(r.status.rawValue) }
        return w.bytes
    }
}

/// QUEUED: `bundleID(16) status(1)`. Whatever the status, the relay holds the bundle durably.
///
/// The ID is the envelope's ``YaokCrypto/BundleID`` (BLAKE2b-128 of the sender's user ID and
/// the message ID), as everywhere in this protocol: a message ID alone is chosen by the sender
/// and visible to neighbours, so it cannot say which bundle is meant.
public struct QueuedNotice: Sendable, Equatable {
    public enum Status: UInt8, Sendable, CaseIterable {
        /// Stored; the recipient is offline.
        case queued = 0
        /// Stored and pushed to the recipient's live session at once.
        case pushed = 1
        /// The relay already held this bundle: same bundle ID and the same envelope bytes (the
        /// hop header may differ). A different envelope under a held bundle ID is refused with
        /// ``RelayErrorCode/conflict`` instead.
        case duplicate = 2
    }
    public let bundleID: [UInt8]
    public let status: Status

    public init(bundleID: [UInt8], status: Status) {
        self.bundleID = bundleID
        self.status = status
    }

    public init(parsing payload: [UInt8]) throws {
        guard payload.count == 17 else { throw RelayProtocolError.badLength(what: "QUEUED", detail: "must be 17 bytes, got \(payload.count)") }
        guard let s = Status(rawValue: payload[16]) else { throw RelayProtocolError.invalid("unknown QUEUED status \(payload[16])") }
        bundleID = Array(payload[0..<16])
        status = s
    }

    public var encoded: [UInt8] { bundleID + [status.rawValue] }
}

/// ACK: `count(1) bundleID(16) × count`, 1...64 bundle IDs.
public struct AckList: Sendable, Equatable {
    public static let maxCount = 64
    public let bundleIDs: [[UInt8]]

    public init(_ ids: [[UInt8]]) { bundleIDs = ids }

    public init(parsing payload: [UInt8]) throws {
        var r = RelayReader(payload, what: "ACK")
        let count = Int(try r.u8())
        guard (1...Self.maxCount).contains(count), payload.count == 1 + 16 * count else {
            throw RelayProtocolError.badLength(what: "ACK", detail: "count \(count), \(payload.count) bytes")
        }
        var ids: [[UInt8]] = []
        for _ in 0..<count { ids.append(try r.take(16)) }
        bundleIDs = ids
    }

    public var encoded: [UInt8] { [UInt8(bundleIDs.count)] + bundleIDs.flatMap { $0 } }
}

/// NO_MESSAGES (end of a poll round): `remaining(4)`, messages still waiting after this round.
public struct PollDone: Sendable, Equatable {
    public let remaining: UInt32
    public init(remaining: UInt32) { self.remaining = remaining }
    public init(parsing payload: [UInt8]) throws {
        var r = RelayReader(payload, what: "NO_MESSAGES")
        remaining = try r.u32()
        try r.expectEnd()
    }
    public var encoded: [UInt8] { var w = ByteWriter(); w.u32(remaining); return w.bytes }
}

/// Error codes in ERROR packets.
public enum RelayErrorCode: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// The sender sent more than its hourly allowance; `retryAfterMs` says when to try again.
    case rateLimited = 1
    /// The recipient already has the maximum number of queued messages.
    case recipientQueueFull = 2
    /// The relay holds the maximum number of messages in total.
    case relayFull = 3
    /// This session has no registered user, so it may not send or poll.
    case notRegistered = 4
    /// The envelope's sender signature does not verify.
    case badSignature = 5
    /// The request could not be parsed.
    case malformed = 6
    /// The envelope has expired.
    case expired = 7
    /// The request is larger than the relay accepts.
    case tooLarge = 8
    /// Something failed inside the relay (e.g. storage); try later.
    case internalError = 9
    /// The relay holds a different envelope under this bundle ID. Only the sender's key can
    /// make one (the bundle ID binds the sender's user ID, the envelope is signed): the sender
    /// signed two envelopes with one message ID. The queued one is kept untouched.
    case conflict = 10
    /// The envelope's `created` is further ahead of the relay's clock than the allowed skew
    /// (10 minutes).
    case createdInFuture = 11
    /// `expires − created` is longer than the relay's maximum lifetime (7 days unless the
    /// operator set it lower).
    case lifetimeTooLong = 12

    public var description: String {
        switch self {
        case .rateLimited: return "rate limited"
        case .recipientQueueFull: return "recipient queue full"
        case .relayFull: return "relay full"
        case .notRegistered: return "not registered"
        case .badSignature: return "bad signature"
        case .malformed: return "malformed"
        case .expired: return "expired"
        case .tooLarge: return "too large"
        case .internalError: return "internal error"
        case .conflict: return "conflicting envelope for this bundle ID"
        case .createdInFuture: return "created in the future"
        case .lifetimeTooLong: return "lifetime too long"
        }
    }
}

/// ERROR: `code(1) reference(16) retryAfterMs(4) textLength(2) text(UTF-8, ≤ 256)`.
/// `reference` is the bundle ID the error is about (for a refused SEND: the bundle ID read from
/// the sent bytes, see `BundleID.of(bundle:)`), or zeros.
public struct RelayErrorNotice: Sendable, Equatable, CustomStringConvertible {
    public static let maxTextLength = 256
    public let code: RelayErrorCode
    public let reference: [UInt8]
    /// When the client may try again, in milliseconds (0 = not applicable).
    public let retryAfterMs: UInt32
    public let text: String

    public init(code: RelayErrorCode, reference: [UInt8] = [UInt8](repeating: 0, count: 16), retryAfterMs: UInt32 = 0, text: String) {
        self.code = code
        self.reference = reference.count == 16 ? reference : [UInt8](repeating: 0, count: 16)
        self.retryAfterMs = retryAfterMs
        self.text = String(decoding: Array(text.utf8.prefix(Self.maxTextLength)), as: UTF8.self)
    }

    public init(parsing payload: [UInt8]) throws {
        var r = RelayReader(payload, what: "ERROR")
        let raw = try r.u8()
        guard let code = RelayErrorCode(rawValue: raw) else { throw RelayProtocolError.invalid("unknown relay error code \(raw)") }
        let ref = try r.take(16)
        let retry = try r.u32()
        let n = Int(try r.u16())
        guard n <= Self.maxTextLength else { throw RelayProtocolError.oversized(what: "ERROR text", size: n, limit: Self.maxTextLength) }
        let text = try r.take(n)
        try r.expectEnd()
        self.init(code: code, reference: ref, retryAfterMs: retry, text: String(decoding: text, as: UTF8.self))
    }

    public var encoded: [UInt8] {
        var w = ByteWriter()
        w.u8(code.rawValue)
        w.raw(reference)
        w.u32(retryAfterMs)
        let t = Array(text.utf8)
        w.u16(UInt16(t.count))
        w.raw(t)
        return w.bytes
    }

    public var description: String {
        var s = "relay refused: \(code): \(text)"
        if retryAfterMs > 0 { s += " (retry in \((retryAfterMs + 999) / 1000) s)" }
        return s
    }
}
