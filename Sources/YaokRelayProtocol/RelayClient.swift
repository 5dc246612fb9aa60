import Foundation
import YaokCrypto
import YaokPluginKit
import YaokWire

/// (One file of ~900 lines on purpose: one client thread owns the session, its retransmission
/// timers and fragment reassembly; they share state without locks.)
///
/// A reusable client for the relay: handshake with the pinned relay key, registration,
/// SEND with fragmentation and retransmission, pushed MSG, POLL, ACK, keep-alive PING and
/// automatic re-handshake. Used by the relay transport plugin (hub side) and by the `yaok`
/// endpoint acting as an internet-side user.
///
/// Event-driven core (``onEvent``, called on the client's thread) plus blocking helpers
/// (``connect(timeout:)``, ``registerAndWait(_:timeout:)``, ``sendAndWait(bundle:timeout:)``,
/// ``pollAndWait(timeout:)``) for command-line use and tests.
///
/// ACK only after the bundle is durably stored: the relay deletes on ACK, and re-offers
/// un-acknowledged messages after its lease (30 s) otherwise.
// @unchecked: state under `lock`, the event log under `condition`; onEvent and the provider set before start.
public final class RelayClient: @unchecked Sendable {
    /// Client settings.
    public struct Configuration: Sendable {
        public var relay: IPEndpoint
        /// The relay's Ed25519 key, pinned (from `yaok-relay key`).
        public var relaySigningKey: [UInt8]
        /// PING after this long without hearing from the relay.
        public var pingIntervalMs: Int64 = 60_000
        /// No answer this long after a PING: the relay is unreachable.
        public var pingTimeoutMs: Int64 = 15_000
        /// First HELLO retry delay; doubles up to ``maxHandshakeRetryMs``.
        public var handshakeRetryMs: Int64 = 1_000
        public var maxHandshakeRetryMs: Int64 = 30_000
        /// Resend an unanswered SEND / REGISTER after this long, at most ``maxAttempts`` times.
        public var requestRetryMs: Int64 = 2_000
        public var maxAttempts = 5
        /// Events kept for the blocking helpers (``waitFor(_:timeout:after:_:)``); 0 when only
        /// ``onEvent`` is used (the plugin), so received bundles are not held twice.
        public var eventHistory = 1_024
        /// SENDs awaiting QUEUED at most; more are refused at once.
        public var maxPendingSends = 1_024
        /// Wall clock in milliseconds (registration timestamps).
        public var clock: @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
        /// Opens the packet link to ``relay``; nil for UDP. The WebSocket-over-TLS link comes
        /// from module YaokRelayWebSocket (`RelayWebSocketLink.factory(url:spkiSHA256:)`).
        public var makeLink: (@Sendable (IPEndpoint) throws -> RelayLink)?
        /// How to call ``relay`` in status and events (default: its address).
        public var relayName: String?
        /// Further nodes of the same relay (same pinned ``relaySigningKey``), tried in order
        /// after ``relay`` when the node in use stops answering (failover, see ``nodes``).
        /// Empty: one node, retried for ever (the single-relay behaviour).
        public var alternates: [Node] = []
        /// With alternates: a node whose handshake brings no reply verified against the pinned
        /// key within this long (no answer, a key mismatch, a refused connection) is left.
        public var failoverHandshakeMs: Int64 = 5_000
        /// With alternates: a session that hears nothing this long while a request (SEND,
        /// POLL, REGISTER, PING) waits for its answer is left for the next node.
        public var failoverSilenceMs: Int64 = 6_000
        /// With alternates: each node's backoff after it failed (1 s doubling to 60 s, ±25 %).
        public var failoverBackoff = Backoff(baseMs: 1_000, capMs: 60_000)
        /// With alternates: a session up this long clears its node's backoff.
        public var stableAfterMs: Int64 = 60_000

        public init(relay: IPEndpoint, relaySigningKey: [UInt8]) {
            self.relay = relay
            self.relaySigningKey = relaySigningKey
        }

        /// Every node: ``relay`` first, then ``alternates``.
        public var nodes: [Node] {
            [Node(address: relay, makeLink: makeLink, name: relayName)] + alternates
        }
    }

    /// One node of the relay: its address and how to reach it.
    public struct Node: Sendable {
        public var address: IPEndpoint
        /// nil for UDP; the WebSocket link factory for `wss://`.
        public var makeLink: (@Sendable (IPEndpoint) throws -> RelayLink)?
        /// As the user gave it (the `wss://` URL, or the address).
        public var name: String

        public init(address: IPEndpoint, makeLink: (@Sendable (IPEndpoint) throws -> RelayLink)? = nil, name: String? = nil) {
            self.address = address
            self.makeLink = makeLink
            self.name = name ?? address.description
        }
    }

