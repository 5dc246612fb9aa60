import Foundation

/// Moves TLV records as UDP datagrams (one sealed record per datagram) and runs the
/// kit's ``SecureLink`` per remote address.
///
/// Used by the hub's `udp` plugin (role hub) and by the `yaok` endpoint (role
/// endpoint) as its client side. A remote address becomes a link once its
/// handshake completes; it goes down after `idleTimeout` without authenticated traffic.
///
/// Denial of service: a hello is answered with a stateless cookie first (``LinkCookies``),
/// so a forged source address costs no state, no signature and no reply larger than its
/// datagram. Half-open handshakes are capped (`maxPending`, one per address); established
/// sessions are capped (`maxSessions`) with a slot always kept for each configured peer, at
/// most `maxSessionsPerKey` per peer key and `maxSessionsPerAddress` per IP address (keys are
/// free, addresses cost a round trip). When the table is full, a newcomer takes the place of
/// the idlest session of the most crowded /24, never the other way round: many addresses
/// cannot lock out a phone from another network, only compete within their own. A live
/// session is otherwise never displaced by a new handshake unless that handshake
/// authenticates the same peer key (the peer restarted).
// @unchecked: tables under `lock`; `boundAddress` only by start (host serialises).
public final class UDPLinkEngine: @unchecked Sendable {
    /// Counters for status.
    public struct Counters: Sendable {
        public var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        public var dropped: UInt64 = 0, handshakeFailures: UInt64 = 0
        /// Cookie replies sent (hellos from addresses not yet validated).
        public var cookiesSent: UInt64 = 0
        /// Sealed frames refused: forged, altered, replayed, or for no session.
        public var sealedRefused: UInt64 = 0
        /// Handshakes refused for lack of a slot (pending or established).
        public var slotsRefused: UInt64 = 0
        /// Half-open handshakes dropped to make room for newer ones.
        public var halfOpenEvicted: UInt64 = 0
        /// Completed handshakes that tried to take over a live session with another key.
        public var takeoversRefused: UInt64 = 0
        /// Records from peers speaking another link version.
        public var versionRefused: UInt64 = 0
        /// Established sessions closed to make room for a newcomer (the table was full).
        public var sessionsEvicted: UInt64 = 0
        /// Clear handshake records that did not verify (a forged reply, cookie or version
        /// refusal in a peer's name): dropped, the handshake kept waiting for the real one.
        public var handshakeRecordsIgnored: UInt64 = 0
        /// A hello a half-open session had answered, again: answered with the same reply.
        public var helloRepeats: UInt64 = 0
    }

    /// Largest record carried in one datagram.
    public static let mtu = 65_000

    /// IPv4 addresses: the socket is `AF_INET` (the config takes IPv4 `host:port` only).
    public let listen: IPEndpoint
    public let staticPeers: [IPEndpoint]
    private let identity: LinkIdentity
    private let role: PeerRole
    private let clock: @Sendable () -> Int64
    private let events: any LinkEvents
    private let idleTimeoutMs: Int64
    private let keepaliveMs: Int64
    private let maxSessions: Int
    private let maxPending: Int
    private let maxSessionsPerKey = 4
    private let maxPendingPerHost = 8
    /// Established sessions per IP address: a phone needs one, a NAT a few.
    static let maxSessionsPerAddress = 8
    private let cookies: LinkCookies

    private let lock = NSLock()
    private var fd: Int32 = -1
    private var running = false
    /// The receive thread. ``stop()`` waits for it, so no event comes from this engine after
    /// `stop()` returns: a plugin is destroyed next, and the host's callback table with it.
    private var receiver: JoinableThread?
    private var sessions: [IPEndpoint: Session] = [:]
    private var lastVersionLogMs: Int64 = -60_000
    private var byLink: [LinkID: IPEndpoint] = [:]
    private var nextLinkID: LinkID = 1
    private var counters = Counters()
    private var lastError: String?

