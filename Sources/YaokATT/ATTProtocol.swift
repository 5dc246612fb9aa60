import enum YaokPluginKit.Hex
/// ATT PDU opcodes (Core Spec Vol 3 Part F 3.4.8). Bit 6 (0x40) marks a command,
/// bit 7 (0x80) an authentication signature.
public enum ATTOpcode {
    public static let errorResponse: UInt8 = 0x01
    public static let exchangeMTURequest: UInt8 = 0x02
    public static let exchangeMTUResponse: UInt8 = 0x03
    public static let findInformationRequest: UInt8 = 0x04
    public static let findInformationResponse: UInt8 = 0x05
    public static let findByTypeValueRequest: UInt8 = 0x06
    public static let findByTypeValueResponse: UInt8 = 0x07
    public static let readByTypeRequest: UInt8 = 0x08
    public static let readByTypeResponse: UInt8 = 0x09
    public static let readRequest: UInt8 = 0x0A
    public static let readResponse: UInt8 = 0x0B
    public static let readBlobRequest: UInt8 = 0x0C
    public static let readBlobResponse: UInt8 = 0x0D
    public static let readMultipleRequest: UInt8 = 0x0E
    public static let readMultipleResponse: UInt8 = 0x0F
    public static let readByGroupTypeRequest: UInt8 = 0x10
    public static let readByGroupTypeResponse: UInt8 = 0x11
    public static let writeRequest: UInt8 = 0x12
    public static let writeResponse: UInt8 = 0x13
    public static let prepareWriteRequest: UInt8 = 0x16
    public static let prepareWriteResponse: UInt8 = 0x17
    public static let executeWriteRequest: UInt8 = 0x18
    public static let executeWriteResponse: UInt8 = 0x19
    public static let readMultipleVariableResponse: UInt8 = 0x21
    public static let handleValueNotification: UInt8 = 0x1B
    public static let handleValueIndication: UInt8 = 0x1D
    public static let handleValueConfirmation: UInt8 = 0x1E
    public static let multipleHandleValueNotification: UInt8 = 0x23
    public static let writeCommand: UInt8 = 0x52
    public static let signedWriteCommand: UInt8 = 0xD2

    /// The command flag: PDUs with this bit never get a response.
    public static let commandFlag: UInt8 = 0x40
}

/// An ATT error code (Core Spec Vol 3 Part F 3.4.1.1). Values 0x80–0x9F are application
/// errors and 0xE0–0xFF common profile errors; any byte is representable.
public struct ATTErrorCode: RawRepresentable, Hashable, Sendable, Error, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let invalidHandle = ATTErrorCode(rawValue: 0x01)
    public static let readNotPermitted = ATTErrorCode(rawValue: 0x02)
    public static let writeNotPermitted = ATTErrorCode(rawValue: 0x03)
    public static let invalidPDU = ATTErrorCode(rawValue: 0x04)
    public static let insufficientAuthentication = ATTErrorCode(rawValue: 0x05)
    public static let requestNotSupported = ATTErrorCode(rawValue: 0x06)
    public static let invalidOffset = ATTErrorCode(rawValue: 0x07)
    public static let insufficientAuthorization = ATTErrorCode(rawValue: 0x08)
    public static let prepareQueueFull = ATTErrorCode(rawValue: 0x09)
    public static let attributeNotFound = ATTErrorCode(rawValue: 0x0A)
    public static let attributeNotLong = ATTErrorCode(rawValue: 0x0B)
    public static let insufficientEncryptionKeySize = ATTErrorCode(rawValue: 0x0C)
    public static let invalidAttributeValueLength = ATTErrorCode(rawValue: 0x0D)
    public static let unlikelyError = ATTErrorCode(rawValue: 0x0E)
    public static let insufficientEncryption = ATTErrorCode(rawValue: 0x0F)
    public static let unsupportedGroupType = ATTErrorCode(rawValue: 0x10)
    public static let insufficientResources = ATTErrorCode(rawValue: 0x11)
    public static let valueNotAllowed = ATTErrorCode(rawValue: 0x13)
    /// Common profile error: CCCD improperly configured (0xFD).
    public static let cccdImproperlyConfigured = ATTErrorCode(rawValue: 0xFD)

    public var description: String {
        let names: [UInt8: String] = [
            0x01: "invalid handle", 0x02: "read not permitted", 0x03: "write not permitted",
            0x04: "invalid PDU", 0x05: "insufficient authentication", 0x06: "request not supported",
            0x07: "invalid offset", 0x08: "insufficient authorization", 0x09: "prepare queue full",
            0x0A: "attribute not found", 0x0B: "attribute not long",
            0x0C: "insufficient encryption key size", 0x0D: "invalid attribute value length",
            0x0E: "unlikely error", 0x0F: "insufficient encryption", 0x10: "unsupported group type",
            0x11: "insufficient resources", 0x13: "value not allowed", 0xFD: "CCCD improperly configured",
        ]
        let hex = "0x" + Hex.encode([rawValue])
        if let name = names[rawValue] { return "\(name) (\(hex))" }
        if (0x80...0x9F).contains(rawValue) { return "application error (\(hex))" }
        return "ATT error \(hex)"
    }
}

/// ATT protocol constants.
public enum ATTLimits {
    /// The LE default ATT_MTU before any Exchange MTU.
    public static let defaultMTU: UInt16 = 23
    /// The largest attribute value ATT allows (Vol 3 Part F 3.2.9).
    public static let maxValueLength = 512
}
