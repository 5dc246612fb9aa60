import CSodium

/// SHA-256 (`crypto_hash_sha256`).
public enum Hash {
    /// Digest length in bytes.
    public static let sha256Length = 32

    /// The SHA-256 digest of `bytes`.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: sha256Length)
        bytes.withUnsafeBufferPointer { input in
            _ = crypto_hash_sha256(&out, input.baseAddress, UInt64(input.count))
        }
        return out
    }

    /// The SHA-256 digest of a slice, without copying it first.
    public static func sha256(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: sha256Length)
        bytes.withUnsafeBufferPointer { input in
            _ = crypto_hash_sha256(&out, input.baseAddress, UInt64(input.count))
        }
        return out
    }
}

/// Randomness from libsodium's CSPRNG (`randombytes_buf`).
public enum Random {
    /// `n` random bytes.
    public static func bytes(_ n: Int) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: Swift.max(n, 0))
        if !out.isEmpty { out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) } }
        return out
    }

    /// A random RFC 4122 version-4 UUID as 16 bytes (version and variant bits set).
    public static func uuidV4() -> [UInt8] {
        var id = bytes(16)
        id[6] = (id[6] & 0x0F) | 0x40
        id[8] = (id[8] & 0x3F) | 0x80
        return id
    }
}

/// Lowercase hexadecimal, for IDs and keys (never for secrets in logs).
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// `bytes` as lowercase hex.
    public static func encode<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        var chars = [UInt8]()
        chars.reserveCapacity(bytes.count * 2)
        for b in bytes {
            chars.append(digits[Int(b >> 4)])
            chars.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: chars, as: UTF8.self)
    }

    /// Parses hex (either case, even length, no separators); nil if malformed.
    public static func decode(_ string: String) -> [UInt8]? {
        let utf8 = Array(string.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 2)
        var i = 0
        while i < utf8.count {
            guard let hi = nibble(utf8[i]), let lo = nibble(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
