import YaokCrypto
import YaokPluginKit

/// A link identity for tests of a transport's session code: real Ed25519 and X25519 keys
/// (libsodium, through YaokCrypto), made from a one-byte seed so that a test names "Alice"
/// and "Bob" and gets the same keys every run. `fixedRandomByte` makes every random byte
/// that value, so a test can choose challenge nonces. Never a production identity: the
/// secret keys follow from the seed.
public struct TestLinkIdentity: LinkIdentity {
    public let identity: Identity
    public var fixedRandomByte: UInt8?

    public init(seed: UInt8, fixedRandomByte: UInt8? = nil) {
        // Distinct 32-byte secrets per seed; any 32 bytes are a valid Ed25519 seed and X25519 secret.
        identity = try! Identity(ed25519Seed: (0..<32).map { UInt8(truncatingIfNeeded: Int(seed) &* 31 &+ $0) },
                                 x25519Secret: (0..<32).map { UInt8(truncatingIfNeeded: Int(seed) &* 17 &+ $0 &+ 100) })
        self.fixedRandomByte = fixedRandomByte
    }

    public var signingKey: [UInt8] { identity.signingKey }
    public var kxKey: [UInt8] { identity.kxKey }
    public func sign(_ message: [UInt8]) throws -> [UInt8] { identity.sign(message) }
    public func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
        SigningKeyPair.verify(signature: signature, message: message, publicKey: publicKey)
    }
    public func randomBytes(_ count: Int) -> [UInt8] {
        fixedRandomByte.map { [UInt8](repeating: $0, count: count) } ?? Random.bytes(count)
    }
}
