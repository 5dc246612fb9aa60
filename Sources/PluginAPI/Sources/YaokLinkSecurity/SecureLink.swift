import CSodium
import Foundation
import YaokBase

/// What a secure link needs from an identity: public keys, signing, verification and randomness.
/// The plugin kit's `HubIdentity` provides it inside plugins (signing is a request to the host, the
/// secret key never enters the plugin); a `yaok` endpoint provides its own.
public protocol LinkIdentity: Sendable {
    var signingKey: [UInt8] { get }
    var kxKey: [UInt8] { get }
    func sign(_ message: [UInt8]) throws -> [UInt8]
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool
    func randomBytes(_ count: Int) -> [UInt8]
}

/// A peer that proved, inside this session's handshake, that it holds the secret key for `signingKey`.
public struct AuthenticatedPeer: Sendable, Equatable {
    /// The role the peer claims. A claim: the host decides what each role may do.
    public var role: PeerRole
    public var signingKey: [UInt8]
    public var kxKey: [UInt8]
    /// What proves this peer to the host: hand it over with the link-up (``LinkInfo/proof``).
    public var proof: LinkProof?
}

extension String {
    /// The longest prefix of whole characters that fits `maxBytes` of UTF-8: a reason a peer
    /// reads is cut, never split inside a character.
    public func utf8Prefix(maxBytes: Int) -> String {
        var text = ""
        var bytes = 0
        for c in self {
            let n = String(c).utf8.count
            guard bytes + n <= maxBytes else { break }
            text.append(c)
            bytes += n
        }
        return text
    }
}

/// The responder's answer to the initiator's identity (Docs/protocol.md §5, "The handshake's
/// outcome"), sent sealed as ``FrameType/linkOutcome``.
public enum LinkOutcome: Sendable, Equatable {
    case accepted
    case refused(Refusal, String)

    /// Why: a code from Docs/protocol.md §5; a code this side does not know is kept as is.
    public struct Refusal: RawRepresentable, Sendable, Equatable, CustomStringConvertible {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Its layout, role byte or signature does not verify for this session.
        public static let identity = Refusal(rawValue: 1)
        /// The role is not one this transport admits (`peer_roles`).
        public static let role = Refusal(rawValue: 2)
        /// The session table is full: try again later or another hub.
        public static let noRoom = Refusal(rawValue: 3)

        public var description: String {
            switch rawValue {
            case 1: return "identity refused"
            case 2: return "role not admitted"
            case 3: return "no room"
            default: return "refusal \(rawValue)"
            }
        }
    }

    /// Longest reason carried, in bytes: the sealed answer stays smaller than the identity record.
    public static let maxReasonLength = 96

    public var encoded: [UInt8] {
        switch self {
        case .accepted: return [0]
        case .refused(let code, let reason):
            return [code.rawValue] + Array(reason.utf8Prefix(maxBytes: Self.maxReasonLength).utf8)
        }
    }

    public init(parsing value: [UInt8]) throws {
        guard let first = value.first else { throw SecureLinkError.malformed("empty link outcome") }
        guard value.count <= 1 + Self.maxReasonLength else { throw SecureLinkError.malformed("link outcome of \(value.count) bytes") }
        if first == 0 {
            guard value.count == 1 else { throw SecureLinkError.malformed("an accepted link outcome with a reason") }
            self = .accepted
            return
        }
        // An unknown code is still a refusal: the responder is ending the session.
        self = .refused(Refusal(rawValue: first), String(decoding: value.dropFirst(), as: UTF8.self))
    }
}

/// Why a secure link refused a record. Every case names what was wrong; none crashes.
public enum SecureLinkError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    /// The peer speaks other link versions than ours.
    case unsupportedVersion(peer: [UInt8])
    /// The peer sent the retired version-1 handshake (challenge/proof).
    case retiredVersion
    case badSignature
    case decryptionFailed
    /// A sealed frame whose counter was seen before, or is too far behind the newest.
    case replayed(counter: UInt64)
    /// A record that has no place in the session's current state.
    case unexpected(String)
    case weakKey
    case exhausted

    public var description: String {
        switch self {
        case .malformed(let what): return "malformed secure-link record: \(what)"
        case .unsupportedVersion(let peer):
            return "the peer speaks link version(s) \(peer.map(String.init).joined(separator: ", ")); this node speaks \(SecureLink.version)"
        case .retiredVersion:
            return "the peer speaks link version 1 (unencrypted challenge/proof), which is retired: upgrade it to link version \(SecureLink.version)"
        case .badSignature: return "the peer's identity signature does not verify for this session"
        case .decryptionFailed: return "a sealed frame failed authentication (wrong key, altered or forged)"
        case .replayed(let counter): return "sealed frame \(counter) was replayed or is too old"
        case .unexpected(let what): return "unexpected secure-link record: \(what)"
        case .weakKey: return "the peer's ephemeral key is of small order"
        case .exhausted: return "the session's frame counter is exhausted"
        }
    }
}

