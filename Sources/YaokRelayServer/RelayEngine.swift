import Logging
import NIOCore
import YaokCrypto
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokWire
import enum YaokPluginKit.Hex

/// The relay's logic, independent of sockets: datagram in → datagrams out. One file of ~950
/// lines on purpose: it is one serial state machine whose invariants (sessions, registrations,
/// queues, limits) hold across all of its handlers.
///
/// Not thread-safe: ``RelayServer`` calls it from one serial queue. It never reads
/// envelope contents: it parses bundles structurally, verifies the sender signature, and
/// routes by the recipient user ID. Logs carry short IDs (8 hex digits) only.
// @unchecked: not thread-safe by design; RelayServer calls it only on its one serial engine queue.
public final class RelayEngine: @unchecked Sendable {
    /// A packet to send, and to whom.
    public struct Output: Sendable {
        public var peer: RelayPeer
        public var bytes: [UInt8]
        /// The remote socket address (UDP sender, or the WebSocket connection's remote end).
        public var address: SocketAddress { peer.remote }
    }

    final class Session {
        let id: UInt64
        var address: RelayPeer
        let secure: SecureSession
        let createdMs: Int64
        var lastHeardMs: Int64
        var authenticated = false
        /// What an owner registration on this session must sign (Docs §2, "Channel binding").
        let binding: ChannelBinding
        /// The address prefix the session was opened from: its session, reassembly shares are
        /// charged there (kept fixed so the accounting balances when a client roams).
        let prefix: AddressPrefix
        /// The session's authenticated owners' user IDs: users whose owner registration signed
        /// this session's channel binding. Only they, and users whose collector is one of
        /// them, may receive, poll and ACK here.
        var users: [[UInt8]] = []
        /// The owners' Ed25519 keys (what a carried registration's collector must equal).
        var ownerKeys: Set<[UInt8]> = []
        /// Users whose carried registrations were accepted here (the per-session limit), with
        /// when each was last renewed.
        var carried: [[UInt8]: Int64] = [:]
        var reassembler = Reassembler(maxPartial: 4)
        /// Registration nonces accepted here (a retransmitted REGISTER is answered again, not refused).
        var nonceKeys: Set<[UInt8]> = []
        init(id: UInt64, address: RelayPeer, secure: SecureSession, binding: ChannelBinding, prefix: AddressPrefix, nowMs: Int64) {
            self.id = id
            self.address = address
            self.secure = secure
            self.binding = binding
            self.prefix = prefix
            self.createdMs = nowMs
            self.lastHeardMs = nowMs
        }
    }

    public let identity: Identity
    public let limits: RelayLimits
    /// Where queues, attachments, nonces and (for a shared store) leases and send counters live.
    let store: any RelayStore
    private let logger: Logger
    private let now: @Sendable () -> Int64

    private var sessions: [UInt64: Session] = [:]
    /// Live direct registrations: user → sessions.
    private var userSessions: [[UInt8]: Set<UInt64>] = [:]
    /// Phones reachable through a hub: user → owner (persisted).
    private var attachments: [[UInt8]: (owner: [UInt8], expiresMs: Int64)] = [:]
    private var attachedTo: [[UInt8]: Set<[UInt8]>] = [:]
    /// Used registration nonces → expiry (persisted).
    private var nonces: [[UInt8]: Int64] = [:]
    private var queuedPerUser: [[UInt8]: Int] = [:]
    private var queuedTotal = 0
    /// Pushed/polled bundles (by bundle ID) not to offer again before the lease ends.
    private var leases: [[UInt8]: Int64] = [:]
    private var ipBuckets: BucketMap<AddressPrefix>
    private var helloBuckets: BucketMap<AddressPrefix>
    private var senderBuckets: BucketMap<[UInt8]>
    /// New messages accepted per address prefix (SEND), on top of the per-sender limit:
    /// keyless identities are free to make, so one network cannot multiply its hourly budget.
    private var sendIPBuckets: BucketMap<AddressPrefix>
    private var registrationBuckets: BucketMap<AddressPrefix>
    private var lastSweepMs: Int64 = 0
    /// Shared store: leases that ran out up to here have been looked at (``tick()``).
    private var leaseCheckedMs: Int64 = 0
    /// Shared store: when the queue counts were last re-read before a refusal.
    private var lastCountRefreshMs: Int64 = 0
    /// Shared store: notify key (``RelayPostgresStore/notifyKey(for:)``) → users registered
    /// or attached here, so a wake-up from another node finds who it is for.
    private var notifyUsers: [String: Set<[UInt8]>] = [:]
    /// Bytes buffered in all sessions' reassemblers (kept up to date on every change).
    private var reassemblyBytes = 0
    /// The same, per address prefix (its share of ``RelayLimits/maxReassemblyBytes``).
    private var reassemblyPerPrefix: [AddressPrefix: Int] = [:]
    /// Sessions per address prefix (its share of ``RelayLimits/maxSessions``).
    private var sessionsPerPrefix: [AddressPrefix: Int] = [:]
    /// Queued bundles per envelope sender (persisted in the queue's `sender` column).
    private var queuedPerSender: [[UInt8]: Int] = [:]
    /// Queued bundles per source prefix, for bundles queued since this start (the queue does
    /// not store addresses): bundle ID → (prefix, expiry), and the counts.
    private var queuedSource: [[UInt8]: (prefix: AddressPrefix, expiresMs: Int64)] = [:]
    private var queuedPerPrefix: [AddressPrefix: Int] = [:]
    /// The stateless HELLO cookie (Docs §2.1) and the HELLO rate that decides "under load".
    private var cookies: RelayCookie
    private var helloLoad = HelloLoad()
    public private(set) var metrics = RelayMetrics()

