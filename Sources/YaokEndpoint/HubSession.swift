import Foundation
import YaokPluginKit
import YaokRelayProtocol
import YaokTransportBLE
import YaokTransportUDP
import YaokTransportWiFiDirect
import YaokWire

/// Where a hub listens for endpoints.
public enum HubAddress: Sendable, Equatable, CustomStringConvertible {
    /// The UDP example transport (`udp://HOST:PORT`).
    case udp(SocketAddress)
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
        var backoff = 1.0
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
                backoff = 1
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
                Thread.sleep(forTimeInterval: backoff)
                backoff = min(30, backoff * 2)
            }
        }
    }
}

/// An endpoint attached to a hub: pushes the outbox, receives bundles, acknowledges
/// custody after the store commits, and reports what happens.
///
/// It speaks the same link protocol as any transport (TLV records, the link handshake
/// as an endpoint) over the UDP example transport, a TCP link or Bluetooth LE.
public final class HubSession: @unchecked Sendable {
    /// Things worth telling the user.
    public enum Event: Sendable, Equatable {
        case connected(hub: String)
        case disconnected(String)
        case handedOver([UInt8])
        case refused([UInt8], String)
        case incoming(Endpoint.Incoming)
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
    private var inFlight: [[UInt8]: (messageID: [UInt8], sentMs: Int64)] = [:]
    private var timer: DispatchSourceTimer?
    /// When set, the endpoint asks its hub to make it reachable through this relay
    /// (the relay's pinned Ed25519 key): a fresh signed registration goes with every connect.
    public var relayKey: [UInt8]?
    private var lastRegistrationMs: Int64 = 0
    /// The hub's signing key from the link handshake: the collector our relay registration
    /// names, so only this hub may collect our mail from the relay.
    private var hubSigningKey: [UInt8]?
    /// How long a carried registration lets the hub collect (the relay caps it at 7 days and
    /// remembers it for at most 24 h; we renew every few minutes while linked).
    static let registrationLifetimeMs: Int64 = 24 * 3_600_000
    /// The relay accepts a registration within ±5 minutes of its timestamp: renew before that.
    static let registrationRefreshMs: Int64 = 240_000
    /// Items sent before waiting for acknowledgements.
    public static let window = 64
    /// Resend an unacknowledged item after this long.
    public static let retransmitMs: Int64 = 5_000

    /// Parses `udp://HOST:PORT` (the default scheme).
    public static func parseHub(_ text: String) throws -> SocketAddress {
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
        guard let a = SocketAddress(parsing: stripped) else { throw EndpointError.badHubAddress(text) }
        return .udp(a)
    }

    public convenience init(endpoint: Endpoint, hub: SocketAddress, onEvent: @escaping @Sendable (Event) -> Void) {
        self.init(endpoint: endpoint, address: .udp(hub), onEvent: onEvent)
    }

