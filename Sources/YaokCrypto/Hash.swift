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

    /// The unkeyed BLAKE2b digest (`crypto_generichash`) of `input`, `length` bytes long
    /// (16…64): the labelled hashes of bundle IDs and receipt proofs.
    public static func blake2b(_ input: [UInt8], length: Int) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: length)
        input.withUnsafeBufferPointer { p in
            _ = crypto_generichash(&out, length, p.baseAddress, UInt64(p.count), nil, 0)
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
