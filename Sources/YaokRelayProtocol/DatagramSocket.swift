#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import struct YaokPluginKit.IPEndpoint

/// What a ``RelayLink`` reports when asked for the next packet.
public enum RelayLinkEvent: Sendable {
    /// One relay packet (a datagram, or one binary WebSocket message).
    case packet([UInt8])
    /// Nothing arrived within the timeout.
    case nothing
    /// The link failed (relay unreachable, connection closed, TLS pin mismatch, ...). The link
    /// stays usable: the next ``RelayLink/send(_:)`` tries again.
    case failed(RelayProtocolError)
}

/// A packet pipe between ``RelayClient`` and the relay: UDP (the default) or WebSocket over
/// TLS 1.3 (module YaokRelayWebSocket). Packets are the same either way, and the secure
/// channel runs inside, so a link only moves bytes; it may lose packets like UDP does (the
/// client retransmits).
public protocol RelayLink: AnyObject, Sendable {
    /// Sends one packet; returns why it could not be sent, or nil.
    func send(_ packet: [UInt8]) -> String?
    /// Waits up to `timeoutMs` for the next packet or failure.
    func receive(timeoutMs: Int32) -> RelayLinkEvent
    /// Closes the link for good.
    func close()
}

/// A UDP socket connected to one address: the kernel filters datagrams from anyone else and
/// reports ICMP "port unreachable" as ECONNREFUSED, which tells the client the relay is down.
// @unchecked: `fd` is fixed in init; `buffer` is used only by the client's one receiving thread.
final class ConnectedDatagramSocket: RelayLink, @unchecked Sendable {
    let address: IPEndpoint
    private var buffer = [UInt8](repeating: 0, count: 65_536)
    let fd: Int32

    init(to address: IPEndpoint) throws {
        let first: IPEndpoint
        do {
            first = try address.resolved(socketType: Int32(SOCK_DGRAM.rawValue))[0]
        } catch let e as IPEndpoint.ResolveError {
            throw RelayProtocolError.invalid("cannot resolve relay host \(address.host): \(e.reason)")
        }
        let fd = socket(first.family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw RelayProtocolError.system(call: "socket", errno: errno) }
        guard first.withSockaddr({ Glibc.connect(fd, $0, $1) }) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw RelayProtocolError.system(call: "connect \(address)", errno: e)
        }
        var buf: Int32 = 1 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, socklen_t(MemoryLayout<Int32>.size))
        self.fd = fd
        self.address = address
    }

    func send(_ packet: [UInt8]) -> String? {
        let e = sendDatagram(packet)
        return e == 0 ? nil : "send to relay \(address): \(String(cString: strerror(e)))"
    }

    /// Only the client's thread receives, so the one buffer is not shared.
    func receive(timeoutMs: Int32) -> RelayLinkEvent {
        switch receive(timeoutMs: timeoutMs, buffer: &buffer) {
        case .datagram(let d): return .packet(d)
        case .nothing: return .nothing
        case .failed(let e):
            // ECONNREFUSED: ICMP port unreachable, nobody listens there (yet).
            if e != ECONNREFUSED { usleep(100_000) }
            return .failed(.unreachable("relay \(address) unreachable: \(String(cString: strerror(e)))"))
        }
    }

    func close() { shutdownAndClose() }

    /// Sends one datagram; returns errno on failure (0 on success).
    @discardableResult
    func sendDatagram(_ bytes: [UInt8]) -> Int32 {
        let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        return n == bytes.count ? 0 : errno
    }

    enum Received { case datagram([UInt8]), nothing, failed(Int32) }

    /// Waits up to `timeoutMs` for one datagram.
    func receive(timeoutMs: Int32, buffer: inout [UInt8]) -> Received {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&pfd, 1, timeoutMs)
        if ready <= 0 { return .nothing }
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if n < 0 {
            let e = errno
            return e == EAGAIN || e == EINTR ? .nothing : .failed(e)
        }
        return .datagram(Array(buffer[0..<n]))
    }

    func shutdownAndClose() {
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}
