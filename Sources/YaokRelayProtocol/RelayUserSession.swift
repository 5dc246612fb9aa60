import Foundation
import YaokCrypto
import YaokWire
import struct YaokPluginKit.Backoff
import struct YaokPluginKit.IPEndpoint

/// A Ya OK user talking to the relay directly (the `yaok` endpoint on the internet side):
/// connects with the pinned key, registers itself (again after every reconnect), sends
/// envelopes, receives bundles (pushed or polled) and acknowledges them, by bundle ID, once
/// stored.
// @unchecked: only `let`s: the client, and an inbox and observer that lock themselves.
public final class RelayUserSession: @unchecked Sendable {
    public let identity: Identity
    public let client: RelayClient
    private let inbox = Inbox()
    private let observer = Observer()

    /// Bundles received (pushed or polled) and not yet handed out by ``takeReceived()``,
    /// keyed by bundle ID (a bundle pushed and then polled again is kept once).
    // @unchecked: `order` and `bundles` only under `condition`.
    final class Inbox: @unchecked Sendable {
        private let condition = NSCondition()
        private var order: [[UInt8]] = []
        private var bundles: [[UInt8]: [UInt8]] = [:]
        static let limit = 1_000

        func add(_ bundle: [UInt8], id: [UInt8]) {
            condition.withLock {
                // Beyond the limit the relay keeps it and offers it again after its lease.
                guard bundles[id] == nil, bundles.count < Self.limit else { return }
                bundles[id] = bundle
                order.append(id)
                condition.broadcast()
            }
        }

        func drain() -> [[UInt8]] {
            condition.withLock {
                defer { order.removeAll(); bundles.removeAll() }
                return order.compactMap { bundles[$0] }
            }
        }

        /// Waits until something is held or `deadline` passes; whether something is held.
        func wait(until deadline: Date) -> Bool {
            condition.withLock {
                while order.isEmpty {
                    guard condition.wait(until: deadline) else { return !order.isEmpty }
                }
                return true
            }
        }
    }

    /// Who hears about the session going down and coming back.
    // @unchecked: `handler` only under `lock`.
    final class Observer: @unchecked Sendable {
        private let lock = NSLock()
        private var handler: (@Sendable (ConnectionChange) -> Void)?
        func set(_ h: (@Sendable (ConnectionChange) -> Void)?) { lock.withLock { handler = h } }
        func notify(_ change: ConnectionChange) { lock.withLock { handler }?(change) }
    }

    /// A change of the session with the relay, after ``open(timeout:)`` succeeded.
    public enum ConnectionChange: Sendable, Equatable {
        /// The session went down (unreachable, relay silent); the client keeps handshaking.
        case down(reason: String)
        /// A new session is up (after a drop or a relay restart); registration follows.
        case up
        /// The node in use stopped answering: the client moved to another node of the relay
        /// (``RelayClient/Configuration/alternates``); `.up` follows once it answers.
        case moved(RelayClient.NodeChange)
    }

    /// - Parameters:
    ///   - relay: the relay's address.
    ///   - relayKey: the relay's pinned Ed25519 key (from `yaok-relay key`).
    ///   - makeLink: the packet link; nil for UDP (see ``RelayClient/Configuration/makeLink``).
    ///   - alternates: further nodes of the same relay (same key) to fail over to.
    ///   - configure: adjusts the client's settings (tests: shorter retries).
    public init(identity: Identity, relay: IPEndpoint, relayKey: [UInt8],
                makeLink: (@Sendable (IPEndpoint) throws -> RelayLink)? = nil,
                name: String? = nil, alternates: [RelayClient.Node] = [],
                configure: (inout RelayClient.Configuration) -> Void = { _ in }) {
        self.identity = identity
        var configuration = RelayClient.Configuration(relay: relay, relaySigningKey: relayKey)
        configuration.makeLink = makeLink
        configuration.relayName = name
        configuration.alternates = alternates
        configure(&configuration)
        client = RelayClient(configuration: configuration)
        let clock = client.configuration.clock
        // Pushed MSGs (right after registering, or whenever mail comes while the session is
        // registered) arrive outside any poll round: keep them.
        let inbox = self.inbox, observer = self.observer
        client.onEvent = { event in
            switch event {
            case .message(let bundle, let id): inbox.add(bundle, id: id)
            case .disconnected(let reason): observer.notify(.down(reason: reason))
            case .connected: observer.notify(.up)
            case .nodeChanged(let change): observer.notify(.moved(change))
            default: break
            }
        }
        // A user on its own session registers as its owner, bound to this session's channel.
        client.registrationProvider = { channel in
            (try? Registration.owner(identity, relaySigningKey: relayKey, channel: channel, timestampMs: clock())).map { [$0] } ?? []
        }
    }

    /// Called on the client's thread when the session goes down or a new one comes up.
    public func onConnectionChange(_ handler: (@Sendable (ConnectionChange) -> Void)?) { observer.set(handler) }

