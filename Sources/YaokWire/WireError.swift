import YaokCrypto

/// Errors from parsing, checking or building wire formats.
public enum WireError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Fewer bytes than the format needs.
    case truncated(what: String, needed: Int, have: Int)
    /// More bytes than the format allows.
    case oversized(what: String, size: Int, limit: Int)
    /// An unsupported format version.
    case wrongVersion(what: String, version: Int)
    /// A length field or the total length is inconsistent or out of range.
    case badLength(what: String, detail: String)
    /// An unknown envelope kind.
    case badKind(UInt8)
    /// A field that must be zero for this kind is not.
    case nonZeroField(String)
    /// A timestamp is out of range (above Int64.max, or expiry before creation).
    case badTimestamp(String)
    /// The Ed25519 signature does not verify.
    case badSignature
    /// The envelope is addressed to another user.
    case wrongRecipient
    /// The operation needs a message envelope but got a receipt (or the reverse).
    case wrongKind(expected: String, actual: UInt8)
    /// Decryption failed: the ciphertext or header was altered, or the key is wrong.
    case decryptionFailed
    /// The plaintext is larger than an envelope carries.
    case plaintextTooLarge(size: Int, limit: Int)
    /// A hop header's hop count is above its limit, or forwarding would pass it.
    case hopLimitReached(count: Int, limit: Int)
    /// A contact name is empty, too short or long, untrimmed, not UTF-8 or has control characters.
    case invalidName(String)
    /// A contact code URI is not `yaok://contact?v=1&d=...` or its payload is not base64url.
    case invalidURI(String)
    /// A contact code's user ID is not SHA-256 of its Ed25519 key.
    case userIDMismatch
    /// A list of message IDs is not sorted ascending without duplicates.
    case notSortedUnique
    /// Too many items for the format.
    case tooMany(what: String, count: Int, limit: Int)
    /// An unknown custody refusal reason code.
    case unknownReason(UInt8)
    /// A parameter passed to a builder is wrong (a programming error, not network input).
    case invalidArgument(String)
    /// A crypto operation failed.
    case crypto(CryptoError)

    public var description: String {
        switch self {
        case .truncated(let what, let needed, let have): return "truncated \(what): need \(needed) bytes, have \(have)"
        case .oversized(let what, let size, let limit): return "\(what) of \(size) bytes exceeds the limit of \(limit)"
        case .wrongVersion(let what, let version): return "unsupported \(what) version \(version)"
        case .badLength(let what, let detail): return "bad length in \(what): \(detail)"
        case .badKind(let kind): return "unknown envelope kind \(kind)"
        case .nonZeroField(let field): return "field \(field) must be all zeros"
        case .badTimestamp(let detail): return "bad timestamp: \(detail)"
        case .badSignature: return "signature does not verify"
        case .wrongRecipient: return "envelope is addressed to another user"
        case .wrongKind(let expected, let actual): return "expected a \(expected) envelope, got kind \(actual)"
        case .decryptionFailed: return "decryption failed (altered ciphertext or wrong key)"
        case .plaintextTooLarge(let size, let limit): return "plaintext of \(size) bytes exceeds the limit of \(limit)"
        case .hopLimitReached(let count, let limit): return "hop limit reached (\(count) of \(limit))"
        case .invalidName(let detail): return "invalid contact name: \(detail)"
        case .invalidURI(let detail): return "invalid contact code: \(detail)"
        case .userIDMismatch: return "contact code user ID does not match its signing key"
        case .notSortedUnique: return "message IDs are not sorted and unique"
        case .tooMany(let what, let count, let limit): return "\(count) \(what) exceeds the limit of \(limit)"
        case .unknownReason(let code): return "unknown custody refusal reason \(code)"
        case .invalidArgument(let detail): return "invalid argument: \(detail)"
        case .crypto(let error): return error.description
        }
    }
}
