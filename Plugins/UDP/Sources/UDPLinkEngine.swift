import Foundation
import YaokPluginKit

/// Moves TLV records as UDP datagrams (one record per datagram) and runs the
/// link handshake per remote address.
///
/// Used by the hub's `udp` plugin (role hub) and by the `yaok` endpoint (role
/// endpoint) as its client side. A remote address becomes a link once its
/// identity proof verifies; it goes down after `idleTimeout` without traffic.
public final class UDPLinkEngine: @unchecked Sendable {
    /// Callbacks from the engine. Called on the engine's thread.
    public struct Events: Sendable {
        public var linkUp: @Sendable (LinkInfo) -> Void
        public var linkDown: @Sendable (LinkID, String) -> Void
        public var frame: @Sendable ([UInt8], LinkID) -> Void
        public var log: @Sendable (String) -> Void

        public init(linkUp: @escaping @Sendable (LinkInfo) -> Void, linkDown: @escaping @Sendable (LinkID, String) -> Void,
                    frame: @escaping @Sendable ([UInt8], LinkID) -> Void, log: @escaping @Sendable (String) -> Void) {
            self.linkUp = linkUp
            self.linkDown = linkDown
            self.frame = frame
            self.log = log
        }
    }

    /// Counters for status.
    public struct Counters: Sendable {
        public var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        public var dropped: UInt64 = 0, handshakeFailures: UInt64 = 0
    }

    /// Largest record carried in one datagram.
    public static let mtu = 65_000

    public let listen: SocketAddress
    public let staticPeers: [SocketAddress]
    private let identity: LinkIdentity
    private let role: PeerRole
    private let clock: @Sendable () -> Int64
    /// Where link events go; set before ``start()``.
    public var events = Events(linkUp: { _ in }, linkDown: { _, _ in }, frame: { _, _ in }, log: { _ in })
    private let idleTimeoutMs: Int64
    private let keepaliveMs: Int64
    private let maxSessions: Int

    private let lock = NSLock()
    private var fd: Int32 = -1
    private var running = false
    private var thread: Thread?
    private var sessions: [SocketAddress: Session] = [:]
    private var byLink: [LinkID: SocketAddress] = [:]
    private var nextLinkID: LinkID = 1
    private var counters = Counters()
    private var lastError: String?

    final class Session {
        let address: SocketAddress
        let linkID: LinkID
        var handshake: LinkHandshake
        var up = false
        var lastHeardMs: Int64
        var lastChallengeMs: Int64 = 0
        var lastPingMs: Int64 = 0
        init(address: SocketAddress, linkID: LinkID, handshake: LinkHandshake, now: Int64) {
            self.address = address
            self.linkID = linkID
            self.handshake = handshake
            self.lastHeardMs = now
        }
    }

    public init(identity: LinkIdentity, role: PeerRole, listen: SocketAddress, staticPeers: [SocketAddress],
                clock: @escaping @Sendable () -> Int64,
                idleTimeoutMs: Int64 = 45_000, keepaliveMs: Int64 = 10_000, maxSessions: Int = 256) {
        self.identity = identity
        self.role = role
        self.listen = listen
        self.staticPeers = staticPeers
        self.clock = clock
        self.idleTimeoutMs = idleTimeoutMs
        self.keepaliveMs = keepaliveMs
        self.maxSessions = maxSessions
    }

    /// The bound local address (useful when listening on port 0).
    public private(set) var boundAddress: SocketAddress?

