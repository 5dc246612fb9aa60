import enum YaokPluginKit.Hex
/// A Ya OK identity: an Ed25519 signing key pair and an X25519 key-agreement key pair.
///
/// The user ID is SHA-256 of the Ed25519 public key; it is what envelopes address.
public struct Identity: Sendable {
    public static let userIDLength = 32

    public let signingKeyPair: SigningKeyPair
    public let kxKeyPair: KXKeyPair
    /// SHA-256 of the Ed25519 public key.
    public let userID: [UInt8]

    public init(signing: SigningKeyPair, kx: KXKeyPair) {
        self.signingKeyPair = signing
        self.kxKeyPair = kx
        self.userID = Hash.sha256(signing.publicKey)
    }

    /// A fresh random identity.
    public static func generate() -> Identity {
        Identity(signing: .generate(), kx: .generate())
    }

    /// The identity for a fixed Ed25519 seed and X25519 secret (identity file, test vectors).
    public init(ed25519Seed: [UInt8], x25519Secret: [UInt8]) throws {
        self.init(signing: try SigningKeyPair(seed: ed25519Seed), kx: try KXKeyPair(secretKey: x25519Secret))
    }

    /// The Ed25519 public key.
    public var signingKey: [UInt8] { signingKeyPair.publicKey }
    /// The X25519 public key.
    public var kxKey: [UInt8] { kxKeyPair.publicKey }

    /// Signs with the Ed25519 key.
    public func sign(_ message: [UInt8]) -> [UInt8] { signingKeyPair.sign(message) }

    /// The user ID as 16 groups of 4 lowercase hex digits separated by spaces,
    /// for people to compare out loud.
    public var fingerprint: String { Self.fingerprint(userID) }

    /// The fingerprint format for any user ID.
    public static func fingerprint(_ userID: [UInt8]) -> String {
        let hex = Array(Hex.encode(userID))
        return stride(from: 0, to: hex.count, by: 4)
            .map { String(hex[$0..<Swift.min($0 + 4, hex.count)]) }
            .joined(separator: " ")
    }

    /// A user ID as 64 lowercase hex digits (no spaces).
    public static func hexUserID(_ userID: [UInt8]) -> String { Hex.encode(userID) }

    /// The user ID for an Ed25519 public key.
    public static func userID(forSigningKey key: [UInt8]) -> [UInt8] { Hash.sha256(key) }
}
