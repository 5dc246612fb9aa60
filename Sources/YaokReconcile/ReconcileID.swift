import CSodium
import YaokCrypto
import enum YaokPluginKit.Hex

/// A 16-byte bundle ID held as two integers, so sets of 100,000 of them cost no heap
/// allocation per ID. `hi` is bytes 0..<8 read big-endian and `lo` bytes 8..<16, so the
/// order of `ReconcileID` values is the bytewise order of the IDs on the wire.
public struct ReconcileID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Bytes 0..<8 of the ID, big-endian.
    public var hi: UInt64
    /// Bytes 8..<16 of the ID, big-endian.
    public var lo: UInt64

    /// The length of an ID on the wire.
    public static let byteCount = 16

    /// An ID from its two halves (`hi` = bytes 0..<8 big-endian, `lo` = bytes 8..<16).
    public init(hi: UInt64, lo: UInt64) {
        self.hi = hi
        self.lo = lo
    }

    /// The ID whose bytes are `bytes`, or nil when there are not exactly 16 of them.
    public init?<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        guard bytes.count == Self.byteCount else { return nil }
        var hi: UInt64 = 0, lo: UInt64 = 0
        for (i, b) in bytes.enumerated() {
            if i < 8 { hi = hi << 8 | UInt64(b) } else { lo = lo << 8 | UInt64(b) }
        }
        self.init(hi: hi, lo: lo)
    }

    /// The 16 bytes of the ID.
    public var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        out.withUnsafeMutableBytes { write(to: $0, at: 0) }
        return out
    }

    /// Lowercase hex of the 16 bytes.
    public var description: String { Hex.encode(bytes) }

    public static func < (a: ReconcileID, b: ReconcileID) -> Bool {
        a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo
    }

    @inline(__always)
    func write(to p: UnsafeMutableRawBufferPointer, at offset: Int) {
        p.storeBytes(of: hi.bigEndian, toByteOffset: offset, as: UInt64.self)
        p.storeBytes(of: lo.bigEndian, toByteOffset: offset + 8, as: UInt64.self)
    }

    @inline(__always)
    static func read(_ p: UnsafeRawBufferPointer, at offset: Int) -> ReconcileID {
        ReconcileID(hi: UInt64(bigEndian: p.loadUnaligned(fromByteOffset: offset, as: UInt64.self)),
                    lo: UInt64(bigEndian: p.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)))
    }

    /// Sorted, duplicates removed.
    static func sortedUnique(_ ids: [ReconcileID]) -> [ReconcileID] {
        let sorted = ids.sorted()
        var out: [ReconcileID] = []
        out.reserveCapacity(sorted.count)
        for id in sorted where out.last != id { out.append(id) }
        return out
    }

    /// IDs from byte arrays; nil when any is not 16 bytes long.
    static func parseAll(_ ids: [[UInt8]]) -> [ReconcileID]? {
        var out: [ReconcileID] = []
        out.reserveCapacity(ids.count)
        for bytes in ids {
            guard let id = ReconcileID(bytes) else { return nil }
            out.append(id)
        }
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
