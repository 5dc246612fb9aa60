import Foundation
import YaokPluginKit
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

    public func start() throws { try engine.start() }

    public func stop() {
        engine.stop()
        queue.sync {}
    }

    public var isConnected: Bool { queue.sync { link != nil } }

    /// Pushes pending outbox items now (also done on every connect).
    public func flush() { queue.async { self.pushOutbox() } }

    private func linkUp(_ info: LinkInfo) {
        guard info.peerRole == .hub else { return }
        link = info.id
        onEvent(.connected(hub: info.remote ?? hub.description))
        pushOutbox()
    }

    private func linkDown(_ reason: String) {
        link = nil
        onEvent(.disconnected(reason))
    }

    private func pushOutbox() {
        guard let link, let pending = try? endpoint.store.outbox(states: [.pending]) else { return }
        let t = endpoint.now()
        for item in pending where item.expiresMs > t {
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
            onEvent(.handedOver(ack.messageID))
        case .custodyRefused:
            guard let r = try? CustodyRefusal(parsing: record.value) else { return }
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
