import CSodium
import enum YaokPluginKit.Hex

/// The identity of a bundle everywhere IDs are compared: in offers, requests, custody
/// acknowledgements and refusals, set reconciliation, the hub's and the relay's stores, the
/// endpoint's inbox.
///
/// `BLAKE2b-128("yaok-bundle-id-v1" ‖ sender user ID(32) ‖ message ID(16))`
/// (`crypto_generichash`, 16-byte output, no key).
///
/// Why: the message ID is chosen by the sender and visible to every neighbour, so deduping on
/// it alone let anyone squat a victim's ID with a bundle of their own. The sender's user ID
/// is bound to the envelope's signature, so only the holder of the sender's key can make a
/// second bundle with the same bundle ID.
///
/// Held as two integers (`hi` = bytes 0..<8 big-endian, `lo` = bytes 8..<16): hashing and
/// comparing one costs two word operations, a set of 100,000 of them no allocation per ID, and
/// the order of values is the bytewise order of the IDs on the wire.
public struct BundleID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Bytes 0..<8 of the ID, big-endian.
    public var hi: UInt64
    /// Bytes 8..<16 of the ID, big-endian.
    public var lo: UInt64

    /// 16 bytes: the size of a message ID, so frame layouts are unchanged.
    public static let length = 16
    static let domain = Array("yaok-bundle-id-v1".utf8)

    /// An ID from its two halves.
    public init(hi: UInt64, lo: UInt64) {
        self.hi = hi
        self.lo = lo
    }

    /// The ID whose bytes are `bytes`, or nil when there are not exactly 16 of them.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == Self.length else { return nil }
        self = bytes.withUnsafeBytes { Self.read($0, at: 0) }
    }

    /// The ID whose bytes are `bytes`, or nil when there are not exactly 16 of them.
    public init?(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count == Self.length else { return nil }
        self = bytes.withUnsafeBytes { Self.read($0, at: 0) }
    }

    /// The bytes of the bundle ID of the message `messageID` sent by `senderUserID`.
    public static func of(senderUserID: [UInt8], messageID: [UInt8]) -> [UInt8] {
        precondition(senderUserID.count == 32 && messageID.count == 16, "bundle ID inputs: 32-byte user ID and 16-byte message ID")
        return Hash.blake2b(domain + senderUserID + messageID, length: length)
    }

    /// The 16 bytes of the ID.
    public var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.length)
        out.withUnsafeMutableBytes { write(to: $0, at: 0) }
        return out
    }

    /// Lowercase hex of the 16 bytes.
    public var description: String { Hex.encode(bytes) }

    public static func < (a: BundleID, b: BundleID) -> Bool {
        a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo
    }

    /// Writes the 16 bytes at `offset` (the caller checked there is room).
    @inline(__always)
    public func write(to p: UnsafeMutableRawBufferPointer, at offset: Int) {
        p.storeBytes(of: hi.bigEndian, toByteOffset: offset, as: UInt64.self)
        p.storeBytes(of: lo.bigEndian, toByteOffset: offset + 8, as: UInt64.self)
    }

    /// Reads 16 bytes at `offset` (the caller checked they are there).
    @inline(__always)
    public static func read(_ p: UnsafeRawBufferPointer, at offset: Int) -> BundleID {
        BundleID(hi: UInt64(bigEndian: p.loadUnaligned(fromByteOffset: offset, as: UInt64.self)),
                 lo: UInt64(bigEndian: p.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)))
    }
}