    /// Loads queue counts, attachments and the nonce cache from the store.
    public init(identity: Identity, store: any RelayStore, limits: RelayLimits, logger: Logger,
                now: @escaping @Sendable () -> Int64) throws {
        self.identity = identity
        self.store = store
        self.limits = limits
        self.logger = logger
        self.now = now
        let t = now()
        cookies = RelayCookie(nowMs: t)
        ipBuckets = BucketMap(capacity: Double(limits.packetsPerSecondPerIP * 2), perMs: Double(limits.packetsPerSecondPerIP) / 1000, maxKeys: 65_536)
        helloBuckets = BucketMap(capacity: Double(limits.hellosPerSecondPerIP * 2), perMs: Double(limits.hellosPerSecondPerIP) / 1000, maxKeys: 65_536)
        registrationBuckets = BucketMap(capacity: Double(limits.registrationsPerMinutePerIP * 5),
                                        perMs: Double(limits.registrationsPerMinutePerIP) / 60_000, maxKeys: 65_536)
        senderBuckets = BucketMap(capacity: Double(limits.messagesPerHour), perMs: Double(limits.messagesPerHour) / 3_600_000, maxKeys: 200_000)
        sendIPBuckets = BucketMap(capacity: Double(limits.sendsPerHourPerIP), perMs: Double(limits.sendsPerHourPerIP) / 3_600_000, maxKeys: 65_536)
        queuedPerUser = try store.countsByRecipient()
        queuedTotal = queuedPerUser.values.reduce(0, +)
        queuedPerSender = try store.countsBySender()
        attachments = try store.attachments(nowMs: t)
        for (user, a) in attachments { attachedTo[a.owner, default: []].insert(user) }
        nonces = try store.nonces(nowMs: t)
        leaseCheckedMs = t
        if store.isShared {
            for (user, a) in attachments { noteNotifyKey(user); noteNotifyKey(a.owner) }
        }
    }

    /// Remembers `user`'s notify key (shared stores only).
    private func noteNotifyKey(_ user: [UInt8]) {
        guard store.isShared else { return }
        notifyUsers[RelayPostgresStore.notifyKey(for: user), default: []].insert(user)
    }

    static func short(_ id: [UInt8]) -> String { Hex.encode(id.prefix(4)) }

    /// The key per-address limits use for `peer`.
    func prefix(of peer: RelayPeer) -> AddressPrefix { AddressPrefix(peer.remote, ipv6PrefixLength: limits.ipv6PrefixLength) }

    // MARK: Datagrams

    /// Counts a datagram the server dropped before the engine saw it.
    public func countDropped(oversized: Bool) {
        metrics.datagramsIn += 1
        if oversized { metrics.droppedOversized += 1 } else { metrics.droppedOverload += 1 }
    }

    /// Handles a batch of datagrams in one database transaction (one fsync for the batch —
    /// group commit) and returns what to send. Nothing is returned unless the transaction
    /// committed, so QUEUED still means durable; if the commit fails the batch's answers are
    /// dropped (clients retransmit) and the queue counters are reloaded from the database.
    public func handleBatch(_ datagrams: [(bytes: [UInt8], peer: RelayPeer)]) -> [Output] {
        do {
            return try store.transaction {
                var out: [Output] = []
                for d in datagrams { out += handle(d.bytes, from: d.peer) }
                return out
            }
        } catch {
            logger.error("store: a batch of \(datagrams.count) datagrams did not commit: \(error)")
            if let counts = try? store.countsByRecipient() {
                queuedPerUser = counts
                queuedTotal = counts.values.reduce(0, +)
            }
            if let senders = try? store.countsBySender() { queuedPerSender = senders }
            return []
        }
    }

    /// Handles one UDP datagram; returns what to send.
    public func handle(_ datagram: [UInt8], from address: SocketAddress) -> [Output] {
        handle(datagram, from: .udp(address))
    }

    /// Handles one packet (a UDP datagram or a binary WebSocket message); returns what to send.
    public func handle(_ datagram: [UInt8], from address: RelayPeer) -> [Output] {
        let t = now()
        metrics.datagramsIn += 1
        guard datagram.count <= RelayPacket.maxDatagramLength else { metrics.droppedOversized += 1; return [] }
        let ip = prefix(of: address)
        if ipBuckets.take(ip, nowMs: t) != nil { metrics.droppedRateLimited += 1; return [] }
        let packet: RelayPacket
        do { packet = try RelayPacket(parsing: datagram) } catch { metrics.droppedMalformed += 1; return [] }
        var out: [Output] = []
        if packet.type == .hello {
            handleHello(packet, from: address, ip: ip, nowMs: t, out: &out)
        } else if packet.type.isSealed {
            handleSealed(packet, from: address, nowMs: t, out: &out)
        } else {
            metrics.droppedMalformed += 1
        }
        metrics.datagramsOut += UInt64(out.count)
        return out
    }

    /// Whether HELLOs must carry a cookie now (Docs §2.1): more than
    /// ``RelayLimits/cookieHellosPerSecond`` HELLOs in the current or the previous second
    /// (0: always), or half of the session table in use.
    public func isUnderLoad(nowMs t: Int64) -> Bool {
        limits.cookieHellosPerSecond == 0 || helloLoad.rate(nowMs: t) > limits.cookieHellosPerSecond
            || sessions.count >= limits.maxSessions / 2
    }

