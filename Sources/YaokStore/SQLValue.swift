/// One SQLite value, as bound to a statement parameter or read from a result column.
public enum SQLValue: Sendable, Equatable, Hashable {
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
    case null

    /// The integer value, or nil if this is not an integer.
    public var int64Value: Int64? {
        if case .integer(let v) = self { return v }
        return nil
    }

    /// The integer value as `Int`, or nil if this is not an integer.
    public var intValue: Int? {
        if case .integer(let v) = self { return Int(exactly: v) }
        return nil
    }

    /// The real value (integers are widened), or nil.
    public var doubleValue: Double? {
        switch self {
        case .real(let v): return v
        case .integer(let v): return Double(v)
        default: return nil
        }
    }

    /// The text value, or nil if this is not text.
    public var textValue: String? {
        if case .text(let v) = self { return v }
        return nil
    }

    /// The blob value, or nil if this is not a blob. SQLite returns a zero-length blob as
    /// an empty array.
    public var blobValue: [UInt8]? {
        if case .blob(let v) = self { return v }
        return nil
    }

    /// True for SQL NULL.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}

extension SQLValue: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByNilLiteral {
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(nilLiteral: ()) { self = .null }
}

extension SQLValue {
    /// `.integer` from any integer type.
    public static func int<I: BinaryInteger>(_ v: I) -> SQLValue { .integer(Int64(v)) }
    /// `.blob` or `.null` for an optional byte array.
    public static func optionalBlob(_ v: [UInt8]?) -> SQLValue { v.map { .blob($0) } ?? .null }
    /// `.text` or `.null` for an optional string.
    public static func optionalText(_ v: String?) -> SQLValue { v.map { .text($0) } ?? .null }
}