    /// Connects and waits until this user is registered. Throws the handshake error (e.g. a
    /// relay key mismatch), a refused registration, or a timeout. A lost HELLO or REGISTER is
    /// retransmitted by the client (HELLO 1 s doubling, REGISTER every 2 s), so one lost
    /// datagram costs time, not the session.
    public func open(timeout: TimeInterval = 10) throws {
        let mark = client.currentSeq()
        try client.connect(timeout: timeout)
        let me = identity.userID
        let status = try client.waitFor("REGISTERED", timeout: timeout, after: mark) { event -> RegistrationStatus? in
            if case .registered(let id, let s) = event, id == me { return s }
            return nil
        }
        guard status == .accepted else {
            throw RelayProtocolError.invalid("the relay refused the registration: \(status)")
        }
    }

    /// Sends an envelope (as a bundle with an origin hop header) and waits until the relay holds it.
    @discardableResult
    public func send(_ envelope: Envelope, timeout: TimeInterval = 15) throws -> QueuedNotice {
        try client.sendAndWait(bundle: YaokWire.Bundle(envelope: envelope).encoded, timeout: timeout)
    }

    /// One poll round: sends POLL and waits for its NO_MESSAGES (the MSGs of the round land
    /// in the inbox, see ``takeReceived()``). Returns how many messages the relay still holds
    /// for this user beyond the round. Throws ``RelayProtocolError/timeout(_:)`` when the POLL
    /// or its answer was lost, ``RelayProtocolError/notConnected`` between sessions: the
    /// caller decides how often to try again (``RelayPollPacing``).
    @discardableResult
    public func poll(timeout: TimeInterval) throws -> UInt32 {
        let mark = client.currentSeq()
        try client.poll()
        return try client.waitFor("NO_MESSAGES", timeout: timeout, after: mark) { event -> UInt32? in
            if case .pollDone(let remaining) = event { return remaining }
            return nil
        }
    }

    /// The bundles pushed or polled since the last call, in arrival order. Store them, then
    /// call ``acknowledge(_:)``; unacknowledged ones come again after the relay's lease.
    public func takeReceived() -> [YaokWire.Bundle] {
        inbox.drain().compactMap { try? YaokWire.Bundle(parsing: $0) }
    }

    /// Waits until a pushed or polled bundle is waiting in ``takeReceived()`` or `deadline`
    /// passes (woken by the push itself, not by polling); whether one is waiting.
    public func waitForReceived(until deadline: Date) -> Bool { inbox.wait(until: deadline) }

    /// One poll round, then everything received meanwhile (pushed or polled). A lost POLL or
    /// NO_MESSAGES throws a timeout; ``RelayPollPacing`` says how a long-running caller retries.
    public func receive(timeout: TimeInterval = 10) throws -> [YaokWire.Bundle] {
        try poll(timeout: timeout)
        return takeReceived()
    }

    /// Tells the relay these bundles (by ``YaokCrypto/BundleID``) are stored; it deletes them.
    public func acknowledge(_ bundleIDs: [[UInt8]]) throws { try client.ack(bundleIDs) }

    /// Disconnects.
    public func close() { client.stop() }
}

/// How an internet-side user waiting for mail (`yaok listen --relay`) paces its polls.
///
/// While the user is registered the relay pushes new mail at once, so polling only picks up
/// what a push lost (a dropped datagram: the relay offers it again after its 30 s lease) and
/// keeps the session fresh. Polls therefore start at ``initialIntervalMs`` and double to
/// ``maxIntervalMs`` while nothing comes, and start over when something does. An unanswered
/// poll (its POLL or NO_MESSAGES lost) is tried again after ``retryMs``; only
/// ``maxUnanswered`` unanswered polls in a row give up.
public struct RelayPollPacing: Sendable, Equatable {
    /// The first interval, and the one after traffic.
    public var initialIntervalMs: Int64 = 1_000
    /// The longest interval (below the relay's 5-minute stale-session limit and the client's 60 s PING).
    public var maxIntervalMs: Int64 = 30_000
    /// How long one poll waits for its NO_MESSAGES.
    public var answerTimeoutMs: Int64 = 2_000
    /// The wait before trying an unanswered poll again.
    public var retryMs: Int64 = 1_000
    /// Unanswered polls in a row after which the relay counts as gone (about 15 s of silence
    /// with the defaults, like the client's PING timeout).
    public var maxUnanswered = 5

    /// Quiet rounds since the last traffic.
    private var quietRounds = 0

    public init() {}

    /// Something arrived (or was sent): poll soon again.
    public mutating func traffic() { quietRounds = 0 }

    /// The interval to wait after a quiet round: ``initialIntervalMs`` doubled once per quiet
    /// round before it, at most ``maxIntervalMs``.
    public mutating func nextIdleInterval() -> Int64 {
        let interval = Backoff.delayMs(failures: quietRounds + 1, baseMs: max(1, initialIntervalMs), capMs: max(1, maxIntervalMs))
        quietRounds = min(quietRounds + 1, 64)
        return interval
    }
}