    private func handleHello(_ packet: RelayPacket, from address: RelayPeer, ip: AddressPrefix, nowMs t: Int64, out: inout [Output]) {
        guard let hello = try? Hello(parsing: packet.payload) else { metrics.droppedMalformed += 1; return }
        if helloBuckets.take(ip, nowMs: t) != nil { metrics.droppedRateLimited += 1; return }
        helloLoad.count(nowMs: t)
        // A UDP source address proves nothing; under load a HELLO must first show that it
        // receives our packets (a cookie for its address). The answer is stateless, unsigned
        // and a quarter of the HELLO's size. TCP+TLS already proved a WebSocket peer's address.
        if case .udp(let remote) = address, isUnderLoad(nowMs: t) {
            let input = AddressPrefix.cookieInput(remote)
            if let c = hello.cookie, cookies.verify(c, for: input, nowMs: t) {
                metrics.cookiesAccepted += 1
            } else {
                let reply = CookieReply(clientKey: hello.clientKey, cookie: cookies.cookie(for: input, nowMs: t))
                guard let bytes = try? RelayPacket(type: .cookieReply, sessionID: 0, counter: 0, payload: reply.encoded).encoded() else { return }
                metrics.cookiesSent += 1
                out.append(Output(peer: address, bytes: bytes))
                return
            }
        }
        if sessions.count >= limits.maxSessions { sweepSessions(nowMs: t) }
        guard sessions.count < limits.maxSessions else { metrics.droppedOverload += 1; return }
        // One network may hold only its share of the session table.
        guard sessionsPerPrefix[ip, default: 0] < limits.maxSessionsPerPrefix else { metrics.droppedPrefixShare += 1; return }
        var id: UInt64 = 0
        while id == 0 || sessions[id] != nil { id = UInt64.random(in: 1...UInt64.max) }
        let eph = EphemeralKX.generate()
        guard let secure = try? SecureSession(side: .relay, sessionID: id, ours: eph, theirs: hello.clientKey) else {
            metrics.droppedMalformed += 1
            return
        }
        let binding = ChannelBinding(sessionID: id, clientKey: hello.clientKey, relayEphemeralKey: eph.publicKey)
        sessions[id] = Session(id: id, address: address, secure: secure, binding: binding, prefix: ip, nowMs: t)
        sessionsPerPrefix[ip, default: 0] += 1
        let reply = HelloReply.make(sessionID: id, clientKey: hello.clientKey, relayEphemeralKey: eph.publicKey, relay: identity)
        guard let bytes = try? RelayPacket(type: .helloReply, sessionID: id, counter: 0, payload: reply.encoded).encoded() else { return }
        metrics.handshakes += 1
        out.append(Output(peer: address, bytes: bytes))
    }

    private func handleSealed(_ packet: RelayPacket, from address: RelayPeer, nowMs t: Int64, out: inout [Output]) {
        guard let session = sessions[packet.sessionID] else {
            // Unknown session (e.g. we restarted): tell the client to handshake again.
            // RESET is 24 bytes, smaller than any sealed packet, so it cannot amplify.
            metrics.droppedUnauthenticated += 1
            if let reset = try? RelayPacket(type: .reset, sessionID: packet.sessionID, counter: 0, payload: []).encoded() {
                metrics.resetsSent += 1
                out.append(Output(peer: address, bytes: reset))
            }
            return
        }
        let plaintext: [UInt8]
        do {
            plaintext = try session.secure.open(packet)
        } catch RelayProtocolError.replayed {
            metrics.droppedReplayed += 1
            return
        } catch {
            metrics.droppedUnauthenticated += 1
            return
        }
        session.authenticated = true
        session.lastHeardMs = t
        if session.address != address { session.address = address }   // NAT rebinding / roaming
        var type = packet.type
        var message = plaintext
        if type == .fragment {
            guard let f = try? Fragment(parsing: plaintext) else { metrics.droppedMalformed += 1; return }
            if reassemblyBytes + f.chunk.count > limits.maxReassemblyBytes { metrics.fragmentsDropped += 1; return }
            // One network's sessions may hold only their share of the reassembly budget.
            if reassemblyPerPrefix[session.prefix, default: 0] + f.chunk.count > limits.maxReassemblyBytesPerPrefix {
                metrics.fragmentsDropped += 1
                return
            }
            let (droppedBefore, bytesBefore) = (session.reassembler.dropped, session.reassembler.bufferedBytes)
            let whole = session.reassembler.add(f, nowMs: t)
            metrics.fragmentsDropped += UInt64(session.reassembler.dropped - droppedBefore)
            chargeReassembly(session, session.reassembler.bufferedBytes - bytesBefore)
            guard let whole else { return }
            (type, message) = whole
        }
        switch type {
        case .register: handleRegister(message, session: session, nowMs: t, out: &out)
        case .send: handleSend(message, session: session, nowMs: t, out: &out)
        case .poll: handlePoll(session: session, nowMs: t, out: &out)
        case .ack: handleAck(message, session: session, nowMs: t, out: &out)
        case .ping:
            // The PING's payload, then our clock: clients with no clock of their own worth
            // trusting learn the time from the relay they pinned (Docs/relay-protocol.md §4).
            var w = ByteWriter(capacity: message.count + 8)
            w.raw(message)
            w.u64(UInt64(max(0, t)))
            reply(.pong, w.bytes, to: session, out: &out)
        case .pong: break
        default: metrics.droppedMalformed += 1
        }
    }


    private func reply(_ type: RelayPacketType, _ message: [UInt8], to session: Session, out: inout [Output]) {
        do {
            for (t, plaintext) in try Fragment.split(type: type, message: message, fragmentID: UInt32.random(in: 0...UInt32.max)) {
                out.append(Output(peer: session.address, bytes: try session.secure.seal(t, plaintext)))
            }
        } catch {
            logger.error("cannot seal \(type) for session: \(error)")
        }
    }

    private func error(_ code: RelayErrorCode, _ text: String, ref: [UInt8]? = nil, retryAfterMs: Int64 = 0, to session: Session, out: inout [Output]) {
        let notice = RelayErrorNotice(code: code, reference: ref ?? [UInt8](repeating: 0, count: 16),
                                      retryAfterMs: UInt32(clamping: max(0, retryAfterMs)), text: text)
        reply(.error, notice.encoded, to: session, out: &out)
    }

    // MARK: Registration

