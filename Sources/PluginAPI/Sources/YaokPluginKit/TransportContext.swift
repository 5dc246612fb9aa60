import CYaokPlugin

/// An authenticated link, as reported to the host by ``LinkEventSink/linkUp(_:)``.
public struct LinkInfo: Sendable, Equatable {
    public var id: LinkID
    /// The peer's Ed25519 public key, proven by the link handshake.
    public var peerSigningKey: [UInt8]
    /// The peer's X25519 public key.
    public var peerKXKey: [UInt8]
    public var peerRole: PeerRole
    /// Largest frame one ``Transport/send(_:to:)`` may carry on this link.
    public var mtu: Int
    /// Routing cost; lower is preferred.
    public var cost: Int
    /// Short kind, e.g. "udp", "ble", "tcp".
    public var kind: String
    /// The remote address, for status.
    public var remote: String?
    /// The handshake's proof of the peer (``SecureLink/proof``): without it the host refuses
    /// the link (Docs/plugin-protocol.md, "Proving a link-up").
    public var proof: LinkProof?

    public init(id: LinkID, peerSigningKey: [UInt8], peerKXKey: [UInt8], peerRole: PeerRole,
                mtu: Int, cost: Int, kind: String, remote: String? = nil, proof: LinkProof? = nil) {
        self.proof = proof
        self.id = id
        self.peerSigningKey = peerSigningKey
        self.peerKXKey = peerKXKey
        self.peerRole = peerRole
        self.mtu = mtu
        self.cost = cost
        self.kind = kind
        self.remote = remote
    }
}

/// Where a transport reports links and received frames: the host. Thread-safe.
///
/// It is ``LinkEvents``, so a transport can hand it straight to a link engine; the engine's
/// log lines then go to the host's log (as ``TransportContext/logger``'s) and its counters and
/// gauges to the host's metrics (as ``TransportContext/metrics``').
public struct LinkEventSink: LinkEvents {
    let host: HostAPI

    /// Reports an authenticated link.
    public func linkUp(_ link: LinkInfo) { host.linkUp(link) }
    /// Reports that a link went away.
    public func linkDown(_ id: LinkID, reason: String?) { host.linkDown(id, reason: reason) }
    /// Hands one received frame (a TLV record) to the host.
    public func frameReceived(_ frame: [UInt8], on link: LinkID) { host.frameReceived(frame, link: link) }
    /// Tells the host that status changed.
    public func statusChanged() { host.statusChanged() }
    /// Logs a line, labelled with the instance by the host.
    public func log(_ level: LogLevel, _ message: String) { host.log(level.hostLevel, message) }
    /// Adds `value` to a counter (``PluginMetrics/increment(_:by:)``).
    public func increment(_ name: String, by value: Double) { host.metric(kind: YAOK_METRIC_COUNTER_ADD, name: name, value: value) }
    /// Sets a gauge (``PluginMetrics/gauge(_:_:)``).
    public func gauge(_ name: String, _ value: Double) { host.metric(kind: YAOK_METRIC_GAUGE_SET, name: name, value: value) }
}

extension LogLevel {
    var hostLevel: yaok_log_level {
        switch self {
        case .trace: return YAOK_LOG_TRACE
        case .debug: return YAOK_LOG_DEBUG
        case .info: return YAOK_LOG_INFO
        case .notice: return YAOK_LOG_NOTICE
        case .warning: return YAOK_LOG_WARNING
        case .error: return YAOK_LOG_ERROR
        }
    }
}

/// The hub's identity as a plugin sees it: public keys and a signing function, never the secret key.
public struct HubIdentity: Sendable {
    let host: HostAPI
    /// The hub's Ed25519 public key.
    public let signingKey: [UInt8]
    /// The hub's X25519 public key.
    public let kxKey: [UInt8]

    /// Signs `message` with the hub's Ed25519 key.
    public func sign(_ message: [UInt8]) throws -> [UInt8] { try host.sign(message) }
    /// Verifies an Ed25519 signature (a convenience from the host's crypto library).
    public func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
        host.verify(publicKey: publicKey, message: message, signature: signature)
    }
    /// Random bytes from the host's CSPRNG.
    public func randomBytes(_ count: Int) -> [UInt8] { host.randomBytes(count) }
}

/// Clocks, from the host.
public struct PluginClock: Sendable {
    let host: HostAPI
    /// Wall clock, UTC milliseconds since the Unix epoch.
    public func nowMilliseconds() -> Int64 { host.nowMilliseconds() }
    /// Monotonic nanoseconds, for timeouts.
    public func monotonicNanoseconds() -> UInt64 { host.monotonicNanoseconds() }
}

/// Metrics, recorded by the host under `yaok_transport_<name>{instance="..."}`.
public struct PluginMetrics: Sendable {
    let host: HostAPI
    /// Adds `value` to a counter.
    public func increment(_ name: String, by value: Double = 1) { host.metric(kind: YAOK_METRIC_COUNTER_ADD, name: name, value: value) }
    /// Sets a gauge.
    public func gauge(_ name: String, _ value: Double) { host.metric(kind: YAOK_METRIC_GAUGE_SET, name: name, value: value) }
}

/// A logger labelled with the plugin's instance name by the host.
public struct PluginLogger: Sendable {
    let host: HostAPI
    public func trace(_ message: @autoclosure () -> String) { host.log(YAOK_LOG_TRACE, message()) }
    public func debug(_ message: @autoclosure () -> String) { host.log(YAOK_LOG_DEBUG, message()) }
    public func info(_ message: @autoclosure () -> String) { host.log(YAOK_LOG_INFO, message()) }
    public func notice(_ message: @autoclosure () -> String) { host.log(YAOK_LOG_NOTICE, message()) }
    public func warning(_ message: @autoclosure () -> String) { host.log(YAOK_LOG_WARNING, message()) }
    public func error(_ message: @autoclosure () -> String) { host.log(YAOK_LOG_ERROR, message()) }
}

/// Everything the host hands a transport instance.
public struct TransportContext: Sendable {
    /// The config instance name, e.g. "udp".
    public let instanceName: String
    /// The transport's own config section, with typed access.
    public let config: ConfigSection
    public let logger: PluginLogger
    public let identity: HubIdentity
    public let metrics: PluginMetrics
    public let clock: PluginClock
    public let events: LinkEventSink

    init(host: HostAPI, config: ConfigSection) {
        self.instanceName = host.instanceName
        self.config = config
        self.logger = PluginLogger(host: host)
        self.identity = HubIdentity(host: host, signingKey: host.hubSigningKey, kxKey: host.hubKXKey)
        self.metrics = PluginMetrics(host: host)
        self.clock = PluginClock(host: host)
        self.events = LinkEventSink(host: host)
    }
}

/// The hub's identity is what a plugin's link sessions prove (``SecureLink``).
extension HubIdentity: LinkIdentity {}
