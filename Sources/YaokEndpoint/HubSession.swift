import Foundation
import Synchronization
import YaokCrypto
import YaokPluginKit
import YaokRelayProtocol
import YaokStore
import YaokBluetooth
import YaokWire

/// Where a hub listens for endpoints.
public enum HubAddress: Sendable, Equatable, CustomStringConvertible {
    /// The UDP example transport (`udp://HOST:PORT`).
    case udp(IPEndpoint)
    /// A TCP link, e.g. the Wi-Fi Direct group owner (`tcp://HOST:PORT`).
    case tcp(host: String, port: UInt16)
    /// Bluetooth LE from a local adapter to the hub's GATT service (`ble://hci1/AA:BB:CC:DD:EE:FF`).
    case ble(BLEHubTarget)
    /// A Wi-Fi Direct hub already joined through `target` (``P2PHubJoin``), whose TCP server
    /// is at `host:port`. When the link is lost the group is found and joined again.
    case p2p(P2PHubTarget, host: String, port: UInt16)

    public var description: String {
        switch self {
        case .udp(let a): return "udp://\(a)"
        case .tcp(let h, let p): return "tcp://\(h):\(p)"
        case .ble(let t): return t.description
        case .p2p(let t, let h, let p): return "\(t) (tcp://\(h):\(p))"
        }
    }
}

/// A connection-oriented link to a hub that runs on its own thread (TCP, BLE): the session
/// feeds it frames and hears about the link through the callbacks, set before `start`.
protocol HubCarrier: AnyObject, Sendable {
    var onUp: (@Sendable (LinkInfo) -> Void)? { get set }
    var onDown: (@Sendable (String) -> Void)? { get set }
    var onFrame: (@Sendable ([UInt8]) -> Void)? { get set }
    func start() throws
    func stop()
    func send(_ frame: [UInt8]) throws
}

extension TCPHubCarrier: HubCarrier {}
extension BLEHubCarrier: HubCarrier {}

/// A TCP link to a hub: connects, runs the endpoint handshake, reads records on its own
/// thread, pings when idle, and reconnects with backoff until stopped.
// @unchecked: `client`, `running` under `lock`; host/port only on the run thread; callbacks set before start.
final class TCPHubCarrier: @unchecked Sendable {
    private var host: String
    private var port: UInt16
    let identity: LinkIdentity
    /// Finds the hub again before a reconnect (Wi-Fi Direct: its group may have been torn
    /// down and re-formed, so the old address no longer leads anywhere).
    private let rejoin: (@Sendable () throws -> (host: String, port: UInt16))?
    private let log: @Sendable (String) -> Void
    /// Seconds without a record or pong from the hub before the link counts as lost (two
    /// pings unanswered).
    let silenceLimit: Double
    private let lock = NSLock()
    private var client: SecureStreamClient?
    private var running = false
    var onUp: (@Sendable (LinkInfo) -> Void)?
    var onDown: (@Sendable (String) -> Void)?
    var onFrame: (@Sendable ([UInt8]) -> Void)?

    init(host: String, port: UInt16, identity: LinkIdentity,
         rejoin: (@Sendable () throws -> (host: String, port: UInt16))? = nil,
         log: @escaping @Sendable (String) -> Void = { _ in }, silenceLimit: Double = 35) {
        self.silenceLimit = silenceLimit
        self.host = host
        self.port = port
        self.identity = identity
        self.rejoin = rejoin
        self.log = log
    }

    func start() {
        lock.withLock { running = true }
        Thread.detachNewThread { [self] in run() }
    }

    func stop() {
        let c: SecureStreamClient? = lock.withLock {
            running = false
            defer { client = nil }
            return client
        }
        c?.close()
    }

    func send(_ frame: [UInt8]) throws {
        guard let c = lock.withLock({ client }) else { throw TransportError.notRunning }
        try c.send(frame)
    }

