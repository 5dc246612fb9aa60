/// Errors from the crypto layer.
public enum CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A key, seed, nonce or signature had the wrong length.
    case badLength(what: String, expected: Int, actual: Int)
    /// X25519 produced an all-zero shared secret (the peer key is of small order).
    case weakPublicKey
    /// AEAD decryption failed: wrong key, or the ciphertext or its associated data was altered.
    case decryptionFailed
    /// A libsodium call reported failure.
    case operationFailed(String)
    /// A plaintext is larger than the caller's limit.
    case plaintextTooLarge(size: Int, limit: Int)

    public var description: String {
        switch self {
        case .badLength(let what, let expected, let actual):
            return "\(what) must be \(expected) bytes, got \(actual)"
        case .weakPublicKey:
            return "the X25519 public key is of small order (all-zero shared secret)"
        case .decryptionFailed:
            return "decryption failed: wrong key or the ciphertext was altered"
        case .operationFailed(let call):
            return "libsodium \(call) failed"
        case .plaintextTooLarge(let size, let limit):
            return "plaintext of \(size) bytes exceeds the limit of \(limit) bytes"
        }
    }
}

@inline(__always)
func requireLength(_ bytes: [UInt8], _ expected: Int, _ what: String) throws {
    guard bytes.count == expected else { throw CryptoError.badLength(what: what, expected: expected, actual: bytes.count) }
}
