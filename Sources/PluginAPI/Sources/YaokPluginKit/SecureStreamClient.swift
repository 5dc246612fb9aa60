#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// The dialling side of a ``SecureStreamEngine`` link, blocking: connects, runs ``SecureLink``
/// as initiator, then moves sealed TLV records. For phones (`yaok tcp://`, Wi-Fi Direct) and
/// tests. One thread at a time receives; ``send(_:)`` may be called from another.
// @unchecked: the link session is used under `sendLock` by senders and by the one receiving thread.
public final class SecureStreamClient: @unchecked Sendable {
    /// The peer, as its handshake proved it.
    public let peer: AuthenticatedPeer
    public let remote: IPEndpoint
    private var fd: Int32
    private var decoder = TLVStreamDecoder()
    private var ready: [[UInt8]] = []
    private let sendLock = NSLock()
    private let link: SecureLink
    private let readTimeoutMs: Int32
    /// When the peer last sent anything (pongs included): a link whose network vanished under it
    /// gives no error, only silence, so callers compare this with their ping interval.
    public private(set) var lastHeard = Date()

    /// Connects (bounded by `connectTimeout` seconds), runs the handshake (same bound) proving
    /// `role`, and requires the peer to prove one of `peerRoles`. `readTimeout` bounds each
    /// ``receive(timeout:)`` wait when none is given.
    public init(to address: IPEndpoint, identity: LinkIdentity, role: PeerRole = .endpoint, peerRoles: Set<PeerRole> = [.hub],
                connectTimeout: Double = 10, readTimeout: Double = 60) throws {
        let fd = try PosixSocket.connect(to: address, timeoutMs: Int32(connectTimeout * 1000))
        self.fd = fd
        remote = address
        readTimeoutMs = Int32(readTimeout * 1000)
        let hs = SecureLink(identity: identity, role: role, isInitiator: true, channel: .stream)
        link = hs
        let deadline = Date().addingTimeInterval(connectTimeout)
        do {
            try PosixSocket.writeAll(fd, hs.hello())
            while !hs.isEstablished {
                let left = deadline.timeIntervalSinceNow
                guard left > 0, let record = try Self.readRecord(fd, &decoder, &ready, timeoutMs: Int32(left * 1000)) else {
                    throw TransportError.failed("\(address) did not complete the handshake within \(connectTimeout) s")
                }
                for case .send(let reply) in try hs.receive(TLVRecord(parsing: record)) { try PosixSocket.writeAll(fd, reply) }
            }
        } catch {
            Glibc.close(fd)
            throw error
        }
        guard let proven = hs.peer, peerRoles.contains(proven.role) else {
            Glibc.close(fd)
            throw TransportError.failed("\(address) proved role \(hs.peer.map { "\($0.role)" } ?? "none"), not \(peerRoles.map { "\($0)" }.sorted().joined(separator: " or "))")
        }
        peer = proven
    }

    deinit { close() }

    /// Says goodbye and closes.
    public func close() {
        sendLock.withLock {
            guard fd >= 0 else { return }
            if let bye = try? link.seal(TLVRecord(.linkClose, value: []).encoded) { try? PosixSocket.writeAll(fd, bye) }
            Glibc.close(fd)
            fd = -1
        }
    }

    /// Seals and sends one TLV record (blocking until the kernel takes it).
    public func send(_ frame: [UInt8]) throws {
        guard frame.count <= SecureStreamEngine.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: SecureStreamEngine.mtu) }
        try sendLock.withLock {
            guard fd >= 0 else { throw TransportError.notRunning }
            try PosixSocket.writeAll(fd, link.seal(frame))
        }
    }

    /// The next record from the peer, answering pings on the way. nil on timeout; throws when
    /// the peer closed the link, the stream broke, or a record was not sealed for this session.
    public func receive(timeout: Double? = nil) throws -> [UInt8]? {
        let deadline = Date().addingTimeInterval(timeout ?? Double(readTimeoutMs) / 1000)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return nil }
            guard let record = try Self.readRecord(fd, &decoder, &ready, timeoutMs: Int32(left * 1000)) else { return nil }
            let outputs = try link.receive(TLVRecord(parsing: record))
            if case .refused(let why)? = outputs.first { throw TransportError.failed("\(remote) refused the link: \(why)") }
            guard case .frame(let frame)? = outputs.first else { continue }
            lastHeard = Date()
            switch FrameType(rawValue: frame[0]) {
            case .ping: try send(TLVRecord(.pong, value: Array(frame.dropFirst(TLVRecord.headerLength))).encoded)
            case .pong: continue
            case .linkClose: throw TransportError.failed("\(remote) closed the link")
            default: return frame
            }
        }
    }

    /// Sends a keep-alive ping (call when idle for a while: the engine closes silent links).
    public func ping() throws { try send(TLVRecord(.ping, value: []).encoded) }

    /// The next whole TLV record from a blocking stream socket, or nil on timeout; throws on EOF or error.
    public static func readRecord(_ fd: Int32, _ decoder: inout TLVStreamDecoder, _ ready: inout [[UInt8]], timeoutMs: Int32) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = Date().addingTimeInterval(Double(timeoutMs) / 1000)
        while ready.isEmpty {
            let left = Int32(max(0, deadline.timeIntervalSinceNow * 1000))
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let rc = poll(&pfd, 1, left)
            if rc < 0 && errno == EINTR { continue }
            if rc <= 0 { return nil }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { throw TransportError.failed("the peer closed the connection") }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw TransportError.system(call: "recv", errno: errno)
            }
            ready += try decoder.feed(buffer[0..<n])
        }
        return ready.removeFirst()
    }
}
