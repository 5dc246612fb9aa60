import CSodium

/// An X25519 key pair for key agreement (`crypto_scalarmult`).
public struct KXKeyPair: Sendable {
    public static let publicKeyLength = 32
    public static let secretKeyLength = 32

    /// The 32-byte public key.
    public let publicKey: [UInt8]
    let secretKey: SecretBytes

    /// A fresh random key pair.
    public static func generate() -> KXKeyPair {
        let sk = SecretBytes(randomCount: secretKeyLength)
        // Base-point multiplication cannot fail for a random scalar.
        return (try? KXKeyPair(secret: sk)) ?? generate()
    }

    /// The key pair for a given 32-byte secret (identity file, test vectors).
    public init(secretKey: [UInt8]) throws {
        try requireLength(secretKey, Self.secretKeyLength, "X25519 secret key")
        try self.init(secret: SecretBytes(copying: secretKey))
    }

    private init(secret: SecretBytes) throws {
        var pk = [UInt8](repeating: 0, count: Self.publicKeyLength)
        let rc = secret.withUnsafeBytes { sk in
            crypto_scalarmult_base(&pk, sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard rc == 0 else { throw CryptoError.operationFailed("crypto_scalarmult_base") }
        self.publicKey = pk
        self.secretKey = secret
    }

    /// A copy of the secret (for the identity file). Wipe after use.
    func secretBytes() -> [UInt8] { secretKey.copyBytes() }

    /// The X25519 shared secret with `peerPublicKey`, in a wiped-on-release buffer.
    /// Throws ``CryptoError/weakPublicKey`` when the result is all zeros.
    func sharedSecret(with peerPublicKey: [UInt8]) throws -> SecretBytes {
        try requireLength(peerPublicKey, Self.publicKeyLength, "X25519 public key")
        var rc: Int32 = 0
        let shared = SecretBytes(count: Int(crypto_scalarmult_BYTES)) { out in
            let q = out.baseAddress!.assumingMemoryBound(to: UInt8.self)
            rc = secretKey.withUnsafeBytes { sk in
                crypto_scalarmult(q, sk.baseAddress!.assumingMemoryBound(to: UInt8.self), peerPublicKey)
            }
            // libsodium already returns -1 for an all-zero result; check again to not depend on it.
            if rc == 0 && sodium_is_zero(q, out.count) == 1 { rc = -1 }
        }
        guard rc == 0 else { throw CryptoError.weakPublicKey }
        return shared
    }
}