    /// Whether one more distinct user may register. A phone attached through its hub is in
    /// both maps, so the cheap sum is only an upper bound; the exact count is taken only near
    /// the limit.
    private var hasRoomForAnotherUser: Bool {
        if userSessions.count + attachments.count < limits.maxRegistrations { return true }
        let attachedOnly = attachments.keys.reduce(0) { $0 + (userSessions[$1] == nil ? 1 : 0) }
        return userSessions.count + attachedOnly < limits.maxRegistrations
    }

    private func handleRegister(_ message: [UInt8], session: Session, nowMs t: Int64, out: inout [Output]) {
        if RegisterRequest.isVersion1(message) {
            // v1 registrations were bearer tokens. Answer with an ERROR a v1 client can parse
            // and show (it could not parse the new REGISTERED statuses).
            let n = UInt64(message[0])
            metrics.registrationsRefused += n
            metrics.registrationsRefusedByReason["v1", default: 0] += n
            logger.notice("refused a v1 REGISTER (\(n) registrations)")
            error(.malformed, RelayProtocolError.registrationV1Text, to: session, out: &out)
            return
        }
        guard let request = try? RegisterRequest(parsing: message) else {
            error(.malformed, "REGISTER could not be parsed", to: session, out: &out)
            return
        }
        var results: [(userID: [UInt8], status: RegistrationStatus)] = []
        var newlyReachable: [[UInt8]] = []
        for reg in request.registrations {
            let user = reg.userID
            let status = register(reg, user: user, session: session, nowMs: t)
            results.append((user, status))
            if status == .accepted {
                metrics.registrationsAccepted += 1
                newlyReachable.append(user)
            } else {
                metrics.registrationsRefused += 1
                metrics.registrationsRefusedByReason[status.metricReason, default: 0] += 1
                logger.info("registration of \(Self.short(user)) refused: \(status)")
            }
        }
        reply(.registered, RegisteredResult(results).encoded, to: session, out: &out)
        // Registered clients get their queued messages at once.
        for user in newlyReachable { pushQueued(for: user, to: session, nowMs: t, out: &out) }
    }

    /// Checks and records one registration. The binding checks come before the replay cache,
    /// so a registration refused here (e.g. a captured carried registration presented on an
    /// attacker's session) does not use up its nonce: its genuine hub can still carry it.
    private func register(_ reg: Registration, user: [UInt8], session: Session, nowMs t: Int64) -> RegistrationStatus {
        guard reg.verifySignature(relaySigningKey: identity.signingKey) else { return .badSignature }
        guard abs(reg.timestampMs - t) <= limits.registrationWindowMs else { return .staleTimestamp }
        var collector: [UInt8]?
        switch reg.kind {
        case .owner:
            guard constantTimeEqual(reg.binding, session.binding.bytes) else { return .wrongChannel }
        case .carried:
            guard reg.untilMs > t, reg.untilMs - reg.timestampMs <= Registration.maxCarriedLifetimeMs else { return .badUntil }
            guard session.ownerKeys.contains(reg.binding) else { return .collectorMismatch }
            collector = Identity.userID(forSigningKey: reg.binding)
        }
        let nonceKey = Hash.sha256(reg.userSigningKey + reg.nonce)
        if session.nonceKeys.contains(nonceKey) { return .accepted }   // a retransmitted REGISTER
        if let expiry = nonces[nonceKey], expiry > t { return .replayed }
        let already = collector == nil ? session.users.contains(user) : session.carried[user] != nil
        if !already {
            guard registrationBuckets.take(prefix(of: session.address), nowMs: t) == nil else { return .tooManyRegistrations }
            if session.users.count + session.carried.count >= limits.maxRegistrationsPerSession, collector != nil {
                makeRoomForCarried(on: session, nowMs: t)
            }
            guard session.users.count + session.carried.count < limits.maxRegistrationsPerSession else { return .tooManyRegistrations }
            guard hasRoomForAnotherUser || userSessions[user] != nil || attachments[user] != nil else { return .tooManyRegistrations }
        }
        // Remember the nonce for the whole window on both sides of the timestamp.
        let expiry = reg.timestampMs + limits.registrationWindowMs + 1
        let attachmentExpiry = min(reg.untilMs, t + limits.attachmentTTLMs)
        do {
            // The store is the arbiter: with a shared store another node may have used this
            // nonce (a registration replayed to another node of the cluster).
            guard try store.claimNonce(nonceKey, expiresMs: expiry, nowMs: t) else {
                nonces[nonceKey] = expiry
                return .replayed
            }
            if let collector { try store.saveAttachment(user: user, owner: collector, expiresMs: attachmentExpiry) }
        } catch {
            logger.error("store: cannot record a registration: \(error)")
            return .tooManyRegistrations
        }
        nonces[nonceKey] = expiry
        session.nonceKeys.insert(nonceKey)
        if let collector {
            if let old = attachments[user] { attachedTo[old.owner]?.remove(user) }
            attachments[user] = (collector, attachmentExpiry)
            attachedTo[collector, default: []].insert(user)
            session.carried[user] = t
            noteNotifyKey(user)
        } else if !already {
            session.users.append(user)
            session.ownerKeys.insert(reg.userSigningKey)
            userSessions[user, default: []].insert(session.id)
            noteNotifyKey(user)
            if store.isShared { loadSharedAttachments(ownedBy: user, nowMs: t) }
        }
        return .accepted
    }

    /// Frees the place of the carried registration renewed longest ago, if that was at least
    /// ``RelayLimits/carriedIdleMs`` ago, and of any whose permission ended or moved to
    /// another hub. An evicted phone's permission ends with it: its mail stays queued here
    /// until the phone registers again (through any hub, or on its own).
    private func makeRoomForCarried(on session: Session, nowMs t: Int64) {
        let owners = Set(session.users)
        for user in session.carried.keys {
            if let a = attachments[user], a.expiresMs > t, owners.contains(a.owner) { continue }
            session.carried[user] = nil
        }
        guard session.users.count + session.carried.count >= limits.maxRegistrationsPerSession,
              let (user, renewed) = session.carried.min(by: { $0.value < $1.value }),
              t - renewed >= limits.carriedIdleMs else { return }
        session.carried[user] = nil
        if let a = attachments[user] {
            attachments[user] = nil
            attachedTo[a.owner]?.remove(user)
            do { try store.saveAttachment(user: user, owner: a.owner, expiresMs: t) } catch {
                logger.error("store: cannot end an evicted attachment: \(error)")
            }
        }
        metrics.carriedRegistrationsEvicted += 1
        logger.info("carried registration of \(Self.short(user)) not renewed for \((t - renewed) / 1000) s; its place went to a newcomer")
    }

