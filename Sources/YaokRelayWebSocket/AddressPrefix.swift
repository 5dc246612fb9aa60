import NIOCore

/// The key the relay's per-address limits are kept under: a whole IPv4 address, or the first
/// `ipv6PrefixLength` bits of an IPv6 address (an IPv4-mapped IPv6 address counts as its
/// IPv4 address). One IPv6 customer gets a whole /64 (or more) and may send from any of its
/// 2⁶⁴ addresses, so keying by the full address would make that customer unlimited.
public struct AddressPrefix: Hashable, Sendable, CustomStringConvertible {
    /// The default IPv6 prefix length: one customer's allocation.
    public static let defaultIPv6PrefixLength = 64
    /// Allowed `--ipv6-prefix` values: shorter than /32 would lump whole providers together.
    public static let ipv6PrefixRange = 32...128

    /// 4 bytes (IPv4), or 16 bytes masked to the prefix followed by the prefix length (IPv6).
    public let bytes: [UInt8]

    public init(_ address: SocketAddress, ipv6PrefixLength: Int = defaultIPv6PrefixLength) {
        let ip = Self.ipBytes(address)
        if ip.count == 16, ip[0..<10].allSatisfy({ $0 == 0 }), ip[10] == 0xff, ip[11] == 0xff {
            bytes = Array(ip[12..<16])   // ::ffff:a.b.c.d is the IPv4 address a.b.c.d
        } else if ip.count == 16 {
            let bits = min(128, max(0, ipv6PrefixLength))
            var masked = ip
            for i in 0..<16 {
                let keep = max(0, min(8, bits - 8 * i))
                masked[i] &= keep == 8 ? 0xff : UInt8(truncatingIfNeeded: 0xff << (8 - keep))
            }
            bytes = masked + [UInt8(bits)]
        } else {
            bytes = ip
        }
    }

    /// The raw IP address bytes (4 or 16), or the description's bytes for other families.
    public static func ipBytes(_ address: SocketAddress) -> [UInt8] {
        switch address {
        case .v4(let a):
            var sin = a.address.sin_addr
            return withUnsafeBytes(of: &sin) { Array($0) }
        case .v6(let a):
            var sin6 = a.address.sin6_addr
            return withUnsafeBytes(of: &sin6) { Array($0) }
        default:
            return Array(address.description.utf8)
        }
    }

    /// IP bytes followed by the port (big-endian): what a HELLO cookie is computed over.
    public static func cookieInput(_ address: SocketAddress) -> [UInt8] {
        let port = UInt16(clamping: address.port ?? 0)
        return ipBytes(address) + [UInt8(port >> 8), UInt8(port & 0xff)]
    }

    public var description: String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        guard bytes.count == 17 else { return "?" }
        let groups = stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "/\(bytes[16])"
    }
}
