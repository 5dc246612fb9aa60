import YaokPluginKit

/// One `transports.<name>` section.
public struct TransportSection: Sendable, Equatable {
    /// The instance name (the section key).
    public var name: String
    /// The plugin kind that serves it (`plugin:` key, default: the name).
    public var kind: String
    public var enabled: Bool
    /// Roles a peer may claim on this transport (`peer_roles`, host-level; the plugin never
    /// sees the key). The relay role is governed by `relay_key` pinning instead.
    public var peerRoles: Set<PeerRole>
    /// The whole section as the plugin will see it.
    public var section: ConfigSection
    /// Address space of its plugin process, MB (`memory_limit_mb`, host-level; 0: unbounded).
    public var memoryLimitMB: Int = TransportSection.defaultMemoryLimitMB
    public static let defaultMemoryLimitMB = 1024
    /// Linux capabilities its plugin process keeps (`capabilities`, host-level; default by
    /// kind: ``defaultCapabilities(kind:)``). Every other one is dropped before plugin code runs.
    public var capabilities: [String] = []
    /// A standalone program serving the section instead of a plugin library (`command`,
    /// host-level): its argument vector, the program an absolute path. It speaks
    /// Docs/plugin-protocol.md on fd 3.
    public var command: [String]?

    public init(name: String, kind: String, enabled: Bool, peerRoles: Set<PeerRole>, section: ConfigSection,
                memoryLimitMB: Int = TransportSection.defaultMemoryLimitMB, capabilities: [String] = [], command: [String]? = nil) {
        self.name = name; self.kind = kind; self.enabled = enabled; self.peerRoles = peerRoles; self.section = section
        self.memoryLimitMB = memoryLimitMB; self.capabilities = capabilities; self.command = command
    }

    /// Capability names a section may list, and their `CAP_*` numbers.
    public static let capabilityNumbers: [String: Int] = [
        "kill": 5, "setgid": 6, "setuid": 7, "net_bind_service": 10, "net_broadcast": 11, "net_admin": 12, "net_raw": 13,
    ]

    /// What each in-tree plugin needs: BLE opens raw HCI sockets and configures the adapter;
    /// Wi-Fi Direct runs wpa_supplicant (packet sockets), dnsmasq (DHCP on port 67; started
    /// as root it drops to nobody/dip, which takes setuid/setgid, and then only kill can end
    /// it) and `ip`. Others need none. Under the packaged unit the hub is not root and its
    /// bounding set has only the net_* ones, so the others are never actually held there.
    public static func defaultCapabilities(kind: String) -> [String] {
        switch kind {
        case "ble": return ["net_admin", "net_raw"]
        case "wifidirect": return ["net_admin", "net_bind_service", "net_raw", "setgid", "setuid", "kill"]
        default: return []
        }
    }

    /// The kept set as a bit mask for the plugin process.
    public var capabilityMask: UInt64 {
        capabilities.reduce(0) { $0 | (1 << UInt64(Self.capabilityNumbers[$1] ?? 63)) }
    }

    /// The settings that matter for restart decisions: values without line numbers.
    public var settings: [String: ConfigValue] { section.entries.mapValues(\.value) }
}