    /// Shared store: phones a hub's carried registrations attached on any node become
    /// reachable through the hub here too.
    private func loadSharedAttachments(ownedBy owner: [UInt8], nowMs t: Int64) {
        guard let attached = try? store.attachments(ownedBy: owner, nowMs: t) else { return }
        for (user, expiry) in attached {
            if let old = attachments[user], old.owner != owner { attachedTo[old.owner]?.remove(user) }
            attachments[user] = (owner, expiry)
            attachedTo[owner, default: []].insert(user)
            noteNotifyKey(user)
        }
    }

    /// Users this session may receive and acknowledge for: its authenticated owners, and the
    /// users whose unexpired collector permission names one of them.
    private func reachableUsers(of session: Session, nowMs t: Int64) -> [[UInt8]] {
        var set = Set(session.users)
        for u in session.users {
            for a in attachedTo[u] ?? [] where (attachments[a]?.expiresMs ?? 0) > t { set.insert(a) }
        }
        return Array(set)
    }

    /// The live session to push to for `user`: its own (a direct registration) before its
    /// hub's — a collector acknowledges for the user and its acknowledgement deletes — and
    /// of either, the most recently heard (a hub that reconnected is fresher than the session
    /// it left behind).
    private func session(reaching user: [UInt8], nowMs t: Int64) -> Session? {
        func freshest(_ ids: Set<UInt64>) -> Session? {
            ids.compactMap { sessions[$0] }.filter { t - $0.lastHeardMs < limits.staleAfterMs }.max { $0.lastHeardMs < $1.lastHeardMs }
        }
        if let own = freshest(userSessions[user] ?? []) { return own }
        guard let a = attachments[user], a.expiresMs > t else { return nil }
        return freshest(userSessions[a.owner] ?? [])
    }

    // MARK: Send

    /// What the queue holds under a bundle ID, compared with a newly sent bundle.
    enum Held {
        case nothing
        /// The same envelope bytes (the hop header may differ): a retransmission.
        case same
        /// Another envelope under this bundle ID: only its sender's key can make one.
        case different
    }

    /// Compares a sent bundle with what is queued under its bundle ID. Envelopes are compared
    /// byte for byte after the 35-byte hop header, which every hub rewrites.
    private func held(_ bundleID: [UInt8], comparedWith message: [UInt8]) throws -> Held {
        guard let queued = try store.bundle(bundleID) else { return .nothing }
        return YaokWire.Bundle.sameEnvelope(queued, message) ? .same : .different
    }

