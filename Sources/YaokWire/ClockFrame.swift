import YaokPluginKit

/// The value of a ``RoutingFrameType/clock`` frame: the sender's best estimate of true
/// time and where it comes from. Layout: `version(1)=1 source(1) timeMs(8)` (Docs/protocol.md,
/// clock (0x0C)). Sending one at all says the sender reads hop header version 2.
public struct ClockFrame: Sendable, Equatable {
    public static let version: UInt8 = 1
    public static let length = 10

    /// Where a node's time comes from, strongest last but one (``none`` is the weakest).
    public enum Source: UInt8, Sendable, CaseIterable, CustomStringConvertible {
        /// Its own clock, not known to be right.
        case none = 0
        /// Its system clock, which its kernel says is synchronised (or its operator vouches for).
        case system = 1
        /// The pinned relay.
        case relay = 2
        /// Trusted hubs whose own source is ``system`` or ``relay``.
        case hubs = 3
        /// A vote of phones (never makes true time known).
        case phones = 4

        public var description: String {
            switch self {
            case .none: return "own clock"
            case .system: return "system"
            case .relay: return "relay"
            case .hubs: return "hubs"
            case .phones: return "phones"
            }
        }

        /// Whether a time from this source makes true time known (Docs/protocol.md §2.2).
        public var makesTimeKnown: Bool { self == .system || self == .relay || self == .hubs }
    }

    public var source: Source
    /// UTC milliseconds.
    public var timeMs: Int64

    public init(source: Source, timeMs: Int64) {
        self.source = source
        self.timeMs = timeMs
    }

    public init(parsing value: [UInt8]) throws {
        guard value.count == Self.length else {
            throw WireError.badLength(what: "clock frame", detail: "must be \(Self.length) bytes, got \(value.count)")
        }
        guard value[0] == Self.version else { throw WireError.wrongVersion(what: "clock frame", version: Int(value[0])) }
        guard let source = Source(rawValue: value[1]) else {
            throw WireError.badLength(what: "clock frame", detail: "unknown source \(value[1])")
        }
        var t: UInt64 = 0
        for b in value[2..<10] { t = t << 8 | UInt64(b) }
        guard t <= UInt64(Int64.max) else { throw WireError.badTimestamp("clock frame time above 2^63-1") }
        self.source = source
        self.timeMs = Int64(t)
    }

    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: Self.length)
        w.u8(Self.version)
        w.u8(source.rawValue)
        w.u64(UInt64(max(0, timeMs)))
        return w.bytes
    }

    /// The whole TLV frame.
    public var frame: [UInt8] { TLVRecord(.clock, value: encoded).encoded }
    public var record: TLVRecord { TLVRecord(.clock, value: encoded) }
}

/// In JSON (`yaok-hub status --json`) a source is its name: `none`, `system`, `relay`, `hubs`, `phones`.
extension ClockFrame.Source: Codable {
    public var name: String {
        switch self {
        case .none: return "none"
        case .system: return "system"
        case .relay: return "relay"
        case .hubs: return "hubs"
        case .phones: return "phones"
        }
    }

    public init(from decoder: Decoder) throws {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let source = Self.allCases.first(where: { $0.name == name }) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "unknown clock source \(name)"))
        }
        self = source
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(name)
    }
}