    private func run() {
        var backoff = Backoff(baseMs: 1_000, capMs: 30_000, jitter: false)
        // The first attempt uses the address we were given; after a failure, find the hub again.
        var findAgain = false
        while lock.withLock({ running }) {
            do {
                if findAgain, let rejoin {
                    (host, port) = try rejoin()
                }
                let c = try SecureStreamClient(to: IPEndpoint.resolve(host: host, port: port), identity: identity, role: .endpoint)
                let kept: Bool = lock.withLock {
                    guard running else { return false }
                    client = c
                    return true
                }
                guard kept else { c.close(); return }
                backoff.reset()
                onUp?(LinkInfo(id: 1, peerSigningKey: c.peer.signingKey, peerKXKey: c.peer.kxKey, peerRole: c.peer.role,
                               mtu: SecureStreamEngine.mtu, cost: 5, kind: "tcp", remote: c.remote.description))
                var idle = 0.0
                while lock.withLock({ running }) {
                    if let frame = try c.receive(timeout: 1) {
                        idle = 0
                        onFrame?(frame)
                    } else {
                        idle += 1
                        // The hub closes links silent for 60 s.
                        if idle >= 15 { try c.ping(); idle = 0 }
                        // Unanswered pings: the path is gone (e.g. the Wi-Fi Direct group was
                        // torn down under us), which TCP alone would not report for minutes.
                        if -c.lastHeard.timeIntervalSinceNow > silenceLimit {
                            throw TransportError.failed("the hub has not answered for \(Int(silenceLimit)) s")
                        }
                    }
                }
            } catch {
                let wasRunning: Bool = lock.withLock {
                    let had = client != nil
                    client = nil
                    return running && had
                }
                if wasRunning { onDown?("\(error)") }
                if rejoin != nil, lock.withLock({ running }) {
                    log(wasRunning ? "p2p: link to the hub lost (\(error)); finding its group again"
                        : findAgain ? "p2p: the hub is not back yet: \(error)"
                        : "p2p: cannot reach the hub (\(error)); finding its group again")
                    findAgain = true
                }
            }
            if lock.withLock({ running }) {
                Thread.sleep(forTimeInterval: Double(backoff.nextDelayMs()) / 1_000)
            }
        }
    }
}

/// An endpoint attached to a hub: pushes the outbox, receives bundles, acknowledges
/// custody after the store commits, and reports what happens.
///
/// Group commit: the store changes of a burst of frames (bundles received, custody answers
/// for what we sent) share one transaction and one durable commit, opened by the first frame
/// after a commit and committed once the frames already queued are handled, at least
/// the ``CommitSpacing`` after the previous commit and at most that long after it opened. What
/// depends on the changes waits for the commit: custody answers, our outbox pushes (a
/// delivery receipt queued in the group), and the events reported; if the commit fails none
/// of them happens (the hub keeps custody and sends again). Idle, nothing is scheduled.
///
/// It speaks the same link protocol as any transport (TLV records, the link handshake
/// as an endpoint) over the UDP example transport, a TCP link or Bluetooth LE.
// @unchecked: session state only on `queue`; `relayKey` is set before start; timer only in start/stop.
public final class HubSession: @unchecked Sendable {
    /// Things worth telling the user.
    public enum Event: Sendable, Equatable {
        case connected(hub: String)
        case disconnected(String)
        /// A trusted hub took custody: final.
        case handedOver([UInt8])
        /// An untrusted hub took it: the item goes back to pending after ``untrustedResendMs``
        /// unless the recipient's receipt comes first.
        case carried([UInt8])
        /// A delivery or read receipt this endpoint sent was taken: machinery, not news for a person.
        case receiptHandedOver([UInt8])
        case refused([UInt8], String)
        case incoming(Endpoint.Incoming)
        /// What became of our relay registration (Docs/protocol.md, registrationAnswer).
        case registration(RegistrationAnswer)
        /// What the hub says of its relay, and the relay key we pin (nil: we asked for none).
        case hubRelay(RelayAnnouncement, pinned: [UInt8]?)
    }

