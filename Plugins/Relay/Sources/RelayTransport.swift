import Foundation
import YaokCrypto
import YaokPluginKit
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokWire

/// The `relay` transport: the hub's uplink to the internet relay (Plugins/Relay/README.md).
///
/// It runs a ``RelayClient`` and reports ONE link with peer role `relay` once the
/// handshake with the pinned relay key and the hub's own registration succeed. Frames on
/// that link map to relay requests:
///
/// - host → `bundle`: SEND; the relay's QUEUED comes back as `custodyAck` (custody moved to
///   the relay), its ERROR as `custodyRefused` (rate limited / store full / conflict / ...).
/// - relay MSG → host `bundle`; the host's `custodyAck` for it → ACK to the relay, so the
///   relay deletes only after the hub's store committed.
///
/// Every ID on both sides is a ``YaokCrypto/BundleID`` (sender user ID and message ID bound
/// together), never a bare message ID: two bundles under one message ID from different
/// senders are two bundles, and an acknowledgement for one never deletes the other.
/// - host → `registration` (0x07): a phone's signed ``Registration`` to carry.
// @unchecked: link state and counters under `lock`; `timer` only in start/stop, which the host serialises.
public final class RelayTransport: Transport, @unchecked Sendable {
    /// Largest frame on the link: a TLV header plus the largest bundle.
    public static let linkMTU = TLVRecord.headerLength + YaokWire.Bundle.maxEncodedLength
    /// Messages handed to the host and awaiting its custody ack (by bundle ID), at most.
    static let maxAwaitingHost = 1_000

    private let context: TransportContext
    private let client: RelayClient
    private let relayKey: [UInt8]
    /// The relay's nodes (`address`, or `addresses` for failover), all with the pinned key.
    private let nodes: [RelayClient.Node]
    /// The node in use, as configured.
    private var address: String { client.currentNode.name }
    private let pollIntervalMs: Int
    private let hubUserID: [UInt8]
    private let lock = NSLock()
    private let timerQueue = DispatchQueue(label: "yaok.relay.poll")
    private var timer: DispatchSourceTimer?
    private var running = false
    private var link: LinkID?
    private var nextLinkID: LinkID = 1
    private var relayKXKey = [UInt8](repeating: 0, count: 32)
    private var connected = false
    private var registered = false
    /// The relay refused our last registration for its timestamp (our clock was off): tried
    /// again as soon as the relay has told us its time.
    private var registrationRefusedAsStale = false
    private var awaitingHost: Set<[UInt8]> = []
    private var pendingRegistrations: [Registration] = []
    /// Until when each phone's carried registration asked to be collected (by user ID), for
    /// the answer the phone gets (Docs/protocol.md, registrationAnswer); at most 512 kept.
    private var carriedUntil: [[UInt8]: Int64] = [:]
    private var lastRemaining: UInt32 = 0
    private var lastError: String?
    private var framesIn: UInt64 = 0, framesOut: UInt64 = 0
    private var nodeChanges = 0

    public init(context: TransportContext) throws {
        self.context = context
        let config = context.config
        try config.rejectUnknownKeys(allowed: ["address", "addresses", "relay_key", "tls_spki_sha256", "poll_interval_s",
                                               "ping_interval_s", "failover_after_s"])
        let nodes = try Self.parseNodes(config)
        guard let key = try config.hexKey("relay_key") else {
            throw config.error("relay_key", "is required: the relay's public key (64 hex digits, from `yaok-relay key`)")
        }
        self.nodes = nodes
        self.relayKey = key
        self.pollIntervalMs = try config.int("poll_interval_s", default: 30, range: 1...86_400) * 1000
        let ping = try config.int("ping_interval_s", default: 60, range: 5...3600)
        self.hubUserID = Hash.sha256(context.identity.signingKey)
        let failoverAfter = Int64(try config.int("failover_after_s", default: 6, range: 2...300)) * 1000
        var cfg = RelayClient.Configuration(relay: nodes[0].address, relaySigningKey: key)
        cfg.makeLink = nodes[0].makeLink
        cfg.relayName = nodes[0].name
        cfg.alternates = Array(nodes.dropFirst())
        cfg.failoverSilenceMs = failoverAfter
        cfg.failoverHandshakeMs = failoverAfter
        cfg.pingIntervalMs = Int64(ping) * 1000
        cfg.eventHistory = 0   // events go to the host as they come; nothing waits on history
        let clock = context.clock
        cfg.clock = { clock.nowMilliseconds() }
        let client = RelayClient(configuration: cfg)
        self.client = client
        let identity = context.identity
        let relayKey = key
        // The hub owns its session: its registration is bound to the session's channel, so it
        // is worthless anywhere else (a fake relay that receives it cannot replay it).
        client.registrationProvider = { channel in
            guard let reg = try? Registration.owner(userSigningKey: identity.signingKey, relaySigningKey: relayKey, channel: channel,
                                                    timestampMs: clock.nowMilliseconds() + (client.relayClockOffsetMs ?? 0), nonce: identity.randomBytes(16),
                                                    sign: identity.sign) else { return [] }
            return [reg]
        }
        client.onEvent = { [weak self] event in self?.handle(event) }
    }