    public init(endpoint: Endpoint, address: HubAddress, onEvent: @escaping @Sendable (Event) -> Void) {
        self.endpoint = endpoint
        self.hub = address
        self.onEvent = onEvent
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
                self.queue.async { self.frame(frame) }
            }
            return
        }
        carrier = nil
        let engine = UDPLinkEngine(identity: endpoint.identity, role: .endpoint,
                                   listen: SocketAddress(host: "0.0.0.0", port: 0), staticPeers: [udpHub], clock: now,
                                   idleTimeoutMs: 30_000, keepaliveMs: 5_000)
        self.engine = engine
        engine.events = .init(
            linkUp: { [weak self] info in
                guard let self else { return }
                self.queue.async { self.linkUp(info) }
            },
            linkDown: { [weak self] _, reason in
                guard let self else { return }
                self.queue.async { self.linkDown(reason) }
            },
            frame: { [weak self] frame, _ in
                guard let self else { return }
                self.queue.async { self.frame(frame) }
            },
            log: { _ in })
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
        queue.sync {}
    }

    /// Sends a fresh relay registration through the hub (when a relay key is set).
    private func register() {
        let t = endpoint.now()
        guard let relayKey, link != nil, let hubSigningKey,
              let registration = try? Registration.carried(by: endpoint.identity, relaySigningKey: relayKey, collector: hubSigningKey,
                                                           timestampMs: t, untilMs: t + Self.registrationLifetimeMs) else { return }
        lastRegistrationMs = t
        send(TLVRecord(.registration, value: registration.encoded))
    }

    private func retransmit() {
        let t = endpoint.now()
        if relayKey != nil && t - lastRegistrationMs >= Self.registrationRefreshMs { register() }
        let stale = inFlight.filter { t - $0.value.sentMs >= Self.retransmitMs }.map(\.key)
        for id in stale { inFlight[id] = nil }
        if !stale.isEmpty || inFlight.count < Self.window { pushOutbox() }
    }

    public var isConnected: Bool { queue.sync { link != nil } }

    /// Waits (bounded) until the hub has taken every pending outbox item, so receipts
    /// queued during this session leave with it. Returns whether the outbox drained.
    @discardableResult
    public func drain(timeout: Double) -> Bool {
        let deadline = DispatchTime.now() + timeout
        while DispatchTime.now() < deadline {
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
        inFlight.removeAll()
        onEvent(.connected(hub: info.remote ?? hub.description))
        register()
        pushOutbox()
    }

    private func linkDown(_ reason: String) {
        link = nil
        onEvent(.disconnected(reason))
    }

    /// Sends pending outbox items, at most ``window`` unacknowledged at a time.
    private func pushOutbox() {
        let room = Self.window - inFlight.count
        guard let link, room > 0, let pending = try? endpoint.store.outbox(states: [.pending], limit: Self.window + room) else { return }
        let t = endpoint.now()
        var sent = 0
        for item in pending where item.expiresMs > t {
            let id = endpoint.bundleID(of: item)
            guard inFlight[id] == nil else { continue }
            guard sent < room else { break }
            inFlight[id] = (item.messageID, t)
            sent += 1
            transmit(TLVRecord(.bundle, value: item.bundle).encoded, link: link)
        }
    }

    private func frame(_ bytes: [UInt8]) {
        guard let record = try? TLVRecord(parsing: bytes) else { return }
        switch FrameType(rawValue: record.type) {
        case .bundle:
            let (incoming, answer) = endpoint.receive(bundle: record.value)
            switch answer {
            case .custody(let id): send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: id).encoded))
            case .refuse(let id, let reason): send(TLVRecord(.custodyRefused, value: CustodyRefusal(bundleID: id, reason: reason).encoded))
            case .none: break
            }
            onEvent(.incoming(incoming))
            // A new message queued a delivery receipt: send it now.
            if case .message = incoming { pushOutbox() }
        case .custodyAck:
            guard let ack = try? CustodyAck(parsing: record.value),
                  let messageID = inFlight.removeValue(forKey: ack.bundleID)?.messageID ?? endpoint.outboxMessageID(bundleID: ack.bundleID) else { return }
            try? endpoint.store.advance(messageID, to: .handedOver)
            onEvent(.handedOver(messageID))
            pushOutbox()
        case .custodyRefused:
            guard let r = try? CustodyRefusal(parsing: record.value),
                  let messageID = inFlight.removeValue(forKey: r.bundleID)?.messageID ?? endpoint.outboxMessageID(bundleID: r.bundleID) else { return }
            switch r.reason {
            case .rateLimited, .storeFull: break  // stays pending; retried on the next push
            default: try? endpoint.store.advance(messageID, to: .refused)
            }
            onEvent(.refused(messageID, "\(r.reason)"))
        default:
            break
        }
    }

    private func send(_ record: TLVRecord) {
        guard let link else { return }
        transmit(record.encoded, link: link)
    }

    private func transmit(_ bytes: [UInt8], link: LinkID) {
        if let carrier { try? carrier.send(bytes) } else { try? engine?.send(bytes, to: link) }
    }
}
