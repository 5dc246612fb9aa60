#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An IPv4 address and port as written in configs (`10.0.0.2:7813`), with the kernel
/// `sockaddr_in` conversions every IP transport needs.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    /// Dotted-quad host.
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port` with an IPv4 literal (or `localhost`); nil when malformed.
    public init?(parsing text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        var host = String(text[..<colon])
        if host == "localhost" { host = "127.0.0.1" }
        var probe = in_addr()
        guard inet_pton(AF_INET, host, &probe) == 1 else { return nil }
        self.init(host: host, port: port)
    }

    /// From a kernel `sockaddr_in`.
    public init(_ sa: sockaddr_in) {
        self.init(host: Self.text(of: sa.sin_addr), port: UInt16(bigEndian: sa.sin_port))
    }

    /// The address as a kernel `sockaddr_in`.
    public var sockaddr: sockaddr_in {
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &sa.sin_addr)
        return sa
    }

    /// Dotted-quad text of an `in_addr`.
    public static func text(of address: in_addr) -> String {
        var a = address
        var buf = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
        return String(cString: buf)
    }

    /// Whether `host` is an IPv4 multicast group (224.0.0.0/4).
    public static func isMulticast(_ host: String) -> Bool {
        var a = in_addr()
        guard inet_pton(AF_INET, host, &a) == 1 else { return false }
        return (UInt32(bigEndian: a.s_addr) >> 28) == 0xE
    }

    public var description: String { "\(host):\(port)" }
}