    /// The nodes from `address` (one) or `addresses` (a list, for failover), with their TLS
    /// pins: `tls_spki_sha256` is one pin for every `wss://` node, or a list with one pin per
    /// `wss://` node in the order they are listed.
    static func parseNodes(_ config: ConfigSection) throws -> [RelayClient.Node] {
        let key: String
        let texts: [String]
        switch (config.value("address"), config.value("addresses")) {
        case (.some, .some):
            throw config.error("addresses", "give either address (one relay) or addresses (several nodes of one relay), not both")
        case (.none, .some):
            key = "addresses"
            texts = try config.strings("addresses", default: [])
            guard !texts.isEmpty else { throw config.error(key, "needs at least one host:port or wss://host:port") }
            guard texts.count <= 16 else { throw config.error(key, "at most 16 nodes, got \(texts.count)") }
        default:
            key = "address"
            texts = [try config.requiredString("address")]
        }
        var pins: [[UInt8]] = []
        switch config.value("tls_spki_sha256") {
        case .none: break
        case .list(let items):
            for item in items {
                guard case .string(let h) = item, let pin = YaokPluginKit.Hex.decode(h), pin.count == 32 else {
                    throw config.error("tls_spki_sha256", "expected 64 hex digits or a list of them, one per wss:// address")
                }
                pins.append(pin)
            }
        default:
            guard let pin = try config.hexKey("tls_spki_sha256") else { break }
            pins = [pin]
        }
        let wssCount = texts.filter { $0.lowercased().hasPrefix("wss://") }.count
        if wssCount == 0, !pins.isEmpty {
            throw config.error("tls_spki_sha256", "only applies to a wss:// address")
        }
        if wssCount > 0, pins.isEmpty {
            throw config.error("tls_spki_sha256", "is required with a wss:// address: the SHA-256 of the relay's TLS public key (64 hex digits, from `yaok-relay tls-pin`)")
        }
        if pins.count > 1, pins.count != wssCount {
            throw config.error("tls_spki_sha256", "has \(pins.count) pins for \(wssCount) wss:// addresses: give one pin for all, or one per wss:// address in order")
        }
        var nodes: [RelayClient.Node] = []
        var wssIndex = 0
        for (i, text) in texts.enumerated() {
            let which = texts.count > 1 ? "item \(i + 1): " : ""
            if text.lowercased().hasPrefix("wss://") {
                let url: RelayWebSocketURL
                do { url = try RelayWebSocketURL(parsing: text) } catch { throw config.error(key, "\(which)\(error)") }
                let pin = pins.count == 1 ? pins[0] : pins[wssIndex]
                wssIndex += 1
                nodes.append(RelayClient.Node(address: url.address, makeLink: RelayWebSocketLink.factory(url: url, spkiSHA256: pin), name: url.description))
            } else {
                guard let a = (try? IPEndpoint.parse(text, allowingNames: true)), a.port > 0 else {
                    throw config.error(key, "\(which)expected host:port or wss://host:port, got \"\(text)\"")
                }
                nodes.append(RelayClient.Node(address: a))
            }
        }
        return nodes
    }

    // MARK: Transport

    public func start() throws {
        do {
            try client.start()
        } catch {
            throw TransportError.failed("relay \(nodes.map(\.name).joined(separator: ", ")): \(error)")
        }
        lock.withLock { running = true }
        let t = DispatchSource.makeTimerSource(queue: timerQueue)
        t.schedule(deadline: .now() + .milliseconds(pollIntervalMs), repeating: .milliseconds(pollIntervalMs))
        t.setEventHandler { [weak self] in self?.pollIfUp() }
        t.resume()
        timer = t
        context.logger.info("connecting to relay \(address)")
        context.events.statusChanged()
    }

