import Foundation
import YaokPluginKit
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokWire

/// An endpoint talking to the internet relay directly (an internet-side user): it sends
/// its outbox, receives what the relay holds for it, stores it, and only then
/// acknowledges, so the relay deletes nothing the endpoint has not kept.
public final class RelaySession: @unchecked Sendable {
    public let endpoint: Endpoint
    private let session: RelayUserSession
    private let onEvent: @Sendable (HubSession.Event) -> Void

    /// Parses `HOST:PORT` (an optional `relay://` prefix is accepted).
    public static func parseRelay(_ text: String) throws -> RelayAddress {
        let stripped = text.hasPrefix("relay://") ? String(text.dropFirst(8)) : text
        guard let a = RelayAddress(parsing: stripped) else { throw EndpointError.badHubAddress(text) }
        return a
    }

    /// - Parameter makeLink: the packet link; nil for UDP, or
    ///   `RelayWebSocketLink.factory(url:spkiSHA256:)` for `wss://` (see ``webSocket(_:pin:)``).
    public init(endpoint: Endpoint, relay: RelayAddress, relayKey: [UInt8],
                makeLink: (@Sendable (RelayAddress) throws -> RelayLink)? = nil,
                onEvent: @escaping @Sendable (HubSession.Event) -> Void) {
        self.endpoint = endpoint
        self.onEvent = onEvent
        session = RelayUserSession(identity: endpoint.identity, relay: relay, relayKey: relayKey, makeLink: makeLink)
    }

    /// For a `wss://host:port[/path]` relay: its address and the link factory pinning the TLS
    /// key `pinHex` (64 hex digits, from `yaok-relay tls-pin`).
    public static func webSocket(_ url: String, pin pinHex: String) throws -> (address: RelayAddress, makeLink: @Sendable (RelayAddress) throws -> RelayLink) {
        let parsed = try RelayWebSocketURL(parsing: url)
        let pin = try SPKIPin.parse(pinHex)
        return (parsed.address, RelayWebSocketLink.factory(url: parsed, spkiSHA256: pin))
    }

    /// Connects (checking the pinned key) and registers.
    public func open(timeout: TimeInterval = 10) throws {
        try session.open(timeout: timeout)
        onEvent(.connected(hub: "relay"))
    }

    public func close() { session.close() }

    /// Sends every pending outbox item; each one the relay takes is handed over.
    public func pushOutbox() {
        guard let pending = try? endpoint.store.outbox(states: [.pending], limit: 1000) else { return }
        for item in pending where item.expiresMs > endpoint.now() {
            guard let bundle = try? YaokWire.Bundle(parsing: item.bundle) else { continue }
            do {
                try session.send(bundle.envelope)
                try? endpoint.store.advance(item.messageID, to: .handedOver)
                onEvent(.handedOver(item.messageID))
            } catch {
                onEvent(.refused(item.messageID, "\(error)"))
            }
        }
    }

    /// One round: receive, store, acknowledge what was stored (by bundle ID, what the relay
    /// keys its queue by), send resulting receipts.
    public func poll(timeout: TimeInterval = 3) throws {
        let bundles = try session.receive(timeout: timeout)
        var stored: [[UInt8]] = []
        for bundle in bundles {
            let (incoming, answer) = endpoint.receive(bundle: bundle.encoded)
            switch answer {
            case .custody, .refuse: stored.append(bundle.envelope.bundleID)
            case .none: break
            }
            onEvent(.incoming(incoming))
        }
        if !stored.isEmpty { try session.acknowledge(stored) }
        pushOutbox()
    }
}
