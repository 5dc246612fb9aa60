import CSodium

/// An Ed25519 key pair (`crypto_sign_*`). Signatures are detached and deterministic.
public struct SigningKeyPair: Sendable {
    public static let publicKeyLength = 32
    public static let seedLength = 32
    public static let signatureLength = 64

    /// The 32-byte public key.
    public let publicKey: [UInt8]
    /// libsodium's 64-byte secret key (seed followed by the public key).
    let secretKey: SecretBytes

    /// A fresh random key pair.
    public static func generate() -> SigningKeyPair {
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: publicKeyLength)
        let sk = SecretBytes(count: Int(crypto_sign_SECRETKEYBYTES)) { dst in
            _ = crypto_sign_keypair(&pk, dst.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return SigningKeyPair(publicKey: pk, secretKey: sk)
    }

    /// The key pair derived from a 32-byte seed (identity file, test vectors).
    public init(seed: [UInt8]) throws {
        try requireLength(seed, Self.seedLength, "Ed25519 seed")
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: Self.publicKeyLength)
        var rc: Int32 = 0
        let sk = SecretBytes(count: Int(crypto_sign_SECRETKEYBYTES)) { dst in
            rc = crypto_sign_seed_keypair(&pk, dst.baseAddress!.assumingMemoryBound(to: UInt8.self), seed)
        }
        guard rc == 0 else { throw CryptoError.operationFailed("crypto_sign_seed_keypair") }
        self.init(publicKey: pk, secretKey: sk)
    }

    init(publicKey: [UInt8], secretKey: SecretBytes) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// The 32-byte seed this key pair derives from (for the identity file). Wipe after use.
    func seedBytes() -> [UInt8] {
        var seed = [UInt8](repeating: 0, count: Self.seedLength)
        secretKey.withUnsafeBytes { sk in
            _ = crypto_sign_ed25519_sk_to_seed(&seed, sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return seed
    }

    /// A 64-byte detached Ed25519 signature of `message`.
    public func sign(_ message: [UInt8]) -> [UInt8] {
        message.withUnsafeBufferPointer { sign($0) }
    }

    /// Signs a slice without copying it first.
    public func sign(_ message: ArraySlice<UInt8>) -> [UInt8] {
        message.withUnsafeBufferPointer { sign($0) }
    }

    private func sign(_ message: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var signature = [UInt8](repeating: 0, count: Self.signatureLength)
        secretKey.withUnsafeBytes { sk in
            _ = crypto_sign_detached(&signature, nil, message.baseAddress, UInt64(message.count),
                                     sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return signature
    }

    /// Whether `signature` is a valid Ed25519 signature of `message` by `publicKey`.
    /// Wrong lengths are simply invalid.
    public static func verify(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        message.withUnsafeBufferPointer { verify(signature: signature, message: $0, publicKey: publicKey) }
    }

    /// Verifies a signature over a slice without copying it first.
    public static func verify(signature: [UInt8], message: ArraySlice<UInt8>, publicKey: [UInt8]) -> Bool {
        message.withUnsafeBufferPointer { verify(signature: signature, message: $0, publicKey: publicKey) }
    }

    private static func verify(signature: [UInt8], message: UnsafeBufferPointer<UInt8>, publicKey: [UInt8]) -> Bool {
        guard signature.count == signatureLength, publicKey.count == publicKeyLength else { return false }
        Sodium.ensureInitialized()
        return crypto_sign_verify_detached(signature, message.baseAddress, UInt64(message.count), publicKey) == 0
    }
}