    public func stop() {
        timer?.cancel()
        timer = nil
        lock.withLock { running = false }
        client.stop()
        reportDown("transport stopped")
    }

    public func send(_ frame: [UInt8], to id: LinkID) throws {
        guard lock.withLock({ link == id }) else { throw TransportError.unknownLink(id) }
        let record = try TLVRecord(parsing: frame)
        lock.withLock { framesOut += 1 }
        do {
            switch HostFrameType(record.type) {
            case .link(.bundle):
                try client.send(bundle: record.value)
            case .routing(.custodyAck):
                let ack = try CustodyAck(parsing: record.value)
                let known = lock.withLock { awaitingHost.remove(ack.bundleID) != nil }
                if known { try client.ack([ack.bundleID]) }
                pollAgainIfDrained()
            case .routing(.custodyRefused):
                // The relay keeps it and offers it again after its lease.
                let refusal = try CustodyRefusal(parsing: record.value)
                lock.withLock { _ = awaitingHost.remove(refusal.bundleID) }
            case .link(.ping):
                context.events.frameReceived(TLVRecord(.pong, value: record.value).encoded, on: id)
            case .routing(.registration):
                carry(record.value)
            default:
                break   // other host frames (offers, attachments) mean nothing to the relay
            }
        } catch let e as RelayProtocolError {
            throw TransportError.failed("relay: \(e)")
        }
    }

    public var status: TransportStatus {
        let c = client.counterSnapshot
        let outstanding = client.outstandingSends
        let lastSync = client.lastSync
        let clientError = client.lastError
        let node = client.currentNode
        let change = client.lastNodeChange
        let nodeText = nodes.count > 1 ? "node \(node.index + 1) of \(nodes.count) (\(node.name))" : node.name
        return lock.withLock {
            let state: TransportState = !running ? .stopped : (link != nil ? .running : .degraded)
            var reason: String
            if !running { reason = "stopped" }
            else if link != nil { reason = "registered with relay \(nodeText)" }
            else if connected { reason = "connected to relay \(nodeText); registering" }
            else { reason = "connecting to relay \(nodeText)" + (clientError.map { ": \($0)" } ?? "") }
            // `yaok-hub status` prints the reason: it says why this node is the one in use.
            if running, let change { reason += "; last move: " + Self.describe(change) }
            var details = ["address": node.name,
                           "transport": nodes[node.index].makeLink == nil ? "udp" : node.name,
                           "relay_key": YaokPluginKit.Hex.encode(relayKey.prefix(4)) + "…",
                           "connected": String(connected),
                           "registered": String(registered),
                           "last_sync": lastSync.map(String.init) ?? "never",
                           "outstanding": String(outstanding + awaitingHost.count),
                           "pending_registrations": String(pendingRegistrations.count)]
            if nodes.count > 1 {
                details["node"] = "\(node.index + 1) of \(nodes.count)"
                details["node_changes"] = String(nodeChanges)
                if let change {
                    details["last_node_change"] = Self.describe(change)
                    details["last_node_change_ms"] = String(change.atMs)
                }
            }
            return TransportStatus(
                state: state, reason: reason, links: link == nil ? 0 : 1, peers: link == nil ? 0 : 1,
                framesIn: framesIn, framesOut: framesOut, bytesIn: c.bytesIn, bytesOut: c.bytesOut,
                lastError: lastError ?? clientError,
                details: details)
        }
    }

    // MARK: Relay events

