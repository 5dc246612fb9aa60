import YaokCrypto

extension Envelope {
    /// This envelope's ``YaokCrypto/BundleID``: its identity in frames and stores.
    public var bundleID: [UInt8] { BundleID.of(senderUserID: senderUserID, messageID: messageID) }

    /// For a receipt, the bundle ID of the message it acknowledges: that message was sent by
    /// this receipt's recipient (`recipientUserID`) under `refID`. Nil for a message.
    public var acknowledgedBundleID: [UInt8]? {
        kind == .message ? nil : BundleID.of(senderUserID: recipientUserID, messageID: refID)
    }
}

extension BundleID {
    /// Offsets in an encoded bundle: the message ID after the hop header, version and kind;
    /// the sender's signing key right after it.
    static let messageIDOffsetInBundle = HopHeader.length + 2
    static let senderKeyOffsetInBundle = messageIDOffsetInBundle + 16

    /// The bundle ID of a bundle's envelope, read from its fixed offsets (message ID at 37,
    /// sender key at 53) without parsing or verifying the rest; nil if the bytes are too short.
    ///
    /// For matching answers to requests (a client's pending SENDs, the reference of a relay's
    /// ERROR or a hub's custody refusal about bytes that may not even parse). Equal to
    /// ``Envelope/bundleID`` of a bundle that parses; never a reason to trust the bytes.
    public static func of(bundle: [UInt8]) -> [UInt8]? {
        let (id, key) = (messageIDOffsetInBundle, senderKeyOffsetInBundle)
        guard bundle.count >= key + 32 else { return nil }
        return of(senderUserID: Hash.sha256(Array(bundle[key..<key + 32])), messageID: Array(bundle[id..<id + 16]))
    }
}

extension Bundle {
    /// Whether two encoded bundles carry the same envelope: every byte after the hop header,
    /// which each hub rewrites. Bytes too short to hold a hop header are compared whole.
    public static func sameEnvelope(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count >= HopHeader.length, b.count >= HopHeader.length else { return a == b }
        return a[HopHeader.length...] == b[HopHeader.length...]
    }
}

/// How long an envelope may live, checked by every hub, the relay and the endpoint before
/// anything is stored. An envelope's times are the sender's claims: without these bounds a
/// throwaway key could make junk that never expires, or a tombstone that never goes away.
public struct EnvelopeLifetime: Sendable, Equatable {
    /// Why an envelope's times are refused.
    public enum Violation: Error, Sendable, Equatable, CustomStringConvertible {
        /// `expires` is not after now.
        case expired(expiresMs: Int64)
        /// `created` lies further ahead of our clock than the allowed skew.
        case createdInFuture(aheadMs: Int64, allowedMs: Int64)
        /// `expires − created` is longer than the maximum lifetime.
        case lifetimeTooLong(lifetimeMs: Int64, maxMs: Int64)

        public var description: String {
            switch self {
            case .expired: return "expired"
            case .createdInFuture(let ahead, let allowed):
                return "created \(ahead / 1000) s in the future (allowed clock skew \(allowed / 1000) s)"
            case .lifetimeTooLong(let life, let max):
                return "lifetime \(life / 3_600_000) h exceeds the maximum \(max / 3_600_000) h"
            }
        }
    }

    /// The protocol's ceiling for `expires − created`: 7 days, the default TTL.
    public static let protocolMaxTTLMs: Int64 = Envelope.defaultTTLMilliseconds
    /// Default allowance for clocks running ahead of ours: 10 minutes.
    public static let defaultClockSkewMs: Int64 = 10 * 60 * 1000

    /// Maximum `expires − created`; a deployment may set it lower, never above 7 days.
    public var maxTTLMs: Int64
    /// How far `created` may be ahead of this node's clock.
    public var clockSkewMs: Int64

    public init(maxTTLMs: Int64 = EnvelopeLifetime.protocolMaxTTLMs, clockSkewMs: Int64 = EnvelopeLifetime.defaultClockSkewMs) {
        self.maxTTLMs = min(max(0, maxTTLMs), Self.protocolMaxTTLMs)
        self.clockSkewMs = max(0, clockSkewMs)
    }

    /// The first rule `envelope` breaks at `nowMs`, or nil if its times are acceptable.
    public func violation(of envelope: Envelope, nowMs: Int64) -> Violation? {
        if envelope.expiresMs <= nowMs { return .expired(expiresMs: envelope.expiresMs) }
        let ahead = envelope.createdMs &- nowMs
        if envelope.createdMs > nowMs, ahead > clockSkewMs { return .createdInFuture(aheadMs: ahead, allowedMs: clockSkewMs) }
        // created ≤ expires is guaranteed by parsing, so the difference cannot overflow.
        let life = envelope.expiresMs - envelope.createdMs
        if life > maxTTLMs { return .lifetimeTooLong(lifetimeMs: life, maxMs: maxTTLMs) }
        return nil
    }
}
