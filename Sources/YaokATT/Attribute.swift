/// What a client may do with an attribute, and the link security each direction needs.
///
/// `read` / `write` say whether the operation exists at all (else Read/Write Not Permitted).
/// The requirement flags add conditions checked against the connection's `ATTLinkSecurity`.
/// "Write without response" is a characteristic *property* (in the 0x2803 declaration),
/// not a permission: Write Command is accepted wherever `write` is.
public struct ATTPermissions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let read = ATTPermissions(rawValue: 1 << 0)
    public static let write = ATTPermissions(rawValue: 1 << 1)
    public static let readEncrypted = ATTPermissions(rawValue: 1 << 2)
    public static let readAuthenticated = ATTPermissions(rawValue: 1 << 3)
    public static let readAuthorized = ATTPermissions(rawValue: 1 << 4)
    public static let writeEncrypted = ATTPermissions(rawValue: 1 << 5)
    public static let writeAuthenticated = ATTPermissions(rawValue: 1 << 6)
    public static let writeAuthorized = ATTPermissions(rawValue: 1 << 7)

    /// Readable and writable with no security requirement.
    public static let readWrite: ATTPermissions = [.read, .write]
}

/// The security of one connection's link, as the owner (transport) knows it.
public struct ATTLinkSecurity: Hashable, Sendable {
    /// The link is encrypted. Always false for UNIX sockets and plain L2CAP.
    public var encrypted: Bool
    /// The link is encrypted with an authenticated (MITM-protected) key.
    public var authenticated: Bool
    /// The owner has authorized this client.
    public var authorized: Bool

    public init(encrypted: Bool = false, authenticated: Bool = false, authorized: Bool = false) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.authorized = authorized
    }

    /// No encryption, no authentication, no authorization.
    public static let none = ATTLinkSecurity()
}

/// One attribute: handle, type, permissions, value. The engine gives no type special
/// meaning except where GATT requires it (service grouping, CCCD lookup for notifications).
public struct Attribute: Hashable, Sendable {
    /// Non-zero; strictly increasing within a table.
    public var handle: UInt16
    public var type: ATTUUID
    public var permissions: ATTPermissions
    /// The stored value (a registered read provider may override what clients see).
    public var value: [UInt8]
    /// The largest value a client may write (0...512).
    public var maxLength: Int

    public init(handle: UInt16, type: ATTUUID, permissions: ATTPermissions,
                value: [UInt8] = [], maxLength: Int = ATTLimits.maxValueLength) {
        self.handle = handle
        self.type = type
        self.permissions = permissions
        self.value = value
        self.maxLength = maxLength
    }
}
