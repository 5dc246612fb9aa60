/// Characteristic properties, the first octet of a «Characteristic» declaration value
/// (Core Spec Vol 3 Part G 3.3.1.1).
public struct GATTCharacteristicProperties: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let broadcast = GATTCharacteristicProperties(rawValue: 0x01)
    public static let read = GATTCharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = GATTCharacteristicProperties(rawValue: 0x04)
    public static let write = GATTCharacteristicProperties(rawValue: 0x08)
    public static let notify = GATTCharacteristicProperties(rawValue: 0x10)
    public static let indicate = GATTCharacteristicProperties(rawValue: 0x20)
    public static let authenticatedSignedWrites = GATTCharacteristicProperties(rawValue: 0x40)
    public static let extendedProperties = GATTCharacteristicProperties(rawValue: 0x80)
}

/// Values of GATT declarations and descriptors, for building tables by hand.
public enum GATTDeclaration {
    /// «Primary/Secondary Service» value: the service UUID (2 or 16 octets).
    public static func serviceValue(_ uuid: ATTUUID) -> [UInt8] { uuid.littleEndianBytes }

    /// «Include» value: included service handle, its end group handle, and its UUID only
    /// when that is a 16-bit UUID (Vol 3 Part G 3.2).
    public static func includeValue(serviceHandle: UInt16, endGroupHandle: UInt16, uuid: ATTUUID) -> [UInt8] {
        var value: [UInt8] = []
        value.appendLE16(serviceHandle)
        value.appendLE16(endGroupHandle)
        if let short = uuid.uuid16 { value.appendLE16(short) }
        return value
    }

    /// «Characteristic» value: properties, value handle, characteristic UUID.
    public static func characteristicValue(properties: GATTCharacteristicProperties,
                                           valueHandle: UInt16, uuid: ATTUUID) -> [UInt8] {
        var value: [UInt8] = [properties.rawValue]
        value.appendLE16(valueHandle)
        value += uuid.littleEndianBytes
        return value
    }
}

/// The handles one `addCharacteristic` call allocated.
public struct GATTCharacteristicHandles: Hashable, Sendable {
    public let declaration: UInt16
    public let value: UInt16
    public let cccd: UInt16?
    public let userDescription: UInt16?
}

/// Why the builder could not add an attribute.
public enum GATTBuilderError: Error, Equatable, CustomStringConvertible {
    /// Handles would pass 0xFFFF.
    case outOfHandles

    public var description: String {
        switch self {
        case .outOfHandles: return "GATT database is full: no handle left below 0xFFFF"
        }
    }
}

/// Builds an `AttributeTable` in GATT layout, allocating consecutive handles.
/// It is only a convenience: the result is ordinary attributes.
public struct GATTDatabaseBuilder: Sendable {
    public private(set) var attributes: [Attribute] = []
    private var nextHandle: UInt32

    /// Starts allocating at `firstHandle` (non-zero).
    public init(firstHandle: UInt16 = 1) {
        nextHandle = UInt32(max(firstHandle, 1))
    }

    /// Adds any attribute at the next handle and returns that handle.
    @discardableResult
    public mutating func add(type: ATTUUID, permissions: ATTPermissions, value: [UInt8],
                             maxLength: Int = ATTLimits.maxValueLength) throws -> UInt16 {
        guard nextHandle <= 0xFFFF else { throw GATTBuilderError.outOfHandles }
        let handle = UInt16(nextHandle)
        attributes.append(Attribute(handle: handle, type: type, permissions: permissions,
                                    value: value, maxLength: maxLength))
        nextHandle += 1
        return handle
    }

    /// Adds a primary (0x2800) or secondary (0x2801) service declaration.
    @discardableResult
    public mutating func addService(_ uuid: ATTUUID, primary: Bool = true) throws -> UInt16 {
        let value = GATTDeclaration.serviceValue(uuid)
        return try add(type: primary ? .primaryService : .secondaryService, permissions: .read,
                       value: value, maxLength: value.count)
    }

    /// Adds an «Include» declaration (0x2802).
    @discardableResult
    public mutating func addInclude(serviceHandle: UInt16, endGroupHandle: UInt16, uuid: ATTUUID) throws -> UInt16 {
        let value = GATTDeclaration.includeValue(serviceHandle: serviceHandle, endGroupHandle: endGroupHandle, uuid: uuid)
        return try add(type: .include, permissions: .read, value: value, maxLength: value.count)
    }

    /// Adds a characteristic: declaration (0x2803), value, then a CCCD (0x2902, value 0000,
    /// readable and writable) when `properties` has notify or indicate, then a user
    /// description (0x2901, read-only) when `userDescription` is given.
    public mutating func addCharacteristic(_ uuid: ATTUUID, properties: GATTCharacteristicProperties,
                                           permissions: ATTPermissions, value: [UInt8] = [],
                                           maxLength: Int = ATTLimits.maxValueLength,
                                           userDescription: String? = nil) throws -> GATTCharacteristicHandles {
        guard nextHandle + 1 <= 0xFFFF else { throw GATTBuilderError.outOfHandles }
        let valueHandle = UInt16(nextHandle + 1)
        let declValue = GATTDeclaration.characteristicValue(properties: properties, valueHandle: valueHandle, uuid: uuid)
        let declaration = try add(type: .characteristic, permissions: .read, value: declValue, maxLength: declValue.count)
        try add(type: uuid, permissions: permissions, value: value, maxLength: maxLength)
        var cccd: UInt16?
        if !properties.isDisjoint(with: [.notify, .indicate]) {
            cccd = try add(type: .clientCharacteristicConfiguration, permissions: .readWrite, value: [0, 0], maxLength: 2)
        }
        var description: UInt16?
        if let text = userDescription {
            let bytes = Array(text.utf8.prefix(ATTLimits.maxValueLength))
            description = try add(type: .characteristicUserDescription, permissions: .read, value: bytes, maxLength: bytes.count)
        }
        return GATTCharacteristicHandles(declaration: declaration, value: valueHandle, cccd: cccd, userDescription: description)
    }

    /// The finished, validated table.
    public func build() throws -> AttributeTable { try AttributeTable(attributes) }
}