/// How the carrier moves records, which decides the denial-of-service rules.
public enum LinkChannel: Sendable {
    /// Ordered, connection-based (TCP, BLE GATT): the peer's address is already validated.
    case stream
    /// Datagrams from addresses anyone can forge (UDP): a stateless cookie round first, and
    /// the hello is padded so no answer is larger than what asked for it.
    case datagram
}

/// Counters up to `size` behind the newest are accepted once (datagrams reorder); WireGuard style.
public struct ReplayWindow: Sendable {
    public static let size: UInt64 = 1024
    private var newest: UInt64?
    private var bits = [UInt64](repeating: 0, count: Int(size / 64))

    public init() {}

    public func accepts(_ n: UInt64) -> Bool {
        guard let newest else { return true }
        if n > newest { return true }
        if newest - n >= Self.size { return false }
        let slot = Int(n % Self.size)
        return bits[slot / 64] & (1 << UInt64(slot % 64)) == 0
    }

    /// Marks `n` seen. Call only after the frame authenticated.
    public mutating func mark(_ n: UInt64) {
        if let newest, n > newest {
            if n - newest >= Self.size {
                for i in bits.indices { bits[i] = 0 }
            } else {
                var c = newest + 1
                while c <= n {
                    let slot = Int(c % Self.size)
                    bits[slot / 64] &= ~(1 << UInt64(slot % 64))
                    c += 1
                }
            }
            self.newest = n
        } else if newest == nil {
            newest = n
        }
        let slot = Int(n % Self.size)
        bits[slot / 64] |= 1 << UInt64(slot % 64)
    }
}

/// Stateless cookies for datagram responders (as WireGuard's cookie reply and DTLS's
/// HelloVerifyRequest): a hello is answered with a 16-byte cookie bound to its source
/// address and ephemeral key; only a hello that brings the cookie back costs the responder
/// state or a signature. The secret rotates every two minutes; the previous one is still
/// accepted, so a cookie lives two to four minutes. Thread-safe.
// @unchecked: the secrets and rotation time only under `lock`.
public final class LinkCookies: @unchecked Sendable {
    public static let cookieLength = 16
    /// What a cookie record echoes of a hello that asks for it: the first bytes of its ephemeral key.
    public static let echoLength = 16
    public static let rotationMs: Int64 = 120_000

    /// What to do with a hello, decided without per-peer state.
    public enum Admission: Sendable, Equatable {
        /// Proceed: create the session and let it answer.
        case admit
        /// Answer with this record (a cookie or a version refusal), keep nothing.
        case reply([UInt8])
        /// Drop silently (counted by the caller).
        case drop(String)
    }

    private let lock = NSLock()
    private var current: [UInt8]
    private var previous: [UInt8]
    private var rotatedAt: Int64
    private let clock: @Sendable () -> Int64

    public init(clock: @escaping @Sendable () -> Int64) {
        self.clock = clock
        current = Noise.randomBytes(32)
        previous = Noise.randomBytes(32)
        rotatedAt = clock()
    }

