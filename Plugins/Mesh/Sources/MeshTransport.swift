import Foundation
import YaokPluginKit

/// Hub-to-hub links over IP: multicast beacons find neighbours, authenticated TCP
/// sessions carry TLV records. Routing, storage and custody stay in the host.
/// Keys, status and metrics: Plugins/Mesh/README.md.
// @unchecked: `state` and `startError` only under `lock`; the engine locks itself.
public final class MeshTransport: Transport, @unchecked Sendable {
    private let context: TransportContext
    private let engine: MeshEngine
    private let lock = NSLock()
    private var state: TransportState = .stopped
    private var startError: String?

    public init(context: TransportContext) throws {
        self.context = context
        let settings = try MeshSettings(config: context.config)
        let clock = context.clock
        engine = MeshEngine(identity: context.identity, settings: settings,
                            wallClockMs: { clock.nowMilliseconds() }, monotonicNs: { clock.monotonicNanoseconds() },
                            events: context.events)
    }

    public func start() throws {
        do {
            try engine.start()
        } catch {
            lock.withLock {
                state = .failed
                startError = "\(error)"
            }
            throw error
        }
        lock.withLock {
            state = .running
            startError = nil
        }
        context.events.statusChanged()
    }

    public func stop() {
        engine.stop()
        lock.withLock { state = .stopped }
    }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        try engine.send(frame, to: link)
    }

    public var status: TransportStatus {
        let snap = engine.snapshot
        let (baseState, startError) = lock.withLock { (self.state, self.startError) }
        let settings = engine.settings
        var state: TransportState = baseState
        var reason: String
        switch baseState {
        case .failed: reason = startError ?? "failed"
        case .stopped: reason = "stopped"
        default:
            reason = "listening on TCP \(snap.listen)\(snap.listen6.map { " and \($0)" } ?? ""); \(snap.neighbours.count) neighbour(s)"
            if settings.discovery {
                if let problem = snap.beaconProblem {
                    state = .degraded
                    reason = "discovery unavailable (\(problem)); \(reason)"
                } else if !snap.missingInterfaces.isEmpty {
                    state = .degraded
                    reason = "beacon interface(s) unavailable: \(snap.missingInterfaces.joined(separator: ", ")); \(reason)"
                } else if snap.interfaces.isEmpty {
                    state = .degraded
                    reason = "no up, non-loopback interface with an IPv4\(settings.ipv6 ? " or link-local IPv6" : "") address to beacon on; \(reason)"
                }
            }
        }
        let c = snap.counters
        var details: [String: String] = [
            "listen": snap.listen,
            "discovery": settings.discovery
                ? "\(settings.multicastGroup)\(settings.ipv6 ? ", [\(settings.multicastGroup6)]" : ""):\(settings.beaconPort) every \(Double(settings.beaconIntervalMs) / 1000) s" : "off",
            "ipv6": !settings.ipv6 ? "off" : snap.ipv6Problem.map { "unavailable: \($0)" } ?? "on",
            "listen6": snap.listen6 ?? "",
            "interfaces": snap.interfaces.joined(separator: ","),
            "static_peers": settings.peers.map(\.description).joined(separator: ","),
            "neighbours": snap.neighbours.joined(separator: ","),
            "sessions": String(snap.sessions),
            "beacons_sent": String(c.beaconsSent),
            "beacons_received": String(c.beaconsReceived),
            "beacons_bad": String(c.beaconsBad),
            "beacons_stale": String(c.beaconsStale),
            "beacons_malformed": String(c.beaconsMalformed),
            "beacons_dropped": String(c.beaconsDropped),
            "links_up_total": String(c.linksUpTotal),
            "connect_failures": String(c.connectFailures),
            "handshake_failures": String(c.handshakeFailures),
            "refused_role": String(c.refusedRole),
            "refused_max_sessions": String(c.refusedFull),
            "half_open_evicted": String(c.halfOpenEvicted),
            "crowd_evicted": String(c.crowdEvicted),
            "trusted_displaced": String(c.trustedDisplaced),
            "duplicates_closed": String(c.duplicatesClosed),
            "unsealed_frames": String(c.unsealedFrames),
            "disconnects_misbehaviour": String(c.misbehaviourDisconnects),
            "throttled": String(c.throttled),
            "queue_full": String(c.queueFull),
            "bundles_in": String(c.bundlesIn),
            "bundles_out": String(c.bundlesOut),
            "bundles_by_peer": snap.bundlesByPeer.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value.0)/\($0.value.1)" }.joined(separator: ","),
        ]
        if !snap.missingInterfaces.isEmpty { details["missing_interfaces"] = snap.missingInterfaces.joined(separator: ",") }
        return TransportStatus(state: state, reason: reason, links: snap.neighbours.count, peers: snap.peersSeen,
                               framesIn: c.framesIn, framesOut: c.framesOut, bytesIn: c.bytesIn, bytesOut: c.bytesOut,
                               lastError: snap.lastError, details: details)
    }
}
