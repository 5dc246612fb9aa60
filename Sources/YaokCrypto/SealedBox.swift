import CSodium

/// Anonymous public-key encryption for envelopes: an ephemeral X25519 key agreement
/// and XChaCha20-Poly1305 (IETF) AEAD.
///
/// key = BLAKE2b-256(shared_secret || ephemeral_pk || recipient_pk) (`crypto_generichash`),
/// shared_secret = X25519(ephemeral_sk, recipient_pk). Binding both public keys into the key
/// means a ciphertext cannot be re-targeted to another key pair. The shared secret and the
/// derived key live in wiped buffers.
public enum SealedBox {
    public static let nonceLength = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)   // 24
    public static let tagLength = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)        // 16
    static let keyLength = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)             // 32

    /// A fresh random nonce.
    public static func randomNonce() -> [UInt8] { Random.bytes(nonceLength) }

    /// A message's key, derived once from the key agreement: it seals or opens the message
    /// and gives the message's receipt chain (``ReceiptChain``).
    public struct MessageKey: Sendable {
        let key: SecretBytes

        /// The sender's key for a message to `recipientKXKey`, sealed with `ephemeral`.
        public init(ephemeral: KXKeyPair, recipientKXKey: [UInt8]) throws {
            key = try deriveKey(secretHolder: ephemeral, peerPublicKey: recipientKXKey,
                                ephemeralPublicKey: ephemeral.publicKey, recipientPublicKey: recipientKXKey)
        }

        /// The recipient's key for a message sealed with `ephemeralPublicKey`.
        public init(ephemeralPublicKey: [UInt8], recipient: KXKeyPair) throws {
            key = try deriveKey(secretHolder: recipient, peerPublicKey: ephemeralPublicKey,
                                ephemeralPublicKey: ephemeralPublicKey, recipientPublicKey: recipient.publicKey)
        }

        /// The delivery proof `d` the recipient reveals in its delivery receipt.
        public var deliveryProof: [UInt8] { ReceiptChain.deliveryProof(readSecret: ReceiptChain.readSecret(messageKey: key)) }

        /// The commitment `c` the sender puts into the envelope.
        public var receiptCommitment: [UInt8] { ReceiptChain.commitment(deliveryProof: deliveryProof) }

        /// Encrypts `plaintext` with `nonce`; returns ciphertext followed by the 16-byte tag.
        public func seal(plaintext: [UInt8], additionalData: ArraySlice<UInt8>, nonce: [UInt8]) throws -> [UInt8] {
            try requireLength(nonce, nonceLength, "nonce")
            var ciphertext = [UInt8](repeating: 0, count: plaintext.count + tagLength)
            var clen: UInt64 = 0
            let ad = Array(additionalData)
            let rc = key.withUnsafeBytes { k in
                crypto_aead_xchacha20poly1305_ietf_encrypt(
                    &ciphertext, &clen, plaintext, UInt64(plaintext.count), ad, UInt64(ad.count), nil, nonce,
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
            guard rc == 0, Int(clen) == ciphertext.count else { throw CryptoError.operationFailed("crypto_aead_xchacha20poly1305_ietf_encrypt") }
            return ciphertext
        }

        /// Decrypts; throws ``CryptoError/decryptionFailed`` if anything (ciphertext, tag,
        /// associated data, keys, nonce) does not match.
        public func open(ciphertext: ArraySlice<UInt8>, additionalData: ArraySlice<UInt8>, nonce: [UInt8]) throws -> [UInt8] {
            try requireLength(nonce, nonceLength, "nonce")
            guard ciphertext.count >= tagLength else { throw CryptoError.decryptionFailed }
            var plaintext = [UInt8](repeating: 0, count: ciphertext.count - tagLength)
            var mlen: UInt64 = 0
            // Arrays bridge to non-null pointers even when empty.
            let c = Array(ciphertext)
            let ad = Array(additionalData)
            let rc = key.withUnsafeBytes { k in
                crypto_aead_xchacha20poly1305_ietf_decrypt(
                    &plaintext, &mlen, nil, c, UInt64(c.count), ad, UInt64(ad.count), nonce,
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
            guard rc == 0 else { throw CryptoError.decryptionFailed }
            return plaintext
        }
    }

    /// Encrypts `plaintext` for `recipientKXKey` using `ephemeral` (a fresh key pair per message)
    /// and `nonce`; returns ciphertext followed by the 16-byte tag.
    public static func seal(plaintext: [UInt8], additionalData: ArraySlice<UInt8>,
                            recipientKXKey: [UInt8], ephemeral: KXKeyPair, nonce: [UInt8]) throws -> [UInt8] {
        try requireLength(nonce, nonceLength, "nonce")
        return try MessageKey(ephemeral: ephemeral, recipientKXKey: recipientKXKey)
            .seal(plaintext: plaintext, additionalData: additionalData, nonce: nonce)
    }

    /// Decrypts a ciphertext sealed to `recipient`. Throws ``CryptoError/decryptionFailed``
    /// if anything (ciphertext, tag, associated data, keys, nonce) does not match.
    public static func open(ciphertext: ArraySlice<UInt8>, additionalData: ArraySlice<UInt8>,
                            ephemeralPublicKey: [UInt8], nonce: [UInt8], recipient: KXKeyPair) throws -> [UInt8] {
        try requireLength(nonce, nonceLength, "nonce")
        guard ciphertext.count >= tagLength else { throw CryptoError.decryptionFailed }
        return try MessageKey(ephemeralPublicKey: ephemeralPublicKey, recipient: recipient)
            .open(ciphertext: ciphertext, additionalData: additionalData, nonce: nonce)
    }

    private static func deriveKey(secretHolder: KXKeyPair, peerPublicKey: [UInt8],
                                  ephemeralPublicKey: [UInt8], recipientPublicKey: [UInt8]) throws -> SecretBytes {
        try requireLength(ephemeralPublicKey, KXKeyPair.publicKeyLength, "ephemeral X25519 public key")
        try requireLength(recipientPublicKey, KXKeyPair.publicKeyLength, "recipient X25519 public key")
        let shared = try secretHolder.sharedSecret(with: peerPublicKey)
        // The hash input holds the shared secret, so it lives in a wiped buffer too.
        let input = SecretBytes(count: shared.count + 2 * KXKeyPair.publicKeyLength) { buf in
            shared.withUnsafeBytes { s in buf.copyMemory(from: s) }
            let keys = ephemeralPublicKey + recipientPublicKey
            keys.withUnsafeBytes { k in
                UnsafeMutableRawBufferPointer(rebasing: buf[shared.count...]).copyMemory(from: k)
            }
        }
        var rc: Int32 = 0
        let key = SecretBytes(count: keyLength) { out in
            rc = input.withUnsafeBytes { i in
                crypto_generichash(out.baseAddress!.assumingMemoryBound(to: UInt8.self), out.count,
                                   i.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(i.count), nil, 0)
            }
        }
        guard rc == 0 else { throw CryptoError.operationFailed("crypto_generichash") }
        return key
    }
}