    private func handleSend(_ message: [UInt8], session: Session, nowMs t: Int64, out: inout [Output]) {
        // The reference of any ERROR: the bundle ID read from the bytes as sent, which is how
        // the client matches the answer to its request (even for bytes that do not parse).
        let ref = BundleID.of(bundle: message)
        func refuse(_ code: RelayErrorCode, _ reason: String, _ text: String, retry: Int64 = 0) {
            metrics.sendsRefused[reason, default: 0] += 1
            error(code, text, ref: ref, retryAfterMs: retry, to: session, out: &out)
        }
        guard !session.users.isEmpty else { return refuse(.notRegistered, "not_registered", "register a user before sending") }
        let bundle: YaokWire.Bundle
        do { bundle = try YaokWire.Bundle(parsing: message) } catch {
            return refuse(.malformed, "malformed", "bundle does not parse: \(error)")
        }
        let envelope = bundle.envelope
        guard envelope.verifySignature() else { return refuse(.badSignature, "bad_signature", "the envelope's sender signature does not verify") }
        // The signature binds the sender's key, so from here the bundle ID is the sender's own.
        let id = envelope.bundleID
        // Judged by its age (a version-2 hop header's) and by the relay's clock, which is true
        // time (Docs/protocol.md §2.2).
        let judgement: EnvelopeLifetime.Judgement
        do {
            judgement = try limits.lifetime.judge(envelope, claimedAgeMs: bundle.hop.ageMs, trueTimeMs: t)
        } catch {
            switch error {
            case .expired: return refuse(.expired, "expired", "the envelope has expired")
            case .createdInFuture(let ahead, let allowed):
                return refuse(.createdInFuture, "created_in_future",
                              "the envelope was created \((ahead + 999) / 1000) s in the future; the relay allows a sender's clock to lead by \(allowed / 1000) s")
            case .lifetimeTooLong(let life, let max):
                return refuse(.lifetimeTooLong, "lifetime_too_long",
                              "the envelope lives \(life / 1000) s from creation to expiry; the relay accepts at most \(max / 1000) s")
            }
        }
        do {
            // Delivered already (its ACK came before this copy): a duplicate, never queued
            // again nor charged (a node resumed after a freeze, a hub's retry).
            if try store.isDelivered(id) {
                metrics.sendsDuplicate += 1
                reply(.queued, QueuedNotice(bundleID: id, status: .duplicate).encoded, to: session, out: &out)
                return
            }
            switch try held(id, comparedWith: message) {
            case .nothing: break
            case .same:
                metrics.sendsDuplicate += 1
                reply(.queued, QueuedNotice(bundleID: id, status: .duplicate).encoded, to: session, out: &out)
                return
            case .different:
                // The queued one is kept and stays deliverable; only its sender could have signed this one.
                logger.info("sender \(Self.short(envelope.senderUserID)) sent a different envelope under queued bundle \(Self.short(id)); refused")
                return refuse(.conflict, "conflict", "the relay holds a different envelope with this bundle ID (same sender and message ID); it keeps the first")
            }
        } catch {
            logger.error("store: lookup failed: \(error)")
            return refuse(.internalError, "internal", "storage unavailable; try later", retry: 5_000)
        }
        let sender = envelope.senderUserID
        let source = prefix(of: session.address)
        let recipient = envelope.recipientUserID
        if store.isShared, queuedPerUser[recipient, default: 0] >= limits.maxQueuedPerUser || queuedTotal >= limits.maxQueuedTotal
            || queuedPerSender[sender, default: 0] >= limits.maxQueuedPerSender {
            // Other nodes' ACKs do not reach these counts until the next refresh: re-read them
            // before refusing (at most once a second).
            refreshSharedCounts(nowMs: t)
        }
        guard queuedPerUser[recipient, default: 0] < limits.maxQueuedPerUser else {
            return refuse(.recipientQueueFull, "recipient_full", "the recipient already has \(limits.maxQueuedPerUser) queued messages", retry: 3_600_000)
        }
        guard queuedTotal < limits.maxQueuedTotal else {
            return refuse(.relayFull, "relay_full", "the relay holds its maximum of \(limits.maxQueuedTotal) messages", retry: 3_600_000)
        }
        // Shares of the total, so one sender or one network cannot fill it for everyone.
        guard queuedPerSender[sender, default: 0] < limits.maxQueuedPerSender else {
            return refuse(.relayFull, "sender_share", "this sender holds its share (\(limits.maxQueuedPerSender)) of the relay's queue", retry: 3_600_000)
        }
        guard queuedPerPrefix[source, default: 0] < limits.maxQueuedPerPrefix else {
            logger.notice("an address prefix holds its share of the queue")
            return refuse(.relayFull, "prefix_share", "this address prefix holds its share (\(limits.maxQueuedPerPrefix)) of the relay's queue", retry: 3_600_000)
        }
        // Charged last: only a new message that would be queued counts against the hourly
        // budgets, not a refused one or a copy sent again.
        if let wait = sendIPBuckets.take(source, nowMs: t) {
            logger.notice("an address exceeded \(limits.sendsPerHourPerIP) messages per hour")
            return refuse(.rateLimited, "rate_limited_ip",
                          "rate limit: \(limits.sendsPerHourPerIP) messages per hour from one address; retry in \((wait + 999) / 1000) s", retry: wait)
        }
        let senderWait: Int64?
        if store.isShared {
            // Counted in the shared store, so sending through several nodes does not multiply the budget.
            do { senderWait = try store.chargeSend(sender: sender, nowMs: t, limit: limits.messagesPerHour) } catch {
                logger.error("store: cannot count a send: \(error)")
                return refuse(.internalError, "internal", "storage unavailable; try later", retry: 5_000)
            }
        } else {
            senderWait = senderBuckets.take(sender, nowMs: t)
        }
        if let wait = senderWait {
            logger.notice("sender \(Self.short(sender)) rate limited")
            return refuse(.rateLimited, "rate_limited",
                          "rate limit: \(limits.messagesPerHour) messages per hour per sender; retry in \((wait + 999) / 1000) s", retry: wait)
        }
        let expires = t + min(judgement.remainingMs, limits.retentionMs)
        // Queued with a version-1 header, which every client reads: whoever it goes to knows
        // the relay's time (PONG), and judges its age from that (Docs/relay-protocol.md §4).
        let message = bundle.hop.ageMs == nil ? message : bundle.withAge(nil).encoded
        do {
            // The lookup above found nothing and this queue is serial, so the insert cannot
            // collide; if it does anyway, nothing is overwritten and the sender is told.
            guard try store.insert(bundleID: id, recipient: recipient, sender: sender, bundle: message, queuedMs: t, expiresMs: expires) else {
                logger.error("store: bundle \(Self.short(id)) appeared between lookup and insert")
                return refuse(.internalError, "internal", "storage changed under the request; try again", retry: 1_000)
            }
        } catch {
            logger.error("store: cannot queue \(Self.short(id)): \(error)")
            return refuse(.internalError, "internal", "storage unavailable; try later", retry: 5_000)
        }
        queuedPerUser[recipient, default: 0] += 1
        queuedTotal += 1
        queuedPerSender[sender, default: 0] += 1
        queuedSource[id] = (source, expires)
        queuedPerPrefix[source, default: 0] += 1
        var status = QueuedNotice.Status.queued
        if let target = self.session(reaching: recipient, nowMs: t) {
            leases[id] = t + limits.leaseMs
            _ = try? store.lease(id, untilMs: t + limits.leaseMs, nowMs: t)
            reply(.msg, message, to: target, out: &out)
            metrics.messagesDelivered += 1
            metrics.sendsPushed += 1
            status = .pushed
        } else {
            metrics.sendsQueued += 1
        }
        logger.debug("queued \(Self.short(id)) for \(Self.short(recipient)) (\(status))")
        reply(.queued, QueuedNotice(bundleID: id, status: status).encoded, to: session, out: &out)
    }

    /// Shared store: re-reads the queue counts (what other nodes queued and acknowledged),
    /// at most once a second.
    private func refreshSharedCounts(nowMs t: Int64) {
        guard t - lastCountRefreshMs >= 1_000 else { return }
        lastCountRefreshMs = t
        guard let counts = try? store.countsByRecipient(), let senders = try? store.countsBySender() else { return }
        queuedPerUser = counts
        queuedTotal = counts.values.reduce(0, +)
        queuedPerSender = senders
    }

    // MARK: Poll and ack

