import CSodium

/// What a transport that runs the link handshake itself hands the host with a link-up, so the
/// host believes the peer's key and role on proof, not on the plugin's word
/// (Docs/plugin-protocol.md, "Proving a link-up").
///
/// In a link handshake (Docs/protocol.md §5) the responder signs the hash `h` the Noise state
/// has before the reply's payload; the initiator signs `SHA-256(h ‖ reply payload)`, the final
/// hash. The host signed one of the two for this hub; with `h`, the reply payload (the
/// responder's encrypted identity) and the peer's signature it recomputes the other and checks
/// the peer's signature over it. A plugin cannot make such a proof for a peer that did not
/// take part in this hub's handshake, because the peer signs a hash that chains from one the
/// host signed.
///
/// Encoded `kind(1) = 1 ‖ h(32) ‖ reply payload(145) ‖ peer signature(64)`.
public struct LinkProof: Sendable, Equatable {
    public static let kindLinkV2: UInt8 = 1
    /// The responder's encrypted identity: identity(129) ‖ tag(16).
    public static let replyPayloadLength = SecureLink.identityLength + Noise.tagLength
    public static let length = 1 + 32 + replyPayloadLength + 64

    /// The hash the responder signed.
    public var responderHash: [UInt8]
    /// The reply's encrypted identity, as the initiator hashed it.
    public var replyPayload: [UInt8]
    /// The peer's Ed25519 signature from its identity.
    public var peerSignature: [UInt8]

    public init(responderHash: [UInt8], replyPayload: [UInt8], peerSignature: [UInt8]) {
        self.responderHash = responderHash
        self.replyPayload = replyPayload
        self.peerSignature = peerSignature
    }

    public init(parsing bytes: [UInt8]) throws {
        guard bytes.count == Self.length else { throw SecureLinkError.malformed("link proof of \(bytes.count) bytes, expected \(Self.length)") }
        guard bytes[0] == Self.kindLinkV2 else { throw SecureLinkError.malformed("link proof of unknown kind \(bytes[0])") }
        responderHash = Array(bytes[1..<33])
        replyPayload = Array(bytes[33..<(33 + Self.replyPayloadLength)])
        peerSignature = Array(bytes[(33 + Self.replyPayloadLength)...])
    }

    public var encoded: [UInt8] { [Self.kindLinkV2] + responderHash + replyPayload + peerSignature }

    /// The hash the initiator signed.
    public var finalHash: [UInt8] { Noise.sha256(responderHash + replyPayload) }

    /// Whether the peer's signature proves this role and these keys in the handshake, the host
    /// having been the responder (the peer initiated) or the initiator.
    public func proves(role: PeerRole, signingKey: [UInt8], kxKey: [UInt8], hostWasResponder: Bool) -> Bool {
        guard signingKey.count == 32, kxKey.count == 32, peerSignature.count == 64 else { return false }
        let statement = (hostWasResponder ? SecureLink.initiatorContext + finalHash : SecureLink.responderContext + responderHash)
            + [UInt8(truncatingIfNeeded: role.rawValue)] + signingKey + kxKey
        _ = Noise.sha256([])  // libsodium initialised
        return crypto_sign_verify_detached(peerSignature, statement, UInt64(statement.count), signingKey) == 0
    }
}
