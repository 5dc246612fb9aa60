/// The one hex codec of the project: lower-case out; in, either case, even length, no
/// separators. For IDs, keys and diagnostics (never a secret in a log).
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lower-case hex of `bytes`.
    public static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        String(decoding: ascii(bytes), as: UTF8.self)
    }

    /// Lower-case hex digits as ASCII bytes: for a secret (a database key) that must be wiped
    /// after use, which an immutable `String` cannot be.
    public static func ascii<S: Sequence>(_ bytes: S) -> [UInt8] where S.Element == UInt8 {
        var out = [UInt8]()
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return out
    }

    /// Bytes from hex (either case, no separators), or nil when malformed.
    public static func decode<S: StringProtocol>(_ hex: S) -> [UInt8]? {
        decode(ascii: Array(hex.utf8))
    }

    /// Bytes from hex digits given as ASCII bytes (either case, no separators), or nil when
    /// malformed; never goes through a `String`.
    public static func decode<C: Collection>(ascii chars: C) -> [UInt8]? where C.Element == UInt8 {
        guard chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = chars.startIndex
        while i != chars.endIndex {
            let j = chars.index(after: i)
            guard let hi = nibble(chars[i]), let lo = nibble(chars[j]) else { return nil }
            out.append(hi << 4 | lo)
            i = chars.index(after: j)
        }
        return out
    }
}
