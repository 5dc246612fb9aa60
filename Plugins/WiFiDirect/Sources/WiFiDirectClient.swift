#if canImport(Glibc)
import Glibc
#endif
import Foundation
import YaokPluginKit

/// The phone side of a Wi-Fi Direct link, for `yaok` on Linux (and tests): connects to the
/// hub's TCP port on the group owner's address, runs the kit's ``SecureLink`` as initiator
/// (role endpoint), then moves sealed TLV records. Blocking calls with timeouts; one caller thread at a time for
/// receiving, ``send(_:)`` may be called from another.
public final class WiFiDirectClient: @unchecked Sendable {
    /// The hub, as its handshake proved it.
    public let hub: AuthenticatedPeer
    public let remote: String
    private var fd: Int32
    private var decoder = TLVStreamDecoder()
    private var ready: [[UInt8]] = []
    private let sendLock = NSLock()
    private let link: SecureLink
    private let readTimeoutMs: Int32
    /// When the hub last sent anything (pongs included): a link whose group vanished under it
    /// gives no error, only silence, so callers compare this with their ping interval.
    public private(set) var lastHeard = Date()

    /// Connects (timeout `connectTimeout` seconds), runs the link handshake (same timeout),
    /// and returns a connected client. `readTimeout` bounds each ``receive(timeout:)`` wait
    /// when none is given.
    public init(host: String, port: UInt16 = 7814, identity: LinkIdentity, role: PeerRole = .endpoint,
                connectTimeout: Double = 10, readTimeout: Double = 60) throws {
        fd = try TCPSockets.connect(host: host, port: port, timeoutMs: Int32(connectTimeout * 1000))
        remote = "\(host):\(port)"
        readTimeoutMs = Int32(readTimeout * 1000)
        let hs = SecureLink(identity: identity, role: role, isInitiator: true, channel: .stream)
        link = hs
        let deadline = Date().addingTimeInterval(connectTimeout)
        do {
            try Self.write(fd, hs.hello())
            while !hs.isEstablished {
                let left = deadline.timeIntervalSinceNow
                guard left > 0 else { throw TransportError.failed("the hub at \(host):\(port) did not complete the handshake within \(connectTimeout) s") }
                guard let frame = try Self.readFrame(fd, &decoder, &ready, timeoutMs: Int32(left * 1000)) else {
                    throw TransportError.failed("the hub at \(host):\(port) did not complete the handshake within \(connectTimeout) s")
                }
                for case .send(let reply) in try hs.receive(TLVRecord(parsing: frame)) { try Self.write(fd, reply) }
            }
        } catch {
            Glibc.close(fd)
            throw error
        }
        guard let peer = hs.peer else { Glibc.close(fd); throw TransportError.failed("handshake ended without an identity") }
        guard peer.role == .hub else {
            Glibc.close(fd)
            throw TransportError.failed("\(host):\(port) proved role \(peer.role), not hub")
        }
        hub = peer
    }

    deinit { close() }

    /// Says goodbye and closes.
    public func close() {
        sendLock.withLock {
            guard fd >= 0 else { return }
            if let bye = try? link.seal(TLVRecord(.linkClose, value: []).encoded) { try? Self.write(fd, bye) }
            Glibc.close(fd)
            fd = -1
        }
    }

    /// Seals and sends one TLV record (blocking until the kernel takes it).
    public func send(_ frame: [UInt8]) throws {
        guard frame.count <= LinkServer.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: LinkServer.mtu) }
        try sendLock.withLock {
            guard fd >= 0 else { throw TransportError.notRunning }
            try Self.write(fd, link.seal(frame))
        }
    }

    /// The next record from the hub, answering pings on the way. nil on timeout; throws when
    /// the hub closed the link or the stream broke.
    public func receive(timeout: Double? = nil) throws -> [UInt8]? {
        let deadline = Date().addingTimeInterval(timeout ?? Double(readTimeoutMs) / 1000)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return nil }
            guard let record = try Self.readFrame(fd, &decoder, &ready, timeoutMs: Int32(left * 1000)) else { return nil }
            // Only frames sealed for this session count; anything else means the stream is not the hub's.
            guard case .frame(let frame)? = try link.receive(TLVRecord(parsing: record)).first else { continue }
            lastHeard = Date()
            switch FrameType(rawValue: frame[0]) {
            case .ping: try send(TLVRecord(.pong, value: []).encoded)
            case .pong: continue
            case .linkClose: throw TransportError.failed("the hub closed the link")
            default: return frame
            }
        }
    }

    /// Sends a keep-alive ping (call when idle for a while: the hub closes silent links).
    public func ping() throws { try send(TLVRecord(.ping, value: []).encoded) }

    static func write(_ fd: Int32, _ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw TransportError.system(call: "send", errno: errno)
            }
            offset += n
        }
    }

    static func readFrame(_ fd: Int32, _ decoder: inout TLVStreamDecoder, _ ready: inout [[UInt8]], timeoutMs: Int32) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = Date().addingTimeInterval(Double(timeoutMs) / 1000)
        while ready.isEmpty {
            let left = Int32(max(0, deadline.timeIntervalSinceNow * 1000))
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let rc = poll(&pfd, 1, left)
            if rc < 0 && errno == EINTR { continue }
            if rc <= 0 { return nil }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { throw TransportError.failed("the hub closed the connection") }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw TransportError.system(call: "recv", errno: errno)
            }
            ready += try decoder.feed(buffer[0..<n])
        }
        return ready.removeFirst()
    }
}
