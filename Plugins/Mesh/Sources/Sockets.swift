#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import YaokPluginKit

/// Thin POSIX socket helpers. Plain sockets and one poll thread keep the plugin
/// small (no event-loop library inside a dlopen'd .so); see README "Design".
enum Sockets {
    static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL, 0)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) {
        var v = value
        setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size))
    }

    static func bind(_ fd: Int32, _ address: MeshAddress) -> Int32 {
        address.withSockaddr { Glibc.bind(fd, $0, $1) }
    }

    static func localAddress(_ fd: Int32) -> MeshAddress? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &ss) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return rc == 0 ? MeshAddress(storage: ss) : nil
    }

    static func errorText(_ e: Int32) -> String { String(cString: strerror(e)) }

    /// A non-blocking TCP listener. An IPv6 listener is IPv6-only (the IPv4 one is separate).
    static func listen(on address: MeshAddress) throws -> Int32 {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        if address.isIPv6 { setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1) }
        guard bind(fd, address) == 0, Glibc.listen(fd, 64) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot listen on TCP \(address): \(errorText(e))")
        }
        setNonBlocking(fd)
        return fd
    }

    /// Starts a non-blocking connect. Returns the socket; the caller polls for POLLOUT and
    /// checks ``pendingError(_:)``.
    static func startConnect(to address: MeshAddress) throws -> Int32 {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setNonBlocking(fd)
        setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        let rc = address.withSockaddr { connect(fd, $0, $1) }
        if rc != 0 && errno != EINPROGRESS {
            let e = errno
            close(fd)
            throw TransportError.system(call: "connect \(address)", errno: e)
        }
        return fd
    }

    /// The socket's pending error (SO_ERROR), 0 when connected.
    static func pendingError(_ fd: Int32) -> Int32 {
        var e: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 else { return errno }
        return e
    }

    /// Accepts one connection, non-blocking; nil when none is waiting.
    static func accept(_ listener: Int32) -> (Int32, MeshAddress)? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = withUnsafeMutablePointer(to: &ss) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(listener, $0, &len) }
        }
        guard fd >= 0 else { return nil }
        guard let remote = MeshAddress(storage: ss) else {
            close(fd)
            return nil
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        setNonBlocking(fd)
        setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        return (fd, remote)
    }

    /// A UDP socket bound to `port` on every address, for multicast beacons (TTL 1, loopback on).
    static func beaconSocket(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        guard bind(fd, MeshAddress(host: "0.0.0.0", port: port)) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot bind beacon port UDP \(port): \(errorText(e))")
        }
        setNonBlocking(fd)
        setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, 1)
        setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_LOOP, 1)
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
    static func sendMulticast(_ fd: Int32, _ bytes: [UInt8], group: MeshAddress, interfaceAddress: String) -> Int32? {
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
        setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1)
        guard bind(fd, MeshAddress(host: "::", port: port)) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot bind IPv6 beacon port UDP \(port): \(errorText(e))")
        }
        setNonBlocking(fd)
        setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, 1)
        setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_LOOP, 1)
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
    static func sendMulticast6(_ fd: Int32, _ bytes: [UInt8], group: MeshAddress, interfaceIndex: UInt32) -> Int32? {
        var index = Int32(bitPattern: interfaceIndex)
        guard setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, &index, socklen_t(MemoryLayout<Int32>.size)) == 0 else { return errno }
        var scoped = group
        scoped.scopeID = interfaceIndex
        return sendTo(fd, bytes, scoped)
    }

    private static func sendTo(_ fd: Int32, _ bytes: [UInt8], _ to: MeshAddress) -> Int32? {
        let n = to.withSockaddr { sa, len in
            bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, len) }
        }
        return n == bytes.count ? nil : errno
    }

    /// Receives one datagram (non-blocking); nil when none is waiting. The sender of an
    /// IPv6 datagram carries its scope (the interface it came in on).
    static func receiveDatagram(_ fd: Int32, into buffer: inout [UInt8]) -> ([UInt8], MeshAddress)? {
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
            guard let sender = MeshAddress(storage: from) else { continue }
            return (Array(buffer[0..<n]), sender)
        }
    }
}