    final class Session {
        let address: IPEndpoint
        let linkID: LinkID
        /// The live session once up; before that, the handshake in progress.
        var link: SecureLink
        /// A new handshake beside a live session; it replaces `link` only if it proves the same key.
        var pending: SecureLink?
        var pendingSinceMs: Int64 = 0
        var up = false
        /// Last datagram of any kind for this slot (or our own hello to a configured peer): what
        /// keeps a half-open slot alive, and the idle timeout.
        var lastHeardMs: Int64
        let createdMs: Int64
        /// Last frame that opened under the session's keys: what keepalive and re-handshake go by,
        /// since anyone can make a slot "heard" with forged datagrams but not authentic.
        var lastAuthenticMs: Int64
        var lastHelloMs: Int64 = 0
        var lastPingMs: Int64 = 0
        /// The hello a half-open responder session answered (its ephemeral key) and the reply:
        /// the same hello again (duplicated or resent on the way) gets the same reply, since a
        /// new one would leave the initiator, already established on the first, with keys we
        /// no longer hold.
        var answered: (ephemeral: [UInt8], reply: [UInt8])?
        init(address: IPEndpoint, linkID: LinkID, link: SecureLink, now: Int64) {
            self.address = address
            self.linkID = linkID
            self.link = link
            self.lastHeardMs = now
            self.createdMs = now
            self.lastAuthenticMs = now
        }
    }

    /// - Parameter events: where links and frames are reported, and refusals and failures logged
    ///   (as warnings); called on the engine's thread (and on the caller's by ``stop()``), never
    ///   under its lock. The engine keeps no metrics of its own there.
    public init(identity: LinkIdentity, role: PeerRole, listen: IPEndpoint, staticPeers: [IPEndpoint],
                clock: @escaping @Sendable () -> Int64, events: any LinkEvents,
                idleTimeoutMs: Int64 = 45_000, keepaliveMs: Int64 = 10_000, maxSessions: Int = 256, maxPending: Int = 64) {
        self.identity = identity
        self.role = role
        self.listen = listen
        self.staticPeers = staticPeers
        self.clock = clock
        self.events = events
        self.idleTimeoutMs = idleTimeoutMs
        self.keepaliveMs = keepaliveMs
        self.maxSessions = maxSessions
        self.maxPending = maxPending
        self.cookies = LinkCookies(clock: clock)
    }

    /// The bound local address (useful when listening on port 0).
    public private(set) var boundAddress: IPEndpoint?

