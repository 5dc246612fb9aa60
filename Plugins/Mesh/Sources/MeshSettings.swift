import YaokPluginKit

/// The mesh transport's config section, validated. Keys and defaults are
/// documented in Plugins/Mesh/README.md.
public struct MeshSettings: Sendable, Equatable {
    /// Interfaces that send and hear beacons; empty means every up, multicast-capable, non-loopback
    /// interface with an IPv4 address or (with ``ipv6``) a link-local IPv6 address.
    public var interfaces: [String]
    /// Where the TCP listener binds.
    public var listen: IPEndpoint
    /// Hubs dialled whether or not they beacon.
    public var peers: [IPEndpoint]
    /// Whether multicast beacons are sent and heard.
    public var discovery: Bool
    /// IPv4 multicast group of the beacons.
    public var multicastGroup: String
    /// Whether beacons also go out (and are heard) on IPv6 link-local multicast, and an
    /// IPv6 listener takes sessions dialled to our link-local addresses.
    public var ipv6: Bool
    /// IPv6 multicast group (link-local scope) of the beacons, joined on each beacon interface.
    public var multicastGroup6: String
    /// UDP port of the beacons.
    public var beaconPort: UInt16
    /// Milliseconds between beacons.
    public var beaconIntervalMs: Int64
    /// Sessions (any state, both directions) held at once.
    public var maxSessions: Int
    /// Frames waiting to be written on one session before `send` refuses.
    public var queueFrames: Int
    /// Bytes waiting to be written on one session before `send` refuses.
    public var queueBytes: Int
    /// Routing cost reported with each link.
    public var cost: Int
    /// Milliseconds of silence after which a ping is sent.
    public var keepaliveMs: Int64
    /// Milliseconds of silence after which a session is closed.
    public var idleTimeoutMs: Int64
    /// Frames per second one peer may send before it is throttled (and, if it persists, disconnected).
    public var maxFramesPerSecond: Int
    /// Dial timeout.
    public var connectTimeoutMs: Int64 = 10_000
    /// Time a new session has to complete the link handshake.
    public var handshakeTimeoutMs: Int64 = 10_000
    /// Beacon-table entries (distinct hubs heard) kept at once.
    public var maxBeaconTable: Int = 256
    /// Hubs trusted by name (`router.trusted_hubs`, passed by the host): heard by beacon, they
    /// get a reserved slot and may take a stranger's session (README, "Trusted hubs").
    public var trustedHubKeys: Set<[UInt8]> = []

    /// Every key the section accepts (besides `enabled`).
    public static let keys: Set<String> = [
        "interfaces", "listen", "peers", "discovery", "multicast_group", "ipv6", "ipv6_multicast_group", "beacon_port", "beacon_interval_s",
        "max_sessions", "queue_frames", "queue_mb", "cost", "keepalive_s", "idle_timeout_s", "max_frames_per_second",
    ]

    /// Reads and validates the section; throws ``ConfigError`` naming the key and line.
    public init(config: ConfigSection) throws {
        try config.rejectUnknownKeys(allowed: Self.keys)
        interfaces = try config.strings("interfaces", default: [])
        for name in interfaces where name.isEmpty || name.utf8.count > 15 {
            throw config.error("interfaces", "\"\(name)\" is not an interface name (1–15 characters)")
        }
        let listenText = try config.string("listen", default: "0.0.0.0:7813")
        let listen: IPEndpoint
        do {
            listen = try config.ipv4Endpoint("listen", text: listenText)
        } catch let e as ConfigError where (try? IPEndpoint.parse(listenText))?.isIPv6 == true {
            throw ConfigError(keyPath: e.keyPath, line: e.line, message: e.message + " (with ipv6: true the IPv6 listener takes the same port on [::])")
        }
        self.listen = listen
        peers = try config.strings("peers", default: []).map { text in
            guard let a = IPEndpoint(parsing: text), a.port != 0 else {
                throw config.error("peers", "expected host:port (IPv4) or [ipv6%interface]:port, got \"\(text)\"")
            }
            guard !a.isLinkLocal6 || a.scopeID != 0 else {
                throw config.error("peers", "the link-local address in \"\(text)\" needs its interface: [fe80::…%eth0]:port")
            }
            return a
        }
        discovery = try config.bool("discovery", default: true)
        multicastGroup = try config.string("multicast_group", default: "239.255.89.79")
        guard IPEndpoint.isMulticast(multicastGroup) else {
            throw config.error("multicast_group", "\"\(multicastGroup)\" is not an IPv4 multicast address (224.0.0.0/4)")
        }
        ipv6 = try config.bool("ipv6", default: true)
        multicastGroup6 = try config.string("ipv6_multicast_group", default: "ff02::5961:6f6b")
        guard IPEndpoint.isLinkLocalMulticast6(multicastGroup6) else {
            throw config.error("ipv6_multicast_group", "\"\(multicastGroup6)\" is not an IPv6 link-local multicast address (ff02::/16)")
        }
        beaconPort = UInt16(try config.int("beacon_port", default: 7812, range: 1...65_535))
        beaconIntervalMs = Int64(try config.double("beacon_interval_s", default: 5, range: 0.1...3600) * 1000)
        maxSessions = try config.int("max_sessions", default: 32, range: 1...4096)
        queueFrames = try config.int("queue_frames", default: 1000, range: 1...1_000_000)
        queueBytes = try config.int("queue_mb", default: 16, range: 1...1024) << 20
        cost = try config.int("cost", default: 20, range: 0...1_000_000)
        keepaliveMs = Int64(try config.double("keepalive_s", default: 15, range: 0.1...3600) * 1000)
        idleTimeoutMs = Int64(try config.double("idle_timeout_s", default: 60, range: 0.3...86_400) * 1000)
        guard idleTimeoutMs > keepaliveMs else {
            throw config.error("idle_timeout_s", "must be longer than keepalive_s (\(keepaliveMs / 1000) s), or idle links would close between pings")
        }
        maxFramesPerSecond = try config.int("max_frames_per_second", default: 4000, range: 10...1_000_000)
        trustedHubKeys = Set(config.trustedHubKeys)
    }
}