    /// Up to `limit` unleased bundle IDs for `users`, and how many are queued for them in all.
    private func unleased(for users: [[UInt8]], limit: Int, nowMs t: Int64) -> (ids: [[UInt8]], total: Int) {
        var ids: [[UInt8]] = []
        var total = 0
        for user in users {
            // A shared store's queue changes under us (other nodes queue and ACK): ask it.
            let n = queuedPerUser[user, default: 0]
            guard n > 0 || store.isShared else { continue }
            if !store.isShared { total += n }
            guard ids.count < limit || store.isShared else { continue }
            let candidates = (try? store.bundleIDs(for: user, nowMs: t, limit: limits.maxQueuedPerUser)) ?? []
            if store.isShared { total += candidates.count }
            for id in candidates where ids.count < limit {
                if let until = leases[id], until > t { continue }
                ids.append(id)
            }
        }
        return (ids, total)
    }

    private func deliver(_ ids: [[UInt8]], to session: Session, nowMs t: Int64, out: inout [Output]) -> Int {
        var sent = 0
        // Another node may hold a lease (a shared store): then it delivers that one, not us.
        for (id, bundle) in (try? store.leaseBundles(ids, untilMs: t + limits.leaseMs, nowMs: t)) ?? [] {
            leases[id] = t + limits.leaseMs
            reply(.msg, bundle, to: session, out: &out)
            metrics.messagesDelivered += 1
            sent += 1
        }
        return sent
    }

    private func pushQueued(for user: [UInt8], to session: Session, nowMs t: Int64, out: inout [Output]) {
        guard queuedPerUser[user, default: 0] > 0 || store.isShared else { return }
        _ = deliver(unleased(for: [user], limit: limits.pollBatch, nowMs: t).ids, to: session, nowMs: t, out: &out)
    }

    private func handlePoll(session: Session, nowMs t: Int64, out: inout [Output]) {
        guard !session.users.isEmpty else {
            error(.notRegistered, "register a user before polling", to: session, out: &out)
            return
        }
        metrics.polls += 1
        let (ids, total) = unleased(for: reachableUsers(of: session, nowMs: t), limit: limits.pollBatch, nowMs: t)
        let sent = deliver(ids, to: session, nowMs: t, out: &out)
        reply(.noMessages, PollDone(remaining: UInt32(clamping: max(0, total - sent))).encoded, to: session, out: &out)
    }

    private func handleAck(_ message: [UInt8], session: Session, nowMs t: Int64, out: inout [Output]) {
        guard let list = try? AckList(parsing: message) else {
            error(.malformed, "ACK could not be parsed", to: session, out: &out)
            return
        }
        let allowed = Set(reachableUsers(of: session, nowMs: t))
        // Two statements for the whole list on a shared store: who holds each, then the delete.
        let holders = (try? store.recipientsAndSenders(of: list.bundleIDs)) ?? [:]
        var permitted: [[UInt8]] = []
        var seen = Set<[UInt8]>()
        for id in list.bundleIDs where seen.insert(id).inserted {
            guard let held = holders[id] else { continue }
            // Only a session that may receive a message may delete it.
            guard allowed.contains(held.recipient) else {
                metrics.acksRefused += 1
                logger.notice("ACK of \(Self.short(id)) refused: its recipient is not reachable on this session")
                continue
            }
            permitted.append(id)
        }
        let deleted = (try? store.delete(permitted)) ?? []
        for id in permitted where deleted.contains(id) {
            guard let held = holders[id] else { continue }
            leases[id] = nil
            metrics.acks += 1
            queuedTotal = max(0, queuedTotal - 1)
            Self.decrement(&queuedPerUser, held.recipient)
            Self.decrement(&queuedPerSender, held.sender)
            if let source = queuedSource.removeValue(forKey: id) { Self.decrement(&queuedPerPrefix, source.prefix) }
        }
    }

    static func decrement<K: Hashable>(_ counts: inout [K: Int], _ key: K) {
        let left = counts[key, default: 1] - 1
        counts[key] = left > 0 ? left : nil
    }

    /// Adds `delta` bytes to the reassembly totals, global and for the session's prefix.
    private func chargeReassembly(_ session: Session, _ delta: Int) {
        guard delta != 0 else { return }
        reassemblyBytes += delta
        let left = reassemblyPerPrefix[session.prefix, default: 0] + delta
        reassemblyPerPrefix[session.prefix] = left > 0 ? left : nil
    }

    /// Forgets a session: its registrations' live routes, its reassembly and session shares.
    private func removeSession(_ id: UInt64, _ s: Session) {
        sessions[id] = nil
        chargeReassembly(s, -s.reassembler.bufferedBytes)
        Self.decrement(&sessionsPerPrefix, s.prefix)
        for u in s.users {
            userSessions[u]?.remove(id)
            if userSessions[u]?.isEmpty == true { userSessions[u] = nil }
        }
    }

    // MARK: Timers

    /// Periodic work: stale sessions, reassembly timeouts, leases, and (each minute) expiry.
    public func tick() {
        let t = now()
        sweepSessions(nowMs: t)
        leases = leases.filter { $0.value > t }
        if store.isShared, t - leaseCheckedMs >= 1_000 {
            // What another node leased and let run out (it died, or its client vanished):
            // deliver it to sessions here.
            let after = leaseCheckedMs
            leaseCheckedMs = t
            if let users = try? store.recipientsWithLeasesExpired(afterMs: after, untilMs: t), !users.isEmpty {
                pendingOutputs += wakeUp(users, nowMs: t)
            }
        }
        if t - lastSweepMs >= 60_000 {
            lastSweepMs = t
            sweepExpired(nowMs: t)
        }
    }

    private func sweepSessions(nowMs t: Int64) {
        for (id, s) in sessions {
            let stale = t - s.lastHeardMs >= limits.staleAfterMs
            let neverAuthenticated = !s.authenticated && t - s.createdMs >= limits.handshakeTimeoutMs
            if stale || neverAuthenticated {
                removeSession(id, s)
            } else {
                let before = s.reassembler.bufferedBytes
                s.reassembler.expire(nowMs: t)
                chargeReassembly(s, s.reassembler.bufferedBytes - before)
            }
        }
    }

