import YaokPluginKit

/// The link handshakes the hub signed its identity in for one transport, and the check of a
/// link-up that transport's plugin reports against them (Docs/plugin-protocol.md, "Proving a
/// link-up"): a compromised plugin must not get the victim's mail by reporting a link with the
/// victim's key. A link-up is believed only with a ``LinkProof`` whose peer signature chains
/// from a hash this hub signed, recently, and not used by another link-up.
///
/// A value: its owner (``TransportHost``) keeps it under its lock.
struct LinkProofLedger: Sendable {
    /// How long a signed handshake may wait for its link-up (handshakes end after 10 s).
    static let windowNs: UInt64 = 30_000_000_000
    /// Bound on remembered handshakes: a plugin asking for many signatures forgets its oldest.
    static let capacity = 512

    private struct Signed {
        let asResponder: Bool
        let atNs: UInt64
    }
    private var signed: [[UInt8]: Signed] = [:]

    /// Notes a statement the hub signed for the plugin, if it is a link identity
    /// (context ‖ hash(32) ‖ role ‖ keys; ``HostSigningPolicy`` allowed it).
    mutating func noteSigned(_ message: [UInt8], nowNs: UInt64) {
        for (context, asResponder) in [(SecureLink.responderContext, true), (SecureLink.initiatorContext, false)]
        where message.starts(with: context) && message.count >= context.count + 32 {
            expire(nowNs: nowNs)
            if signed.count >= Self.capacity, let oldest = signed.min(by: { $0.value.atNs < $1.value.atNs })?.key {
                signed[oldest] = nil
            }
            signed[Array(message[context.count..<(context.count + 32)])] = Signed(asResponder: asResponder, atNs: nowNs)
            return
        }
    }

    /// Nil if the link-up is proven (its handshake is then used up); otherwise why it is refused.
    /// The relay role is not proven here: it has no link handshake, and the router honours it
    /// only on the relay library's link with the pinned key.
    mutating func refusal(of link: LinkInfo, nowNs: UInt64) -> String? {
        if link.peerRole == .relay { return nil }
        expire(nowNs: nowNs)
        guard let proof = link.proof else { return "it came without the handshake's proof" }
        let hash: [UInt8], asResponder: Bool
        if let s = signed[proof.responderHash], s.asResponder {
            (hash, asResponder) = (proof.responderHash, true)
        } else if case let final = proof.finalHash, let s = signed[final], !s.asResponder {
            (hash, asResponder) = (final, false)
        } else {
            return "its proof names no handshake this hub signed in the last \(Self.windowNs / 1_000_000_000) s (forged, replayed or used)"
        }
        guard proof.proves(role: link.peerRole, signingKey: link.peerSigningKey, kxKey: link.peerKXKey, hostWasResponder: asResponder) else {
            return "the peer's signature in its proof does not prove that key and role"
        }
        signed[hash] = nil
        return nil
    }

    private mutating func expire(nowNs: UInt64) {
        signed = signed.filter { nowNs &- $0.value.atNs <= Self.windowNs }
    }
}
