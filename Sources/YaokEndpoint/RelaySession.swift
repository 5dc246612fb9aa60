import Foundation
import YaokPluginKit
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokWire

/// Why a session with the relay ended before its caller stopped it.
public enum RelaySessionError: Error, Sendable, CustomStringConvertible {
    /// This many polls in a row went unanswered (each retried after a pause): the relay or
    /// the path to it is gone.
    case relaySilent(polls: Int, last: String)

    public var description: String {
        switch self {
        case .relaySilent(let polls, let last):
            return "the relay did not answer \(polls) polls in a row (last: \(last)); giving up"
        }
    }
}

/// An endpoint talking to the internet relay directly (an internet-side user): it sends
/// its outbox, receives what the relay holds for it, stores it, and only then
/// acknowledges (by bundle ID), so the relay deletes nothing the endpoint has not kept.
///
/// While it runs (``run(until:shouldStop:)``) the relay pushes new mail to its registered
/// session at once; polls only catch what a push lost, paced by ``pacing`` (1 s doubling to
/// 30 s while idle, back to 1 s on traffic), and a lost POLL or answer is retried, so one
/// lost datagram never ends the session.
// @unchecked: not thread-safe by design: one thread drives it; the session observer captures only `let`s.
public final class RelaySession: @unchecked Sendable {
    public let endpoint: Endpoint
    /// The relay, as the user gave it (for messages).
    public let relayName: String
    private let session: RelayUserSession
    private let onEvent: @Sendable (HubSession.Event) -> Void
    /// How idle polling is paced and how many unanswered polls end the session.
    public var pacing = RelayPollPacing()
    /// Outbox items (by message ID, the outbox's key) the relay refused for a while (rate
    /// limit, full queue): not offered again before this time.
    private var notBefore: [[UInt8]: Date] = [:]
    /// Polls sent by ``run(until:shouldStop:)`` (tests and status).
    public private(set) var pollsSent = 0

    /// Parses `HOST:PORT` (an optional `relay://` prefix is accepted).
    public static func parseRelay(_ text: String) throws -> IPEndpoint {
        let stripped = text.hasPrefix("relay://") ? String(text.dropFirst(8)) : text
        guard let a = (try? IPEndpoint.parse(stripped, allowingNames: true)) else { throw EndpointError.badHubAddress(text) }
        return a
    }

    /// - Parameters:
    ///   - makeLink: the packet link; nil for UDP, or
    ///     `RelayWebSocketLink.factory(url:spkiSHA256:)` for `wss://` (see ``webSocket(_:pin:)``).
    ///   - name: how to call the relay in events (default: its address).
    public init(endpoint: Endpoint, relay: IPEndpoint, relayKey: [UInt8],
                makeLink: (@Sendable (IPEndpoint) throws -> RelayLink)? = nil, name: String? = nil,
                alternates: [RelayClient.Node] = [],
                configure: (inout RelayClient.Configuration) -> Void = { _ in },
                onEvent: @escaping @Sendable (HubSession.Event) -> Void) {
        self.endpoint = endpoint
        self.onEvent = onEvent
        self.relayName = name ?? relay.description
        session = RelayUserSession(identity: endpoint.identity, relay: relay, relayKey: relayKey, makeLink: makeLink,
                                   name: name, alternates: alternates, configure: configure)
    }

