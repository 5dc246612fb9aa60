/// The hop-by-hop header in front of an envelope. Not signed: each hub rewrites it.
///
/// Layout: `version(1)=1 hopCount(1) hopLimit(1) previousHop(32)` = 35 bytes.
public struct HopHeader: Sendable, Equatable {
    public static let version: UInt8 = 1
    public static let length = 35
    public static let defaultHopLimit: UInt8 = 10

    /// Hubs this bundle has crossed.
    public var hopCount: UInt8
    /// Hubs it may cross.
    public var hopLimit: UInt8
    /// The user ID of the hub that sent it last, or 32 zeros from the originating endpoint.
    public var previousHop: [UInt8]

    /// The header an endpoint puts on a new envelope.
    public static func origin(hopLimit: UInt8 = defaultHopLimit) -> HopHeader {
        HopHeader(hopCount: 0, hopLimit: hopLimit, previousHop: [UInt8](repeating: 0, count: 32))
    }

    public init(hopCount: UInt8, hopLimit: UInt8 = defaultHopLimit, previousHop: [UInt8]) {
        self.hopCount = hopCount
        self.hopLimit = hopLimit
        self.previousHop = previousHop
    }

    /// Parses the 35-byte header at the start of `bytes`.
    public init(parsing bytes: [UInt8]) throws {
        var r = ByteReader(bytes, what: "hop header")
        let version = try r.u8()
        guard version == Self.version else { throw WireError.wrongVersion(what: "hop header", version: Int(version)) }
        hopCount = try r.u8()
        hopLimit = try r.u8()
        previousHop = try r.take(32)
        guard hopCount <= hopLimit else { throw WireError.hopLimitReached(count: Int(hopCount), limit: Int(hopLimit)) }
    }

    /// The header's 35 bytes. A `previousHop` that is not 32 bytes encodes as 32 zeros (no previous
    /// hop); ``Bundle/forwarded(by:)`` checks the hub ID's length.
    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: Self.length)
        w.u8(Self.version)
        w.u8(hopCount)
        w.u8(hopLimit)
        w.raw(previousHop.count == 32 ? previousHop : [UInt8](repeating: 0, count: 32))
        return w.bytes
    }
}

/// What moves between nodes in a ``YaokPluginKit/FrameType/bundle`` frame:
/// a hop header followed by the signed envelope.
public struct Bundle: Sendable, Equatable {
    public static let maxEncodedLength = HopHeader.length + Envelope.maxEncodedLength

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
        guard bytes.count >= HopHeader.length else {
            throw WireError.truncated(what: "bundle", needed: HopHeader.length, have: bytes.count)
        }
        hop = try HopHeader(parsing: Array(bytes[0..<HopHeader.length]))
        envelope = try Envelope(parsing: Array(bytes[HopHeader.length...]))
    }

    /// Header followed by the envelope.
    public var encoded: [UInt8] { hop.encoded + envelope.encoded }

    /// The bundle as the hub `hubID` (its user ID) sends it on: hop count + 1, previous hop = hub.
    /// Throws ``WireError/hopLimitReached(count:limit:)`` if that would pass the hop limit.
    public func forwarded(by hubID: [UInt8]) throws -> Bundle {
        try checkLength(hubID, 32, "hub ID")
        let next = Int(hop.hopCount) + 1
        guard next <= Int(hop.hopLimit) else { throw WireError.hopLimitReached(count: next, limit: Int(hop.hopLimit)) }
        return Bundle(hop: HopHeader(hopCount: UInt8(next), hopLimit: hop.hopLimit, previousHop: hubID), envelope: envelope)
    }
}
