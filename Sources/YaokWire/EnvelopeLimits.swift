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
