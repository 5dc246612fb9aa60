import CSodium
import YaokCrypto

/// A self-signed contact card, shared as a QR code or link:
/// `yaok://contact?v=1&d=<base64url, no padding>`.
///
/// `d` = `version(1)=1 userID(32) nameLength(1) name(UTF-8) x25519Key(32) ed25519Key(32) signature(64)`;
/// the Ed25519 signature by `ed25519Key` covers every byte before it, and the user ID must be
/// SHA-256 of `ed25519Key`. Names are 2–50 Unicode scalars, trimmed, without control characters
/// or bidirectional overrides.
public struct ContactCode: Sendable, Equatable {
    public static let version: UInt8 = 1
    public static let scheme = "yaok://contact?"
    public static let minNameLength = 2
    public static let maxNameLength = 50
    /// Longest payload: a 50-scalar name is at most 200 UTF-8 bytes.
    public static let maxPayloadLength = 1 + 32 + 1 + 4 * maxNameLength + 32 + 32 + 64
    /// Longer URIs are refused before decoding.
    public static let maxURILength = 1024

    public let userID: [UInt8]
    public let name: String
    public let kxKey: [UInt8]
    public let signingKey: [UInt8]
    public let signature: [UInt8]

    /// A signed contact code for `identity` under `name` (trimmed first).
    public static func make(identity: Identity, name: String) throws -> ContactCode {
        let trimmed = trim(name)
        try validate(name: trimmed)
        let body = signedBody(userID: identity.userID, name: trimmed, kxKey: identity.kxKey, signingKey: identity.signingKey)
        return ContactCode(userID: identity.userID, name: trimmed, kxKey: identity.kxKey,
                           signingKey: identity.signingKey, signature: identity.sign(body))
    }

    private init(userID: [UInt8], name: String, kxKey: [UInt8], signingKey: [UInt8], signature: [UInt8]) {
        self.userID = userID
        self.name = name
        self.kxKey = kxKey
        self.signingKey = signingKey
        self.signature = signature
    }

