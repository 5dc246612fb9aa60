import Foundation
import YaokCrypto
import YaokWire

/// A Ya OK user talking to the relay directly (the `yaok` endpoint on the internet side):
/// connects with the pinned key, registers itself (again after every reconnect), sends
/// envelopes, receives bundles (pushed or polled) and acknowledges them, by bundle ID, once
/// stored.
public final class RelayUserSession: @unchecked Sendable {
    public let identity: Identity
    public let client: RelayClient
    private let inbox = Inbox()

    /// Bundles received (pushed or polled) and not yet handed out by ``receive(timeout:)``.
    final class Inbox: @unchecked Sendable {
        private let lock = NSLock()
        private var order: [[UInt8]] = []
        private var bundles: [[UInt8]: [UInt8]] = [:]
        static let limit = 1_000

        func add(_ bundle: [UInt8], id: [UInt8]) {
            lock.withLock {
                guard bundles[id] == nil, bundles.count < Self.limit else { return }
                bundles[id] = bundle
                order.append(id)
            }
        }

        func drain() -> [[UInt8]] {
            lock.withLock {
                defer { order.removeAll(); bundles.removeAll() }
                return order.compactMap { bundles[$0] }
            }
        }
    }

    /// - Parameters:
    ///   - relay: the relay's address.
    ///   - relayKey: the relay's pinned Ed25519 key (from `yaok-relay key`).
    ///   - makeLink: the packet link; nil for UDP (see ``RelayClient/Configuration/makeLink``).
    public init(identity: Identity, relay: RelayAddress, relayKey: [UInt8],
                makeLink: (@Sendable (RelayAddress) throws -> RelayLink)? = nil) {
        self.identity = identity
        var configuration = RelayClient.Configuration(relay: relay, relaySigningKey: relayKey)
        configuration.makeLink = makeLink
        client = RelayClient(configuration: configuration)
        let clock = client.configuration.clock
        // Pushed MSGs (e.g. right after registering) arrive outside any poll round: keep them.
        let inbox = self.inbox
        client.onEvent = { event in
            if case .message(let bundle, let id) = event { inbox.add(bundle, id: id) }
        }
        client.registrationProvider = {
            (try? Registration.signed(by: identity, relaySigningKey: relayKey, timestampMs: clock())).map { [$0] } ?? []
        }
    }

    /// Connects and waits until this user is registered. Throws the handshake error (e.g. a
    /// relay key mismatch), a refused registration, or a timeout.
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

    /// One poll round: the bundles waiting for this user, plus any pushed since the last
    /// call (the relay pushes queued mail as soon as the user registers). Store them, then
    /// call ``acknowledge(_:)``; unacknowledged ones come again after the relay's lease.
    public func receive(timeout: TimeInterval = 10) throws -> [YaokWire.Bundle] {
        _ = try client.pollAndWait(timeout: timeout)
        return inbox.drain().compactMap { try? YaokWire.Bundle(parsing: $0) }
    }

    /// Tells the relay these bundles (by ``YaokCrypto/BundleID``) are stored; it deletes them.
    public func acknowledge(_ bundleIDs: [[UInt8]]) throws { try client.ack(bundleIDs) }

    /// Disconnects.
    public func close() { client.stop() }
}