    private func handle(_ event: RelayClient.Event) {
        switch event {
        case .connected(_, let kx):
            lock.withLock {
                connected = true
                relayKXKey = kx
            }
            context.logger.info("connected to relay \(address)")
            context.events.statusChanged()
        case .disconnected(let reason):
            lock.withLock {
                connected = false
                registered = false
            }
            reportDown(reason)
        case .handshakeFailed(let error):
            lock.withLock { lastError = error.description }
            context.logger.error("relay \(address): \(error)")
            context.events.statusChanged()
        case .registered(let user, let status):
            if user != hubUserID && status != .replayed {
                // The phone hears the relay's answer through the router (status 3, replayed, is
                // the router's re-sent copy: the phone's answer came with the first).
                let until = lock.withLock { carriedUntil.removeValue(forKey: user) } ?? 0
                deliver(RegistrationAnswer(status: status.rawValue, userID: user, relayKey: relayKey,
                                           untilMs: status == .accepted ? until : 0,
                                           reason: status == .accepted ? "" : status.description).frame)
            }
            if user == hubUserID {
                hubRegistered(status)
            } else if status == .replayed {
                // The router re-sends a phone's registration whenever a relay link comes up; the
                // relay already remembers the phone behind this hub from the first one (24 h).
                context.logger.debug("relay already used this phone registration (\(Hex.encode(user.prefix(4))))")
            } else if status != .accepted {
                // The phone's ID prefix only at debug (Docs/operations.md, "What the log holds").
                context.logger.warning("relay refused a phone registration: \(status)")
                context.logger.debug("relay refused the registration of \(Hex.encode(user.prefix(4)))")
            }
        case .queued(let notice):
            deliver(CustodyAck(bundleID: notice.bundleID).frame)
        case .sendFailed(let id, let error):
            guard case .refused(let notice) = error else { return }   // timeouts: the router's custody timer retries
            // The relay's hint goes with it, so the router does not offer it again before then.
            let hint = notice.retryAfterMs > 0 ? notice.retryAfterMs / 1000 + (notice.retryAfterMs % 1000 > 0 ? 1 : 0) : nil
            deliver(CustodyRefusal(bundleID: id, reason: Self.refusalReason(notice.code), retryAfterS: hint).frame)
        case .message(let bundle, let id):
            let accept = lock.withLock { () -> Bool in
                guard link != nil, awaitingHost.count < Self.maxAwaitingHost || awaitingHost.contains(id) else { return false }
                awaitingHost.insert(id)
                return true
            }
            if accept { deliver(TLVRecord(.bundle, value: bundle).encoded) }
        case .pollDone(let remaining):
            lock.withLock { lastRemaining = remaining }
            pollAgainIfDrained()
            context.events.statusChanged()
        case .relayError(let notice):
            lock.withLock { lastError = notice.description }
            context.logger.warning("relay: \(notice)")
        case .relayTime(let offset, let roundTrip):
            context.logger.debug("relay clock: \(offset) ms from ours (round trip \(roundTrip) ms)")
            sendClock()
            // A registration refused for its timestamp is worth trying again at once.
            let retry = lock.withLock { running && connected && !registered && registrationRefusedAsStale }
            if retry, let channel = client.channelBinding, let regs = client.registrationProvider?(channel) { try? client.register(regs) }
        case .nodeChanged(let change):
            lock.withLock { nodeChanges += 1 }
            // Once per move; the reason names addresses and errors only (no user IDs, no keys).
            context.logger.warning("relay failover: \(Self.describe(change))")
            context.events.statusChanged()
        }
    }