    /// A move from one node to another (failover).
    public struct NodeChange: Sendable, Equatable {
        /// Indices into ``Configuration/nodes`` (0 = ``Configuration/relay``).
        public let from: Int, to: Int
        public let fromName: String, toName: String
        /// Why the node `from` was left, e.g. "relay 127.0.0.1:7900 unreachable: Connection refused".
        public let reason: String
        /// Wall clock ms (``Configuration/clock``).
        public let atMs: Int64

        public var description: String {
            "node \(from + 1) (\(fromName)) stopped answering: \(reason); now node \(to + 1) (\(toName))"
        }
    }

    /// What the client reports.
    public enum Event: Sendable {
        /// The handshake succeeded (also after a re-handshake).
        case connected(sessionID: UInt64, relayKXKey: [UInt8])
        /// The session is gone (unreachable, relay reset, stopped). The client keeps retrying.
        case disconnected(reason: String)
        /// The relay's answer could not be trusted (e.g. key mismatch). The client keeps retrying.
        case handshakeFailed(RelayProtocolError)
        /// A registration's outcome.
        case registered(userID: [UInt8], status: RegistrationStatus)
        /// The relay durably holds a sent bundle.
        case queued(QueuedNotice)
        /// A send was refused (``RelayProtocolError/refused(_:)``) or not answered; the ID is
        /// the sent bundle's ``YaokCrypto/BundleID``.
        case sendFailed(bundleID: [UInt8], error: RelayProtocolError)
        /// A bundle for a registered user (pushed or polled), with its bundle ID (read from
        /// its bytes; the receiver still parses and verifies it). ACK that ID after storing it.
        case message(bundle: [UInt8], bundleID: [UInt8])
        /// End of a poll round.
        case pollDone(remaining: UInt32)
        /// An ERROR not tied to a send.
        case relayError(RelayErrorNotice)
        /// The node in use stopped answering; the client now handshakes with another one
        /// (``Configuration/alternates``). Reported before that node's ``connected(sessionID:relayKXKey:)``.
        case nodeChanged(NodeChange)
        /// The relay's clock, measured from a PONG as SNTP does: relay time − our clock, and
        /// the round trip it came with (Docs/relay-protocol.md §4, PING).
        case relayTime(offsetMs: Int64, roundTripMs: Int64)
    }

    /// Counters for status.
    public struct Counters: Sendable, Equatable {
        public var packetsIn: UInt64 = 0, packetsOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        public var dropped: UInt64 = 0, handshakes: UInt64 = 0, sent: UInt64 = 0, received: UInt64 = 0, acked: UInt64 = 0
        /// RESETs for the current session (each starts at most one handshake beside it).
        public var resets: UInt64 = 0
    }

    enum State {
        case stopped
        case handshaking(ephemeral: EphemeralKX, nextAttemptMs: Int64, backoff: Backoff)
        case connected(SecureSession)
    }

    struct PendingSend {
        let message: [UInt8]
        var attempts: Int
        var nextRetryMs: Int64
    }

    struct PendingRegister {
        let request: RegisterRequest
        var attempts: Int
        var nextRetryMs: Int64
    }

    public let configuration: Configuration
    /// Where events go. Set before ``start()``.
    public var onEvent: @Sendable (Event) -> Void = { _ in }
    /// Fresh registrations to send after every (re)connect, e.g. the hub's own owner
    /// registration signed for the new session's ``ChannelBinding`` (passed in).
    public var registrationProvider: (@Sendable (ChannelBinding) -> [Registration])?

