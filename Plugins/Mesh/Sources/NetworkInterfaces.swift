#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import YaokPluginKit

/// A network interface and the addresses beacons use on it, as the kernel reports them (getifaddrs).
struct NetworkInterface: Hashable, Sendable {
    var name: String
    var index: UInt32
    /// The interface's first IPv4 address, if it has one.
    var ipv4: String?
    /// The interface's first link-local IPv6 address (fe80::/10), if it has one.
    var linkLocal6: String?
    var isUp: Bool
    var isLoopback: Bool
    var supportsMulticast: Bool

    init(name: String, index: UInt32, ipv4: String? = nil, linkLocal6: String? = nil,
         isUp: Bool = true, isLoopback: Bool = false, supportsMulticast: Bool = true) {
        self.name = name
        self.index = index
        self.ipv4 = ipv4
        self.linkLocal6 = linkLocal6
        self.isUp = isUp
        self.isLoopback = isLoopback
        self.supportsMulticast = supportsMulticast
    }

    /// Whether beacons can go out here: an IPv4 address, or (with `ipv6`) a link-local IPv6 one.
    func hasBeaconAddress(ipv6: Bool) -> Bool { ipv4 != nil || (ipv6 && linkLocal6 != nil) }

    /// Every interface with an IPv4 or a link-local IPv6 address, in the kernel's order.
    static func current() -> [NetworkInterface] {
        var head: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&head) == 0, let first = head else { return [] }
        defer { freeifaddrs(head) }
        var out: [NetworkInterface] = []
        var position: [String: Int] = [:]
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let sa = entry.pointee.ifa_addr, let cname = entry.pointee.ifa_name else { continue }
            let family = Int32(sa.pointee.sa_family)
            var ipv4: String?
            var linkLocal6: String?
            if family == AF_INET {
                ipv4 = IPEndpoint.text(of: UnsafeRawPointer(sa).load(as: sockaddr_in.self).sin_addr)
            } else if family == AF_INET6 {
                let address = UnsafeRawPointer(sa).load(as: sockaddr_in6.self).sin6_addr
                guard IPEndpoint.isLinkLocal6(address) else { continue }
                linkLocal6 = IPEndpoint.text(of: address)
            } else {
                continue
            }
            let name = String(cString: cname)
            if let i = position[name] {
                // The first address of each family wins.
                if out[i].ipv4 == nil { out[i].ipv4 = ipv4 }
                if out[i].linkLocal6 == nil { out[i].linkLocal6 = linkLocal6 }
                continue
            }
            let flags = entry.pointee.ifa_flags
            position[name] = out.count
            out.append(NetworkInterface(
                name: name, index: if_nametoindex(cname), ipv4: ipv4, linkLocal6: linkLocal6,
                isUp: flags & UInt32(IFF_UP) != 0 && flags & UInt32(IFF_RUNNING) != 0,
                isLoopback: flags & UInt32(IFF_LOOPBACK) != 0,
                supportsMulticast: flags & UInt32(IFF_MULTICAST) != 0))
        }
        return out
    }

    /// The interfaces beacons use: the named ones (those missing, down or without a usable
    /// address are returned separately, with why), or with no names every up,
    /// multicast-capable, non-loopback interface with an IPv4 address or (with `ipv6`) a
    /// link-local IPv6 address.
    static func select(named names: [String], from all: [NetworkInterface], ipv6: Bool = true)
        -> (usable: [NetworkInterface], missing: [String]) {
        if names.isEmpty {
            return (all.filter { $0.isUp && !$0.isLoopback && $0.supportsMulticast && $0.hasBeaconAddress(ipv6: ipv6) }
                .sorted { $0.name < $1.name }, [])
        }
        var usable: [NetworkInterface] = []
        var missing: [String] = []
        for name in names {
            guard let i = all.first(where: { $0.name == name }), i.isUp else {
                missing.append("\(name) (missing or down)")
                continue
            }
            guard i.hasBeaconAddress(ipv6: ipv6) else {
                missing.append("\(name) (no \(ipv6 ? "IPv4 or link-local IPv6" : "IPv4") address)")
                continue
            }
            usable.append(i)
        }
        return (usable, missing)
    }
}