    /// Binds the socket and starts the receive thread.
    public func start() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = listen.sockaddr
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot bind UDP \(listen): \(String(cString: strerror(e)))")
        }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        boundAddress = SocketAddress(bound)
        var rcvbuf: Int32 = 4 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, socklen_t(MemoryLayout<Int32>.size))
        lock.withLock {
            self.fd = fd
            running = true
        }
        let thread = Thread { [weak self] in self?.run(fd) }
        thread.name = "yaok-udp"
        self.thread = thread
        thread.start()
    }

    /// Stops the receive thread, reports every link down and closes the socket.
    public func stop() {
        let (fd, links, addresses): (Int32, [LinkID], [SocketAddress]) = lock.withLock {
            guard running else { return (-1, [], []) }
            running = false
            let up = sessions.values.filter(\.up)
            sessions.removeAll()
            byLink.removeAll()
            return (self.fd, up.map(\.linkID), up.map(\.address))
        }
        guard fd >= 0 else { return }
        // Say goodbye so peers drop the link now instead of after the idle timeout.
        for address in addresses { try? sendDatagram(TLVRecord(.linkClose, value: []).encoded, to: address, fd: fd) }
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        for id in links { events.linkDown(id, "transport stopped") }
    }

    /// Sends one record to an up link.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard frame.count <= Self.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: Self.mtu) }
        let (fd, address): (Int32, SocketAddress?) = lock.withLock { (self.fd, byLink[link]) }
        guard fd >= 0 else { throw TransportError.notRunning }
        guard let address else { throw TransportError.unknownLink(link) }
        try sendDatagram(frame, to: address, fd: fd)
    }

    public var counterSnapshot: Counters { lock.withLock { counters } }
    public var lastErrorSnapshot: String? { lock.withLock { lastError } }
    /// Remote addresses whose link is up.
    public var upLinks: [(LinkID, SocketAddress)] { lock.withLock { sessions.values.filter(\.up).map { ($0.linkID, $0.address) } } }

    private func sendDatagram(_ bytes: [UInt8], to address: SocketAddress, fd: Int32) throws {
        var addr = address.sockaddr
        let n = withUnsafePointer(to: &addr) { a in
            a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard n == bytes.count else {
            let e = errno
            lock.withLock { lastError = "sendto \(address): \(String(cString: strerror(e)))" }
            throw TransportError.system(call: "sendto \(address)", errno: e)
        }
        lock.withLock {
            counters.framesOut += 1
            counters.bytesOut += UInt64(bytes.count)
        }
    }

    private func run(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while lock.withLock({ running }) {
            tick(fd)
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 250)
            if ready <= 0 { continue }
            var from = sockaddr_in()
            var fromLen = socklen_t(MemoryLayout<sockaddr_in>.size)
            let n = buffer.withUnsafeMutableBytes { buf in
                withUnsafeMutablePointer(to: &from) { f in
                    f.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, buf.baseAddress, buf.count, 0, $0, &fromLen) }
                }
            }
            if n <= 0 { continue }
            receive(Array(buffer[0..<n]), from: SocketAddress(from), fd: fd)
        }
    }

    private func session(for address: SocketAddress, now: Int64) -> Session? {
        if let s = sessions[address] { return s }
        guard sessions.count < maxSessions else { return nil }
        let id = nextLinkID
        nextLinkID += 1
        let s = Session(address: address, linkID: id, handshake: LinkHandshake(identity: identity, role: role, clock: clock), now: now)
        sessions[address] = s
        return s
    }

    private func receive(_ datagram: [UInt8], from address: SocketAddress, fd: Int32) {
        let now = clock()
        guard let record = try? TLVRecord(parsing: datagram) else {
            lock.withLock { counters.dropped += 1 }
            return
        }
        var replies: [[UInt8]] = []
        var upInfo: LinkInfo?
        var deliver: LinkID?
        var failure: String?
        var closed: LinkID?
        lock.withLock {
            counters.framesIn += 1
            counters.bytesIn += UInt64(datagram.count)
            guard let s = session(for: address, now: now) else { counters.dropped += 1; return }
            s.lastHeardMs = now
            switch FrameType(rawValue: record.type) {
            case .linkChallenge, .linkProof:
                if record.type == FrameType.linkChallenge.rawValue && s.lastChallengeMs == 0 {
                    // The peer started the conversation: challenge it too.
                    replies.append(s.handshake.challengeFrame())
                    s.lastChallengeMs = now
                }
                do {
                    if let reply = try s.handshake.handle(record) { replies.append(reply) }
                    if !s.up, let peer = s.handshake.peer {
                        s.up = true
                        byLink[s.linkID] = address
                        upInfo = LinkInfo(id: s.linkID, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey,
                                          peerRole: peer.role, mtu: Self.mtu, cost: 10, kind: "udp", remote: address.description)
                    }
                } catch {
                    counters.handshakeFailures += 1
                    failure = "handshake with \(address) failed: \(error)"
                    if !s.up { sessions[address] = nil }
                }
            case .ping where s.up:
                replies.append(TLVRecord(.pong, value: record.value).encoded)
            case .pong:
                break
            case .linkClose:
                sessions[address] = nil
                if s.up {
                    byLink[s.linkID] = nil
                    closed = s.linkID
                }
            default:
                if s.up {
                    deliver = s.linkID
                } else {
                    counters.dropped += 1
                    // Traffic from an unknown peer (e.g. we restarted): ask it to prove itself again.
                    if now - s.lastChallengeMs >= 1_000 {
                        replies.append(s.handshake.challengeFrame())
                        s.lastChallengeMs = now
                    }
                }
            }
        }
        if let failure { events.log(failure) }
        if let closed { events.linkDown(closed, "peer closed the link") }
        for reply in replies { try? sendDatagram(reply, to: address, fd: fd) }
        if let upInfo { events.linkUp(upInfo) }
        if let deliver { events.frame(datagram, deliver) }
    }

    /// Timers: (re)challenge static peers, keep links alive, expire idle ones.
    private func tick(_ fd: Int32) {
        let now = clock()
        var toSend: [([UInt8], SocketAddress)] = []
        var down: [(LinkID, String)] = []
        lock.withLock {
            for peer in staticPeers {
                guard let s = session(for: peer, now: now) else { continue }
                if !s.up && now - s.lastChallengeMs >= 2_000 {
                    s.handshake = LinkHandshake(identity: identity, role: role, clock: clock)
                    toSend.append((s.handshake.challengeFrame(), peer))
                    s.lastChallengeMs = now
                    s.lastHeardMs = now
                }
            }
            for (address, s) in sessions {
                if now - s.lastHeardMs > idleTimeoutMs {
                    sessions[address] = nil
                    if s.up {
                        byLink[s.linkID] = nil
                        down.append((s.linkID, "no traffic for \(idleTimeoutMs / 1000) s"))
                    }
                } else if s.up && now - max(s.lastPingMs, s.lastHeardMs) >= keepaliveMs {
                    s.lastPingMs = now
                    toSend.append((TLVRecord(.ping, value: []).encoded, address))
                }
            }
        }
        for (bytes, address) in toSend { try? sendDatagram(bytes, to: address, fd: fd) }
        for (id, reason) in down { events.linkDown(id, reason) }
    }
}
