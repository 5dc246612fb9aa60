import YaokBluetooth
import YaokPluginKit

/// The BLE transport's config section (`transports.<name>` with `plugin: ble`).
/// Keys and defaults are documented in Plugins/BLE/README.md.
public struct BLEConfig: Sendable, Equatable {
    /// The HCI adapter, e.g. "hci0".
    public var adapter: String
    /// Its index (the N of hciN).
    public var adapterIndex: UInt16
    /// The short name put in the scan response (at most 29 bytes of UTF-8).
    public var name: String
    /// Advertising interval in milliseconds (20...10240).
    public var advertisingIntervalMs: Int
    /// Most centrals (phones) connected at once.
    public var maxConnections: Int
    /// The server's ATT receive MTU offered in Exchange MTU (23...517).
    public var mtu: Int
    /// How long a partly received frame may wait for its remaining chunks, in seconds.
    public var reassemblyTimeoutSeconds: Int

    /// The keys this transport understands (besides `enabled` and `plugin`).
    public static let keys: Set<String> = ["plugin", "adapter", "name", "advertising_interval_ms",
                                           "max_connections", "mtu", "reassembly_timeout_s"]
    /// Scan response: 31 bytes minus the 2-byte AD header.
    public static let maxNameBytes = 29

    /// Defaults, as documented.
    public init(adapter: String = "hci0", name: String = "yaok-hub", advertisingIntervalMs: Int = 200,
                maxConnections: Int = 10, mtu: Int = 517, reassemblyTimeoutSeconds: Int = 30) {
        self.adapter = adapter
        self.adapterIndex = BluetoothKernel.adapterIndex(adapter) ?? 0
        self.name = name
        self.advertisingIntervalMs = advertisingIntervalMs
        self.maxConnections = maxConnections
        self.mtu = mtu
        self.reassemblyTimeoutSeconds = reassemblyTimeoutSeconds
    }

    /// Reads and validates a config section; throws ``ConfigError`` naming the key and line.
    public init(section config: ConfigSection) throws {
        try config.rejectUnknownKeys(allowed: Self.keys)
        let adapter = try config.string("adapter", default: "hci0")
        guard let index = BluetoothKernel.adapterIndex(adapter) else {
            throw config.error("adapter", "expected an HCI adapter name like \"hci0\", got \"\(adapter)\"")
        }
        let name = try config.string("name", default: "yaok-hub")
        guard !name.isEmpty else { throw config.error("name", "must not be empty") }
        guard name.utf8.count <= Self.maxNameBytes else {
            throw config.error("name", "is \(name.utf8.count) bytes of UTF-8; the scan response holds at most \(Self.maxNameBytes)")
        }
        self.adapter = adapter
        self.adapterIndex = index
        self.name = name
        // Core Spec Vol 4 Part E 7.8.5: 0x0020...0x4000 units of 0.625 ms.
        self.advertisingIntervalMs = try config.int("advertising_interval_ms", default: 200, range: 20...10_240)
        self.maxConnections = try config.int("max_connections", default: 10, range: 1...64)
        self.mtu = try config.int("mtu", default: 517, range: 23...517)
        self.reassemblyTimeoutSeconds = try config.int("reassembly_timeout_s", default: 30, range: 1...600)
    }

    /// The interval in controller units of 0.625 ms.
    public var advertisingIntervalUnits: UInt16 {
        UInt16(clamping: (advertisingIntervalMs * 1000 + 624) / 625)
    }
}
