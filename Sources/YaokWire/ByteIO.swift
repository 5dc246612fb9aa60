/// Big-endian writer used by the encoders (the wire formats, the relay's messages and the
/// plugin-process protocol).
public struct ByteWriter: Sendable {
    public var bytes: [UInt8] = []

    public init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    public mutating func u8(_ v: UInt8) { bytes.append(v) }
    public mutating func u16(_ v: UInt16) { bigEndian(v) }
    public mutating func u32(_ v: UInt32) { bigEndian(v) }
    public mutating func u64(_ v: UInt64) { bigEndian(v) }

    public mutating func raw<C: Collection>(_ v: C) where C.Element == UInt8 { bytes.append(contentsOf: v) }

    private mutating func bigEndian<T: FixedWidthInteger & UnsignedInteger>(_ v: T) {
        for shift in stride(from: T.bitWidth - 8, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> shift)) }
    }
}

/// The errors a ``BigEndianReader`` throws: each format's own error type, whose
/// `truncated` and `badLength` cases witness these requirements.
public protocol ByteReaderError: Error {
    static func truncated(what: String, needed: Int, have: Int) -> Self
    static func badLength(what: String, detail: String) -> Self
}

extension WireError: ByteReaderError {}

/// The wire formats' reader: it throws ``WireError``.
public typealias ByteReader = BigEndianReader<WireError>

/// Bounds-checked big-endian reader used by the parsers: every read checks the
/// remaining length first and throws `Failure.truncated(what:needed:have:)`.
public struct BigEndianReader<Failure: ByteReaderError>: Sendable {
    public let bytes: [UInt8]
    public let what: String
    public private(set) var offset: Int

    public init(_ bytes: [UInt8], what: String, offset: Int = 0) {
        self.bytes = bytes
        self.what = what
        self.offset = offset
    }

    public var remaining: Int { bytes.count - offset }

    private func need(_ n: Int) throws(Failure) {
        guard n >= 0, remaining >= n else { throw Failure.truncated(what: what, needed: offset + n, have: bytes.count) }
    }

    public mutating func u8() throws(Failure) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func u16() throws(Failure) -> UInt16 { try bigEndian() }
    public mutating func u32() throws(Failure) -> UInt32 { try bigEndian() }
    public mutating func u64() throws(Failure) -> UInt64 { try bigEndian() }

    private mutating func bigEndian<T: FixedWidthInteger & UnsignedInteger>() throws(Failure) -> T {
        let n = T.bitWidth / 8
        try need(n)
        var v: T = 0
        for i in 0..<n { v = v << 8 | T(bytes[offset + i]) }
        offset += n
        return v
    }

    public mutating func take(_ n: Int) throws(Failure) -> [UInt8] {
        try need(n)
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }

    /// Every byte not read yet (possibly none).
    public mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }

    /// Throws unless every byte was consumed.
    public func expectEnd() throws(Failure) {
        guard remaining == 0 else {
            throw Failure.badLength(what: what, detail: "\(remaining) unexpected trailing bytes")
        }
    }
}

@inline(__always)
func isAllZero<C: Collection>(_ bytes: C) -> Bool where C.Element == UInt8 {
    bytes.allSatisfy { $0 == 0 }
}

@inline(__always)
func checkLength(_ bytes: [UInt8], _ expected: Int, _ what: String) throws {
    guard bytes.count == expected else {
        throw WireError.invalidArgument("\(what) must be \(expected) bytes, got \(bytes.count)")
    }
}
