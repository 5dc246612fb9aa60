
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
