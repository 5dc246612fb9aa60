import Foundation
import YaokPluginKit
import YaokRelayProtocol
import YaokTransportUDP
import YaokWire

/// An endpoint attached to a hub: pushes the outbox, receives bundles, acknowledges
/// custody after the store commits, and reports what happens.
///
/// It speaks the same link protocol as any transport (TLV records, the link handshake
/// as an endpoint); this client rides on the UDP example transport.
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
    public let hub: SocketAddress
    private let engine: UDPLinkEngine
    private let queue = DispatchQueue(label: "yaok.session")
    private var link: LinkID?
    private let onEvent: @Sendable (Event) -> Void
    /// Outbox items sent on this link and not yet acknowledged, with when they were sent.
    private var inFlight: [[UInt8]: Int64] = [:]
    private var timer: DispatchSourceTimer?
    /// When set, the endpoint asks its hub to make it reachable through this relay
    /// (the relay's pinned Ed25519 key): a fresh signed registration goes with every connect.
    public var relayKey: [UInt8]?
    private var lastRegistrationMs: Int64 = 0
    /// The relay accepts a registration within ±5 minutes of its timestamp: renew before that.
    static let registrationRefreshMs: Int64 = 240_000
    /// Items sent before waiting for acknowledgements.
    public static let window = 64
    /// Resend an unacknowledged item after this long.
    public static let retransmitMs: Int64 = 5_000

    /// Parses `udp://HOST:PORT`.
    public static func parseHub(_ text: String) throws -> SocketAddress {
        let stripped = text.hasPrefix("udp://") ? String(text.dropFirst(6)) : text
        guard let a = SocketAddress(parsing: stripped) else { throw EndpointError.badHubAddress(text) }
        return a
    }

    public init(endpoint: Endpoint, hub: SocketAddress, onEvent: @escaping @Sendable (Event) -> Void) {
        self.endpoint = endpoint
        self.hub = hub
        self.onEvent = onEvent
        let now = endpoint.now
        engine = UDPLinkEngine(identity: endpoint.identity, role: .endpoint,
                               listen: SocketAddress(host: "0.0.0.0", port: 0), staticPeers: [hub], clock: now,
                               idleTimeoutMs: 30_000, keepaliveMs: 5_000)
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
        try engine.start()
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1)
        timer.setEventHandler { [weak self] in self?.retransmit() }
        timer.resume()
        self.timer = timer
    }

    public func stop() {
        timer?.cancel()
        engine.stop()
        queue.sync {}
    }

    /// Sends a fresh relay registration through the hub (when a relay key is set).
    private func register() {
        let t = endpoint.now()
        guard let relayKey, link != nil,
              let registration = try? Registration.signed(by: endpoint.identity, relaySigningKey: relayKey, timestampMs: t) else { return }
        lastRegistrationMs = t
        send(TLVRecord(.registration, value: registration.encoded))
    }

    private func retransmit() {
        let t = endpoint.now()
        if relayKey != nil && t - lastRegistrationMs >= Self.registrationRefreshMs { register() }
        let stale = inFlight.filter { t - $0.value >= Self.retransmitMs }.map(\.key)
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
        for item in pending where item.expiresMs > t && inFlight[item.messageID] == nil {
            guard sent < room else { break }
            inFlight[item.messageID] = t
            sent += 1
            try? engine.send(TLVRecord(.bundle, value: item.bundle).encoded, to: link)
        }
    }

    private func frame(_ bytes: [UInt8]) {
        guard let record = try? TLVRecord(parsing: bytes) else { return }
        switch FrameType(rawValue: record.type) {
        case .bundle:
            let (incoming, answer) = endpoint.receive(bundle: record.value)
            switch answer {
            case .custody(let id): send(TLVRecord(.custodyAck, value: CustodyAck(messageID: id).encoded))
            case .refuse(let id, let reason): send(TLVRecord(.custodyRefused, value: CustodyRefusal(messageID: id, reason: reason).encoded))
            case .none: break
            }
            onEvent(.incoming(incoming))
            // A new message queued a delivery receipt: send it now.
            if case .message = incoming { pushOutbox() }
        case .custodyAck:
            guard let ack = try? CustodyAck(parsing: record.value) else { return }
            try? endpoint.store.advance(ack.messageID, to: .handedOver)
            inFlight[ack.messageID] = nil
            onEvent(.handedOver(ack.messageID))
            pushOutbox()
        case .custodyRefused:
            guard let r = try? CustodyRefusal(parsing: record.value) else { return }
            inFlight[r.messageID] = nil
            switch r.reason {
            case .rateLimited, .storeFull: break  // stays pending; retried on the next push
            default: try? endpoint.store.advance(r.messageID, to: .refused)
            }
            onEvent(.refused(r.messageID, "\(r.reason)"))
        default:
            break
        }
    }

    private func send(_ record: TLVRecord) {
        guard let link else { return }
        try? engine.send(record.encoded, to: link)
    }
}