    /// Several nodes of one relay (same pinned key), from `--relay` given repeated or
    /// comma-separated: `HOST:PORT` (UDP) or `wss://HOST:PORT[/PATH]`. `pins` are the
    /// `--relay-tls-pin` values: one for every `wss://` node, or one per `wss://` node in order.
    public static func nodes(_ texts: [String], pins: [String]) throws -> [RelayClient.Node] {
        let list = texts.flatMap { $0.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) } }.filter { !$0.isEmpty }
        let wss = list.filter { $0.lowercased().hasPrefix("wss://") }.count
        let pinList = pins.flatMap { $0.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) } }.filter { !$0.isEmpty }
        if wss > 0, pinList.isEmpty { throw RelayProtocolError.invalid("a wss:// relay needs --relay-tls-pin (pin its TLS key)") }
        if pinList.count > 1, pinList.count != wss {
            throw RelayProtocolError.invalid("\(pinList.count) --relay-tls-pin values for \(wss) wss:// relays: give one for all, or one per wss:// relay in order")
        }
        var nodes: [RelayClient.Node] = []
        var w = 0
        for text in list {
            if text.lowercased().hasPrefix("wss://") {
                let ws = try webSocket(text, pin: pinList.count == 1 ? pinList[0] : pinList[w])
                w += 1
                nodes.append(RelayClient.Node(address: ws.address, makeLink: ws.makeLink, name: text))
            } else {
                guard let address = try? parseRelay(text) else {
                    throw RelayProtocolError.invalid("relay \"\(text)\" is not HOST:PORT or wss://HOST:PORT[/PATH]")
                }
                nodes.append(RelayClient.Node(address: address, name: text))
            }
        }
        guard !nodes.isEmpty else { throw RelayProtocolError.invalid("--relay needs HOST:PORT or wss://HOST:PORT") }
        return nodes
    }

    /// A session with the first of `nodes` failing over to the others.
    public convenience init(endpoint: Endpoint, nodes: [RelayClient.Node], relayKey: [UInt8],
                            configure: (inout RelayClient.Configuration) -> Void = { _ in },
                            onEvent: @escaping @Sendable (HubSession.Event) -> Void) {
        self.init(endpoint: endpoint, relay: nodes[0].address, relayKey: relayKey, makeLink: nodes[0].makeLink, name: nodes[0].name,
                  alternates: Array(nodes.dropFirst()), configure: configure, onEvent: onEvent)
    }

    /// The node in use (0-based index into the nodes given) and its name.
    public var currentNode: (index: Int, name: String) { session.client.currentNode }
    /// The last move between nodes, if any.
    public var lastNodeChange: RelayClient.NodeChange? { session.client.lastNodeChange }

    /// For a `wss://host:port[/path]` relay: its address and the link factory pinning the TLS
    /// key `pinHex` (64 hex digits, from `yaok-relay tls-pin`).
    public static func webSocket(_ url: String, pin pinHex: String) throws -> (address: IPEndpoint, makeLink: @Sendable (IPEndpoint) throws -> RelayLink) {
        let parsed = try RelayWebSocketURL(parsing: url)
        let pin = try SPKIPin.parse(pinHex)
        return (parsed.address, RelayWebSocketLink.factory(url: parsed, spkiSHA256: pin))
    }

    /// Connects (checking the pinned key) and registers. Later drops and reconnects of the
    /// session are reported as events (the client handshakes again by itself).
    public func open(timeout: TimeInterval = 10) throws {
        try session.open(timeout: timeout)
        onEvent(.connected(hub: session.client.currentNode.name))
        let (onEvent, client) = (self.onEvent, session.client)
        session.onConnectionChange { change in
            switch change {
            case .down(let reason): onEvent(.disconnected(reason))
            case .up: onEvent(.connected(hub: client.currentNode.name))
            case .moved(let change): onEvent(.disconnected("relay failover: \(change.description)"))
            }
        }
    }

    public func close() {
        session.onConnectionChange(nil)
        session.close()
    }

    /// Sends every pending outbox item; each one the relay takes is handed over. A permanent
    /// refusal (bad signature, lifetime, conflict, …) marks the item refused; a temporary one
    /// (rate limit, full queue) holds it back for the relay's retry time; no answer at all
    /// stops this round (the relay is not answering; the item stays pending).
    public func pushOutbox() {
        guard let pending = try? endpoint.store.outbox(states: [.pending], limit: 1000) else { return }
        let now = Date()
        for item in pending where item.expiresMs > endpoint.now() {
            if let until = notBefore[item.messageID], until > now { continue }
            guard let bundle = try? YaokWire.Bundle(parsing: item.bundle) else { continue }
            do {
                // Answered by bundle ID; sendAndWait matches it to this item's bundle.
                try session.send(bundle.envelope)
                notBefore[item.messageID] = nil
                try? endpoint.store.advance(item.messageID, to: .handedOver)
                onEvent(item.kind == Envelope.Kind.message.rawValue ? .handedOver(item.messageID) : .receiptHandedOver(item.messageID))
            } catch RelayProtocolError.refused(let notice) {
                switch notice.code {
                case .rateLimited, .recipientQueueFull, .relayFull, .internalError, .notRegistered:
                    let wait = min(3_600, max(1, (Double(notice.retryAfterMs) + 999) / 1000))
                    notBefore[item.messageID] = now.addingTimeInterval(wait)
                case .badSignature, .malformed, .expired, .tooLarge, .conflict, .createdInFuture, .lifetimeTooLong:
                    try? endpoint.store.advance(item.messageID, to: .refused)
                }
                onEvent(.refused(item.messageID, notice.description))
            } catch {
                onEvent(.refused(item.messageID, "\(error)"))
                return
            }
        }
    }

    /// Stores what the relay pushed or a poll brought and acknowledges what is settled (by
    /// bundle ID); the receipts this queues go with the next ``pushOutbox()``. Whether
    /// anything had arrived.
    @discardableResult
    func processReceived() -> Bool {
        let bundles = session.takeReceived()
        guard !bundles.isEmpty else { return false }
        var settled: [[UInt8]] = []
        for bundle in bundles {
            let (incoming, answer) = endpoint.receive(bundle: bundle.encoded)
            switch answer {
            case .custody:
                settled.append(bundle.envelope.bundleID)
            case .refuse(_, let reason) where reason == .storeFull || reason == .rateLimited:
                // Not stored: the relay must keep it and offer it again after its lease.
                break
            case .refuse:
                // Refused for good (forged, expired, …): the relay need not offer it again.
                settled.append(bundle.envelope.bundleID)
            case .none:
                break
            }
            onEvent(.incoming(incoming))
        }
        // A lost ACK costs a second delivery after the lease, which the endpoint answers as a duplicate.
        if !settled.isEmpty { try? session.acknowledge(settled) }
        return true
    }

    /// One poll round: receive, store, acknowledge what was stored, send resulting receipts.
    /// Throws when the poll is not answered within `timeout` (``run(until:shouldStop:)``
    /// retries instead).
    public func poll(timeout: TimeInterval = 3) throws {
        pollsSent += 1
        try session.poll(timeout: timeout)
        processReceived()
        pushOutbox()
    }

    /// Sends the outbox and receives until `shouldStop()` says so or `deadline` passes.
    ///
    /// Between polls it waits for the relay's push (woken by it, not by a timer); it polls
    /// after ``pacing``'s interval (1 s, doubling to 30 s while nothing comes, 1 s again
    /// after traffic). An unanswered poll is tried again after ``RelayPollPacing/retryMs``;
    /// only ``RelayPollPacing/maxUnanswered`` in a row end the session with
    /// ``RelaySessionError/relaySilent(polls:last:)``. `shouldStop` is checked after every
    /// poll round and every push handled (the events it looks at are reported by then).
    public func run(until deadline: Date, shouldStop: () -> Bool) throws {
        var pacing = self.pacing
        var unanswered = 0
        var nextPoll = Date()
        // With several relay nodes: how long without any session, after the last move, ends it.
        let failover = !session.client.configuration.alternates.isEmpty
        let budgetMs = Int64(pacing.maxUnanswered) * (pacing.answerTimeoutMs + pacing.retryMs)
        var lastMove = session.client.lastNodeChange?.atMs
        var offlineSince: Date?
        pushOutbox()
        while !shouldStop() {
            let now = Date()
            guard now < deadline else { return }
            if now >= nextPoll {
                pollsSent += 1
                do {
                    try session.poll(timeout: Double(pacing.answerTimeoutMs) / 1000)
                    unanswered = 0
                    offlineSince = nil
                } catch let error as RelayProtocolError {
                    switch error {
                    case .timeout, .notConnected: break
                    default: throw error
                    }
                    if case .notConnected = error, failover {
                        // Between nodes: the client is handshaking with the next one. Give up
                        // only when no node took us for the silence budget since the last move.
                        let move = session.client.lastNodeChange?.atMs
                        if move != lastMove || offlineSince == nil { lastMove = move; offlineSince = Date() }
                        if let since = offlineSince, Date().timeIntervalSince(since) * 1000 > Double(budgetMs) {
                            throw RelaySessionError.relaySilent(polls: unanswered + 1, last: session.client.lastError ?? error.description)
                        }
                        if processReceived() { pushOutbox() }
                        nextPoll = Date().addingTimeInterval(Double(pacing.retryMs) / 1000)
                        continue
                    }
                    unanswered += 1
                    guard unanswered < pacing.maxUnanswered else {
                        throw RelaySessionError.relaySilent(polls: unanswered, last: error.description)
                    }
                    // Lost POLL or NO_MESSAGES, or between sessions: a pause, then again.
                    if processReceived() { pushOutbox() }
                    nextPoll = Date().addingTimeInterval(Double(pacing.retryMs) / 1000)
                    continue
                }
                if processReceived() { pacing.traffic() }
                pushOutbox()   // receipts just queued, and items held back whose time has come
                nextPoll = Date().addingTimeInterval(Double(pacing.nextIdleInterval()) / 1000)
                continue
            }
            if session.waitForReceived(until: min(nextPoll, deadline)), processReceived() {
                pushOutbox()
                pacing.traffic()
                nextPoll = Date().addingTimeInterval(Double(pacing.nextIdleInterval()) / 1000)
            }
        }
    }
}