    /// Checks a `linkHello` from `address` (any stable byte form of the source address).
    public func admit(_ hello: TLVRecord, from address: [UInt8]) -> Admission {
        guard hello.type == FrameType.linkHello.rawValue else { return .drop("not a hello") }
        guard let version = hello.value.first else { return .drop("empty hello") }
        guard version == SecureLink.version else {
            let refusal = SecureLink.versionRecord()
            return refusal.count <= hello.value.count + TLVRecord.headerLength ? .reply(refusal) : .drop("unsupported version \(version)")
        }
        guard hello.value.count >= SecureLink.helloMinimumLength else { return .drop("hello of \(hello.value.count) bytes is too short") }
        let ephemeral = Array(hello.value[1..<33])
        let presented = Array(hello.value[33..<49])
        let (now, prev) = secrets()
        if constantTimeEqual(presented, Self.cookie(secret: now, address: address, ephemeral: ephemeral))
            || constantTimeEqual(presented, Self.cookie(secret: prev, address: address, ephemeral: ephemeral)) {
            // Validated address; the reply may now be as large as the padded hello, never larger.
            guard hello.value.count >= SecureLink.datagramHelloLength else {
                return .drop("hello with a cookie must be padded to \(SecureLink.datagramHelloLength) bytes")
            }
            return .admit
        }
        // A hello that asks for an echo gets its ephemeral key's first bytes back beside the
        // cookie, so its initiator can tell our cookie from a blind spoofer's.
        let cookie = Self.cookie(secret: now, address: address, ephemeral: ephemeral)
        let asksEcho = hello.value.count > SecureLink.helloMinimumLength && hello.value[SecureLink.helloMinimumLength] & SecureLink.helloFlagEcho != 0
        return .reply(TLVRecord(.linkCookie, value: asksEcho ? cookie + ephemeral.prefix(Self.echoLength) : cookie).encoded)
    }

    private func secrets() -> ([UInt8], [UInt8]) {
        lock.withLock {
            let t = clock()
            if t - rotatedAt >= Self.rotationMs {
                previous = current
                current = Noise.randomBytes(32)
                rotatedAt = t
            }
            return (current, previous)
        }
    }

    static func cookie(secret: [UInt8], address: [UInt8], ephemeral: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: cookieLength)
        let input = address + ephemeral
        crypto_generichash(&out, cookieLength, input, UInt64(input.count), secret, secret.count)
        return out
    }

    private func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.count == b.count && sodium_memcmp(a, b, a.count) == 0
    }
}

/// The one secure link session every transport runs (Docs/protocol.md §5).
///
/// Handshake: `Noise_NN_25519_ChaChaPoly_SHA256` with prologue `"yaok-link-v2"`:
/// 1. initiator → `linkHello`: version 2, ephemeral key, cookie (zeros if none), padding;
/// 2. responder → `linkReply`: its ephemeral key and, encrypted under the `ee` key, its
///    identity (role, Ed25519 key, X25519 key) signed over the handshake hash;
/// 3. initiator → its identity, signed over the final handshake hash, as the first sealed frame.
///
/// Each signature covers a hash of both ephemeral keys and everything before it, so a proof
/// is valid for this session only: it can be neither replayed nor relayed into another one,
/// and a relayed handshake leaves the relay holding no key. After it, every frame (pings,
/// custody acks and link close included) is a `sealed` record: counter (8) ‖ ChaCha20-Poly1305
/// with the direction's key; a counter seen before is refused (``ReplayWindow``).
///
/// Not thread-safe: the owning transport serialises calls.
// @unchecked: not thread-safe by design; the owning transport serialises every call (see above).
public final class SecureLink: @unchecked Sendable {
    /// The link protocol version this node speaks.
    public static let version: UInt8 = 2
    static let prologue = Array("yaok-link-v2".utf8) + [version]
    /// What each side's identity signature starts with (the host signs only these for a plugin).
    public static let responderContext = Array("yaok-link-v2 responder".utf8)
    public static let initiatorContext = Array("yaok-link-v2 initiator".utf8)
    /// role(1) ‖ Ed25519 key(32) ‖ X25519 key(32) ‖ signature(64).
    public static let identityLength = 1 + 32 + 32 + 64
    /// version(1) ‖ ephemeral(32) ‖ cookie(16).
    public static let helloMinimumLength = 1 + 32 + LinkCookies.cookieLength
    /// A datagram hello's first padding byte: flags. Bit 0: "echo my ephemeral key in a cookie"
    /// (Docs/protocol.md §5, "Datagram transports"); a responder that does not know it ignores it.
    public static let helloFlagEcho: UInt8 = 0x01
    /// The reply's value length: ephemeral(32) ‖ encrypted identity.
    public static let replyLength = 32 + identityLength + Noise.tagLength
    /// A datagram hello is padded to the reply's size, so answering it amplifies nothing.
    public static let datagramHelloLength = replyLength
    /// What sealing adds to a frame: outer header(3) ‖ counter(8) ‖ tag(16).
    public static let overhead = TLVRecord.headerLength + 8 + Noise.tagLength
    /// Largest inner frame a sealed record carries.
    public static let maxFrameLength = TLVRecord.maxValueLength - 8 - Noise.tagLength

