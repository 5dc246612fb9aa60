#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An IPv4 interface address as the kernel reports it (getifaddrs).
struct NetworkInterface: Hashable, Sendable {
    var name: String
    var index: UInt32
    /// The interface's IPv4 address (network byte order in `s_addr`).
    var address: String
    var isUp: Bool
    var isLoopback: Bool
    var supportsMulticast: Bool

    /// Every IPv4 address on the host, one entry per interface (the first address wins).
    static func current() -> [NetworkInterface] {
        var head: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&head) == 0, let first = head else { return [] }
        defer { freeifaddrs(head) }
        var out: [NetworkInterface] = []
        var seen = Set<String>()
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let sa = entry.pointee.ifa_addr, sa.pointee.sa_family == sa_family_t(AF_INET),
                  let cname = entry.pointee.ifa_name else { continue }
            let name = String(cString: cname)
            guard !seen.contains(name) else { continue }
            seen.insert(name)
            let sin = UnsafeRawPointer(sa).load(as: sockaddr_in.self)
            let flags = entry.pointee.ifa_flags
            out.append(NetworkInterface(
                name: name, index: if_nametoindex(cname), address: MeshAddress.text(of: sin.sin_addr),
                isUp: flags & UInt32(IFF_UP) != 0 && flags & UInt32(IFF_RUNNING) != 0,
                isLoopback: flags & UInt32(IFF_LOOPBACK) != 0,
                supportsMulticast: flags & UInt32(IFF_MULTICAST) != 0))
        }
        return out
    }

    /// The interfaces beacons use: the named ones (those missing are returned separately),
    /// or with no names every up, multicast-capable, non-loopback IPv4 interface.
    static func select(named names: [String], from all: [NetworkInterface]) -> (usable: [NetworkInterface], missing: [String]) {
        if names.isEmpty {
            return (all.filter { $0.isUp && !$0.isLoopback && $0.supportsMulticast }.sorted { $0.name < $1.name }, [])
        }
        var usable: [NetworkInterface] = []
        var missing: [String] = []
        for name in names {
            if let i = all.first(where: { $0.name == name }), i.isUp {
                usable.append(i)
            } else {
                missing.append(name)
            }
        }
        return (usable, missing)
    }
}