    /// Parses a `yaok://contact?...` URI and checks the user ID and the self-signature.
    public init(parsing uri: String) throws {
        let utf8 = Array(uri.utf8)
        guard utf8.count <= Self.maxURILength else { throw WireError.oversized(what: "contact code URI", size: utf8.count, limit: Self.maxURILength) }
        let prefix = Array(Self.scheme.utf8)
        guard utf8.starts(with: prefix) else { throw WireError.invalidURI("must start with \(Self.scheme)") }
        var version: String?
        var data: String?
        for param in utf8[prefix.count...].split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false) {
            guard let eq = param.firstIndex(of: UInt8(ascii: "=")) else { throw WireError.invalidURI("parameter without '='") }
            let key = String(decoding: param[param.startIndex..<eq], as: UTF8.self)
            let value = String(decoding: param[(eq + 1)...], as: UTF8.self)
            switch key {
            case "v":
                guard version == nil else { throw WireError.invalidURI("duplicate parameter v") }
                version = value
            case "d":
                guard data == nil else { throw WireError.invalidURI("duplicate parameter d") }
                data = value
            default:
                continue   // unknown parameters are ignored, for later versions
            }
        }
        guard let version else { throw WireError.invalidURI("missing parameter v") }
        guard version == "1" else { throw WireError.wrongVersion(what: "contact code URI", version: Int(version) ?? -1) }
        guard let data else { throw WireError.invalidURI("missing parameter d") }
        try self.init(payload: try Self.base64URLDecode(data))
    }

    /// Parses and checks the binary payload `d`.
    public init(payload bytes: [UInt8]) throws {
        let what = "contact code"
        guard bytes.count <= Self.maxPayloadLength else {
            throw WireError.oversized(what: what, size: bytes.count, limit: Self.maxPayloadLength)
        }
        // A code cut short or mistyped is the common case: say so, not "version 0".
        let shortest = 1 + 32 + 1 + Self.minNameLength + 32 + 32 + 64
        guard bytes.count >= shortest else {
            throw WireError.invalidURI("it is cut short or garbled (\(bytes.count) bytes where a code has at least \(shortest)); copy the whole code again")
        }
        var r = ByteReader(bytes, what: what)
        let version = try r.u8()
        guard version != 0 else { throw WireError.invalidURI("it is garbled (no contact code has version 0); copy the whole code again") }
        guard version == Self.version else { throw WireError.wrongVersion(what: what, version: Int(version)) }
        let userID = try r.take(32)
        let nameLength = Int(try r.u8())
        let nameBytes = try r.take(nameLength)
        let kxKey = try r.take(32)
        let signingKey = try r.take(32)
        let signature = try r.take(64)
        try r.expectEnd()

        // Decoding repairs invalid UTF-8 with U+FFFD, so a round trip that changes the bytes means invalid input.
        let name = String(decoding: nameBytes, as: UTF8.self)
        guard Array(name.utf8) == nameBytes else { throw WireError.invalidName("not valid UTF-8") }
        try Self.validate(name: name)
        guard name.unicodeScalars.elementsEqual(Self.trim(name).unicodeScalars) else { throw WireError.invalidName("leading or trailing whitespace") }
        guard constantTimeEqual(Hash.sha256(signingKey), userID) else { throw WireError.userIDMismatch }
        guard SigningKeyPair.verify(signature: signature, message: bytes[0..<(bytes.count - 64)], publicKey: signingKey) else {
            throw WireError.badSignature
        }
        self.init(userID: userID, name: name, kxKey: kxKey, signingKey: signingKey, signature: signature)
    }

    /// The binary payload `d`.
    public var payload: [UInt8] {
        Self.signedBody(userID: userID, name: name, kxKey: kxKey, signingKey: signingKey) + signature
    }

    /// The `yaok://contact?v=1&d=...` URI.
    public var uri: String { Self.scheme + "v=1&d=" + Self.base64URLEncode(payload) }

    /// The fingerprint people compare (see ``YaokCrypto/Identity/fingerprint``).
    public var fingerprint: String { Identity.fingerprint(userID) }

    // MARK: Helpers

    private static func signedBody(userID: [UInt8], name: String, kxKey: [UInt8], signingKey: [UInt8]) -> [UInt8] {
        let nameBytes = Array(name.utf8)
        var w = ByteWriter(capacity: maxPayloadLength)
        w.u8(version)
        w.raw(userID)
        w.u8(UInt8(truncatingIfNeeded: nameBytes.count))
        w.raw(nameBytes)
        w.raw(kxKey)
        w.raw(signingKey)
        return w.bytes
    }

    /// Removes leading and trailing whitespace (Unicode White_Space).
    static func trim(_ s: String) -> String {
        let scalars = Array(s.unicodeScalars)
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        var out = String.UnicodeScalarView()
        out.append(contentsOf: scalars[first...last])
        return String(out)
    }

    static func validate(name: String) throws {
        let count = name.unicodeScalars.count
        guard count >= minNameLength else { throw WireError.invalidName("must be at least \(minNameLength) characters") }
        guard count <= maxNameLength else { throw WireError.invalidName("must be at most \(maxNameLength) characters") }
        for scalar in name.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .lineSeparator, .paragraphSeparator:
                throw WireError.invalidName("contains a control character (U+\(String(scalar.value, radix: 16, uppercase: true)))")
            default:
                // Bidirectional overrides and isolates could make a name display as another.
                if (0x202A...0x202E).contains(scalar.value) || (0x2066...0x2069).contains(scalar.value) {
                    throw WireError.invalidName("contains a bidirectional control (U+\(String(scalar.value, radix: 16, uppercase: true)))")
                }
            }
        }
    }

    static func base64URLEncode(_ bytes: [UInt8]) -> String {
        let variant = Int32(sodium_base64_VARIANT_URLSAFE_NO_PADDING)
        let capacity = sodium_base64_encoded_len(bytes.count, variant)
        var out = [CChar](repeating: 0, count: capacity)
        _ = sodium_bin2base64(&out, capacity, bytes, bytes.count, variant)
        return out.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    static func base64URLDecode(_ string: String) throws -> [UInt8] {
        let chars = Array(string.utf8).map { CChar(bitPattern: $0) }
        guard !chars.isEmpty else { throw WireError.invalidURI("d is empty") }
        // Every 4 characters decode to at most 3 bytes; bound the output before allocating.
        let maxOut = chars.count / 4 * 3 + 3
        guard maxOut <= maxPayloadLength + 3 else {
            throw WireError.oversized(what: "contact code payload", size: maxOut, limit: maxPayloadLength)
        }
        var out = [UInt8](repeating: 0, count: maxOut)
        var length = 0
        var consumed = 0
        let rc = chars.withUnsafeBufferPointer { c -> Int32 in
            var end: UnsafePointer<CChar>? = nil
            let rc = sodium_base642bin(&out, out.count, c.baseAddress, c.count, nil, &length, &end,
                                       Int32(sodium_base64_VARIANT_URLSAFE_NO_PADDING))
            // libsodium stops at the first invalid character; the whole string must be consumed.
            if let end, let base = c.baseAddress { consumed = end - base }
            return rc
        }
        guard rc == 0, consumed == chars.count, length <= out.count else {
            throw WireError.invalidURI("d is not base64url without padding")
        }
        return Array(out[0..<length])
    }
}
