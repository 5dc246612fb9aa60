import YaokPluginKit

/// The `wifidirect` config section, validated. Keys and defaults: Plugins/WiFiDirect/README.md.
public struct WiFiDirectSettings: Sendable, Equatable {
    public enum WPSMethod: String, Sendable { case pbc, pin }

    public var interface: String
    public var manageSupplicant: Bool
    public var supplicantPath: String
    /// The control socket used when the supplicant is not ours.
    public var ctrlInterface: String
    public var runtimeDirectory: String
    public var deviceName: String
    public var frequency: Int
    public var wpsMethod: WPSMethod
    public var wpsPin: String?
    /// Group owner IPv4 address and prefix length.
    public var groupAddress: String
    public var prefixLength: Int
    public var dhcp: Bool
    public var dnsmasqPath: String
    public var ipPath: String
    public var port: UInt16
    public var serviceName: String
    public var maxSessions: Int
    public var cost: Int
    public var readTimeoutMs: Int64
    public var queueFrames: Int
    public var queueBytes: Int
    public var groupStartTimeoutMs: Int64
    /// Records per second one phone may send (0: no limit); see `SecureStreamEngine.Settings` in the kit.
    public var maxFramesPerSecond: Int
    public var rateLimitDisconnectMs: Int64

    /// `plugin` is the host's (it names the plugin kind serving the section) and reaches us too.
    static let keys: Set<String> = [
        "plugin", "interface", "manage_supplicant", "supplicant_path", "ctrl_interface", "runtime_dir", "device_name",
        "frequency", "wps_method", "wps_pin", "group_address", "dhcp", "dnsmasq_path", "ip_path", "port",
        "service_name", "max_sessions", "cost", "read_timeout_s", "queue_frames", "queue_mb", "group_start_timeout_s",
        "max_frames_per_second", "rate_limit_disconnect_s",
    ]

    public init(config: ConfigSection, instanceName: String = "wifi-direct") throws {
        try config.rejectUnknownKeys(allowed: Self.keys)
        interface = try config.string("interface", default: "wlan0")
        guard !interface.isEmpty, interface.count < 16, !interface.contains("/"), !interface.contains(" ") else {
            throw config.error("interface", "\"\(interface)\" is not a network interface name")
        }
        manageSupplicant = try config.bool("manage_supplicant", default: true)
        supplicantPath = try config.string("supplicant_path", default: "/usr/sbin/wpa_supplicant")
        ctrlInterface = try config.string("ctrl_interface", default: "/run/wpa_supplicant/p2p-dev-\(interface)")
        runtimeDirectory = try config.string("runtime_dir", default: "/run/yaok-hub/\(instanceName)")
        guard runtimeDirectory.hasPrefix("/") else { throw config.error("runtime_dir", "must be an absolute path") }
        deviceName = try config.string("device_name", default: "yaok-hub")
        guard !deviceName.isEmpty, deviceName.utf8.count <= 32, !deviceName.contains("\n"), !deviceName.contains("\"") else {
            throw config.error("device_name", "must be 1-32 bytes without quotes or newlines")
        }
        frequency = try config.int("frequency", default: 2437)
        guard [2412, 2437, 2462].contains(frequency) else {
            throw config.error("frequency", "\(frequency) MHz is not a 2.4 GHz social channel (2412, 2437 or 2462)")
        }
        wpsMethod = WPSMethod(rawValue: try config.choice("wps_method", ["pbc", "pin"], default: "pbc")) ?? .pbc
        wpsPin = try config.optionalString("wps_pin")
        if wpsMethod == .pin {
            guard let pin = wpsPin, pin.count == 8, pin.allSatisfy(\.isASCII), pin.allSatisfy(\.isNumber) else {
                throw config.error("wps_pin", "wps_method pin needs an 8-digit wps_pin")
            }
        }
        let address = try config.string("group_address", default: "192.168.49.1/24")
        let parts = address.split(separator: "/")
        guard parts.count == 2, let prefix = Int(parts[1]), (8...30).contains(prefix), Self.isIPv4(String(parts[0])) else {
            throw config.error("group_address", "expected IPv4 address/prefix (8-30), e.g. 192.168.49.1/24, got \"\(address)\"")
        }
        groupAddress = String(parts[0])
        prefixLength = prefix
        dhcp = try config.bool("dhcp", default: true)
        dnsmasqPath = try config.string("dnsmasq_path", default: "/usr/sbin/dnsmasq")
        ipPath = try config.string("ip_path", default: "/usr/sbin/ip")
        port = UInt16(try config.int("port", default: 7814, range: 1...65_535))
        serviceName = try config.string("service_name", default: deviceName)
        guard !serviceName.isEmpty, serviceName.utf8.count <= 63 else { throw config.error("service_name", "must be 1-63 bytes (one DNS label)") }
        maxSessions = try config.int("max_sessions", default: 32, range: 1...1024)
        cost = try config.int("cost", default: 5, range: 0...1_000_000)
        readTimeoutMs = Int64(try config.double("read_timeout_s", default: 60, range: 1...3600) * 1000)
        queueFrames = try config.int("queue_frames", default: 1000, range: 1...1_000_000)
        queueBytes = try config.int("queue_mb", default: 16, range: 1...1024) << 20
        groupStartTimeoutMs = Int64(try config.double("group_start_timeout_s", default: 30, range: 1...600) * 1000)
        maxFramesPerSecond = try config.int("max_frames_per_second", default: 2000, range: 0...1_000_000)
        rateLimitDisconnectMs = Int64(try config.double("rate_limit_disconnect_s", default: 5, range: 0.1...3600) * 1000)
    }

    static func isIPv4(_ s: String) -> Bool {
        let octets = s.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets.allSatisfy { o in o.count <= 3 && Int(o).map { (0...255).contains($0) } == true }
    }

    /// The DHCP pool: .10 to .250 of a /24 (or the host range of smaller nets, skipping the GO's address).
    public var dhcpRange: (String, String) {
        let o = groupAddress.split(separator: ".").compactMap { UInt32($0) }
        let ip = o[0] << 24 | o[1] << 16 | o[2] << 8 | o[3]
        let mask: UInt32 = prefixLength == 0 ? 0 : ~UInt32(0) << UInt32(32 - prefixLength)
        let net = ip & mask, broadcast = net | ~mask
        let size = broadcast - net
        var first = net + min(10, size / 4 + 1), last = broadcast - min(5, size / 8 + 1)
        if ip >= first && ip <= last && ip - first < last - ip { first = ip + 1 } else if ip >= first && ip <= last { last = ip - 1 }
        func text(_ v: UInt32) -> String { "\(v >> 24).\(v >> 16 & 255).\(v >> 8 & 255).\(v & 255)" }
        return (text(first), text(last))
    }

    public var netmask: String {
        let mask: UInt32 = ~UInt32(0) << UInt32(32 - prefixLength)
        return "\(mask >> 24).\(mask >> 16 & 255).\(mask >> 8 & 255).\(mask & 255)"
    }
}