    public let endpoint: Endpoint
    public let hub: HubAddress
    private let engine: UDPLinkEngine?
    /// The TCP or BLE link, when the hub is not reached over UDP.
    private let carrier: HubCarrier?
    private let queue = DispatchQueue(label: "yaok.session")
    private var link: LinkID?
    private let onEvent: @Sendable (Event) -> Void
    /// Outbox items sent on this link and not yet acknowledged, by bundle ID (what the hub's
    /// answers name): their message ID and when they were sent.
    private var inFlight = InFlight()
    private var timer: DispatchSourceTimer?
    /// When set, the endpoint asks its hub to make it reachable through this relay
    /// (the relay's pinned Ed25519 key): a fresh signed registration goes with every connect.
    public var relayKey: [UInt8]?
    private var lastRegistrationMs: Int64 = 0
    /// The hub's signing key from the link handshake: the collector our relay registration
    /// names, so only this hub may collect our mail from the relay.
    private var hubSigningKey: [UInt8]?
    /// Which hubs get final custody and our relay registration (set before start).
    public var trust = HubTrust.none
    /// After this long an item an untrusted hub acknowledged is sent again (set before start).
    public var untrustedResendMs: Int64 = 15 * 60_000
    /// Whether the hub on the current link is trusted (a pinned key, or a certificate it sent).
    private var hubTrusted = false
    /// Whether the hub on the current link is trusted (``trust``), once the link is up.
    public var isHubTrusted: Bool { queue.sync { link != nil && hubTrusted } }
    /// How long a carried registration lets the hub collect (the relay caps it at 7 days and
    /// remembers it for at most 24 h; we renew every few minutes while linked). Short: a hub
    /// collects our internet mail for at most an hour after we left it; after that the mail
    /// waits at the relay for wherever we turn up next (Docs/protocol.md §5).
    static let registrationLifetimeMs: Int64 = 3_600_000
    /// The relay accepts a registration within ±5 minutes of its timestamp: renew before that.
    static let registrationRefreshMs: Int64 = 240_000
    /// Items sent before waiting for acknowledgements.
    public static let window = 64
    /// Resend an unacknowledged item after this long.
    public static let retransmitMs: Int64 = 5_000

    /// Group commit (on `queue`): the open group, and the frames and events that depend on it, in order.
    private let group: GroupCommit<HubSession, Deferred>
    private enum Deferred { case frame([UInt8]), ack([UInt8]), event(Event) }
    /// The hub announced that it reads `custodyAcks`: a commit's acks leave as one list.
    private var hubReadsAckLists = false
    /// The hub sent a `clock` frame: it reads version-2 hop headers, so our bundles tell it
    /// their age (Docs/protocol.md §3).
    private var hubReadsAge = false
    /// The outbox was asked to push while the group was open (it may hold uncommitted receipts).
    private var pushWanted = false
    /// New messages stored in the open group (the crash-test hook runs after their commit).
    private var messagesInGroup = 0
    private var commits = (groups: 0, frames: 0, longestOpenUs: 0, totalOpenUs: 0)
    /// Group commits that changed the store so far, the frames they covered, and how long
    /// groups stayed open from their first frame to the end of their commit (the extra wait
    /// an answer can see), longest and summed.
    public var groupCommits: (groups: Int, frames: Int, longestOpenUs: Int, totalOpenUs: Int) { queue.sync { commits } }
    /// A group closes after this many frames even if more are queued.
    static let maxGroupItems = 512

    /// Parses `udp://HOST:PORT` (the default scheme).
    public static func parseHub(_ text: String) throws -> IPEndpoint {
        guard case .udp(let a) = try parseHubAddress(text) else { throw EndpointError.badHubAddress(text) }
        return a
    }