    /// "node 1 (host:port) stopped answering at 2026-…Z: <reason>; now node 2 (host:port)".
    static func describe(_ change: RelayClient.NodeChange) -> String {
        let at = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(change.atMs) / 1000))
        return "node \(change.from + 1) (\(change.fromName)) stopped answering at \(at): \(change.reason); now node \(change.to + 1) (\(change.toName))"
    }

    /// How the router should treat a relay refusal: retry later (rate limited, full) or never.
    static func refusalReason(_ code: RelayErrorCode) -> CustodyRefusal.Reason {
        switch code {
        case .rateLimited: return .rateLimited
        case .recipientQueueFull, .relayFull, .internalError, .notRegistered: return .storeFull
        case .badSignature: return .badSignature
        case .expired: return .expired
        case .malformed, .tooLarge: return .malformed
        case .createdInFuture, .lifetimeTooLong: return .badLifetime
        case .conflict: return .conflict
        }
    }

    private func hubRegistered(_ status: RegistrationStatus) {
        guard status == .accepted else {
            lock.withLock {
                lastError = "the relay refused the hub's registration: \(status)"
                registrationRefusedAsStale = status == .staleTimestamp
            }
            context.events.statusChanged()
            // Our clock is off (±5 min window) and the relay has told us its time already (its
            // PONG can overtake the REGISTERED): a registration dated by it goes at once.
            if status == .staleTimestamp, client.relayClockOffsetMs != nil, let channel = client.channelBinding,
               let regs = client.registrationProvider?(channel) {
                context.logger.warning("the relay refused the hub's registration as stale (this hub's clock is off); registering again, dated by the relay's clock")
                try? client.register(regs)
                return
            }
            context.logger.error("the relay refused the hub's registration: \(status); retrying in 30 s")
            // E.g. our clock was off and the relay has not told us its time yet: try again then
            // (or at once when its PONG comes, above and in `.relayTime`).
            timerQueue.asyncAfter(deadline: .now() + 30) { [weak self] in
                guard let self, self.lock.withLock({ self.running && !self.registered }),
                      let channel = self.client.channelBinding,
                      let regs = self.client.registrationProvider?(channel) else { return }
                try? self.client.register(regs)
            }
            return
        }
        let (info, carried): (LinkInfo?, [Registration]) = lock.withLock {
            registered = true
            lastError = nil
            let now = relayNowMs()
            let carried = pendingRegistrations.filter { abs($0.timestampMs - now) < 5 * 60_000 }
            pendingRegistrations.removeAll()
            guard link == nil, running else { return (nil, carried) }
            let id = nextLinkID
            nextLinkID += 1
            link = id
            return (LinkInfo(id: id, peerSigningKey: relayKey, peerKXKey: relayKXKey, peerRole: .relay,
                             mtu: Self.linkMTU, cost: 100, kind: "relay", remote: address), carried)
        }
        if !carried.isEmpty { try? client.register(carried) }
        if let info {
            context.logger.info("link \(info.id) up with the relay at \(address)")
            context.metrics.increment("links_up_total")
            context.events.linkUp(info)
            sendClock()
            // The uplink is back: fetch what waited for us.
            try? client.poll()
        }
        context.events.statusChanged()
    }

    /// Our clock corrected by the relay's, where a PONG has told us the difference.
    private func relayNowMs() -> Int64 { context.clock.nowMilliseconds() + (client.relayClockOffsetMs ?? 0) }

    /// Tells the host the relay's time on the relay link (a `clock` frame, source relay;
    /// Docs/protocol.md, clock 0x0C). Sending it also says the relay reads version-2 hop headers.
    private func sendClock() {
        guard client.relayClockOffsetMs != nil else { return }
        deliver(ClockFrame(source: .relay, timeMs: relayNowMs()).frame)
    }

    private func reportDown(_ reason: String) {
        let id: LinkID? = lock.withLock {
            defer { link = nil; awaitingHost.removeAll() }
            return link
        }
        if let id {
            context.logger.info("link \(id) with the relay down: \(reason)")
            context.events.linkDown(id, reason: reason)
        }
        context.events.statusChanged()
    }

    private func deliver(_ frame: [UInt8]) {
        guard let id = lock.withLock({ () -> LinkID? in
            if link != nil { framesIn += 1 }
            return link
        }) else { return }
        context.events.frameReceived(frame, on: id)
    }

    /// Carries a phone's registration now, or when the hub is next registered. Only a v2
    /// registration carried for this hub is worth sending: the relay refuses anything else
    /// (v1 bearer tokens, owner registrations, another hub as collector), so those are
    /// dropped here with a log line naming the phone's ID prefix.
    private func carry(_ value: [UInt8]) {
        let registration: Registration
        do {
            registration = try Registration(parsing: value)
        } catch {
            // The user key sits at offset 0 in v1, 1 in v2: name the phone by its ID prefix.
            let keyOffset = value.count == Registration.v1Length ? 0 : 1
            let who = value.count >= keyOffset + 32 ? Hex.encode(Hash.sha256(Array(value[keyOffset..<keyOffset + 32])).prefix(4)) : "?"
            context.logger.warning("not carrying a phone registration: \(error)")
            context.logger.debug("not carrying the registration of \(who)")
            return
        }
        guard registration.collectorSigningKey == context.identity.signingKey else {
            context.logger.warning("not carrying a phone registration: it does not name this hub as collector")
            context.logger.debug("not carrying the registration of \(Hex.encode(registration.userID.prefix(4)))")
            return
        }
        let now = lock.withLock { () -> Bool in
            if carriedUntil.count >= 512 { carriedUntil.removeAll() }
            carriedUntil[registration.userID] = registration.untilMs
            if registered { return true }
            if pendingRegistrations.count < 512 { pendingRegistrations.append(registration) }
            return false
        }
        if now { try? client.register([registration]) }
    }

    private func pollIfUp() {
        guard lock.withLock({ link != nil }) else { return }
        try? client.poll()
    }

    /// After a round with more waiting, poll again once the host has acknowledged the round.
    private func pollAgainIfDrained() {
        let again = lock.withLock { () -> Bool in
            guard link != nil, lastRemaining > 0, awaitingHost.isEmpty else { return false }
            lastRemaining = 0
            return true
        }
        if again { try? client.poll() }
    }
}
