#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one host-and-port type of the code base: an IPv4 or IPv6 address and TCP/UDP port, as
/// written in configs: `10.0.0.2:7813`, `[2001:db8::2]:7813`, or a link-local
/// `[fe80::2%eth0]:7813` (the scope names the interface; a link-local address means nothing
/// without it). Where the caller allows it (``parse(_:allowingNames:)``), the host may be a
/// DNS name (`relay.example.org:7900`), turned into addresses by ``resolved(socketType:)``.
///
/// Every IP transport uses it: UDP, mesh, Wi-Fi Direct, `tcp://`, and the relay protocol.
public struct IPEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// The address in its canonical text form (`inet_ntop`): dotted quad or IPv6 without
    /// brackets; or a DNS name (``isName``) as given.
    public var host: String
    public var port: UInt16
    /// The interface index of a link-local IPv6 address (`sin6_scope_id`); 0 otherwise.
    public var scopeID: UInt32

    public init(host: String, port: UInt16, scopeID: UInt32 = 0) {
        self.host = host
        self.port = port
        self.scopeID = scopeID
    }

    /// The network a host's address belongs to, for sharing capacity among crowds rather than
    /// addresses: the IPv4 /24, the IPv6 /64 (one Wi-Fi or one customer gives anyone a whole
    /// /64), or the host text for anything else. Addresses are cheap; networks less so.
    public var crowd: String {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return host.split(separator: ".").prefix(3).joined(separator: ".") + ".0/24"
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
                return "\(bytes[12]).\(bytes[13]).\(bytes[14]).0/24"   // ::ffff:a.b.c.d is IPv4
            }
            return stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
                .joined(separator: ":") + "::/64"
        }
        return host
    }

    /// Why a `host:port` text is not an address.
    public enum ParseError: Error, Equatable, CustomStringConvertible {
        /// No `:port` after the host (`10.0.0.2`, `[::1]`).
        case missingPort(String)
        /// The port is not a number from 0 to 65535.
        case badPort(String)
        /// `[` without its `]`.
        case unclosedBracket(String)
        /// The host is no IPv4 or IPv6 address (nor a DNS name, where names are allowed).
        case badHost(String)
        /// A link-local scope (`%eth0`) that is empty, too long or names no interface.
        case badScope(String)
        /// A DNS name where only IP literals are taken (a field hub may have no resolver).
        case nameNotAllowed(String)

        public var description: String {
            switch self {
            case .missingPort(let t): return "\"\(t)\" has no port: expected host:port or [IPv6]:port"
            case .badPort(let t): return "\"\(t)\": the port must be a number from 0 to 65535"
            case .unclosedBracket(let t): return "\"\(t)\": '[' without ']' (an IPv6 address is written [2001:db8::1]:port)"
            case .badHost(let t): return "\"\(t)\" is not an IPv4 address, [IPv6] address or DNS name"
            case .badScope(let t): return "\"\(t)\": the interface after '%' is empty, too long or does not exist"
            case .nameNotAllowed(let t): return "\"\(t)\": expected an IPv4 or [IPv6] address here, not a name"
            }
        }
    }

    /// A host name that could be a DNS name: 1 to 253 bytes of letters, digits, '-', '_' and '.'.
    private static func isPlausibleName(_ host: String) -> Bool {
        !host.isEmpty && host.utf8.count <= 253
            && host.utf8.allSatisfy { $0 == 0x2d || $0 == 0x2e || $0 == 0x5f || (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) }
    }

    /// Parses `host:port` (an IPv4 literal, or `localhost` as 127.0.0.1), or `[ipv6]:port`, where
    /// a link-local IPv6 address carries its interface as `%name` or `%index`; with
    /// `allowingNames`, also `name:port` (kept as given, `localhost` included, for
    /// ``resolved(socketType:)``). Throws a ``ParseError`` naming what is wrong.
    public static func parse(_ text: String, allowingNames: Bool = false) throws -> IPEndpoint {
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw ParseError.unclosedBracket(text) }
            var host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw rest.isEmpty ? ParseError.missingPort(text) : ParseError.badHost(text) }
            let portText = rest.dropFirst()
            guard !portText.isEmpty else { throw ParseError.missingPort(text) }
            guard let port = UInt16(portText) else { throw ParseError.badPort(text) }
            var scope: UInt32 = 0
            if let percent = host.firstIndex(of: "%") {
                let name = String(host[host.index(after: percent)...])
                host = String(host[..<percent])
                guard !name.isEmpty, name.utf8.count <= 15 else { throw ParseError.badScope(text) }
                if let index = UInt32(name) {
                    scope = index
                } else {
                    scope = if_nametoindex(name)
                    guard scope != 0 else { throw ParseError.badScope(text) }
                }
            }
            var probe = in6_addr()
            guard !host.isEmpty, inet_pton(AF_INET6, host, &probe) == 1 else { throw ParseError.badHost(text) }
            return IPEndpoint(host: Self.text(of: probe), port: port, scopeID: scope)
        }
        guard let colon = text.lastIndex(of: ":") else { throw ParseError.missingPort(text) }
        var host = String(text[..<colon])
        let portText = text[text.index(after: colon)...]
        guard !portText.isEmpty else { throw ParseError.missingPort(text) }
        guard let port = UInt16(portText) else { throw ParseError.badPort(text) }
        var probe = in_addr()
        if inet_pton(AF_INET, host, &probe) == 1 { return IPEndpoint(host: host, port: port) }
        // An IPv6 address without brackets, or something else that is no name.
        guard !host.contains(":"), isPlausibleName(host) else { throw ParseError.badHost(text) }
        if allowingNames { return IPEndpoint(host: host, port: port) }
        if host == "localhost" { host = "127.0.0.1" }
        guard inet_pton(AF_INET, host, &probe) == 1 else { throw ParseError.nameNotAllowed(text) }
        return IPEndpoint(host: host, port: port)
    }

    /// Whether `host` is a DNS name rather than an IP address.
    public var isName: Bool {
        var probe = in_addr()
        return !host.contains(":") && inet_pton(AF_INET, host, &probe) != 1
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

    /// Parses like ``parse(_:allowingNames:)`` without names; nil when malformed, or when a
    /// named interface does not exist.
    public init?(parsing text: String) {
        guard let parsed = try? Self.parse(text) else { return nil }
        self = parsed
    }

    /// A name the resolver could not turn into an address.
    /// A host that is not an IP literal where only one is accepted.
    public struct NotAnAddress: Error, Equatable, CustomStringConvertible {
        public let host: String
        public init(host: String) { self.host = host }
        public var description: String { "\(host) is not an IPv4 or IPv6 address" }
    }

    public struct ResolveError: Error, Equatable, CustomStringConvertible {
        public let host: String
        /// The resolver's words (`gai_strerror`).
        public let reason: String
        public init(host: String, reason: String) {
            self.host = host
            self.reason = reason
        }
        public var description: String { "cannot resolve \(host): \(reason)" }
    }

    /// The addresses to send to: this one when ``host`` is an IP address, else what the
    /// resolver (`getaddrinfo`) answers for the name, in its order of preference.
    public func resolved(socketType: Int32 = Int32(SOCK_DGRAM.rawValue)) throws -> [IPEndpoint] {
        guard isName else { return [self] }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = socketType
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0 else { throw ResolveError(host: host, reason: String(cString: gai_strerror(rc))) }
        defer { freeaddrinfo(result) }
        var out: [IPEndpoint] = []
        var next = result
        while let ai = next {
            if let addr = ai.pointee.ai_addr {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: addr, count: Int(ai.pointee.ai_addrlen))) }
                if let e = IPEndpoint(storage: storage) { out.append(e) }
            }
            next = ai.pointee.ai_next
        }
        guard !out.isEmpty else { throw ResolveError(host: host, reason: "no IP address") }
        return out
    }

    /// A host given apart from its port (`10.0.0.2`, `2001:db8::2`, `[fe80::2%wlan0]`, `localhost`),
    /// or an error naming it: only IP literals, no DNS (a field hub may have no resolver).
    public static func resolve(host: String, port: UInt16) throws -> IPEndpoint {
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        guard let address = IPEndpoint(parsing: "\(bracketed):\(port)") else {
            throw NotAnAddress(host: host)
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

    /// Calls `body` with the address as a kernel `sockaddr` and its length. For an IP address;
    /// a name is first turned into those by ``resolved(socketType:)``.
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

    /// Dotted-quad text of an `in_addr`.
    public static func text(of address: in_addr) -> String {
        var a = address
        var buf = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
        return String(nulTerminated: buf)
    }

    /// Canonical text of an `in6_addr`.
    public static func text(of address: in6_addr) -> String {
        var a = address
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
        return String(nulTerminated: buf)
    }

    /// Whether `host` is an IPv4 multicast group (224.0.0.0/4).
    public static func isMulticast(_ host: String) -> Bool {
        var a = in_addr()
        guard inet_pton(AF_INET, host, &a) == 1 else { return false }
        return (UInt32(bigEndian: a.s_addr) >> 28) == 0xE
    }

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
        let scope = if_indextoname(scopeID, &name) != nil ? String(nulTerminated: name) : String(scopeID)
        return "[\(host)%\(scope)]:\(port)"
    }
}