    /// Parses `udp://HOST:PORT`, `tcp://HOST:PORT` or `ble://[hciN/]AA:BB:CC:DD:EE:FF[?type=random][&mtu=N]`
    /// (see ``BLEHubTarget``).
    public static func parseHubAddress(_ text: String) throws -> HubAddress {
        if text.hasPrefix("ble://") { return .ble(try BLEHubTarget.parse(String(text.dropFirst(6)))) }
        if text.hasPrefix("tcp://") {
            let rest = String(text.dropFirst(6))
            guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]), colon > rest.startIndex else {
                throw EndpointError.badHubAddress(text)
            }
            return .tcp(host: String(rest[..<colon]), port: port)
        }
        let stripped = text.hasPrefix("udp://") ? String(text.dropFirst(6)) : text
        guard let a = IPEndpoint(parsing: stripped), !a.isIPv6 else { throw EndpointError.badHubAddress(text) }
        return .udp(a)
    }

    public convenience init(endpoint: Endpoint, hub: IPEndpoint, onEvent: @escaping @Sendable (Event) -> Void) {
        self.init(endpoint: endpoint, address: .udp(hub), onEvent: onEvent)
    }

    /// - Parameter testCommitDelayUs: tests only: holds every group that much longer before its
    ///   commit (at most 2 s), so a test can kill the endpoint inside the window (`yaok` takes it
    ///   from `YAOK_TEST_ENDPOINT_COMMIT_DELAY_MS`).
    public init(endpoint: Endpoint, address: HubAddress, testCommitDelayUs: UInt32 = 0, onEvent: @escaping @Sendable (Event) -> Void) {
        self.endpoint = endpoint
        self.hub = address
        self.onEvent = onEvent
        group = Self.groupCommit(on: queue, testDelayUs: min(testCommitDelayUs, 2_000_000))
        let now = endpoint.now
        guard case .udp(let udpHub) = address else {
            let carrier: HubCarrier
            switch address {
            case .tcp(let host, let port): carrier = TCPHubCarrier(host: host, port: port, identity: endpoint.identity)
            case .p2p(let target, let host, let port):
                let log: @Sendable (String) -> Void = { FileHandle.standardError.write(Data("\($0)\n".utf8)) }
                carrier = TCPHubCarrier(host: host, port: port, identity: endpoint.identity, rejoin: {
                    let joined = try P2PHubJoin.join(target, log: log)
                    return (joined.host, joined.port)
                }, log: log)
            case .ble(let target): carrier = BLEHubCarrier(target: target, identity: endpoint.identity)
            case .udp: preconditionFailure("handled above")
            }
            engine = nil
            self.carrier = carrier
            queue.setSpecific(key: GroupGate.ownerKey, value: ObjectIdentifier(self))
            carrier.onUp = { [weak self] info in
                guard let self else { return }
                self.queue.async { self.linkUp(info) }
            }
            carrier.onDown = { [weak self] reason in
                guard let self else { return }
                self.queue.async { self.linkDown(reason) }
            }
            carrier.onFrame = { [weak self] frame in
                guard let self else { return }
                self.queue.async { self.grouped { self.frame(frame) } }
            }
            return
        }
        carrier = nil
        let events = EngineEvents()
        engine = UDPLinkEngine(identity: endpoint.identity, role: .endpoint,
                               listen: IPEndpoint(host: "0.0.0.0", port: 0), staticPeers: [udpHub], clock: now, events: events,
                               idleTimeoutMs: 30_000, keepaliveMs: 5_000)
        queue.setSpecific(key: GroupGate.ownerKey, value: ObjectIdentifier(self))
        events.attach(self)
    }

    /// The UDP engine's reports, handed to the session on its queue. It holds the session
    /// weakly (the session owns the engine, which holds this), attached at the end of the
    /// session's `init`, before the engine can start.
    private final class EngineEvents: LinkEvents {
        private struct Weak { weak var session: HubSession? }
        private let owner = Mutex(Weak())
        private var session: HubSession? { owner.withLock { $0.session } }

        func attach(_ session: HubSession) { owner.withLock { $0.session = session } }

        func linkUp(_ link: LinkInfo) {
            guard let session else { return }
            session.queue.async { session.linkUp(link) }
        }
        func linkDown(_ id: LinkID, reason: String?) {
            guard let session else { return }
            session.queue.async { session.linkDown(reason ?? "") }
        }
        func frameReceived(_ frame: [UInt8], on link: LinkID) {
            guard let session else { return }
            session.queue.async { session.grouped { session.frame(frame) } }
        }
        func statusChanged() {}
    }

    public func start() throws {
        try engine?.start()
        try carrier?.start()
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1)
        timer.setEventHandler { [weak self] in self?.retransmit() }
        timer.resume()
        self.timer = timer
    }

    public func stop() {
        timer?.cancel()
        engine?.stop()
        carrier?.stop()
        queue.sync { commitGroup() }
    }

    // MARK: Group commit

    /// The session's group commit: groups close after ``maxGroupItems`` frames or once open for
    /// the spacing; a failed commit undoes the acks we took, so the outbox is pushed again.
    /// The spacing: 4 ms. Under a backlog, a commit then covers about 20 frames (13 at 2 ms),
    /// and each end spends a tenth to a sixth less CPU per message than at 2 ms; a lone
    /// message commits at once either way (Docs/performance.md, "Group commit").
    static let commitSpacingUs: UInt64 = 4_000

    private static func groupCommit(on queue: DispatchQueue, testDelayUs: UInt32) -> GroupCommit<HubSession, Deferred> {
        GroupCommit(
            queue: queue, spacing: CommitSpacing(environmentKey: "YAOK_ENDPOINT_COMMIT_SPACING_US", defaultUs: commitSpacingUs),
            maxItems: maxGroupItems, closesAfterSpacing: true, testDelayUs: testDelayUs,
            begin: { try $0.endpoint.store.beginGroup(owner: ObjectIdentifier($0)) },
            hasChanges: { $0.endpoint.store.groupHasChanges },
            beginFailed: { _, error in
                // Each change then commits alone, and what depends on it leaves at once.
                FileHandle.standardError.write(Data("store: cannot open a group transaction: \(error)\n".utf8))
            },
            commit: { try $0.endpoint.store.commitGroup() },
            committed: { session, frames, openNs in
                let openUs = Int(openNs / 1_000)
                session.commits.groups += 1
                session.commits.frames += frames
                session.commits.longestOpenUs = max(session.commits.longestOpenUs, openUs)
                session.commits.totalOpenUs += openUs
            },
            failed: { session, _, dropped, error in
                // None of it happened: no custody answer leaves (the hub keeps custody and
                // sends again), acks we took are undone (those items go again).
                FileHandle.standardError.write(Data("store: a group commit failed and was rolled back; its \(dropped) answers and events are dropped: \(error)\n".utf8))
                session.messagesInGroup = 0
                session.pushWanted = false
                session.pushOutbox()
            },
            release: { session, waited in session.release(waited) })
    }

    /// Runs frame handling inside the open group, opening one if none is (see the type's notes).
    private func grouped(_ body: () -> Void) {
        group.run(self, body)
    }

    /// Commits the open group (if any), then sends and reports what waited for it.
    private func commitGroup() {
        group.commit(self)
    }

    /// After a commit: the crash-test hook (new messages were stored), what waited for the
    /// commit, then a push that was asked for meanwhile.
    private func release(_ waited: [Deferred]) {
        if messagesInGroup > 0 {
            messagesInGroup = 0
            Endpoint.faultAfterReceive?()
        }
        var acks: [[UInt8]] = []
        for d in waited {
            switch d {
            case .frame(let bytes): if let link { transmit(bytes, link: link) }
            case .ack(let id): acks.append(id)
            case .event(let e): onEvent(e)
            }
        }
        if let link { sendAcks(acks, link: link) }
        if pushWanted {
            pushWanted = false
            pushOutbox()
        }
    }

    /// Reports an event, after the open group commits if one is open.
    private func report(_ event: Event) {
        if group.isOpen { group.hold(.event(event)) } else { onEvent(event) }
    }

    /// Sends a fresh relay registration through the hub (when a relay key is set), only to a
    /// trusted hub: the collector may delete what the relay holds for us.
    private func register() {
        let t = endpoint.now()
        guard let relayKey, link != nil, hubTrusted, let hubSigningKey,
              let registration = try? Registration.carried(by: endpoint.identity, relaySigningKey: relayKey, collector: hubSigningKey,
                                                           timestampMs: t, untilMs: t + Self.registrationLifetimeMs) else { return }
        lastRegistrationMs = t
        send(TLVRecord(.registration, value: registration.encoded))
    }

    private func retransmit() {
        let t = endpoint.now()
        if relayKey != nil && t - lastRegistrationMs >= Self.registrationRefreshMs { register() }
        // Items an untrusted hub took and whose resend time came go out again (pushed below).
        _ = try? endpoint.store.requeueUntrustedHandovers(nowMs: t)
        let stale = inFlight.sentBefore(t - Self.retransmitMs + 1)
        for id in stale { _ = inFlight.remove(bundleID: id) }
        if !stale.isEmpty || inFlight.count < Self.window { pushOutbox() }
    }

    public var isConnected: Bool { queue.sync { link != nil } }

    /// Waits (bounded) until the hub has taken every pending outbox item, so receipts
    /// queued during this session leave with it. Returns whether the outbox drained.
    @discardableResult
    public func drain(timeout: Double) -> Bool {
        let deadline = DispatchTime.now() + timeout
        while DispatchTime.now() < deadline {
            // (Waits for an open group to commit: it may hold receipts not yet sent.)
            let pending = (try? endpoint.store.outbox(states: [.pending], limit: 1).count) ?? 0
            if pending == 0 { return true }
            if !isConnected { return false }
            usleep(20_000)
        }
        return false
    }

    /// Pushes pending outbox items now (also done on every connect).
    public func flush() { queue.async { self.pushOutbox() } }

    private func linkUp(_ info: LinkInfo) {
        guard info.peerRole == .hub else { return }
        link = info.id
        hubSigningKey = info.peerSigningKey
        // A certificate the hub sends first may make it trusted a moment later (``frame(_:)``).
        hubTrusted = trust.trusts(hubKey: info.peerSigningKey)
        _ = try? endpoint.store.requeueUntrustedHandovers(nowMs: endpoint.now())
        inFlight.removeAll()
        hubReadsAckLists = false
        hubReadsAge = false
        // Our time (a phone's vote in the hub's estimate) first; it also says we read ages.
        transmit(ClockFrame(source: .none, timeMs: endpoint.now()).frame, link: info.id)
        // We read ack lists (Docs/protocol.md, custodyAcks): the empty list says so.
        transmit(CustodyAcks.announcement.encoded, link: info.id)
        report(.connected(hub: info.remote ?? hub.description))
        register()
        pushOutbox()
    }

    private func linkDown(_ reason: String) {
        link = nil
        report(.disconnected(reason))
    }

    /// Sends pending outbox items, at most ``window`` unacknowledged at a time; while a group
    /// is open, once it commits (a receipt queued in it must be durable before it leaves).
    private func pushOutbox() {
        if group.isOpen {
            pushWanted = true
            return
        }
        let room = Self.window - inFlight.count
        // IDs first (the items in flight lead the list); a bundle is read only to be sent.
        guard let link, room > 0, let pending = try? endpoint.store.pendingOutbox(limit: Self.window + room) else { return }
        let t = endpoint.now()
        var sent = 0
        for p in pending where p.expiresMs > t && !inFlight.contains(messageID: p.messageID) {
            guard sent < room else { break }
            guard let item = try? endpoint.store.outboxItem(p.messageID), item.state == .pending else { continue }
            inFlight.add(bundleID: endpoint.bundleID(of: item), messageID: item.messageID, sentMs: t)
            sent += 1
            transmit(TLVRecord(.bundle, value: outgoing(item.bundle, nowMs: t)).encoded, link: link)
        }
    }

    /// An outbox bundle as it goes to the hub: with its age (the time it waited here, on our
    /// clock) to a hub that reads it, else as stored (version 1).
    private func outgoing(_ bundle: [UInt8], nowMs t: Int64) -> [UInt8] {
        guard hubReadsAge, let b = try? YaokWire.Bundle(parsing: bundle) else { return bundle }
        return b.withAge(HopHeader.clampedAge(t - b.envelope.createdMs)).encoded
    }

    private func frame(_ bytes: [UInt8]) {
        guard let record = try? TLVRecord(parsing: bytes) else { return }
        switch HostFrameType(record.type) {
        case .link(.bundle):
            let (incoming, answer) = endpoint.receive(bundle: record.value)
            switch answer {
            case .custody(let id): sendAck(id)
            case .refuse(let id, let reason): send(TLVRecord(.custodyRefused, value: CustodyRefusal(bundleID: id, reason: reason).encoded))
            case .none: break
            }
            report(.incoming(incoming))
            // A new message queued a delivery receipt: send it (after the commit).
            if case .message = incoming {
                if group.isOpen { messagesInGroup += 1 }
                pushOutbox()
            }
        case .routing(.custodyAck):
            guard let ack = try? CustodyAck(parsing: record.value), handedOver(ack.bundleID) else { return }
            pushOutbox()
        case .routing(.custodyAcks):
            guard let list = try? BundleIDList(parsing: record.value) else { return }
            hubReadsAckLists = true
            var any = false
            for id in list.bundleIDs where handedOver(id) { any = true }
            if any { pushOutbox() }
        case .routing(.hubCertificate):
            guard !hubTrusted, let hubSigningKey,
                  trust.trusts(certificate: record.value, hubKey: hubSigningKey, nowMs: endpoint.now()) else { return }
            hubTrusted = true
            register()
        case .routing(.clock):
            // Only that the hub reads ages: a phone keeps its own time.
            guard (try? ClockFrame(parsing: record.value)) != nil else { return }
            hubReadsAge = true
        case .routing(.registrationAnswer):
            guard let answer = try? RegistrationAnswer(parsing: record.value),
                  answer.userID == Identity.userID(forSigningKey: endpoint.identity.signingKey) else { return }
            report(.registration(answer))
        case .routing(.relay):
            guard let announced = try? RelayAnnouncement(parsing: record.value) else { return }
            report(.hubRelay(announced, pinned: relayKey))
        case .routing(.custodyRefused):
            guard let r = try? CustodyRefusal(parsing: record.value),
                  let messageID = inFlight.remove(bundleID: r.bundleID) ?? endpoint.outboxMessageID(bundleID: r.bundleID) else { return }
            switch r.reason {
            case .rateLimited, .storeFull: break  // stays pending; retried on the next push
            default: try? endpoint.store.advance(messageID, to: .refused)
            }
            report(.refused(messageID, "\(r.reason)"))
        default:
            break
        }
    }

    /// The hub took custody of outbox item `bundleID`, if it is one of ours; whether it was.
    /// From an untrusted hub, a message stays ours to resend (Docs/protocol.md §5).
    private func handedOver(_ bundleID: [UInt8]) -> Bool {
        guard let messageID = inFlight.remove(bundleID: bundleID) ?? endpoint.outboxMessageID(bundleID: bundleID) else { return false }
        let isMessage = (try? endpoint.store.outboxItem(messageID))?.kind == Envelope.Kind.message.rawValue
        if hubTrusted || !isMessage {
            try? endpoint.store.advance(messageID, to: .handedOver)
            report(isMessage ? .handedOver(messageID) : .receiptHandedOver(messageID))
        } else {
            try? endpoint.store.handedToUntrustedHub(messageID, resendAfterMs: endpoint.now() + untrustedResendMs)
            report(.carried(messageID))
        }
        return true
    }

    /// Acknowledges custody of a bundle: after the open group commits, with the group's other acks.
    private func sendAck(_ bundleID: [UInt8]) {
        if group.isOpen {
            group.hold(.ack(bundleID))
        } else if let link {
            sendAcks([bundleID], link: link)
        }
    }

    /// A single ack as `custodyAck`; more, to a hub that reads lists, as `custodyAcks` lists.
    private func sendAcks(_ ids: [[UInt8]], link: LinkID) {
        for record in CustodyAcks.records(for: ids, peerReadsLists: hubReadsAckLists) { transmit(record.encoded, link: link) }
    }

    /// Sends a frame on the link: after the open group commits, if one is open.
    private func send(_ record: TLVRecord) {
        if group.isOpen {
            group.hold(.frame(record.encoded))
            return
        }
        guard let link else { return }
        transmit(record.encoded, link: link)
    }

    private func transmit(_ bytes: [UInt8], link: LinkID) {
        if let carrier { try? carrier.send(bytes) } else { try? engine?.send(bytes, to: link) }
    }
}

/// Outbox items sent on a link and not yet acknowledged, by bundle ID (what the hub's answers
/// name) and by message ID (what the outbox lists, so a push skips them without hashing).
struct InFlight {
    private var byBundle: [[UInt8]: (messageID: [UInt8], sentMs: Int64)] = [:]
    private var messages: Set<[UInt8]> = []

    var count: Int { byBundle.count }

    func contains(messageID: [UInt8]) -> Bool { messages.contains(messageID) }

    mutating func add(bundleID: [UInt8], messageID: [UInt8], sentMs: Int64) {
        byBundle[bundleID] = (messageID, sentMs)
        messages.insert(messageID)
    }

    /// Forgets the item; returns its message ID if it was in flight.
    mutating func remove(bundleID: [UInt8]) -> [UInt8]? {
        guard let e = byBundle.removeValue(forKey: bundleID) else { return nil }
        messages.remove(e.messageID)
        return e.messageID
    }

    /// Bundle IDs of the items sent before `ms`.
    func sentBefore(_ ms: Int64) -> [[UInt8]] { byBundle.filter { $0.value.sentMs < ms }.map(\.key) }

    mutating func removeAll() {
        byBundle.removeAll()
        messages.removeAll()
    }
}