    private let lock = NSLock()
    private let condition = NSCondition()
    private var state: State = .stopped
    /// A handshake run beside a live session after a RESET (see ``handle(_:)``).
    private var rehandshake: (ephemeral: EphemeralKX, nextAttemptMs: Int64, backoff: Backoff)?
    private var socket: RelayLink?
    /// The client's thread. ``stop()`` waits for it, so no event comes after `stop()` returns
    /// (a hub plugin is destroyed next, and the host's callback table with it).
    private var thread: JoinableThread?
    private var running = false
    /// Which start() the running thread belongs to (a stop() then start() ends the old one).
    private var generation = 0
    // Failover (only with alternates): the node in use, each node's backoff and retry time.
    private var nodeIndex = 0
    private var nodeBackoff: [Backoff] = []
    private var nodeRetryAtMs: [Int64] = []
    /// When the first HELLO to the node in use went out in this handshake (its window).
    private var handshakeStartedMs: Int64?
    /// When the current session came up (its node's backoff clears once it is stable).
    private var connectedSinceMs: Int64?
    /// The oldest request still waiting for any answer from the relay.
    private var unansweredSinceMs: Int64?
    private var lastChange: NodeChange?
    private var lastHeardMs: Int64 = 0
    private var pingSentMs: Int64?
    private var pendingSends: [[UInt8]: PendingSend] = [:]
    private var pendingRegisters: [PendingRegister] = []
    private var reassembler = Reassembler(maxPartial: 16)
    private var nextFragmentID: UInt32 = 1
    private var counters = Counters()
    private var lastErrorText: String?
    /// The relay's clock − ours, from the last PONG that carried it.
    private var clockOffsetMs: Int64?
    private var lastSyncMs: Int64?
    private var binding: ChannelBinding?
    /// The relay's last cookie for our address (Docs §2.1), repeated in HELLOs until connected.
    private var cookie: [UInt8]?
    /// Recent events for the blocking helpers (bounded).
    private var eventLog: [(seq: Int, event: Event)] = []
    private var eventSeq = 0

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.nextFragmentID = UInt32.random(in: 1...UInt32.max / 2)
    }

    deinit { stop() }

    // MARK: Lifecycle

    /// Opens the socket and starts handshaking in the background. Returns at once.
    public func start() throws {
        guard !lock.withLock({ running }) else { return }
        // The first node that opens (with alternates, one that cannot, e.g. a name that does
        // not resolve, is skipped like a node that does not answer).
        let nodes = configuration.nodes
        var opened: (index: Int, link: RelayLink)?
        var firstError: Error?
        var skipped: [(Int, String)] = []
        for (i, node) in nodes.enumerated() {
            do {
                opened = (i, try Self.open(node))
                break
            } catch {
                if nodes.count == 1 { throw error }
                firstError = firstError ?? error
                skipped.append((i, "\(error)"))
            }
        }
        guard let opened else { throw firstError ?? RelayProtocolError.notConnected }
        let now = configuration.clock()
        let gen: Int = lock.withLock {
            socket = opened.link
            running = true
            generation += 1
            nodeIndex = opened.index
            nodeBackoff = Array(repeating: configuration.failoverBackoff, count: nodes.count)
            nodeRetryAtMs = Array(repeating: 0, count: nodes.count)
            for (i, _) in skipped { nodeRetryAtMs[i] = now + nodeBackoff[i].nextDelayMs() }
            handshakeStartedMs = nil
            connectedSinceMs = nil
            unansweredSinceMs = nil
            state = .handshaking(ephemeral: .generate(), nextAttemptMs: 0, backoff: handshakeBackoff)
            return generation
        }
        if let (i, reason) = skipped.last, opened.index != i {
            let change = NodeChange(from: i, to: opened.index, fromName: nodes[i].name, toName: nodes[opened.index].name,
                                    reason: reason, atMs: now)
            lock.withLock { lastChange = change }
            emit(.nodeChanged(change))
        }
        let t = JoinableThread(name: "yaok-relay-client") { [weak self] in self?.run(gen) }
        lock.withLock { thread = t }
        t.start()
    }

    /// Stops the thread (waiting up to 1.5 s for it to return, unless called on it, e.g. from
    /// ``onEvent``) and closes the socket. Reports ``Event/disconnected(reason:)`` if connected.
    public func stop() {
        let (s, wasConnected, runner): (RelayLink?, Bool, JoinableThread?) = lock.withLock {
            guard running else { return (nil, false, nil) }
            running = false
            var connected = false
            if case .connected = state { connected = true }
            state = .stopped
            rehandshake = nil
            let s = socket
            socket = nil
            return (s, connected, thread)
        }
        guard let s else { return }
        // The thread sees `running` false within one receive timeout (100 ms), or once the
        // event it is handling returns; the link closes after that, not under its receive.
        runner?.join(timeout: 1.5)
        s.close()
        if wasConnected { emit(.disconnected(reason: "client stopped")) }
        failAllPending("client stopped")
    }

    static func open(_ node: Node) throws -> RelayLink {
        try node.makeLink?(node.address) ?? ConnectedDatagramSocket(to: node.address)
    }

    /// Whether alternates are configured (failover on).
    private var failover: Bool { !configuration.alternates.isEmpty }

    /// The node in use: its index in ``Configuration/nodes`` and name.
    public var currentNode: (index: Int, name: String) {
        let i = lock.withLock { nodeIndex }
        return (i, configuration.nodes[i].name)
    }

    /// The last move between nodes, if any.
    public var lastNodeChange: NodeChange? { lock.withLock { lastChange } }

    /// Whether a session with the relay is up.
    public var isConnected: Bool { lock.withLock { if case .connected = state { return true }; return false } }
    public var counterSnapshot: Counters { lock.withLock { counters } }
    public var lastError: String? { lock.withLock { lastErrorText } }
    /// When the last poll round finished (wall clock ms).
    public var lastSync: Int64? { lock.withLock { lastSyncMs } }
    /// The current session's channel binding (what an owner ``Registration`` signs); nil
    /// before the first handshake.
    public var channelBinding: ChannelBinding? { lock.withLock { binding } }
    /// The relay's clock − ours, ms, once a PONG has told it (nil before, or from a relay that
    /// does not send its time).
    public var relayClockOffsetMs: Int64? { lock.withLock { clockOffsetMs } }
    /// Sends waiting for QUEUED.
    public var outstandingSends: Int { lock.withLock { pendingSends.count } }

    // MARK: Requests

    /// Sends REGISTER (retransmitted until REGISTERED arrives). Registrations are only
    /// accepted once by the relay, so make fresh ones per call.
    public func register(_ registrations: [Registration]) throws {
        for start in stride(from: 0, to: registrations.count, by: RegisterRequest.maxCount) {
            let req = RegisterRequest(Array(registrations[start..<min(registrations.count, start + RegisterRequest.maxCount)]))
            let now = configuration.clock()
            try lock.withLock {
                guard case .connected(let session) = state else { throw RelayProtocolError.notConnected }
                pendingRegisters.append(PendingRegister(request: req, attempts: 1, nextRetryMs: now + configuration.requestRetryMs))
                try transmit(.register, req.encoded, session)
            }
        }
    }

    /// Sends a bundle (hop header + envelope). Answered by ``Event/queued(_:)`` or
    /// ``Event/sendFailed(bundleID:error:)``, matched by the bundle's ``YaokCrypto/BundleID``.
    public func send(bundle: [UInt8]) throws {
        guard let id = BundleID.of(bundle: bundle) else { throw RelayProtocolError.invalid("bundle too short to carry a bundle ID") }
        guard bundle.count <= Fragment.maxMessageLength else {
            throw RelayProtocolError.oversized(what: "bundle", size: bundle.count, limit: Fragment.maxMessageLength)
        }
        let now = configuration.clock()
        try lock.withLock {
            guard case .connected(let session) = state else { throw RelayProtocolError.notConnected }
            guard pendingSends.count < configuration.maxPendingSends || pendingSends[id] != nil else {
                throw RelayProtocolError.invalid("\(pendingSends.count) sends already wait for the relay's answer")
            }
            pendingSends[id] = PendingSend(message: bundle, attempts: 1, nextRetryMs: now + configuration.requestRetryMs)
            try transmit(.send, bundle, session)
            counters.sent += 1
        }
    }

    /// Asks for queued messages (answered by MSGs, then ``Event/pollDone(remaining:)``).
    public func poll() throws {
        try lock.withLock {
            guard case .connected(let session) = state else { throw RelayProtocolError.notConnected }
            try transmit(.poll, [], session)
        }
    }

    /// Tells the relay these bundles (by bundle ID) are durably stored: it deletes them.
    public func ack(_ bundleIDs: [[UInt8]]) throws {
        try lock.withLock {
            guard case .connected(let session) = state else { throw RelayProtocolError.notConnected }
            for start in stride(from: 0, to: bundleIDs.count, by: AckList.maxCount) {
                try transmit(.ack, AckList(Array(bundleIDs[start..<min(bundleIDs.count, start + AckList.maxCount)])).encoded, session)
            }
            counters.acked += UInt64(bundleIDs.count)
        }
    }

    // MARK: Blocking helpers

    /// Starts (if needed) and waits for the handshake. Throws the handshake error (e.g.
    /// "relay key mismatch: expected …, got …") or a timeout.
    public func connect(timeout: TimeInterval = 10) throws {
        let mark = currentSeq()
        if !lock.withLock({ running }) { try start() }
        if isConnected { return }
        // With alternates one node's failure is not the end: wait for any node, and say what
        // went wrong last when none answered.
        let what = failover ? "a handshake with any of the \(configuration.nodes.count) relay nodes" : "the relay handshake"
        do {
            try waitFor(what, timeout: timeout, after: mark) { event -> Result<Void, RelayProtocolError>? in
                switch event {
                case .connected: return .success(())
                case .handshakeFailed(let e): return failover ? nil : .failure(e)
                default: return nil
                }
            }.get()
        } catch RelayProtocolError.timeout(let w) where failover {
            throw RelayProtocolError.timeout(w + (lastError.map { " (last error: \($0))" } ?? ""))
        }
    }

    /// Registers and waits for every result.
    public func registerAndWait(_ registrations: [Registration], timeout: TimeInterval = 10) throws -> [(userID: [UInt8], status: RegistrationStatus)] {
        let mark = currentSeq()
        try register(registrations)
        var results: [(userID: [UInt8], status: RegistrationStatus)] = []
        let wanted = registrations.count
        return try waitFor("REGISTERED", timeout: timeout, after: mark) { event in
            if case .registered(let id, let status) = event { results.append((id, status)) }
            return results.count >= wanted ? results : nil
        }
    }

    /// Sends a bundle and waits until the relay holds it; throws the relay's refusal.
    public func sendAndWait(bundle: [UInt8], timeout: TimeInterval = 15) throws -> QueuedNotice {
        guard let id = BundleID.of(bundle: bundle) else { throw RelayProtocolError.invalid("bundle too short to carry a bundle ID") }
        let mark = currentSeq()
        try send(bundle: bundle)
        return try waitFor("QUEUED", timeout: timeout, after: mark) { event -> Result<QueuedNotice, RelayProtocolError>? in
            switch event {
            case .queued(let q) where q.bundleID == id: return .success(q)
            case .sendFailed(let mid, let e) where mid == id: return .failure(e)
            default: return nil
            }
        }.get()
    }

    /// Polls once and returns the messages of that round (plus any pushed meanwhile).
    public func pollAndWait(timeout: TimeInterval = 10) throws -> [(bundle: [UInt8], bundleID: [UInt8])] {
        let mark = currentSeq()
        try poll()
        var got: [(bundle: [UInt8], bundleID: [UInt8])] = []
        return try waitFor("NO_MESSAGES", timeout: timeout, after: mark) { event in
            switch event {
            case .message(let b, let id): got.append((b, id)); return nil
            case .pollDone: return got
            default: return nil
            }
        }
    }

    /// Waits for the next pushed or polled message.
    public func nextMessage(timeout: TimeInterval = 10) throws -> (bundle: [UInt8], bundleID: [UInt8]) {
        try nextMessage(after: currentSeq(), timeout: timeout)
    }

    /// The event sequence number now; pass to ``nextMessage(after:timeout:)`` to not miss a message
    /// that arrives between an action and the wait.
    public func currentSeq() -> Int { condition.withLock { eventSeq } }

    public func nextMessage(after mark: Int, timeout: TimeInterval = 10) throws -> (bundle: [UInt8], bundleID: [UInt8]) {
        try waitFor("MSG", timeout: timeout, after: mark) { event in
            if case .message(let b, let id) = event { return (b, id) }
            return nil
        }
    }

    /// Waits for `count` messages logged after `mark` (pushed or polled), in arrival order.
    public func nextMessages(_ count: Int, after mark: Int, timeout: TimeInterval = 10) throws -> [(bundle: [UInt8], bundleID: [UInt8])] {
        var got: [(bundle: [UInt8], bundleID: [UInt8])] = []
        return try waitFor("\(count) MSGs", timeout: timeout, after: mark) { event in
            if case .message(let b, let id) = event { got.append((b, id)) }
            return got.count >= count ? got : nil
        }
    }

    /// Waits until `match` returns a value for an event logged after `mark`.
    public func waitFor<T>(_ what: String, timeout: TimeInterval, after mark: Int, _ match: (Event) -> T?) throws -> T {
        let deadline = Date().addingTimeInterval(timeout)
        var seen = mark
        condition.lock()
        defer { condition.unlock() }
        while true {
            for entry in eventLog where entry.seq > seen {
                seen = entry.seq
                if let v = match(entry.event) { return v }
            }
            guard condition.wait(until: deadline) else {
                for entry in eventLog where entry.seq > seen {
                    seen = entry.seq
                    if let v = match(entry.event) { return v }
                }
                throw RelayProtocolError.timeout(what)
            }
        }
    }

    // MARK: Internals

    private func emit(_ event: Event) {
        condition.withLock {
            eventSeq += 1
            let keep = configuration.eventHistory
            if keep > 0 {
                eventLog.append((eventSeq, event))
                if eventLog.count > keep { eventLog.removeFirst(eventLog.count - keep) }
            }
            condition.broadcast()
        }
        onEvent(event)
    }

    /// Seals (fragmenting if needed) and sends. Caller holds `lock`.
    private func transmit(_ type: RelayPacketType, _ message: [UInt8], _ session: SecureSession) throws {
        let fid = nextFragmentID
        nextFragmentID &+= 1
        switch type {
        case .send, .poll, .register, .ping: if unansweredSinceMs == nil { unansweredSinceMs = configuration.clock() }
        default: break
        }
        for (t, plaintext) in try Fragment.split(type: type, message: message, fragmentID: fid) {
            let datagram = try session.seal(t, plaintext)
            sendRaw(datagram)
        }
    }

    /// Caller holds `lock`.
    private func sendRaw(_ datagram: [UInt8]) {
        guard let socket else { return }
        if let e = socket.send(datagram) {
            lastErrorText = e
        } else {
            counters.packetsOut += 1
            counters.bytesOut += UInt64(datagram.count)
        }
    }

    private func failAllPending(_ reason: String) {
        let ids: [[UInt8]] = lock.withLock {
            let ids = Array(pendingSends.keys)
            pendingSends.removeAll()
            pendingRegisters.removeAll()
            return ids
        }
        for id in ids { emit(.sendFailed(bundleID: id, error: .timeout("QUEUED (\(reason))"))) }
    }

    private func run(_ gen: Int) {
        // A stop() followed by start() starts a new thread; this one then ends. A move to
        // another node swaps the link under this thread.
        while let s = lock.withLock({ running && generation == gen ? socket : nil }) {
            tick()
            let received = s.receive(timeoutMs: 100)
            // A packet or failure of a link already left (failover) means nothing.
            guard lock.withLock({ socket === s }) else { continue }
            switch received {
            case .packet(let d): handle(d)
            case .nothing: break
            case .failed(let error):
                // A relay that cannot be trusted (TLS pin mismatch) fails the handshake with
                // that error, so `connect` reports it instead of a timeout.
                let handshaking: Bool = lock.withLock {
                    if case .handshaking = state { return true }
                    return false
                }
                if error.isTrustFailure {
                    lock.withLock { lastErrorText = error.description }
                    if handshaking { emit(.handshakeFailed(error)) }
                }
                disconnect(error.description)
                // The node refused us (nobody listens, connection closed, TLS pin mismatch).
                if failover { moveOn(error.description) }
            }
        }
    }

    /// Failover: the node in use failed (`reason`). It backs off; the client moves to the next
    /// node in list order whose backoff has run out (or, if none, the one free soonest) and
    /// handshakes there. The session, if any, is already gone (``disconnect(_:)``).
    private func moveOn(_ reason: String) {
        let nodes = configuration.nodes
        let now = configuration.clock()
        let (from, candidates): (Int, [Int]) = lock.withLock {
            guard running else { return (nodeIndex, []) }
            nodeRetryAtMs[nodeIndex] = now + nodeBackoff[nodeIndex].nextDelayMs()
            let n = nodes.count
            let order = (1...n).map { (nodeIndex + $0) % n }
            let ready = order.filter { nodeRetryAtMs[$0] <= now }
            let later = order.filter { nodeRetryAtMs[$0] > now }.sorted { nodeRetryAtMs[$0] < nodeRetryAtMs[$1] }
            return (nodeIndex, ready + later)
        }
        for to in candidates {
            if to == from {
                // Every other node is further from being tried: this one again, after its backoff.
                lock.withLock {
                    guard running, nodeIndex == from else { return }
                    restartHandshake(at: nodeRetryAtMs[from])
                }
                return
            }
            let link: RelayLink
            do {
                link = try Self.open(nodes[to])
            } catch {
                lock.withLock { if nodeRetryAtMs.indices.contains(to) { nodeRetryAtMs[to] = now + nodeBackoff[to].nextDelayMs() } }
                continue
            }
            let change = NodeChange(from: from, to: to, fromName: nodes[from].name, toName: nodes[to].name, reason: reason, atMs: now)
            let old: RelayLink? = lock.withLock {
                guard running, nodeIndex == from else { return nil }
                let old = socket
                socket = link
                nodeIndex = to
                cookie = nil   // a cookie is one node's
                lastChange = change
                restartHandshake(at: nodeRetryAtMs[to])
                return old
            }
            guard let old else { link.close(); return }
            old.close()
            emit(.nodeChanged(change))
            return
        }
    }

    /// HELLO retries: ``Configuration/handshakeRetryMs`` doubling to ``Configuration/maxHandshakeRetryMs``.
    private var handshakeBackoff: Backoff {
        Backoff(baseMs: configuration.handshakeRetryMs, capMs: configuration.maxHandshakeRetryMs, jitter: false)
    }

    /// A fresh handshake with the node in use, its first HELLO not before `notBeforeMs`.
    /// Caller holds `lock`.
    private func restartHandshake(at notBeforeMs: Int64) {
        state = .handshaking(ephemeral: .generate(), nextAttemptMs: notBeforeMs, backoff: handshakeBackoff)
        rehandshake = nil
        pingSentMs = nil
        handshakeStartedMs = nil
        connectedSinceMs = nil
        unansweredSinceMs = nil
    }

    /// Drops the session (if any) and starts handshaking again.
    private func disconnect(_ reason: String) {
        let was: Bool = lock.withLock {
            lastErrorText = reason
            guard running else { return false }
            if case .connected = state {
                restartHandshake(at: 0)
                return true
            }
            return false
        }
        if was {
            emit(.disconnected(reason: reason))
            failAllPending(reason)
        }
    }

    private func tick() {
        let now = configuration.clock()
        var failed: [[UInt8]] = []
        var timedOut: String?
        var leave: String?
        lock.withLock {
            guard running else { return }
            switch state {
            case .stopped: return
            case .handshaking(let eph, let next, var backoff):
                if failover, let started = handshakeStartedMs, now - started >= configuration.failoverHandshakeMs {
                    leave = "no handshake verified against the pinned key in \(configuration.failoverHandshakeMs / 1000) s"
                        + (lastErrorText.map { " (last error: \($0))" } ?? "")
                    return
                }
                guard now >= next else { return }
                if handshakeStartedMs == nil { handshakeStartedMs = now }
                sendRaw(helloDatagram(eph))
                state = .handshaking(ephemeral: eph, nextAttemptMs: now + backoff.nextDelayMs(), backoff: backoff)
            case .connected(let session):
                if var r = rehandshake, now >= r.nextAttemptMs {
                    sendRaw(helloDatagram(r.ephemeral))
                    r.nextAttemptMs = now + r.backoff.nextDelayMs()
                    rehandshake = r
                }
                if let sent = pingSentMs, now - sent > configuration.pingTimeoutMs {
                    timedOut = "relay did not answer for \((now - lastHeardMs) / 1000) s"
                    return
                }
                if failover {
                    if let since = unansweredSinceMs, now - since >= configuration.failoverSilenceMs {
                        timedOut = "no answer to requests for \((now - since) / 1000) s"
                        return
                    }
                    if let up = connectedSinceMs, now - up >= configuration.stableAfterMs {
                        nodeBackoff[nodeIndex].reset()
                        connectedSinceMs = nil
                    }
                }
                if pingSentMs == nil, now - lastHeardMs >= configuration.pingIntervalMs {
                    pingSentMs = now
                    var w = ByteWriter()
                    w.u64(UInt64(bitPattern: now))
                    try? transmit(.ping, w.bytes, session)
                }
                for (id, var p) in pendingSends where now >= p.nextRetryMs {
                    if p.attempts >= configuration.maxAttempts {
                        pendingSends[id] = nil
                        failed.append(id)
                        continue
                    }
                    p.attempts += 1
                    p.nextRetryMs = now + configuration.requestRetryMs * Int64(p.attempts)
                    pendingSends[id] = p
                    try? transmit(.send, p.message, session)
                }
                for i in pendingRegisters.indices.reversed() where now >= pendingRegisters[i].nextRetryMs {
                    if pendingRegisters[i].attempts >= configuration.maxAttempts {
                        pendingRegisters.remove(at: i)
                        continue
                    }
                    pendingRegisters[i].attempts += 1
                    pendingRegisters[i].nextRetryMs = now + configuration.requestRetryMs
                    try? transmit(.register, pendingRegisters[i].request.encoded, session)
                }
            }
        }
        if let timedOut {
            disconnect(timedOut)
            if failover { moveOn(timedOut) }
        }
        if let leave { moveOn(leave) }
        for id in failed { emit(.sendFailed(bundleID: id, error: .timeout("QUEUED after \(configuration.maxAttempts) attempts"))) }
    }

    /// A HELLO for `eph`, with the relay's cookie if we hold one. Caller holds `lock`.
    private func helloDatagram(_ eph: EphemeralKX) -> [UInt8] {
        (try? RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: eph.publicKey, cookie: cookie).encoded).encoded()) ?? []
    }

    /// A COOKIE_REPLY answering our current HELLO: keep the cookie and send the HELLO again at
    /// once. A reply that does not echo our key was not made by whoever saw our HELLO: dropped.
    /// Caller holds `lock`.
    private func acceptCookie(_ packet: RelayPacket, ephemeral: EphemeralKX) {
        guard let reply = try? CookieReply(parsing: packet.payload), reply.answers(clientKey: ephemeral.publicKey) else {
            counters.dropped += 1
            return
        }
        cookie = reply.cookie
        sendRaw(helloDatagram(ephemeral))
    }

    private func handle(_ datagram: [UInt8]) {
        let now = configuration.clock()
        guard let packet = try? RelayPacket(parsing: datagram) else {
            lock.withLock { counters.dropped += 1 }
            return
        }
        var events: [Event] = []
        var provider: (@Sendable (ChannelBinding) -> [Registration])?
        lock.withLock {
            counters.packetsIn += 1
            counters.bytesIn += UInt64(datagram.count)
            switch (packet.type, state) {
            case (.cookieReply, .handshaking(let eph, _, _)):
                acceptCookie(packet, ephemeral: eph)
            case (.cookieReply, .connected) where rehandshake != nil:
                acceptCookie(packet, ephemeral: rehandshake!.ephemeral)
            case (.helloReply, .handshaking(let eph, _, _)):
                if acceptHelloReply(packet, ephemeral: eph, now: now, events: &events) { provider = registrationProvider }
            case (.helloReply, .connected) where rehandshake != nil:
                // The answer to a handshake started by a RESET: only a reply signed by the
                // pinned key replaces the session, so a forged RESET costs one handshake.
                guard let r = rehandshake, acceptHelloReply(packet, ephemeral: r.ephemeral, now: now, events: &events) else { return }
                rehandshake = nil
                reassembler = Reassembler(maxPartial: 16)
                // Registrations carry used nonces: fresh ones come from the provider (sent
                // below). Sends are idempotent at the relay (the same bundle ID and envelope is
                // answered QUEUED duplicate): the next tick repeats them on the new session,
                // after those registrations.
                pendingRegisters.removeAll()
                for (id, var p) in pendingSends {
                    p.nextRetryMs = now
                    pendingSends[id] = p
                }
                provider = registrationProvider
            case (.reset, .connected(let session)) where packet.sessionID == session.sessionID:
                // RESET travels in clear (the relay that sends it no longer has the session
                // keys), so it is only a hint: keep the session and its pending requests, and
                // handshake beside it. A relay that really lost the session answers with a
                // HELLO_REPLY signed by the pinned key, which then replaces the session; a
                // forged RESET gains an attacker one extra handshake and nothing else.
                if rehandshake == nil {
                    rehandshake = (EphemeralKX.generate(), 0, handshakeBackoff)
                    counters.resets += 1
                }
            case (_, .connected(let session)) where packet.type.isSealed:
                guard let plaintext = try? session.open(packet) else { counters.dropped += 1; return }
                lastHeardMs = now
                pingSentMs = nil
                unansweredSinceMs = nil
                var type = packet.type
                var message = plaintext
                if type == .fragment {
                    guard let f = try? Fragment(parsing: plaintext) else { counters.dropped += 1; return }
                    guard let whole = reassembler.add(f, nowMs: now) else { return }
                    (type, message) = whole
                }
                events += interpret(type, message, now: now)
            default:
                counters.dropped += 1
            }
        }
        // Registrations go out before `.connected` is reported, so a SEND made in reaction
        // to it reaches the relay after them.
        if let provider, let b = lock.withLock({ binding }) {
            let regs = provider(b)
            if !regs.isEmpty { try? register(regs) }
        }
        for e in events { emit(e) }
    }

    /// Checks a HELLO_REPLY against the pinned relay key and our ephemeral key; on success the
    /// client is connected on the session it derives. Caller holds `lock`.
    private func acceptHelloReply(_ packet: RelayPacket, ephemeral: EphemeralKX, now: Int64, events: inout [Event]) -> Bool {
        do {
            let reply = try HelloReply(parsing: packet.payload)
            try reply.verify(pinnedKey: configuration.relaySigningKey, sessionID: packet.sessionID, clientKey: ephemeral.publicKey)
            let session = try SecureSession(side: .client, sessionID: packet.sessionID, ours: ephemeral, theirs: reply.relayEphemeralKey)
            state = .connected(session)
            binding = ChannelBinding(sessionID: packet.sessionID, clientKey: ephemeral.publicKey, relayEphemeralKey: reply.relayEphemeralKey)
            cookie = nil
            lastHeardMs = now
            pingSentMs = nil
            handshakeStartedMs = nil
            connectedSinceMs = now
            unansweredSinceMs = nil
            counters.handshakes += 1
            // Ask for the relay's time at once: whoever registers through us needs it when its
            // own clock is off (the relay allows ±5 minutes).
            pingSentMs = now
            var w = ByteWriter()
            w.u64(UInt64(bitPattern: now))
            try? transmit(.ping, w.bytes, session)
            events.append(.connected(sessionID: packet.sessionID, relayKXKey: reply.relayKXKey))
            return true
        } catch let e as RelayProtocolError {
            lastErrorText = e.description
            events.append(.handshakeFailed(e))
        } catch {
            events.append(.handshakeFailed(.invalid(String(describing: error))))
        }
        return false
    }

    /// Caller holds `lock`.
    private func interpret(_ type: RelayPacketType, _ message: [UInt8], now: Int64) -> [Event] {
        switch type {
        case .registered:
            guard let r = try? RegisteredResult(parsing: message) else { counters.dropped += 1; return [] }
            let ids = r.results.map(\.userID)
            pendingRegisters.removeAll { $0.request.registrations.map(\.userID) == ids }
            return r.results.map { .registered(userID: $0.userID, status: $0.status) }
        case .queued:
            guard let q = try? QueuedNotice(parsing: message) else { counters.dropped += 1; return [] }
            guard pendingSends.removeValue(forKey: q.bundleID) != nil else { return [] }
            return [.queued(q)]
        case .msg:
            guard let id = BundleID.of(bundle: message) else { counters.dropped += 1; return [] }
            counters.received += 1
            return [.message(bundle: message, bundleID: id)]
        case .noMessages:
            guard let d = try? PollDone(parsing: message) else { counters.dropped += 1; return [] }
            lastSyncMs = now
            return [.pollDone(remaining: d.remaining)]
        case .error:
            guard let notice = try? RelayErrorNotice(parsing: message) else { counters.dropped += 1; return [] }
            lastErrorText = notice.description
            if pendingSends.removeValue(forKey: notice.reference) != nil {
                return [.sendFailed(bundleID: notice.reference, error: .refused(notice))]
            }
            return [.relayError(notice)]
        case .pong:
            // Our PING's timestamp, then the relay's clock (a relay that predates it echoes only ours).
            guard message.count >= 16 else { return [] }
            var r = ByteReader(message, what: "pong")
            guard let sent = try? Int64(bitPattern: r.u64()), let relayMs = try? Int64(bitPattern: r.u64()) else { return [] }
            let roundTrip = now &- sent
            guard roundTrip >= 0, roundTrip <= 30_000, relayMs > 0 else { return [] }
            let offset = relayMs &- (sent &+ roundTrip / 2)
            clockOffsetMs = offset
            return [.relayTime(offsetMs: offset, roundTripMs: roundTrip)]
        case .ping:
            if case .connected(let session) = state { try? transmit(.pong, message, session) }
            return []
        default:
            counters.dropped += 1
            return []
        }
    }
}
