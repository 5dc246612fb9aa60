import YaokATT

/// The Ya OK GATT service and its characteristics. 128-bit UUIDs share one random base,
/// `985eXXXX-a6d1-4b8d-91e4-1f4ec90c658a`, with XXXX 0001…0005 (documented in Plugins/BLE/README.md).
public enum YaokGATT {
    /// The Ya OK service, advertised by every hub.
    public static let serviceUUID = uuid(0x0001)
    /// Identity (read): role(1) = 2 (hub) || Ed25519 public key(32) || X25519 public key(32).
    public static let identityUUID = uuid(0x0002)
    /// Message RX (write, write without response): chunks of frames from the phone.
    public static let rxUUID = uuid(0x0003)
    /// Message TX (notify): chunks of frames to the phone.
    public static let txUUID = uuid(0x0004)
    /// Control (read, write): read → version(1) = 1, link state(1) (0 handshaking, 1 up);
    /// write 0x01 → drop the partly received frame.
    public static let controlUUID = uuid(0x0005)

    public static let protocolVersion: UInt8 = 1
    public static let controlResetReassembly: UInt8 = 0x01

    package static let deviceName = ATTUUID(0x2A00)
    package static let appearance = ATTUUID(0x2A01)
    package static let serviceChanged = ATTUUID(0x2A05)
    package static let gapService = ATTUUID(0x1800)
    package static let gattService = ATTUUID(0x1801)

    /// `985eXXXX-a6d1-4b8d-91e4-1f4ec90c658a` as big-endian bytes.
    package static func uuidBytes(_ short: UInt16) -> [UInt8] {
        [0x98, 0x5e, UInt8(short >> 8), UInt8(short & 0xFF), 0xa6, 0xd1, 0x4b, 0x8d,
         0x91, 0xe4, 0x1f, 0x4e, 0xc9, 0x0c, 0x65, 0x8a]
    }

    package static func uuid(_ short: UInt16) -> ATTUUID {
        // 16 bytes always form a valid 128-bit UUID.
        ATTUUID(bigEndianBytes: uuidBytes(short)) ?? ATTUUID(0)
    }

    /// The hub's GATT database and where its characteristics landed.
    public struct Database: Sendable {
        public let table: AttributeTable
        public let identity: UInt16
        public let rx: UInt16
        public let tx: UInt16
        public let txCCCD: UInt16
        public let control: UInt16
        public let deviceName: UInt16
    }

    /// GAP (Device Name, Appearance), GATT (Service Changed) and the Ya OK service.
    public static func database(name: String, identity: [UInt8]) throws -> Database {
        var b = GATTDatabaseBuilder()
        try b.addService(gapService)
        let nameBytes = Array(name.utf8)
        let nameHandles = try b.addCharacteristic(deviceName, properties: .read, permissions: .read,
                                                  value: nameBytes, maxLength: nameBytes.count)
        _ = try b.addCharacteristic(appearance, properties: .read, permissions: .read, value: [0, 0], maxLength: 2)
        try b.addService(gattService)
        _ = try b.addCharacteristic(serviceChanged, properties: .indicate, permissions: [], value: [0x01, 0x00, 0xFF, 0xFF], maxLength: 4)
        try b.addService(serviceUUID)
        let identityHandles = try b.addCharacteristic(identityUUID, properties: .read, permissions: .read,
                                                      value: identity, maxLength: identity.count,
                                                      userDescription: "Ya OK hub identity")
        let rx = try b.addCharacteristic(rxUUID, properties: [.write, .writeWithoutResponse], permissions: .write,
                                         value: [], maxLength: ATTLimits.maxValueLength)
        let tx = try b.addCharacteristic(txUUID, properties: .notify, permissions: [], value: [],
                                         maxLength: ATTLimits.maxValueLength)
        let control = try b.addCharacteristic(controlUUID, properties: [.read, .write], permissions: .readWrite,
                                              value: [protocolVersion, 0], maxLength: 2)
        return Database(table: try b.build(), identity: identityHandles.value, rx: rx.value, tx: tx.value,
                        txCCCD: tx.cccd ?? 0, control: control.value, deviceName: nameHandles.value)
    }
}
