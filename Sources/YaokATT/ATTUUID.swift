import enum YaokPluginKit.Hex
/// An attribute type: a Bluetooth UUID, stored as its full 128-bit value.
///
/// 16-bit (and 32-bit) UUIDs are shorthands for UUIDs on the Bluetooth Base UUID
/// `0000xxxx-0000-1000-8000-00805F9B34FB`; equality compares the full value, so
/// `ATTUUID(0x2800)` equals `ATTUUID(string: "00002800-0000-1000-8000-00805f9b34fb")`.
/// On the wire a UUID goes out in its 2-octet form whenever it has one, else 16 octets,
/// both little-endian (Core Spec Vol 3 Part F 3.2.1).
public struct ATTUUID: Hashable, Sendable, CustomStringConvertible {
    /// The 16 octets in the usual text order (most significant first).
    public let bigEndianBytes: [UInt8]

    /// The Bluetooth Base UUID's last 12 octets (after the 32-bit prefix).
    static let baseSuffix: [UInt8] = [0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]

    /// A 16-bit UUID on the Bluetooth Base UUID.
    public init(_ uuid16: UInt16) {
        bigEndianBytes = [0, 0, UInt8(uuid16 >> 8), UInt8(uuid16 & 0xFF)] + ATTUUID.baseSuffix
    }

    /// A 32-bit UUID on the Bluetooth Base UUID.
    public init(uuid32: UInt32) {
        bigEndianBytes = [UInt8(uuid32 >> 24), UInt8((uuid32 >> 16) & 0xFF),
                          UInt8((uuid32 >> 8) & 0xFF), UInt8(uuid32 & 0xFF)] + ATTUUID.baseSuffix
    }

    /// A full 128-bit UUID from 16 octets in text order; nil unless exactly 16 octets.
    public init?(bigEndianBytes bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        bigEndianBytes = bytes
    }

    /// Parses the on-wire form: 2 octets (16-bit UUID) or 16 octets (128-bit UUID), little-endian.
    /// Any other length is nil.
    public init?<C: Collection>(littleEndian bytes: C) where C.Element == UInt8 {
        let array = Array(bytes)
        switch array.count {
        case 2: self.init(UInt16(array[0]) | UInt16(array[1]) << 8)
        case 16: self.init(bigEndianBytes: array.reversed())
        default: return nil
        }
    }

    /// Parses text: 4 hex digits (16-bit), 8 hex digits (32-bit), an optional `0x` prefix on
    /// those, or the 36-character `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` form. Case-insensitive.
    public init?(string: String) {
        var text = Substring(string)
        if text.hasPrefix("0x") || text.hasPrefix("0X") { text = text.dropFirst(2) }
        switch text.count {
        case 4:
            guard let bytes = Hex.decode(text), bytes.count == 2 else { return nil }
            self.init(UInt16(bytes[0]) << 8 | UInt16(bytes[1]))
        case 8:
            guard let bytes = Hex.decode(text), bytes.count == 4 else { return nil }
            self.init(uuid32: bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        case 36 where text.count == string.count:
            let groups = text.split(separator: "-", omittingEmptySubsequences: false)
            guard groups.map(\.count) == [8, 4, 4, 4, 12],
                  let bytes = Hex.decode(groups.joined()), bytes.count == 16 else { return nil }
            self.init(bigEndianBytes: bytes)
        default:
            return nil
        }
    }

    /// The 16-bit alias, when this UUID is `0000xxxx` on the Bluetooth Base UUID.
    public var uuid16: UInt16? {
        guard bigEndianBytes[0] == 0, bigEndianBytes[1] == 0,
              Array(bigEndianBytes[4...]) == ATTUUID.baseSuffix else { return nil }
        return UInt16(bigEndianBytes[2]) << 8 | UInt16(bigEndianBytes[3])
    }

    /// The on-wire form: 2 octets when a 16-bit alias exists, else 16; little-endian.
    public var littleEndianBytes: [UInt8] {
        if let short = uuid16 { return [UInt8(short & 0xFF), UInt8(short >> 8)] }
        return bigEndianBytes.reversed()
    }

    /// The full 128-bit on-wire form (16 octets, little-endian), even for 16-bit UUIDs.
    public var littleEndianBytes128: [UInt8] { bigEndianBytes.reversed() }

    /// `2800` for 16-bit UUIDs, else the lowercase 36-character form.
    public var description: String {
        if let short = uuid16 { return Hex.encode([UInt8(short >> 8), UInt8(short & 0xFF)]) }
        let hex = Hex.encode(bigEndianBytes)
        let chars = Array(hex)
        let cuts = [0, 8, 12, 16, 20, 32]
        return (0..<5).map { String(chars[cuts[$0]..<cuts[$0 + 1]]) }.joined(separator: "-")
    }
}

extension ATTUUID {
    /// «Primary Service» declaration (0x2800).
    public static let primaryService = ATTUUID(0x2800)
    /// «Secondary Service» declaration (0x2801).
    public static let secondaryService = ATTUUID(0x2801)
    /// «Include» declaration (0x2802).
    public static let include = ATTUUID(0x2802)
    /// «Characteristic» declaration (0x2803).
    public static let characteristic = ATTUUID(0x2803)
    /// Characteristic Extended Properties descriptor (0x2900).
    public static let characteristicExtendedProperties = ATTUUID(0x2900)
    /// Characteristic User Description descriptor (0x2901).
    public static let characteristicUserDescription = ATTUUID(0x2901)
    /// Client Characteristic Configuration descriptor, CCCD (0x2902).
    public static let clientCharacteristicConfiguration = ATTUUID(0x2902)
}