    /// Deletes expired messages, attachments and nonces (also from the database).
    public func sweepExpired(nowMs t: Int64) {
        do {
            let n = try store.expire(nowMs: t)
            if n > 0 || store.isShared {   // a shared queue also changed through other nodes
                metrics.expired += UInt64(n)
                queuedPerUser = try store.countsByRecipient()
                queuedTotal = queuedPerUser.values.reduce(0, +)
                queuedPerSender = try store.countsBySender()
                if n > 0 { logger.info("expired \(n) queued messages") }
            }
        } catch {
            logger.error("store: expiry sweep failed: \(error)")
        }
        for (user, a) in attachments where a.expiresMs <= t {
            attachments[user] = nil
            attachedTo[a.owner]?.remove(user)
        }
        nonces = nonces.filter { $0.value > t }
        if store.isShared {
            // Keep notify keys only for users still registered or attached here.
            notifyUsers = [:]
            for user in userSessions.keys { noteNotifyKey(user) }
            for (user, a) in attachments { noteNotifyKey(user); noteNotifyKey(a.owner) }
        }
        for (id, source) in queuedSource where source.expiresMs <= t {
            queuedSource[id] = nil
            Self.decrement(&queuedPerPrefix, source.prefix)
        }
        senderBuckets.prune(nowMs: t)
        sendIPBuckets.prune(nowMs: t)
        registrationBuckets.prune(nowMs: t)
        ipBuckets.prune(nowMs: t)
        helloBuckets.prune(nowMs: t)
    }

    // MARK: Cluster wake-ups (shared store)

    /// Packets produced by ``tick()`` (deliveries after another node's lease ran out), for
    /// the server to send; taken by ``takePendingOutputs()``.
    private var pendingOutputs: [Output] = []

    /// Takes what ``tick()`` produced.
    public func takePendingOutputs() -> [Output] {
        defer { pendingOutputs = [] }
        return pendingOutputs
    }

    /// Other nodes queued bundles for users with these notify keys: push what is queued to
    /// the sessions here that reach them (leasing each bundle; one transaction). Unknown keys
    /// cost one dictionary lookup.
    public func handleNotified(_ keys: Set<String>) -> [Output] {
        let t = now()
        var users: [[UInt8]] = []
        for key in keys { users += notifyUsers[key] ?? [] }
        guard !users.isEmpty else { return [] }
        return wakeUp(users, nowMs: t)
    }

    /// After the notification connection was lost (notifications may have been missed):
    /// offers every user with a live session here what is queued for it.
    public func handleNotificationGap() -> [Output] {
        let t = now()
        var users = Set(userSessions.keys)
        for (user, a) in attachments where a.expiresMs > t && userSessions[a.owner] != nil { users.insert(user) }
        return wakeUp(Array(users), nowMs: t)
    }

    private func wakeUp(_ users: [[UInt8]], nowMs t: Int64) -> [Output] {
        var out: [Output] = []
        do {
            try store.transaction {
                for user in users {
                    guard let target = session(reaching: user, nowMs: t) else { continue }
                    pushQueued(for: user, to: target, nowMs: t, out: &out)
                }
            }
        } catch {
            logger.error("store: a cross-node wake-up did not commit: \(error)")
            return []
        }
        metrics.datagramsOut += UInt64(out.count)
        return out
    }

    /// Forgets the sessions bound to a closed stream connection (WebSocket): nothing can
    /// reach them any more, so a push must not pick them. UDP peers are never closed.
    public func peerClosed(_ peer: RelayPeer) {
        guard case .webSocket = peer else { return }
        for (id, s) in sessions where s.address == peer { removeSession(id, s) }
    }

    /// Metrics with current gauges.
    public func metricsSnapshot() -> RelayMetrics {
        var m = metrics
        m.sessions = sessions.count
        // Distinct users: a phone on its hub's session is both direct and attached.
        m.registeredUsers = userSessions.count + attachments.keys.reduce(0) { $0 + (userSessions[$1] == nil ? 1 : 0) }
        m.queued = queuedTotal
        return m
    }

    /// Bytes held in fragment reassembly (tests, status).
    public var reassemblyBufferedBytes: Int { reassemblyBytes }

    /// Messages queued for `user` (tests, status).
    public func queuedCount(for user: [UInt8]) -> Int { queuedPerUser[user, default: 0] }

    /// Messages queued that `sender` signed (tests, status).
    public func queuedCount(fromSender sender: [UInt8]) -> Int { queuedPerSender[sender, default: 0] }

    /// Messages queued since this start that came from `peer`'s address prefix (tests, status).
    public func queuedCount(fromPrefixOf peer: RelayPeer) -> Int { queuedPerPrefix[prefix(of: peer), default: 0] }

    /// Sessions opened from `peer`'s address prefix (tests, status).
    public func sessionCount(fromPrefixOf peer: RelayPeer) -> Int { sessionsPerPrefix[prefix(of: peer), default: 0] }
}

/// HELLOs counted in one-second windows: the rate that decides whether the relay is under
/// load (Docs §2.1). The larger of the current and the previous window counts, so the state
/// does not flap at each window's start.
struct HelloLoad {
    private var windowStartMs: Int64 = 0
    private var current = 0
    private var previous = 0

    private mutating func roll(nowMs t: Int64) {
        guard t - windowStartMs >= 1_000 else { return }
        previous = t - windowStartMs >= 2_000 ? 0 : current
        current = 0
        windowStartMs = t
    }

    mutating func count(nowMs t: Int64) {
        roll(nowMs: t)
        current += 1
    }

    mutating func rate(nowMs t: Int64) -> Int {
        roll(nowMs: t)
        return max(current, previous)
    }
}
