import CSodium
import YaokCrypto

/// The values one ID contributes to a table under one salt.
///
/// `H = BLAKE2b-256(key: salt (16 bytes), message: "yaok-reconcile-v1" (17 bytes) ‖ ID (16 bytes))`
/// (`crypto_generichash`, 32-byte output). Then, all little-endian:
/// - `check` = H[0..<8] as UInt64: XORed into a cell's hashSum;
/// - `stratumWord` = H[8..<16] as UInt64: the stratum is its number of trailing zero bits,
///   at most strata − 1 (a zero word and everything above go to the last stratum);
/// - `w0, w1, w2` = H[16..<20], H[20..<24], H[24..<28] as UInt32: in a table of m cells
///   (m a multiple of 3, p = m / 3) the ID's cells are `j·p + (w_j mod p)` for j = 0, 1, 2.
/// H[28..<32] is unused.
public struct ReconcileDigest: Sendable, Equatable {
    /// H[0..<8], little-endian: the check hash XORed into hashSum.
    public var check: UInt64
    /// H[8..<16], little-endian: its trailing zero bits choose the stratum.
    public var stratumWord: UInt64
    /// H[16..<20], H[20..<24], H[24..<28], little-endian: the cell index words.
    public var w0: UInt32, w1: UInt32, w2: UInt32

    /// The stratum of the ID in an estimator of `strata` strata.
    public func stratum(of strata: Int) -> Int {
        min(stratumWord.trailingZeroBitCount, strata - 1)
    }

    /// The three cell indexes of the ID in a table of `cells` cells (a multiple of 3).
    public func cellIndexes(cells: Int) -> (Int, Int, Int) {
        let p = UInt32(cells / 3)
        return (Int(w0 % p), cells / 3 + Int(w1 % p), 2 * (cells / 3) + Int(w2 % p))
    }
}

/// The salted hash of the reconciliation protocol (see `ReconcileDigest`).
public enum ReconcileHash {
    /// The domain string hashed before every ID.
    public static let domain: [UInt8] = Array("yaok-reconcile-v1".utf8)
    /// The salt length.
    public static let saltLength = 16

    private static let sodiumReady: Bool = sodium_init() >= 0
    static func ensureSodium() { precondition(sodiumReady, "sodium_init failed") }

    /// The digest of `id` under `salt` (16 bytes).
    public static func digest(_ id: BundleID, salt: [UInt8]) -> ReconcileDigest {
        digests([id], salt: salt)[0]
    }

    /// The digests of `ids` under `salt` (16 bytes), in the same order.
    public static func digests(_ ids: [BundleID], salt: [UInt8]) -> [ReconcileDigest] {
        precondition(salt.count == saltLength, "salt is 16 bytes")
        ensureSodium()
        let n = ids.count
        var input = domain + [UInt8](repeating: 0, count: 16)
        var out = [UInt8](repeating: 0, count: 32)
        let d0 = domain.count
        return [ReconcileDigest](unsafeUninitializedCapacity: n) { buffer, initialized in
            salt.withUnsafeBufferPointer { key in
                input.withUnsafeMutableBytes { inp in
                    out.withUnsafeMutableBytes { o in
                        let op = o.baseAddress!.assumingMemoryBound(to: UInt8.self)
                        let ip = inp.baseAddress!.assumingMemoryBound(to: UInt8.self)
                        for i in 0..<n {
                            ids[i].write(to: inp, at: d0)
                            _ = crypto_generichash(op, 32, ip, UInt64(inp.count), key.baseAddress, 16)
                            let r = UnsafeRawBufferPointer(o)
                            buffer[i] = ReconcileDigest(
                                check: UInt64(littleEndian: r.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                                stratumWord: UInt64(littleEndian: r.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                                w0: UInt32(littleEndian: r.loadUnaligned(fromByteOffset: 16, as: UInt32.self)),
                                w1: UInt32(littleEndian: r.loadUnaligned(fromByteOffset: 20, as: UInt32.self)),
                                w2: UInt32(littleEndian: r.loadUnaligned(fromByteOffset: 24, as: UInt32.self)))
                        }
                    }
                }
            }
            initialized = n
        }
    }

    /// The raw 32-byte H of `id` under `salt` (for test vectors).
    public static func rawHash(_ id: BundleID, salt: [UInt8]) -> [UInt8] {
        precondition(salt.count == saltLength, "salt is 16 bytes")
        ensureSodium()
        let input = domain + id.bytes
        var out = [UInt8](repeating: 0, count: 32)
        _ = crypto_generichash(&out, 32, input, UInt64(input.count), salt, 16)
        return out
    }
}

/// Random bytes from libsodium (`randombytes_buf`).
func randomBytes(_ count: Int) -> [UInt8] {
    ReconcileHash.ensureSodium()
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
    return out
}

/// A random session number (libsodium `randombytes_random`).
func randomSession() -> UInt32 {
    ReconcileHash.ensureSodium()
    return randombytes_random()
}
