/// Hex text <-> bytes, used by the table file format and diagnostics.
enum Hex {
    private static let digits = Array("0123456789abcdef")

    /// Lowercase hex, two digits per byte, no separators.
    static func encode<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        var out = ""
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return out
    }

    /// Decodes an even number of hex digits (either case); nil on any other character or odd length.
    static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    private static func nibble(_ char: UInt8) -> UInt8? {
        switch char {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return char - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return char - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return char - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// Little-endian field access on a received PDU; every read is bounds-checked.
struct PDUReader {
    let bytes: [UInt8]

    /// The little-endian UInt16 at `offset`, or nil when the PDU is too short.
    func uint16(at offset: Int) -> UInt16? {
        guard offset >= 0, offset + 2 <= bytes.count else { return nil }
        return UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
    }
}

extension Array where Element == UInt8 {
    /// Appends `value` as two little-endian octets.
    mutating func appendLE16(_ value: UInt16) {
        append(UInt8(value & 0xFF))
        append(UInt8(value >> 8))
    }
}
