/// The TLV frame `[type:1][length:2, big-endian][value]` every transport carries.
///
/// One record is one host frame: a datagram transport sends one record per
/// datagram, a stream transport (TCP) sends records back to back and splits
/// them with ``TLVStreamDecoder``, BLE chunks a record (see ``Chunker``).
public struct TLVRecord: Sendable, Equatable {
    /// Largest value a record can carry (the length field is 16 bits).
    public static let maxValueLength = 0xFFFF
    /// Header size: type and length.
    public static let headerLength = 3

    public var type: UInt8
    public var value: [UInt8]

    public init(type: UInt8, value: [UInt8]) {
        self.type = type
        self.value = value
    }

    public init(_ type: FrameType, value: [UInt8]) {
        self.init(type: type.rawValue, value: value)
    }

    /// The record's bytes. Precondition: value fits the 16-bit length.
    public var encoded: [UInt8] {
        precondition(value.count <= Self.maxValueLength, "TLV value too large")
        var out = [UInt8]()
        out.reserveCapacity(Self.headerLength + value.count)
        out.append(type)
        out.append(UInt8(value.count >> 8))
        out.append(UInt8(value.count & 0xff))
        out.append(contentsOf: value)
        return out
    }

    /// Parses exactly one record occupying all of `bytes`.
    public init(parsing bytes: [UInt8]) throws {
        guard bytes.count >= Self.headerLength else { throw TLVError.truncated(needed: Self.headerLength, have: bytes.count) }
        let length = Int(bytes[1]) << 8 | Int(bytes[2])
        guard bytes.count - Self.headerLength == length else {
            throw TLVError.lengthMismatch(declared: length, actual: bytes.count - Self.headerLength)
        }
        self.type = bytes[0]
        self.value = Array(bytes[Self.headerLength...])
    }
}

/// The frame types a transport and its link session know (the TLV `type` byte): the bundle
/// a transport carries (and may schedule first), keep-alives, the goodbye, and the secure link's
/// own records. Routing's frames (custody, offers, requests, reconciliation, …) are
/// `YaokWire.RoutingFrameType`, in the same byte space; a transport carries them without
/// knowing them. Both are tabled in Docs/protocol.md.
public enum FrameType: UInt8, Sendable, CaseIterable {
    /// A bundle: hop-by-hop header followed by a signed envelope.
    case bundle = 0x01
    /// Keep-alive request.
    case ping = 0x12
    /// Keep-alive answer.
    case pong = 0x13
    /// The sender is closing the link (graceful goodbye); the receiver reports it down.
    case linkClose = 0x14
    /// Secure link: the initiator's proof of identity, the first sealed frame it sends.
    case linkIdentity = 0x15
    /// Secure link: the responder's answer to the identity, its first sealed frame (``LinkOutcome``).
    case linkOutcome = 0x16
    /// One slice of a frame too long for one datagram of a slow link (LoRa, Docs/protocol.md
    /// §10.2): `tag ‖ index ‖ count ‖ slice`, inside `sealed`.
    case linkFragment = 0x17
    /// Secure link, in clear: handshake message 1 (version, ephemeral key, cookie, padding).
    case linkHello = 0x20
    /// Secure link, in clear: a datagram responder's stateless cookie (answers a hello without one).
    case linkCookie = 0x21
    /// Secure link, in clear: handshake message 2 (ephemeral key, encrypted signed identity).
    case linkReply = 0x22
    /// Secure link: one frame sealed with the session's key for this direction.
    case sealed = 0x23
    /// Secure link, in clear: "I do not speak your link version"; the value lists the versions spoken.
    case linkVersion = 0x24

    /// Types of the retired version-1 link handshake (challenge 0x10, proof 0x11): a peer that
    /// sends them is refused with ``linkVersion``.
    public static let retiredHandshakeTypes: Set<UInt8> = [0x10, 0x11]
}

/// TLV parsing errors.
public enum TLVError: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated(needed: Int, have: Int)
    case lengthMismatch(declared: Int, actual: Int)
    case oversized(length: Int, limit: Int)

    public var description: String {
        switch self {
        case .truncated(let needed, let have): return "truncated TLV frame: need \(needed) bytes, have \(have)"
        case .lengthMismatch(let declared, let actual): return "TLV length field says \(declared) bytes but \(actual) follow"
        case .oversized(let length, let limit): return "TLV frame of \(length) bytes exceeds the limit of \(limit)"
        }
    }
}

/// Splits a byte stream into TLV records, holding at most one partial record.
///
/// Memory is bounded by `maxValueLength`: a record announcing more is an error
/// and the stream should be closed, since framing is lost.
public struct TLVStreamDecoder: Sendable {
    public let maxValueLength: Int
    private var buffer: [UInt8] = []

    public init(maxValueLength: Int = TLVRecord.maxValueLength) {
        self.maxValueLength = min(maxValueLength, TLVRecord.maxValueLength)
    }

    /// Bytes waiting for the rest of a record.
    public var pendingByteCount: Int { buffer.count }

    /// Feeds bytes; returns every complete record (as whole encoded frames).
    public mutating func feed<C: Collection>(_ bytes: C) throws -> [[UInt8]] where C.Element == UInt8 {
        buffer.append(contentsOf: bytes)
        var frames: [[UInt8]] = []
        var start = 0
        while buffer.count - start >= TLVRecord.headerLength {
            let length = Int(buffer[start + 1]) << 8 | Int(buffer[start + 2])
            guard length <= maxValueLength else {
                buffer.removeAll()
                throw TLVError.oversized(length: length, limit: maxValueLength)
            }
            let end = start + TLVRecord.headerLength + length
            guard end <= buffer.count else { break }
            frames.append(Array(buffer[start..<end]))
            start = end
        }
        if start > 0 { buffer.removeFirst(start) }
        return frames
    }
}
