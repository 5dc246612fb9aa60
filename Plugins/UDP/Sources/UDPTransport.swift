import Foundation
import YaokPluginKit

/// The example transport: TLV records as UDP datagrams between hubs (and `yaok`
/// endpoints) on configured addresses. Small on purpose: it is the model for
/// plugin authors (see Plugins/UDP/README.md and Docs/plugin-guide.md).
// @unchecked: state, reason and link counts only under `lock`; the engine locks itself.
public final class UDPTransport: Transport, @unchecked Sendable {
    private let context: TransportContext
    private let engine: UDPLinkEngine
    private let lock = NSLock()
    private var state: TransportState = .stopped
    private var reason = "not started"
    private var peersSeen = Set<[UInt8]>()
    private var links = 0

    public init(context: TransportContext) throws {
        self.context = context
        let config = context.config
        try config.rejectUnknownKeys(allowed: ["listen", "peers", "idle_timeout_s", "keepalive_s", "max_sessions"])
        let listenText = try config.string("listen", default: "0.0.0.0:7811")
        guard let listen = IPEndpoint(parsing: listenText), !listen.isIPv6 else {
            throw config.error("listen", "expected IPv4 host:port, got \"\(listenText)\"")
        }
        let peers = try config.strings("peers", default: []).map { text -> IPEndpoint in
            guard let a = IPEndpoint(parsing: text), !a.isIPv6 else { throw config.error("peers", "expected IPv4 host:port, got \"\(text)\"") }
            return a
        }
        let idle = try config.int("idle_timeout_s", default: 45, range: 3...3600)
        let keepalive = try config.int("keepalive_s", default: 10, range: 1...600)
        let maxSessions = try config.int("max_sessions", default: 256, range: 1...65_536)
        let clock = context.clock
        self.engine = UDPLinkEngine(
            identity: context.identity, role: .hub, listen: listen, staticPeers: peers,
            clock: { clock.nowMilliseconds() },
            idleTimeoutMs: Int64(idle) * 1000, keepaliveMs: Int64(keepalive) * 1000, maxSessions: maxSessions)
        let sink = context.events
        let logger = context.logger
        engine.events = .init(
            linkUp: { [weak self] info in self?.linkUp(info) },
            linkDown: { [weak self] id, reason in self?.linkDown(id, reason) },
            frame: { frame, link in sink.frameReceived(frame, on: link) },
            log: { logger.warning($0) })
    }

    private func linkUp(_ info: LinkInfo) {
        lock.withLock {
            links += 1
            peersSeen.insert(info.peerSigningKey)
        }
        context.logger.info("link \(info.id) up with \(info.peerRole) at \(info.remote ?? "?")")
        context.metrics.increment("links_up_total")
        context.events.linkUp(info)
    }

    private func linkDown(_ id: LinkID, _ reason: String) {
        lock.withLock { links = max(0, links - 1) }
        context.logger.info("link \(id) down: \(reason)")
        context.events.linkDown(id, reason: reason)
    }

    public func start() throws {
        try engine.start()
        lock.withLock {
            state = .running
            reason = "listening on \(engine.boundAddress?.description ?? engine.listen.description)"
        }
        context.events.statusChanged()
    }

    public func stop() {
        engine.stop()
        lock.withLock {
            state = .stopped
            reason = "stopped"
            links = 0
        }
    }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        try engine.send(frame, to: link)
    }

    public var status: TransportStatus {
        let c = engine.counterSnapshot
        return lock.withLock {
            TransportStatus(state: state, reason: reason, links: links, peers: peersSeen.count,
                            framesIn: c.framesIn, framesOut: c.framesOut, bytesIn: c.bytesIn, bytesOut: c.bytesOut,
                            lastError: engine.lastErrorSnapshot,
                            details: ["listen": engine.boundAddress?.description ?? engine.listen.description,
                                      "static_peers": engine.staticPeers.map(\.description).joined(separator: ","),
                                      "dropped_datagrams": String(c.dropped),
                                      "handshake_failures": String(c.handshakeFailures),
                                      "cookies_sent": String(c.cookiesSent),
                                      "sealed_refused": String(c.sealedRefused),
                                      "slots_refused": String(c.slotsRefused),
                                      "half_open_evicted": String(c.halfOpenEvicted),
                                      "sessions": String(engine.sessionCount),
                                      "takeovers_refused": String(c.takeoversRefused),
                                      "version_refused": String(c.versionRefused)])
        }
    }
}