    /// What the owner does after ``receive(_:)``.
    public enum Output: Sendable, Equatable {
        /// Send these record bytes to the peer as they are.
        case send([UInt8])
        /// The peer is authenticated: report the link up. A responder then answers with
        /// ``accept()`` or ``refuse(_:_:)`` (Docs/protocol.md §5, "The handshake's outcome").
        case established(AuthenticatedPeer)
        /// A frame from the peer (one inner TLV record, whole).
        case frame([UInt8])
        /// The session ends: send what came before this output, then close the link (or forget
        /// the datagram session) and report this reason. A responder whose peer's identity did
        /// not verify, or an initiator the responder refused.
        case refused(String)
    }

    public enum State: Sendable, Equatable { case initial, awaitingReply, awaitingIdentity, established, refused }

    public let isInitiator: Bool
    public let channel: LinkChannel
    private let identity: LinkIdentity
    private let role: PeerRole
    private var noise: NoiseNN
    private var helloMessage: [UInt8] = []
    private var sendCipher: NoiseCipher?
    private var receiveKey: NoiseKey?
    private var window = ReplayWindow()
    public private(set) var state: State = .initial
    /// The authenticated peer, once established.
    public private(set) var peer: AuthenticatedPeer?
    /// The link versions a clear `linkVersion` record said the peer speaks, when they exclude
    /// ours: reported if no reply comes (on a datagram link anyone can send it in the peer's name).
    public private(set) var versionsClaimed: [UInt8]?
    private var responderHash: [UInt8] = []
    private var tookUnechoedCookie = false
    private var replyPayload: [UInt8] = []

    /// `ephemeralSecret` is for test vectors only.
    public init(identity: LinkIdentity, role: PeerRole, isInitiator: Bool, channel: LinkChannel, ephemeralSecret: [UInt8]? = nil) {
        self.identity = identity
        self.role = role
        self.isInitiator = isInitiator
        self.channel = channel
        self.noise = NoiseNN(isInitiator: isInitiator, prologue: Self.prologue, ephemeralSecret: ephemeralSecret)
    }

    public var isEstablished: Bool { state == .established }
    /// Whether sealed frames can be opened: from the reply on (responder) or once established.
    public var acceptsSealed: Bool { state == .awaitingIdentity || state == .established }
    /// This side's ephemeral public key (sent in clear in the hello or reply).
    public var ephemeralKey: [UInt8] { noise.ephemeralPublic }

    /// The "I speak version 2" refusal record.
    public static func versionRecord() -> [UInt8] { TLVRecord(.linkVersion, value: [version]).encoded }

    /// Initiator: the hello record. Call once, when the carrier is connected.
    public func hello() throws -> [UInt8] {
        guard isInitiator, state == .initial else { throw SecureLinkError.unexpected("hello from a responder or twice") }
        helloMessage = try noise.writeFirst(payload: [])
        state = .awaitingReply
        return helloRecord(cookie: [UInt8](repeating: 0, count: LinkCookies.cookieLength))
    }

    private func helloRecord(cookie: [UInt8]) -> [UInt8] {
        var value = [Self.version] + helloMessage + cookie
        if channel == .datagram && value.count < Self.datagramHelloLength {
            value += [Self.helloFlagEcho] + [UInt8](repeating: 0, count: Self.datagramHelloLength - value.count - 1)
        }
        return TLVRecord(.linkHello, value: value).encoded
    }

