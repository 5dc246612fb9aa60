/// The hop-by-hop header in front of an envelope. Not signed: each hub rewrites it.
///
/// Version 2 (39 bytes): `version(1)=2 hopCount(1) hopLimit(1) previousHop(32) ageMs(4)`.
/// Version 1 (35 bytes) is the same without the age; it is what a node sends to a peer that has
/// not shown it reads version 2 (Docs/protocol.md §3).
public struct HopHeader: Sendable, Equatable {
    public static let version: UInt8 = 2
    /// Length of a version-1 header (no age).
    public static let lengthV1 = 35
    /// Length of a version-2 header.
    public static let lengthV2 = 39
    public static let defaultHopLimit: UInt8 = 10

    /// Hubs this bundle has crossed.
    public var hopCount: UInt8
    /// Hubs it may cross.
    public var hopLimit: UInt8
    /// The user ID of the hub that sent it last, or 32 zeros from the originating endpoint.
    public var previousHop: [UInt8]
    /// Milliseconds since the envelope's creation, as counted by the nodes that held it;
    /// nil in a version-1 header, which does not carry it.
    public var ageMs: UInt32?

    /// The header an endpoint puts on a new envelope.
    public static func origin(hopLimit: UInt8 = defaultHopLimit, ageMs: UInt32? = nil) -> HopHeader {
        HopHeader(hopCount: 0, hopLimit: hopLimit, previousHop: [UInt8](repeating: 0, count: 32), ageMs: ageMs)
    }

    public init(hopCount: UInt8, hopLimit: UInt8 = defaultHopLimit, previousHop: [UInt8], ageMs: UInt32? = nil) {
        self.hopCount = hopCount
        self.hopLimit = hopLimit
        self.previousHop = previousHop
        self.ageMs = ageMs
    }

    /// The length of the header at the start of `bytes`, by its version byte; nil if the
    /// first byte is no known version (or there is none).
    public static func length(of bytes: some Collection<UInt8>) -> Int? {
        switch bytes.first {
        case 1?: return lengthV1
        case 2?: return lengthV2
        default: return nil
        }
    }

    /// Parses the header at the start of `bytes` (35 or 39 bytes, by its version).
    public init(parsing bytes: [UInt8]) throws {
        var r = ByteReader(bytes, what: "hop header")
        let version = try r.u8()
        guard version == 1 || version == 2 else { throw WireError.wrongVersion(what: "hop header", version: Int(version)) }
        hopCount = try r.u8()
        hopLimit = try r.u8()
        previousHop = try r.take(32)
        ageMs = version == 2 ? try r.u32() : nil
        guard hopCount <= hopLimit else { throw WireError.hopLimitReached(count: Int(hopCount), limit: Int(hopLimit)) }
    }

    /// This header's length when encoded.
    public var length: Int { ageMs == nil ? Self.lengthV1 : Self.lengthV2 }

    /// The header's bytes: version 2 if it carries an age, else version 1. A `previousHop`
    /// that is not 32 bytes encodes as 32 zeros (no previous hop); ``Bundle/forwarded(by:ageMs:)``
    /// checks the hub ID's length.
    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: length)
        w.u8(ageMs == nil ? 1 : 2)
        w.u8(hopCount)
        w.u8(hopLimit)
        w.raw(previousHop.count == 32 ? previousHop : [UInt8](repeating: 0, count: 32))
        if let ageMs { w.u32(ageMs) }
        return w.bytes
    }

    /// The header the hub `hubID` (its user ID) puts on a bundle it sends on: hop count + 1,
    /// previous hop = hub, and the age `ageMs` (nil: a version-1 header, for a peer that does
    /// not read ages). Throws ``WireError/hopLimitReached(count:limit:)`` if that would pass the
    /// hop limit.
    public func forwarded(by hubID: [UInt8], ageMs: UInt32?) throws -> HopHeader {
        try checkLength(hubID, 32, "hub ID")
        let next = Int(hopCount) + 1
        guard next <= Int(hopLimit) else { throw WireError.hopLimitReached(count: next, limit: Int(hopLimit)) }
        return HopHeader(hopCount: UInt8(next), hopLimit: hopLimit, previousHop: hubID, ageMs: ageMs)
    }

    /// An age in milliseconds as the header carries it: clamped to 0…2³²−1 (any age past
    /// 7 days is expired anyway).
    public static func clampedAge(_ ms: Int64) -> UInt32 { UInt32(clamping: max(0, ms)) }
}

/// What moves between nodes in a ``YaokPluginKit/FrameType/bundle`` frame:
/// a hop header followed by the signed envelope.
public struct Bundle: Sendable, Equatable {
    public static let maxEncodedLength = HopHeader.lengthV2 + Envelope.maxEncodedLength

    public var hop: HopHeader
    public let envelope: Envelope

    public init(hop: HopHeader = .origin(), envelope: Envelope) {
        self.hop = hop
        self.envelope = envelope
    }

    /// Parses a bundle (structure only; call `envelope.verifySignature()` before trusting it).
    public init(parsing bytes: [UInt8]) throws {
        guard bytes.count <= Self.maxEncodedLength else {
            throw WireError.oversized(what: "bundle", size: bytes.count, limit: Self.maxEncodedLength)
        }
        guard let length = HopHeader.length(of: bytes) else {
            guard let v = bytes.first else { throw WireError.truncated(what: "bundle", needed: HopHeader.lengthV1, have: 0) }
            throw WireError.wrongVersion(what: "hop header", version: Int(v))
        }
        guard bytes.count >= length else {
            throw WireError.truncated(what: "bundle", needed: length, have: bytes.count)
        }
        hop = try HopHeader(parsing: Array(bytes[0..<length]))
        envelope = try Envelope(parsing: Array(bytes[length...]))
    }

    /// Header followed by the envelope.
    public var encoded: [UInt8] { hop.encoded + envelope.encoded }

    /// The bundle as the hub `hubID` (its user ID) sends it on: hop count + 1, previous hop =
    /// hub, and the age `ageMs` (nil: a version-1 header, for a peer that does not read ages).
    /// Throws ``WireError/hopLimitReached(count:limit:)`` if that would pass the hop limit.
    public func forwarded(by hubID: [UInt8], ageMs: UInt32?) throws -> Bundle {
        Bundle(hop: try hop.forwarded(by: hubID, ageMs: ageMs), envelope: envelope)
    }

    /// The same bundle with another age in its header (nil: version 1).
    public func withAge(_ ageMs: UInt32?) -> Bundle {
        var b = self
        b.hop.ageMs = ageMs
        return b
    }

    /// The bytes of a bundle accepted earlier with only its hop header rewritten: the envelope
    /// after the header is copied, not parsed again (it was parsed, and its signature checked,
    /// when the bundle arrived). How a hub sends a stored bundle on.
    public static func rewritingHopHeader(of bytes: [UInt8], _ rewrite: (HopHeader) throws -> HopHeader) throws -> [UInt8] {
        guard let length = HopHeader.length(of: bytes) else {
            throw WireError.wrongVersion(what: "hop header", version: Int(bytes.first ?? 0))
        }
        guard bytes.count > length else { throw WireError.truncated(what: "bundle", needed: length + 1, have: bytes.count) }
        var out = try rewrite(HopHeader(parsing: Array(bytes[0..<length]))).encoded
        out.append(contentsOf: bytes[length...])
        return out
    }
}
