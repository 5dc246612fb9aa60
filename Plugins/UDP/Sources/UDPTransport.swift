import Foundation
import Synchronization
import YaokPluginKit

/// The example transport: TLV records as UDP datagrams between hubs (and `yaok`
/// endpoints) on configured addresses. Small on purpose: it is the model for
/// plugin authors (see Plugins/UDP/README.md and Docs/plugin-guide.md).
// @unchecked: state and reason only under `lock`; the engine and the link tally lock themselves.
public final class UDPTransport: Transport, @unchecked Sendable {
    private let context: TransportContext
    private let engine: UDPLinkEngine
    private let tally: LinkTally
    private let lock = NSLock()
    private var state: TransportState = .stopped
    private var reason = "not started"

    /// The engine's events on their way to the host: links up and down are logged, counted for
    /// status and metrics, and passed on; frames and log lines go straight through.
    private final class LinkTally: LinkEvents {
        let context: TransportContext
        /// Links up now, and every peer key seen.
        let counts = Mutex((links: 0, peers: Set<[UInt8]>()))

        init(context: TransportContext) { self.context = context }

        func linkUp(_ info: LinkInfo) {
            counts.withLock {
                $0.links += 1
                $0.peers.insert(info.peerSigningKey)
            }
            // A phone's address only at debug (Docs/operations.md, "What the log holds").
            if info.peerRole == .endpoint {
                context.logger.info("link \(info.id) up with an endpoint")
                context.logger.debug("link \(info.id): endpoint at \(info.remote ?? "?")")
            } else {
                context.logger.info("link \(info.id) up with \(info.peerRole) at \(info.remote ?? "?")")
            }
            context.metrics.increment("links_up_total")
            context.events.linkUp(info)
        }

        func linkDown(_ id: LinkID, reason: String?) {
            counts.withLock { $0.links = max(0, $0.links - 1) }
            context.logger.info("link \(id) down: \(reason ?? "")")
            context.events.linkDown(id, reason: reason)
        }

        func frameReceived(_ frame: [UInt8], on link: LinkID) { context.events.frameReceived(frame, on: link) }
        func statusChanged() { context.events.statusChanged() }
        func log(_ level: LogLevel, _ message: String) { context.events.log(level, message) }
    }

    public init(context: TransportContext) throws {
        self.context = context
        let config = context.config
        try config.rejectUnknownKeys(allowed: ["listen", "peers", "idle_timeout_s", "keepalive_s", "max_sessions"])
        let listenText = try config.string("listen", default: "0.0.0.0:7811")
        let listen = try config.ipv4Endpoint("listen", text: listenText)
        let peers = try config.strings("peers", default: []).map { try config.ipv4Endpoint("peers", text: $0) }
        let idle = try config.int("idle_timeout_s", default: 45, range: 3...3600)
        let keepalive = try config.int("keepalive_s", default: 10, range: 1...600)
        let maxSessions = try config.int("max_sessions", default: 256, range: 1...65_536)
        let clock = context.clock
        tally = LinkTally(context: context)
        self.engine = UDPLinkEngine(
            identity: context.identity, role: .hub, listen: listen, staticPeers: peers,
            clock: { clock.nowMilliseconds() }, events: tally,
            idleTimeoutMs: Int64(idle) * 1000, keepaliveMs: Int64(keepalive) * 1000, maxSessions: maxSessions)
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
        }
        tally.counts.withLock { $0.links = 0 }
    }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        try engine.send(frame, to: link)
    }

    public var status: TransportStatus {
        let c = engine.counterSnapshot
        let (links, peers) = tally.counts.withLock { ($0.links, $0.peers.count) }
        return lock.withLock {
            TransportStatus(state: state, reason: reason, links: links, peers: peers,
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
                                      "version_refused": String(c.versionRefused),
                                      "handshake_records_ignored": String(c.handshakeRecordsIgnored),
                                      "hello_repeats": String(c.helloRepeats),
                                      "sessions_evicted": String(c.sessionsEvicted)])
        }
    }
}