    /// Handles one record from the peer. Throws when it must be refused; for a stream the
    /// owner closes the link, for datagrams it drops the record and counts it.
    public func receive(_ record: TLVRecord) throws -> [Output] {
        if FrameType.retiredHandshakeTypes.contains(record.type) { throw SecureLinkError.retiredVersion }
        switch FrameType(rawValue: record.type) {
        case .linkHello:
            guard !isInitiator, state == .initial else { throw SecureLinkError.unexpected("hello in state \(state)") }
            guard let v = record.value.first else { throw SecureLinkError.malformed("empty hello") }
            guard v == Self.version else { throw SecureLinkError.unsupportedVersion(peer: [v]) }
            guard record.value.count >= Self.helloMinimumLength else {
                throw SecureLinkError.malformed("hello of \(record.value.count) bytes, needs \(Self.helloMinimumLength)")
            }
            // Noise message 1 is the ephemeral key with an empty payload; cookie and padding are outside it.
            _ = try noise.readFirst(Array(record.value[1..<33]))
            let reply = try noise.writeSecond { hash in
                self.responderHash = hash
                return try self.identityPayload(context: Self.responderContext, hash: hash)
            }
            replyPayload = Array(reply[32...])
            establishKeys()
            state = .awaitingIdentity
            return [.send(TLVRecord(.linkReply, value: reply).encoded)]
        case .linkCookie:
            guard isInitiator, state == .awaitingReply, channel == .datagram else { throw SecureLinkError.unexpected("cookie in state \(state)") }
            switch record.value.count {
            case LinkCookies.cookieLength + LinkCookies.echoLength:
                guard Array(record.value.suffix(LinkCookies.echoLength)) == Array(ephemeralKey.prefix(LinkCookies.echoLength)) else {
                    throw SecureLinkError.malformed("a cookie that does not echo our hello")
                }
            case LinkCookies.cookieLength:
                // A responder that does not echo (older), or a blind spoofer: one such cookie per
                // hello, so forging them costs the initiator one datagram, not one each.
                guard !tookUnechoedCookie else { throw SecureLinkError.unexpected("a second cookie without an echo") }
                tookUnechoedCookie = true
            default:
                throw SecureLinkError.malformed("cookie of \(record.value.count) bytes")
            }
            return [.send(helloRecord(cookie: Array(record.value.prefix(LinkCookies.cookieLength))))]
        case .linkReply:
            guard isInitiator, state == .awaitingReply else { throw SecureLinkError.unexpected("reply in state \(state)") }
            guard record.value.count == Self.replyLength else {
                throw SecureLinkError.malformed("reply of \(record.value.count) bytes, expected \(Self.replyLength)")
            }
            // Read on a copy: a forged reply (anyone can send one in the peer's name) must leave
            // the handshake as it was, waiting for the real one.
            var attempt = noise
            let (payload, hash) = try attempt.readSecond(record.value)
            var responder = try verifyIdentity(payload, context: Self.responderContext, hash: hash)
            responder.proof = LinkProof(responderHash: hash, replyPayload: Array(record.value[32...]), peerSignature: Array(payload[65..<129]))
            noise = attempt
            establishKeys()
            let mine = try identityPayload(context: Self.initiatorContext, hash: noise.handshakeHash)
            let first = try seal(TLVRecord(.linkIdentity, value: mine).encoded)
            peer = responder
            state = .established
            return [.send(first), .established(responder)]
        case .linkVersion:
            guard isInitiator, state == .awaitingReply else { throw SecureLinkError.unexpected("version refusal in state \(state)") }
            guard !record.value.contains(Self.version) else {
                throw SecureLinkError.malformed("a version refusal that lists our own version \(Self.version)")
            }
            versionsClaimed = record.value
            throw SecureLinkError.unsupportedVersion(peer: record.value)
        case .sealed:
            guard acceptsSealed else { throw SecureLinkError.unexpected("sealed frame before the handshake") }
            let inner = try open(record.value)
            if isInitiator && inner.first == FrameType.linkOutcome.rawValue {
                switch try LinkOutcome(parsing: TLVRecord(parsing: inner).value) {
                case .accepted:
                    accepted = true
                    return []
                case .refused(let code, let reason):
                    state = .refused
                    return [.refused("the peer refused the link (\(code)): \(reason)")]
                }
            }
            guard state == .awaitingIdentity else { return [.frame(inner)] }
            // A later frame of the initiator's can overtake its identity on a datagram link: it
            // is refused alone and the session keeps waiting.
            guard let parsed = try? TLVRecord(parsing: inner), parsed.type == FrameType.linkIdentity.rawValue else {
                throw SecureLinkError.unexpected("first sealed frame is not the initiator's identity")
            }
            // The identity opened under this session's key: only the initiator sent it, so a
            // refusal answers the initiator and no one else.
            do {
                var initiator = try verifyIdentity(parsed.value, context: Self.initiatorContext, hash: noise.handshakeHash)
                initiator.proof = LinkProof(responderHash: responderHash, replyPayload: replyPayload, peerSignature: Array(parsed.value[65..<129]))
                peer = initiator
                state = .established
                return [.established(initiator)]
            } catch {
                let refusal = try refuse(.identity, "your identity does not verify: \(error)")
                return [.send(refusal), .refused("identity refused: \(error)")]
            }
        default:
            throw SecureLinkError.unexpected("record type 0x\(String(record.type, radix: 16)) in clear")
        }
    }

