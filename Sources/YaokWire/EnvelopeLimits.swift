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
    /// Offsets in an envelope: the message ID after version and kind; the sender's signing key
    /// right after it.
    static let messageIDOffsetInEnvelope = 2
    static let senderKeyOffsetInEnvelope = messageIDOffsetInEnvelope + 16

    /// The bundle ID of a bundle's envelope, read from its fixed offsets after the hop header
    /// (35 or 39 bytes, by its version) without parsing or verifying the rest; nil if the
    /// bytes are too short or the header's version is unknown.
    ///
    /// For matching answers to requests (a client's pending SENDs, the reference of a relay's
    /// ERROR or a hub's custody refusal about bytes that may not even parse). Equal to
    /// ``Envelope/bundleID`` of a bundle that parses; never a reason to trust the bytes.
    public static func of(bundle: [UInt8]) -> [UInt8]? {
        guard let header = HopHeader.length(of: bundle) else { return nil }
        let (id, key) = (header + messageIDOffsetInEnvelope, header + senderKeyOffsetInEnvelope)
        guard bundle.count >= key + 32 else { return nil }
        return of(senderUserID: Hash.sha256(Array(bundle[key..<key + 32])), messageID: Array(bundle[id..<id + 16]))
    }
}

extension Bundle {
    /// Whether two encoded bundles carry the same envelope: every byte after the hop header,
    /// which each hub rewrites (and whose version may differ). Bytes without a known header
    /// are compared whole.
    public static func sameEnvelope(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard let ha = HopHeader.length(of: a), let hb = HopHeader.length(of: b),
              a.count >= ha, b.count >= hb else { return a == b }
        return a[ha...] == b[hb...]
    }
}

/// How long an envelope may live, checked by every hub, the relay and the endpoint before
/// anything is stored (Docs/protocol.md §2.2). An envelope's times are the sender's claims and
/// a node's wall clock may be days wrong, so a lifetime is judged by the bundle's **age** (its
/// hop header's, advanced by each holder on its monotonic clock), and by true time only where
/// the node knows it from an authenticated source. Without these bounds a throwaway key could
/// make junk that never expires, or a tombstone that never goes away.
public struct EnvelopeLifetime: Sendable, Equatable {
    /// Why an envelope's times are refused.
    public enum Violation: Error, Sendable, Equatable, CustomStringConvertible {
        /// Its age has reached its lifetime, or (true time known) `expires` is not after it.
        case expired(expiresMs: Int64)
        /// (True time known) `created` lies further ahead of it than a sender's clock may run.
        case createdInFuture(aheadMs: Int64, allowedMs: Int64)
        /// `expires − created` is longer than the maximum lifetime.
        case lifetimeTooLong(lifetimeMs: Int64, maxMs: Int64)

        public var description: String {
            switch self {
            case .expired: return "expired"
            case .createdInFuture(let ahead, let allowed):
                return "created \(ahead / 1000) s in the future (a sender's clock may lead true time by \(allowed / 1000) s)"
            case .lifetimeTooLong(let life, let max):
                return "lifetime \(life / 3_600_000) h exceeds the maximum \(max / 3_600_000) h"
            }
        }
    }

    /// The protocol's ceiling for `expires − created`: 7 days, the default TTL.
    public static let protocolMaxTTLMs: Int64 = Envelope.defaultTTLMilliseconds
    /// Default allowance for a sender's clock running ahead of true time: one maximum lifetime
    /// (a phone days off still gets its mail through; §2.2).
    public static let defaultClockSkewMs: Int64 = protocolMaxTTLMs

    /// Maximum `expires − created`; a deployment may set it lower, never above 7 days.
    public var maxTTLMs: Int64
    /// How far `created` may be ahead of true time, where true time is known.
    public var clockSkewMs: Int64

    public init(maxTTLMs: Int64 = EnvelopeLifetime.protocolMaxTTLMs, clockSkewMs: Int64 = EnvelopeLifetime.defaultClockSkewMs) {
        self.maxTTLMs = min(max(0, maxTTLMs), Self.protocolMaxTTLMs)
        self.clockSkewMs = max(0, clockSkewMs)
    }

    /// What a node concludes about an envelope it received.
    public struct Judgement: Sendable, Equatable {
        /// The age the node takes: the header's, or for a version-1 header `T − created` when
        /// true time is known, else 0.
        public var ageMs: Int64
        /// How long the node may keep it from now, on its own monotonic clock: `L − age`, or
        /// `min(L − age, expires − T)` when true time `T` is known. Always > 0.
        public var remainingMs: Int64
    }

    /// Judges `envelope`, whose hop header claimed `claimedAgeMs` (nil: a version-1 header),
    /// at a node that knows true time `trueTimeMs` (nil: it does not). Throws the first rule
    /// broken.
    public func judge(_ envelope: Envelope, claimedAgeMs: UInt32?, trueTimeMs: Int64?) throws(Violation) -> Judgement {
        // created ≤ expires is guaranteed by parsing, so the difference cannot overflow.
        let life = envelope.expiresMs - envelope.createdMs
        if life > maxTTLMs { throw .lifetimeTooLong(lifetimeMs: life, maxMs: maxTTLMs) }
        let age: Int64
        if let claimedAgeMs { age = Int64(claimedAgeMs) } else if let t = trueTimeMs { age = max(0, t &- envelope.createdMs) } else { age = 0 }
        var remaining = life - age
        if let t = trueTimeMs {
            if envelope.expiresMs <= t { throw .expired(expiresMs: envelope.expiresMs) }
            let ahead = envelope.createdMs &- t
            if envelope.createdMs > t, ahead > clockSkewMs { throw .createdInFuture(aheadMs: ahead, allowedMs: clockSkewMs) }
            remaining = min(remaining, envelope.expiresMs - t)
        }
        if remaining <= 0 { throw .expired(expiresMs: envelope.expiresMs) }
        return Judgement(ageMs: age, remainingMs: remaining)
    }

    /// The first rule `envelope` breaks at a node whose clock `nowMs` is true time, taking its
    /// age as `nowMs − created` (a version-1 header's rule).
    public func violation(of envelope: Envelope, nowMs: Int64) -> Violation? {
        do { _ = try judge(envelope, claimedAgeMs: nil, trueTimeMs: nowMs); return nil } catch { return error }
    }
}
