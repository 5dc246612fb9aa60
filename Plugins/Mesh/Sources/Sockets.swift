#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import YaokPluginKit

/// The beacon sockets: IPv4 and link-local IPv6 multicast. The TCP side is the kit's
/// ``PosixSocket`` and ``SecureStreamEngine``.
enum Sockets {
    /// A UDP socket bound to `port` on every address, for multicast beacons (TTL 1, loopback on).
    static func beaconSocket(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        PosixSocket.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        guard PosixSocket.bind(fd, IPEndpoint(host: "0.0.0.0", port: port)) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot bind beacon port UDP \(port): \(PosixSocket.errorText(e))")
        }
        PosixSocket.setNonBlocking(fd)
        PosixSocket.setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, 1)
        PosixSocket.setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_LOOP, 1)
        return fd
    }

    /// Joins (or leaves) `group` on the interface with IPv4 address `interfaceAddress`.
    static func membership(_ fd: Int32, group: String, interfaceAddress: String, join: Bool) -> Int32? {
        var mreq = ip_mreq()
        inet_pton(AF_INET, group, &mreq.imr_multiaddr)
        inet_pton(AF_INET, interfaceAddress, &mreq.imr_interface)
        let rc = setsockopt(fd, Int32(IPPROTO_IP), join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &mreq, socklen_t(MemoryLayout<ip_mreq>.size))
        return rc == 0 ? nil : errno
    }

    /// Sends `bytes` to `group:port` out of the interface with IPv4 address `interfaceAddress`.
    static func sendMulticast(_ fd: Int32, _ bytes: [UInt8], group: IPEndpoint, interfaceAddress: String) -> Int32? {
        var ifAddr = in_addr()
        inet_pton(AF_INET, interfaceAddress, &ifAddr)
        guard setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &ifAddr, socklen_t(MemoryLayout<in_addr>.size)) == 0 else { return errno }
        return sendTo(fd, bytes, group)
    }

    /// An IPv6 UDP socket (IPv6 only) bound to `port` on every address, for link-local
    /// multicast beacons (hop limit 1, loopback on).
    static func beaconSocket6(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET6, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket(AF_INET6)", errno: errno) }
        PosixSocket.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        PosixSocket.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1)
        guard PosixSocket.bind(fd, IPEndpoint(host: "::", port: port)) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot bind IPv6 beacon port UDP \(port): \(PosixSocket.errorText(e))")
        }
        PosixSocket.setNonBlocking(fd)
        PosixSocket.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, 1)
        PosixSocket.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_LOOP, 1)
        return fd
    }

    /// Joins (or leaves) the IPv6 `group` on the interface with index `interfaceIndex`.
    static func membership6(_ fd: Int32, group: String, interfaceIndex: UInt32, join: Bool) -> Int32? {
        var mreq = ipv6_mreq()
        inet_pton(AF_INET6, group, &mreq.ipv6mr_multiaddr)
        mreq.ipv6mr_interface = interfaceIndex
        let rc = setsockopt(fd, Int32(IPPROTO_IPV6), join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &mreq, socklen_t(MemoryLayout<ipv6_mreq>.size))
        return rc == 0 ? nil : errno
    }

    /// Sends `bytes` to the IPv6 `group` (its port) out of the interface with index `interfaceIndex`.
    static func sendMulticast6(_ fd: Int32, _ bytes: [UInt8], group: IPEndpoint, interfaceIndex: UInt32) -> Int32? {
        var index = Int32(bitPattern: interfaceIndex)
        guard setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, &index, socklen_t(MemoryLayout<Int32>.size)) == 0 else { return errno }
        var scoped = group
        scoped.scopeID = interfaceIndex
        return sendTo(fd, bytes, scoped)
    }

    private static func sendTo(_ fd: Int32, _ bytes: [UInt8], _ to: IPEndpoint) -> Int32? {
        let n = to.withSockaddr { sa, len in
            bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, len) }
        }
        return n == bytes.count ? nil : errno
    }

    /// Receives one datagram (non-blocking); nil when none is waiting. The sender of an
    /// IPv6 datagram carries its scope (the interface it came in on).
    static func receiveDatagram(_ fd: Int32, into buffer: inout [UInt8]) -> ([UInt8], IPEndpoint)? {
        while true {
            var from = sockaddr_storage()
            var fromLen = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let n = buffer.withUnsafeMutableBytes { buf in
                withUnsafeMutablePointer(to: &from) { f in
                    f.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, buf.baseAddress, buf.count, 0, $0, &fromLen) }
                }
            }
            guard n >= 0 else { return nil }
            // A datagram from an unexpected family cannot be answered: skip it.
            guard let sender = IPEndpoint(storage: from) else { continue }
            return (Array(buffer[0..<n]), sender)
        }
    }
}