    /// Responder, after ``Output/established(_:)``: the sealed "accepted" answer to send.
    public func accept() throws -> [UInt8] {
        guard !isInitiator, state == .established else { throw SecureLinkError.unexpected("accept in state \(state)") }
        return try seal(TLVRecord(.linkOutcome, value: LinkOutcome.accepted.encoded).encoded)
    }

    /// Responder: the sealed refusal to send before ending the session (after a handshake
    /// the owner will not admit, e.g. for a role or a full table); the session is over.
    public func refuse(_ code: LinkOutcome.Refusal, _ reason: String) throws -> [UInt8] {
        guard !isInitiator, sendCipher != nil, state != .refused else { throw SecureLinkError.unexpected("refuse in state \(state)") }
        let record = try seal(TLVRecord(.linkOutcome, value: LinkOutcome.refused(code, reason).encoded).encoded)
        state = .refused
        return record
    }

    /// Initiator: whether the responder said it accepted the link (a responder that predates
    /// ``LinkOutcome`` never says).
    public private(set) var accepted = false

    /// Seals one frame (a whole inner TLV record) for the peer.
    public func seal(_ frame: [UInt8]) throws -> [UInt8] {
        guard state != .refused else { throw SecureLinkError.unexpected("sealing after the session was refused") }
        guard var cipher = sendCipher else { throw SecureLinkError.unexpected("sealing before the handshake") }
        guard frame.count <= Self.maxFrameLength else {
            throw SecureLinkError.malformed("frame of \(frame.count) bytes exceeds \(Self.maxFrameLength)")
        }
        let counter = cipher.n
        let sealed = try cipher.encrypt(ad: [], frame)
        sendCipher = cipher
        var value = [UInt8]()
        value.reserveCapacity(8 + sealed.count)
        for shift in stride(from: 56, through: 0, by: -8) { value.append(UInt8(truncatingIfNeeded: counter >> UInt64(shift))) }
        value += sealed
        return TLVRecord(.sealed, value: value).encoded
    }

    private func open(_ value: [UInt8]) throws -> [UInt8] {
        guard let key = receiveKey else { throw SecureLinkError.unexpected("no receive key") }
        guard value.count >= 8 + Noise.tagLength else { throw SecureLinkError.malformed("sealed record of \(value.count) bytes") }
        var counter: UInt64 = 0
        for i in 0..<8 { counter = counter << 8 | UInt64(value[i]) }
        guard window.accepts(counter) else { throw SecureLinkError.replayed(counter: counter) }
        let inner = try Noise.decrypt(key: key.bytes, nonce: counter, ad: [], ciphertext: Array(value[8...]))
        window.mark(counter)
        guard (try? TLVRecord(parsing: inner)) != nil else { throw SecureLinkError.malformed("sealed frame does not hold one TLV record") }
        return inner
    }

    private func establishKeys() {
        let (send, receive) = noise.split()
        sendCipher = send
        receiveKey = receive.key
    }

    private func identityPayload(context: [UInt8], hash: [UInt8]) throws -> [UInt8] {
        let body = [UInt8(role.rawValue)] + identity.signingKey + identity.kxKey
        return body + (try identity.sign(context + hash + body))
    }

    private func verifyIdentity(_ payload: [UInt8], context: [UInt8], hash: [UInt8]) throws -> AuthenticatedPeer {
        guard payload.count == Self.identityLength else {
            throw SecureLinkError.malformed("identity of \(payload.count) bytes, expected \(Self.identityLength)")
        }
        guard let role = PeerRole(rawValue: UInt32(payload[0])) else { throw SecureLinkError.malformed("unknown role \(payload[0])") }
        let body = Array(payload[0..<65])
        guard identity.verify(signature: Array(payload[65..<129]), of: context + hash + body, by: Array(payload[1..<33])) else {
            throw SecureLinkError.badSignature
        }
        return AuthenticatedPeer(role: role, signingKey: Array(payload[1..<33]), kxKey: Array(payload[33..<65]), proof: nil)
    }

    /// Which of two sessions with one peer both ends keep: rank 0 (the session dialled by the
    /// side with the lower Ed25519 key) before rank 1. It depends only on the two proven keys,
    /// never on a value the peer chose, so both ends compute the same.
    public static func duplicateRank(ourKey: [UInt8], peerKey: [UInt8], weDialled: Bool) -> Int {
        let lowerDials = ourKey.lexicographicallyPrecedes(peerKey)
        return weDialled == lowerDials ? 0 : 1
    }

    /// The handshake hash (for tests and channel binding).
    public var handshakeHash: [UInt8] { noise.handshakeHash }
}
