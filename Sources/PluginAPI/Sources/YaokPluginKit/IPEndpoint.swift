#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An IPv4 or IPv6 address and TCP/UDP port, as written in the config: `10.0.0.2:7813`,
/// `[2001:db8::2]:7813`, or a link-local `[fe80::2%eth0]:7813` (the scope names the
/// interface; a link-local address means nothing without it).
///
/// The stream links (mesh, Wi-Fi Direct, `tcp://`) use it; the IPv4-only ``SocketAddress`` is
/// still what the UDP transport and the relay speak (folding the two is issue 19's).
public struct IPEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// The address in its canonical text form (`inet_ntop`): dotted quad or IPv6 without brackets.
    public var host: String
    public var port: UInt16
    /// The interface index of a link-local IPv6 address (`sin6_scope_id`); 0 otherwise.
    public var scopeID: UInt32

    public init(host: String, port: UInt16, scopeID: UInt32 = 0) {
        self.host = host
        self.port = port
        self.scopeID = scopeID
    }

    /// Whether this is an IPv6 address.
    public var isIPv6: Bool { host.contains(":") }

    /// Whether this is a link-local IPv6 address (fe80::/10), which needs ``scopeID``.
    public var isLinkLocal6: Bool {
        var a = in6_addr()
        return isIPv6 && inet_pton(AF_INET6, host, &a) == 1 && Self.isLinkLocal6(a)
    }

    /// `AF_INET` or `AF_INET6`.
    public var family: Int32 { isIPv6 ? AF_INET6 : AF_INET }

    /// Parses `host:port` (IPv4 literal or `localhost`) or `[ipv6]:port`, where a
    /// link-local IPv6 address carries its interface as `%name` or `%index`. Nil when
    /// malformed, or when a named interface does not exist.
    public init?(parsing text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") {
            guard host.hasSuffix("]"), host.count > 2 else { return nil }
            host = String(host.dropFirst().dropLast())
            var scope: UInt32 = 0
            if let percent = host.firstIndex(of: "%") {
                let name = String(host[host.index(after: percent)...])
                host = String(host[..<percent])
                guard !name.isEmpty, name.utf8.count <= 15 else { return nil }
                if let index = UInt32(name) {
                    scope = index
                } else {
                    scope = if_nametoindex(name)
                    guard scope != 0 else { return nil }
                }
            }
            var probe = in6_addr()
            guard inet_pton(AF_INET6, host, &probe) == 1 else { return nil }
            self.init(host: Self.text(of: probe), port: port, scopeID: scope)
            return
        }
        if host == "localhost" { host = "127.0.0.1" }
        var probe = in_addr()
        guard inet_pton(AF_INET, host, &probe) == 1 else { return nil }
        self.init(host: host, port: port)
    }

    /// A host given apart from its port (`10.0.0.2`, `2001:db8::2`, `[fe80::2%wlan0]`, `localhost`),
    /// or an error naming it: only IP literals, no DNS (a field hub may have no resolver).
    public static func resolve(host: String, port: UInt16) throws -> IPEndpoint {
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        guard let address = IPEndpoint(parsing: "\(bracketed):\(port)") else {
            throw TransportError.failed("\(host) is not an IPv4 or IPv6 address")
        }
        return address
    }

    /// From a kernel `sockaddr_in`.
    public init(_ sa: sockaddr_in) {
        self.init(host: Self.text(of: sa.sin_addr), port: UInt16(bigEndian: sa.sin_port))
    }

    /// From a kernel `sockaddr_in6` (an IPv4-mapped address becomes plain IPv4).
    public init(_ sa: sockaddr_in6) {
        let port = UInt16(bigEndian: sa.sin6_port)
        var addr = sa.sin6_addr
        let bytes = withUnsafeBytes(of: &addr) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff {
            self.init(host: "\(bytes[12]).\(bytes[13]).\(bytes[14]).\(bytes[15])", port: port)
        } else {
            self.init(host: Self.text(of: addr), port: port, scopeID: sa.sin6_scope_id)
        }
    }

    /// From a `sockaddr_storage` the kernel filled (accept, recvfrom, getsockname); nil for other families.
    public init?(storage: sockaddr_storage) {
        var s = storage
        switch Int32(s.ss_family) {
        case AF_INET: self.init(withUnsafeBytes(of: &s) { $0.load(as: sockaddr_in.self) })
        case AF_INET6: self.init(withUnsafeBytes(of: &s) { $0.load(as: sockaddr_in6.self) })
        default: return nil
        }
    }

    /// Calls `body` with the address as a kernel `sockaddr` and its length.
    public func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        if isIPv6 {
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = port.bigEndian
            sa.sin6_scope_id = scopeID
            inet_pton(AF_INET6, host, &sa.sin6_addr)
            return withUnsafePointer(to: &sa) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &sa.sin_addr)
        return withUnsafePointer(to: &sa) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Dotted-quad text of an `in_addr` (the kit's conversion).
    public static func text(of address: in_addr) -> String { SocketAddress.text(of: address) }

    /// Canonical text of an `in6_addr`.
    public static func text(of address: in6_addr) -> String {
        var a = address
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
        return String(cString: buf)
    }

    /// Whether `host` is an IPv4 multicast group (224.0.0.0/4).
    public static func isMulticast(_ host: String) -> Bool { SocketAddress.isMulticast(host) }

    /// Whether `host` is an IPv6 multicast group of link-local scope (ff02::/16, or ff12::/16 transient).
    public static func isLinkLocalMulticast6(_ host: String) -> Bool {
        var a = in6_addr()
        guard inet_pton(AF_INET6, host, &a) == 1 else { return false }
        let bytes = withUnsafeBytes(of: &a) { Array($0) }
        return bytes[0] == 0xff && bytes[1] & 0x0f == 0x02
    }

    /// Whether `address` is IPv6 link-local (fe80::/10).
    public static func isLinkLocal6(_ address: in6_addr) -> Bool {
        var a = address
        return withUnsafeBytes(of: &a) { $0[0] == 0xfe && $0[1] & 0xc0 == 0x80 }
    }

    /// `1.2.3.4:7813`, `[2001:db8::1]:7813`, `[fe80::1%eth0]:7813` (the interface name when
    /// it still exists, else its index).
    public var description: String {
        guard isIPv6 else { return "\(host):\(port)" }
        guard scopeID != 0 else { return "[\(host)]:\(port)" }
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        let scope = if_indextoname(scopeID, &name) != nil ? String(cString: name) : String(scopeID)
        return "[\(host)%\(scope)]:\(port)"
    }
}
