/// A parser for netlink attribute streams (`struct nlattr`: length u16, type u16, payload,
/// padded to 4 bytes), written in Swift so the nl80211 replies are read with bounds checks
/// on every step and can be tested with plain bytes. libnl's `nla_for_each_nested` is a C
/// macro Swift cannot call, and it trusts the kernel; this never reads past the buffer.
public struct NetlinkAttribute: Sendable, Equatable {
    /// The attribute type with the NLA_F_NESTED / NLA_F_NET_BYTEORDER bits cleared.
    public var type: UInt16
    public var payload: [UInt8]

    public init(type: UInt16, payload: [UInt8]) {
        self.type = type
        self.payload = payload
    }

    /// The payload as a little-endian (host order on Linux x86/ARM) u32, when it has 4 bytes or more.
    public var u32: UInt32? {
        guard payload.count >= 4 else { return nil }
        return UInt32(payload[0]) | UInt32(payload[1]) << 8 | UInt32(payload[2]) << 16 | UInt32(payload[3]) << 24
    }

    /// The payload as a NUL-terminated string.
    public var string: String {
        let bytes = payload.prefix { $0 != 0 }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The payload parsed as nested attributes.
    public func nested() throws -> [NetlinkAttribute] { try NetlinkAttribute.parse(payload) }

    /// Header size of one attribute.
    public static let headerLength = 4
    static let typeMask: UInt16 = 0x3fff

    /// Parses every attribute in `bytes`. Throws on a length field that is too small or runs
    /// past the end; never allocates more than the input's size.
    public static func parse(_ bytes: [UInt8]) throws -> [NetlinkAttribute] {
        var out: [NetlinkAttribute] = []
        var offset = 0
        while bytes.count - offset >= headerLength {
            let length = Int(bytes[offset]) | Int(bytes[offset + 1]) << 8
            let type = (UInt16(bytes[offset + 2]) | UInt16(bytes[offset + 3]) << 8) & typeMask
            guard length >= headerLength else { throw NetlinkParseError.badLength(offset: offset, length: length) }
            guard offset + length <= bytes.count else {
                throw NetlinkParseError.truncated(offset: offset, length: length, available: bytes.count - offset)
            }
            out.append(NetlinkAttribute(type: type, payload: Array(bytes[(offset + headerLength)..<(offset + length)])))
            offset += (length + 3) & ~3
        }
        return out
    }

    /// Encodes attributes (for tests and for building requests): each padded to 4 bytes.
    public static func encode(_ attributes: [NetlinkAttribute]) -> [UInt8] {
        var out: [UInt8] = []
        for a in attributes {
            let length = headerLength + a.payload.count
            out += [UInt8(length & 0xff), UInt8(length >> 8), UInt8(a.type & 0xff), UInt8(a.type >> 8)]
            out += a.payload
            while out.count % 4 != 0 { out.append(0) }
        }
        return out
    }
}

/// Why an attribute stream could not be read.
public enum NetlinkParseError: Error, Sendable, Equatable, CustomStringConvertible {
    case badLength(offset: Int, length: Int)
    case truncated(offset: Int, length: Int, available: Int)

    public var description: String {
        switch self {
        case .badLength(let offset, let length):
            return "netlink attribute at byte \(offset) declares length \(length), less than its 4-byte header"
        case .truncated(let offset, let length, let available):
            return "netlink attribute at byte \(offset) declares \(length) bytes but only \(available) remain"
        }
    }
}
