import Foundation
import YaokCrypto
import YaokPluginKit

/// A network operator's statement that a hub key belongs to the network, for a time.
///
/// Layout (145 bytes, integers big-endian):
///
/// | off | len | field |
/// |----:|----:|-------|
/// | 0 | 1 | version = 1 |
/// | 1 | 32 | network Ed25519 public key |
/// | 33 | 32 | hub Ed25519 public key |
/// | 65 | 8 | not before, UTC ms |
/// | 73 | 8 | not after, UTC ms |
/// | 81 | 64 | Ed25519 signature by the network key over `"yaok-hub-cert-v1"` ‖ bytes 0..<81 |
///
/// The context string keeps a certificate signature from ever verifying as another
/// Ya OK signature (link proofs, envelopes, announcements) made with the same key.
public struct HubCertificate: Sendable, Equatable {
    public static let version: UInt8 = 1
    public static let length = 145
    /// The 16 ASCII bytes signed before the fields.
    public static let context: [UInt8] = Array("yaok-hub-cert-v1".utf8)

    public var networkKey: [UInt8]
    public var hubKey: [UInt8]
    public var notBeforeMs: Int64
    public var notAfterMs: Int64
    public var signature: [UInt8]

    /// Issues a certificate for `hubKey`, signed by the network key.
    public static func issue(networkKey: SigningKeyPair, hubKey: [UInt8], notBeforeMs: Int64, notAfterMs: Int64) throws -> HubCertificate {
        guard hubKey.count == 32 else { throw WireError.badLength(what: "hub certificate", detail: "a hub key is 32 bytes, got \(hubKey.count)") }
        guard notBeforeMs >= 0, notAfterMs > notBeforeMs else {
            throw WireError.badTimestamp("a certificate's not-after must be later than its not-before, both non-negative")
        }
        var cert = HubCertificate(networkKey: networkKey.publicKey, hubKey: hubKey, notBeforeMs: notBeforeMs, notAfterMs: notAfterMs,
                                  signature: [])
        cert.signature = networkKey.sign(context + cert.signedFields)
        return cert
    }

    init(networkKey: [UInt8], hubKey: [UInt8], notBeforeMs: Int64, notAfterMs: Int64, signature: [UInt8]) {
        self.networkKey = networkKey
        self.hubKey = hubKey
        self.notBeforeMs = notBeforeMs
        self.notAfterMs = notAfterMs
        self.signature = signature
    }

    /// Parses the 145-byte form; checks layout only (see ``check(networkKey:hubKey:nowMs:clockSkewMs:)``).
    public init(parsing bytes: [UInt8]) throws {
        guard bytes.count == Self.length else {
            throw WireError.badLength(what: "hub certificate", detail: "must be \(Self.length) bytes, got \(bytes.count)")
        }
        guard bytes[0] == Self.version else { throw WireError.wrongVersion(what: "hub certificate", version: Int(bytes[0])) }
        let notBefore = Self.int64(bytes[65..<73]), notAfter = Self.int64(bytes[73..<81])
        guard notBefore >= 0, notAfter > notBefore else { throw WireError.badTimestamp("hub certificate validity window") }
        self.init(networkKey: Array(bytes[1..<33]), hubKey: Array(bytes[33..<65]), notBeforeMs: notBefore, notAfterMs: notAfter,
                  signature: Array(bytes[81..<145]))
    }

    /// Bytes 0..<81: what the signature covers after the context string.
    public var signedFields: [UInt8] {
        [Self.version] + networkKey + hubKey + Self.bytes(notBeforeMs) + Self.bytes(notAfterMs)
    }

    public var encoded: [UInt8] { signedFields + signature }

    /// The whole TLV frame (``RoutingFrameType/hubCertificate``).
    public var frame: [UInt8] { TLVRecord(.hubCertificate, value: encoded).encoded }

    /// Whether the network key's signature verifies (says nothing about which network or when).
    public var signatureVerifies: Bool {
        SigningKeyPair.verify(signature: signature, message: Self.context + signedFields, publicKey: networkKey)
    }

    /// Checks the certificate for one link: issued by `networkKey`, naming `hubKey` (the
    /// key the link proved), valid at `nowMs` give or take `clockSkewMs`, and signed.
    public func check(networkKey expectedNetwork: [UInt8], hubKey expectedHub: [UInt8], nowMs: Int64, clockSkewMs: Int64) throws {
        guard networkKey == expectedNetwork else { throw HubCertificateError.wrongNetwork }
        guard hubKey == expectedHub else { throw HubCertificateError.wrongHub }
        guard nowMs &+ clockSkewMs >= notBeforeMs else { throw HubCertificateError.notYetValid(notBeforeMs: notBeforeMs) }
        guard nowMs &- clockSkewMs <= notAfterMs else { throw HubCertificateError.expired(notAfterMs: notAfterMs) }
        guard signatureVerifies else { throw HubCertificateError.badSignature }
    }

    static func bytes(_ v: Int64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: v) >> (56 - 8 * UInt64($0))) } }
    static func int64(_ b: ArraySlice<UInt8>) -> Int64 { Int64(bitPattern: b.reduce(0) { $0 << 8 | UInt64($1) }) }
}

/// Why a well-formed hub certificate does not make a link's hub trusted.
public enum HubCertificateError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Signed by another network's key than the one configured.
    case wrongNetwork
    /// Names another hub key than the one the link proved.
    case wrongHub
    /// Its validity starts later than now plus the clock skew.
    case notYetValid(notBeforeMs: Int64)
    /// Its validity ended earlier than now minus the clock skew.
    case expired(notAfterMs: Int64)
    /// The network key's signature does not verify.
    case badSignature

    public var description: String {
        switch self {
        case .wrongNetwork: return "signed by another network key"
        case .wrongHub: return "issued for another hub key than the link's"
        case .notYetValid(let t): return "not valid before \(t) ms"
        case .expired(let t): return "expired at \(t) ms"
        case .badSignature: return "the network key's signature does not verify"
        }
    }
}
