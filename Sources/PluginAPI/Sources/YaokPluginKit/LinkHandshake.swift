/// What a handshake needs from an identity: public keys, signing, verification and randomness.
/// The hub's ``HubIdentity`` provides it inside plugins; a `yaok` endpoint provides its own.
public protocol LinkIdentity: Sendable {
    var signingKey: [UInt8] { get }
    var kxKey: [UInt8] { get }
    func sign(_ message: [UInt8]) throws -> [UInt8]
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool
    func randomBytes(_ count: Int) -> [UInt8]
}

extension HubIdentity: LinkIdentity {}

/// A peer that proved it holds the secret key for `signingKey`.
public struct AuthenticatedPeer: Sendable, Equatable {
    public var role: PeerRole
    public var signingKey: [UInt8]
    public var kxKey: [UInt8]
}

/// Handshake errors.
public enum HandshakeError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case badSignature
    case noChallengeSent
    case unexpectedRole(PeerRole)

    public var description: String {
        switch self {
        case .malformed(let what): return "malformed handshake frame: \(what)"
        case .badSignature: return "the peer's identity proof has a bad signature"
        case .noChallengeSent: return "identity proof arrived before our challenge was sent"
        case .unexpectedRole(let role): return "peer claims role \(role), which this link does not accept"
        }
    }
}

/// The mutual link handshake every transport runs before reporting a link up.
///
/// Each side sends ``FrameType/linkChallenge`` with 32 fresh random bytes and
/// answers the other's challenge with ``FrameType/linkProof``:
/// `role(1) signing_key(32) kx_key(32) timestamp_ms(8) signature(64)`, where the
/// Ed25519 signature covers `"yaok-link-v1" || challenge || role || signing_key || kx_key || timestamp_ms`.
/// A proof is only accepted for the challenge this side sent, so it cannot be replayed.
/// Byte layout in Docs/protocol.md.
public final class LinkHandshake: @unchecked Sendable {
    public static let context = Array("yaok-link-v1".utf8)
    public static let proofLength = 1 + 32 + 32 + 8 + 64

    private let identity: LinkIdentity
    private let role: PeerRole
    private let clock: @Sendable () -> Int64
    private var challenge: [UInt8]?

    /// The authenticated peer, once its proof verified.
    public private(set) var peer: AuthenticatedPeer?
    /// Whether this side has answered the peer's challenge.
    public private(set) var answeredPeer = false

    public init(identity: LinkIdentity, role: PeerRole, clock: @escaping @Sendable () -> Int64) {
        self.identity = identity
        self.role = role
        self.clock = clock
    }

    /// Both directions done.
    public var isComplete: Bool { peer != nil && answeredPeer }

    /// Our challenge frame (a TLV record). Call once when the link's transport is connected.
    public func challengeFrame() -> [UInt8] {
        let nonce = identity.randomBytes(32)
        challenge = nonce
        return TLVRecord(.linkChallenge, value: nonce).encoded
    }

    /// Handles a handshake record; returns the frame to send back, if any.
    /// Throws on a bad proof: the caller should drop the link.
    public func handle(_ record: TLVRecord) throws -> [UInt8]? {
        switch FrameType(rawValue: record.type) {
        case .linkChallenge:
            guard record.value.count == 32 else { throw HandshakeError.malformed("challenge must be 32 bytes, got \(record.value.count)") }
            let proof = try makeProof(for: record.value)
            answeredPeer = true
            return TLVRecord(.linkProof, value: proof).encoded
        case .linkProof:
            guard let challenge else { throw HandshakeError.noChallengeSent }
            peer = try Self.verify(proof: record.value, challenge: challenge, identity: identity)
            return nil
        default:
            throw HandshakeError.malformed("record type 0x\(String(record.type, radix: 16)) is not part of the handshake")
        }
    }

    func makeProof(for peerChallenge: [UInt8]) throws -> [UInt8] {
        var body: [UInt8] = [UInt8(role.rawValue)]
        body += identity.signingKey
        body += identity.kxKey
        let ts = UInt64(bitPattern: clock())
        for shift in stride(from: 56, through: 0, by: -8) { body.append(UInt8(truncatingIfNeeded: ts >> UInt64(shift))) }
        let signature = try identity.sign(Self.context + peerChallenge + body)
        return body + signature
    }

    static func verify(proof: [UInt8], challenge: [UInt8], identity: LinkIdentity) throws -> AuthenticatedPeer {
        guard proof.count == proofLength else { throw HandshakeError.malformed("proof must be \(proofLength) bytes, got \(proof.count)") }
        guard let role = PeerRole(rawValue: UInt32(proof[0])) else { throw HandshakeError.malformed("unknown role \(proof[0])") }
        let body = Array(proof[0..<73])
        let signingKey = Array(proof[1..<33])
        let kxKey = Array(proof[33..<65])
        let signature = Array(proof[73..<137])
        guard identity.verify(signature: signature, of: context + challenge + body, by: signingKey) else {
            throw HandshakeError.badSignature
        }
        return AuthenticatedPeer(role: role, signingKey: signingKey, kxKey: kxKey)
    }
}