    /// Binds the socket and starts the receive thread.
    public func start() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TransportError.system(call: "socket", errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard PosixSocket.bind(fd, listen) == 0 else {
            let e = errno
            close(fd)
            throw TransportError.failed("cannot bind UDP \(listen): \(String(cString: strerror(e)))")
        }
        boundAddress = PosixSocket.localAddress(fd)
        var rcvbuf: Int32 = 4 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, socklen_t(MemoryLayout<Int32>.size))
        let receiver = JoinableThread(name: "yaok-udp") { [weak self] in self?.run(fd) }
        lock.withLock {
            self.fd = fd
            running = true
            self.receiver = receiver
        }
        receiver.start()
    }

    /// Stops the receive thread (waiting up to 1.5 s for it to return, unless called on it),
    /// reports every link down and closes the socket.
    public func stop() {
        let (fd, links, goodbyes, thread): (Int32, [LinkID], [(IPEndpoint, [UInt8])], JoinableThread?) = lock.withLock {
            guard running else { return (-1, [], [], nil) }
            running = false
            let up = sessions.values.filter(\.up)
            let goodbyes = up.compactMap { s in (try? s.link.seal(TLVRecord(.linkClose, value: []).encoded)).map { (s.address, $0) } }
            sessions.removeAll()
            byLink.removeAll()
            let fd = self.fd
            self.fd = -1   // sends from now on fail as not running, never on a closed number
            return (fd, up.map(\.linkID), goodbyes, receiver)
        }
        guard fd >= 0 else { return }
        // Say goodbye so peers drop the link now instead of after the idle timeout.
        for (address, bytes) in goodbyes { try? sendDatagram(bytes, to: address, fd: fd) }
        shutdown(fd, Int32(SHUT_RDWR))   // wakes the receive thread's poll
        // The receive thread may be inside a callback to the host; the socket closes after it
        // has returned, so its number cannot be reused under a recvfrom either.
        thread?.join(timeout: 1.5)
        close(fd)
        for id in links { events.linkDown(id, reason: "transport stopped") }
    }

    /// Seals one record and sends it to an up link.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard frame.count <= Self.mtu else { throw TransportError.frameTooLarge(size: frame.count, mtu: Self.mtu) }
        let (fd, address, sealed): (Int32, IPEndpoint?, [UInt8]?) = try lock.withLock {
            guard let address = byLink[link], let s = sessions[address], s.up else { return (self.fd, nil, nil) }
            return (self.fd, address, try s.link.seal(frame))
        }
        guard fd >= 0 else { throw TransportError.notRunning }
        guard let address, let sealed else { throw TransportError.unknownLink(link) }
        try sendDatagram(sealed, to: address, fd: fd)
    }

    public var counterSnapshot: Counters { lock.withLock { counters } }
    /// Sessions held (up or half-open): what a flood could try to fill.
    public var sessionCount: Int { lock.withLock { sessions.count } }
    public var lastErrorSnapshot: String? { lock.withLock { lastError } }
    /// Remote addresses whose link is up.
    public var upLinks: [(LinkID, IPEndpoint)] { lock.withLock { sessions.values.filter(\.up).map { ($0.linkID, $0.address) } } }

    private func sendDatagram(_ bytes: [UInt8], to address: IPEndpoint, fd: Int32) throws {
        let n = address.withSockaddr { sa, len in
            bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, len) }
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

    /// The timers `tick` serves are seconds long, so under a stream of datagrams it runs at
    /// most this often: it walks every session, which per datagram would cost O(sessions) each.
    static let tickIntervalMs: Int64 = 100
    /// Datagrams taken per wake-up before polling again: one `poll` per burst, not per datagram.
    static let receiveBurst = 64

    private func run(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var lastTickMs: Int64?
        while lock.withLock({ running }) {
            let now = clock()
            if lastTickMs.map({ now - $0 >= Self.tickIntervalMs || now < $0 }) ?? true {
                tick(fd)
                lastTickMs = now
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 250)
            if ready <= 0 { continue }
            for _ in 0..<Self.receiveBurst {
                // Once stop() has begun, nothing more is taken in (the peer sends it again).
                guard lock.withLock({ running }) else { break }
                var from = sockaddr_in()
                var fromLen = socklen_t(MemoryLayout<sockaddr_in>.size)
                let n = buffer.withUnsafeMutableBytes { buf in
                    withUnsafeMutablePointer(to: &from) { f in
                        f.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            recvfrom(fd, buf.baseAddress, buf.count, Int32(MSG_DONTWAIT), $0, &fromLen)
                        }
                    }
                }
                if n < 0 { break } // drained (EAGAIN), or an error the next poll reports
                if n > 0 { receive(Array(buffer[0..<n]), from: IPEndpoint(from), fd: fd) }
            }
        }
    }

    private func newLink(initiator: Bool) -> SecureLink {
        SecureLink(identity: identity, role: role, isInitiator: initiator, channel: .datagram)
    }

    /// Makes room for one more half-open handshake from `address`, or says there is none: at
    /// most `maxPendingPerHost` per IP address (ports are free to an attacker, addresses less
    /// so); when all `maxPending` are taken, the oldest one of the most crowded network gives way —
    /// within the newcomer's own network only one past ``halfOpenGraceMs`` (none: the newcomer is
    /// refused and its hello comes again) — so a flood of validated hellos neither evicts an
    /// honest handshake mid-way nor locks out one from a less crowded network. Configured
    /// peers are never evicted. Under the lock.
    private func roomForHalfOpen(from address: IPEndpoint, now: Int64) -> Bool {
        let halfOpen = sessions.values.filter { !$0.up && !staticPeers.contains($0.address) }
        guard halfOpen.filter({ $0.address.host == address.host }).count < maxPendingPerHost else { return false }
        guard halfOpen.count >= maxPending else { return true }
        // The oldest of the most crowded network (/24, /64) gives way: a flood from many addresses competes
        // with itself. Within the newcomer's own network only one past the grace a slow radio needs
        // for its identity frame; none: the newcomer is refused, and its hello comes again.
        let mine = address.crowd
        let crowds = Dictionary(grouping: halfOpen) { $0.address.crowd }
        guard let (prefix, crowd) = crowds.max(by: { $0.value.count < $1.value.count }) else { return true }
        let mineCount = crowds[mine]?.count ?? 0
        let candidates = prefix != mine && crowd.count > mineCount + 1 ? crowd : crowd.filter { now - $0.createdMs >= Self.halfOpenGraceMs }
        guard let oldest = candidates.min(by: { $0.createdMs < $1.createdMs }) else { return false }
        sessions[oldest.address] = nil
        counters.halfOpenEvicted += 1
        return true
    }

    /// How long a half-open handshake whose reply was sent is kept from eviction: a phone on a
    /// slow radio answers the reply within this (a configured peer is never evicted).
    static let halfOpenGraceMs: Int64 = 2_000

    /// Makes room for a new established session for `key` at `address`, keeping a slot for
    /// every configured peer: a key or an address at its cap, or a full table, gives up its
    /// idlest session (the key's own, the address's own, the most crowded network's: /24 or /64), never the
    /// newcomer — a phone that reconnects replaces its stale session, and a crowd competes only
    /// with itself. Evicted links go in `evicted`. Under the lock.
    private func makeRoom(for key: [UInt8], at address: IPEndpoint, evicted: inout [LinkID]) -> Bool {
        func evictable(_ match: (Session) -> Bool) -> [Session] {
            sessions.values.filter { $0.up && !staticPeers.contains($0.address) && match($0) }
        }
        func evictIdlest(of group: [Session]) -> Bool {
            guard let idlest = group.min(by: { $0.lastAuthenticMs < $1.lastAuthenticMs }) else { return false }
            sessions[idlest.address] = nil
            byLink[idlest.linkID] = nil
            evicted.append(idlest.linkID)
            counters.sessionsEvicted += 1
            return true
        }
        let sameKey = sessions.values.filter { $0.up && $0.link.peer?.signingKey == key }
        if sameKey.count >= maxSessionsPerKey, !evictIdlest(of: evictable { $0.link.peer?.signingKey == key }) { return false }
        if staticPeers.contains(address) { return true }
        let sameAddress = evictable { $0.address.host == address.host }
        if sameAddress.count >= Self.maxSessionsPerAddress, !evictIdlest(of: sameAddress) { return false }
        let established = sessions.values.filter(\.up).count
        let reserved = staticPeers.filter { sessions[$0]?.up != true }.count
        if established + reserved < maxSessions { return true }
        let crowds = Dictionary(grouping: evictable { _ in true }) { $0.address.crowd }
        return evictIdlest(of: crowds.values.max(by: { $0.count < $1.count }) ?? [])
    }

    private func linkInfo(_ s: Session, _ peer: AuthenticatedPeer) -> LinkInfo {
        LinkInfo(id: s.linkID, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey,
                 peerRole: peer.role, mtu: Self.mtu, cost: 10, kind: "udp", remote: s.address.description, proof: peer.proof)
    }

    private func receive(_ datagram: [UInt8], from address: IPEndpoint, fd: Int32) {
        let now = clock()
        guard let record = try? TLVRecord(parsing: datagram) else {
            lock.withLock { counters.dropped += 1 }
            return
        }
        var replies: [[UInt8]] = []
        var upInfo: LinkInfo?
        var deliver: [UInt8]?
        var linkForDelivery: LinkID = 0
        var logLine: String?
        var closed: LinkID?
        var closeReason: String?
        var evicted: [LinkID] = []
        lock.withLock {
            counters.framesIn += 1
            counters.bytesIn += UInt64(datagram.count)
            if FrameType.retiredHandshakeTypes.contains(record.type) {
                // A version-1 peer: tell it (4 bytes, never more than it sent) and say so, at most every 10 s.
                counters.versionRefused += 1
                replies.append(SecureLink.versionRecord())
                if now - lastVersionLogMs >= 10_000 {
                    lastVersionLogMs = now
                    logLine = "\(address) speaks link version 1, which is retired; it must be upgraded to link version \(SecureLink.version)"
                }
                return
            }
            switch FrameType(rawValue: record.type) {
            case .linkHello:
                switch cookies.admit(record, from: Array(address.description.utf8)) {
                case .drop:
                    counters.dropped += 1
                    return
                case .reply(let r):
                    if r.first == FrameType.linkCookie.rawValue { counters.cookiesSent += 1 } else { counters.versionRefused += 1 }
                    replies.append(r)
                    return
                case .admit:
                    break
                }
                let existing = sessions[address]
                if let s = existing, !s.up, s.link.isInitiator, s.link.state == .awaitingReply {
                    // Both ends dialled at once: the hello with the lower ephemeral key wins, the same on both sides.
                    let theirs = Array(record.value[1..<33])
                    if s.link.ephemeralKey.lexicographicallyPrecedes(theirs) { return }
                }
                if let s = existing, s.up {
                    guard s.pending == nil || now - s.pendingSinceMs > 5_000 else { counters.slotsRefused += 1; return }
                    let fresh = newLink(initiator: false)
                    do {
                        for case .send(let r) in try fresh.receive(record) { replies.append(r) }
                        s.pending = fresh
                        s.pendingSinceMs = now
                    } catch {
                        counters.handshakeFailures += 1
                    }
                    return
                }
                let theirs = Array(record.value[1..<33])
                if let s = existing, !s.link.isInitiator, s.link.state == .awaitingIdentity, let a = s.answered, a.ephemeral == theirs {
                    counters.helloRepeats += 1
                    s.lastHeardMs = now
                    replies.append(a.reply)
                    return
                }
                guard existing != nil || roomForHalfOpen(from: address, now: now) else { counters.slotsRefused += 1; return }
                let s = existing.map { old -> Session in
                    old.link = newLink(initiator: false)
                    return old
                } ?? makeSession(address, link: newLink(initiator: false), now: now)
                s.lastHeardMs = now
                s.answered = nil
                do {
                    for case .send(let r) in try s.link.receive(record) {
                        replies.append(r)
                        s.answered = (theirs, r)
                    }
                } catch {
                    counters.handshakeFailures += 1
                    sessions[address] = nil
                    logLine = "handshake with \(address) failed: \(error)"
                }
            case .linkCookie, .linkReply, .linkVersion:
                guard let s = sessions[address] else { counters.dropped += 1; return }
                let target = s.up ? s.pending : s.link
                guard let link = target, link.isInitiator else { counters.dropped += 1; return }
                do {
                    for out in try link.receive(record) {
                        switch out {
                        case .send(let r): replies.append(r)
                        case .established(let peer): upInfo = established(s, link: link, peer: peer, now: now, log: &logLine, evicted: &evicted, replies: &replies)
                        case .frame, .refused: break
                        }
                    }
                } catch {
                    // A record in clear proves nothing about its sender: a blind spoofer can send
                    // one "from" the peer. It ends nothing; the handshake waits for a reply that
                    // verifies until its own timeout, which reports a version refusal if one came.
                    counters.handshakeRecordsIgnored += 1
                    if case SecureLinkError.unsupportedVersion = error { counters.versionRefused += 1 }
                }
            case .sealed:
                guard let s = sessions[address] else { counters.sealedRefused += 1; return }
                var outputs: [SecureLink.Output]?
                var from = s.link
                if s.link.acceptsSealed { outputs = try? s.link.receive(record) }
                if outputs == nil, let p = s.pending, p.acceptsSealed {
                    outputs = try? p.receive(record)
                    from = p
                }
                guard let outputs else { counters.sealedRefused += 1; return }
                s.lastHeardMs = now
                s.lastAuthenticMs = now
                for out in outputs {
                    switch out {
                    case .send(let r): replies.append(r)
                    case .established(let peer): upInfo = established(s, link: from, peer: peer, now: now, log: &logLine, evicted: &evicted, replies: &replies)
                    case .refused(let why):
                        // Our refusal of its identity went out with the replies above, or the
                        // peer refused ours: either way this session is over.
                        counters.handshakeFailures += 1
                        if from === s.link {
                            sessions[address] = nil
                            if s.up {
                                byLink[s.linkID] = nil
                                closed = s.linkID
                                closeReason = why
                            }
                        } else {
                            s.pending = nil
                        }
                        logLine = "link with \(address) refused: \(why)"
                    case .frame(let inner):
                        guard s.up, from === s.link else { continue }
                        switch FrameType(rawValue: inner[0]) {
                        case .ping:
                            if let pong = try? s.link.seal(TLVRecord(.pong, value: Array(inner[3...])).encoded) { replies.append(pong) }
                        case .pong, .linkIdentity:
                            break
                        case .linkClose:
                            sessions[address] = nil
                            byLink[s.linkID] = nil
                            closed = s.linkID
                        default:
                            deliver = inner
                            linkForDelivery = s.linkID
                        }
                    }
                }
            default:
                // Anything in clear outside the handshake (a spoofed custody ack or link close) is refused.
                counters.dropped += 1
            }
        }
        if let logLine {
            // Only a configured peer's address (it is in the config anyway) at the default
            // level; a phone's at debug (Docs/operations.md, "What the log holds").
            if staticPeers.contains(address) {
                events.log(.warning, logLine)
            } else {
                events.log(.warning, logLine.replacingOccurrences(of: address.description, with: "a peer"))
                events.log(.debug, logLine)
            }
        }
        if let closed { events.linkDown(closed, reason: closeReason ?? "peer closed the link") }
        for id in evicted { events.linkDown(id, reason: "closed to make room: the session table was full and this was the idlest session of the most crowded network") }
        for reply in replies { try? sendDatagram(reply, to: address, fd: fd) }
        if let upInfo { events.linkUp(upInfo) }
        if let deliver { events.frameReceived(deliver, on: linkForDelivery) }
    }

    private func makeSession(_ address: IPEndpoint, link: SecureLink, now: Int64) -> Session {
        let s = Session(address: address, linkID: nextLinkID, link: link, now: now)
        nextLinkID += 1
        sessions[address] = s
        return s
    }

    /// A handshake completed on `link` for session `s`. Returns the link to report up, if any. Under the lock.
    /// As responder it answers the handshake (Docs/protocol.md §5, "The handshake's outcome")
    /// into `replies`: accepted, or refused with the reason.
    private func established(_ s: Session, link: SecureLink, peer: AuthenticatedPeer, now: Int64, log: inout String?,
                             evicted: inout [LinkID], replies: inout [[UInt8]]) -> LinkInfo? {
        s.lastAuthenticMs = now
        func answer(_ outcome: LinkOutcome) {
            guard !link.isInitiator else { return }
            let record: [UInt8]?
            switch outcome {
            case .accepted: record = try? link.accept()
            case .refused(let code, let reason): record = try? link.refuse(code, reason)
            }
            if let record { replies.append(record) }
        }
        if s.up {
            // A second handshake beside a live session: only the same proven key may replace it (the peer restarted).
            s.pending = nil
            guard link !== s.link else { return nil }
            guard s.link.peer?.signingKey == peer.signingKey else {
                counters.takeoversRefused += 1
                log = "refused a new session from \(s.address) with another key while the link with the current one is live"
                answer(.refused(.noRoom, "a live session from this address has another key"))
                return nil
            }
            s.link = link
            answer(.accepted)
            return nil
        }
        guard makeRoom(for: peer.signingKey, at: s.address, evicted: &evicted) else {
            counters.slotsRefused += 1
            sessions[s.address] = nil
            log = "no session slot for \(s.address)"
            answer(.refused(.noRoom, "the hub's session table is full; try again later"))
            return nil
        }
        s.link = link
        s.up = true
        byLink[s.linkID] = s.address
        answer(.accepted)
        return linkInfo(s, peer)
    }

    /// Timers: dial configured peers, keep links alive, re-handshake a silent one, expire idle ones.
    private func tick(_ fd: Int32) {
        let now = clock()
        var toSend: [([UInt8], IPEndpoint)] = []
        var down: [(LinkID, String)] = []
        var versionLog: String?
        lock.withLock {
            for peer in staticPeers {
                let s = sessions[peer] ?? makeSession(peer, link: newLink(initiator: true), now: now)
                if !s.up && now - s.lastHelloMs >= 2_000 {
                    if let versions = s.link.versionsClaimed, now - lastVersionLogMs >= 10_000 {
                        lastVersionLogMs = now
                        versionLog = "handshake with \(peer) got no reply; a version refusal in its name says it speaks link version(s) \(versions.map(String.init).joined(separator: ", ")), this node speaks \(SecureLink.version)"
                    }
                    s.link = newLink(initiator: true)
                    if let hello = try? s.link.hello() { toSend.append((hello, peer)) }
                    s.lastHelloMs = now
                    s.lastHeardMs = now
                } else if s.up && s.link.isInitiator && now - s.lastAuthenticMs > keepaliveMs + 5_000 && now - s.lastHelloMs >= 2_000 {
                    // Pings go unanswered: the peer may have restarted. Handshake again beside the live session.
                    let fresh = newLink(initiator: true)
                    if let hello = try? fresh.hello() { toSend.append((hello, peer)) }
                    s.pending = fresh
                    s.pendingSinceMs = now
                    s.lastHelloMs = now
                }
            }
            for (address, s) in sessions {
                if now - s.lastHeardMs > idleTimeoutMs || (!s.up && now - s.lastHeardMs > 10_000 && !staticPeers.contains(address)) {
                    sessions[address] = nil
                    if s.up {
                        byLink[s.linkID] = nil
                        down.append((s.linkID, "no traffic for \(idleTimeoutMs / 1000) s"))
                    }
                } else if s.up && now - max(s.lastPingMs, s.lastAuthenticMs) >= keepaliveMs {
                    s.lastPingMs = now
                    if let ping = try? s.link.seal(TLVRecord(.ping, value: []).encoded) { toSend.append((ping, address)) }
                }
                if s.pending != nil, now - s.pendingSinceMs > 10_000 { s.pending = nil }
            }
        }
        if let versionLog { events.log(.warning, versionLog) }
        for (bytes, address) in toSend { try? sendDatagram(bytes, to: address, fd: fd) }
        for (id, reason) in down { events.linkDown(id, reason: reason) }
    }
}
