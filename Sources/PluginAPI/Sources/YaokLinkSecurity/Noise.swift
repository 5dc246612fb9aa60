import CSodium

/// The Noise protocol framework's `Noise_NN_25519_ChaChaPoly_SHA256` (noiseprotocol.org,
/// revision 34), built from libsodium primitives only:
/// X25519 `crypto_scalarmult`, ChaCha20-Poly1305 IETF `crypto_aead_chacha20poly1305_ietf_*`,
/// SHA-256 `crypto_hash_sha256`, HMAC-SHA-256 `crypto_auth_hmacsha256_*` (Noise's HKDF).
///
/// ``SecureLink`` adds what NN leaves out (who the parties are) with Ed25519 signatures over
/// the handshake hash, so the long-term secret keys stay in the host (a plugin may only
/// ask the host to sign). Checked against a published vector in `SecureLinkTests`.
enum Noise {
    static let protocolName = Array("Noise_NN_25519_ChaChaPoly_SHA256".utf8)
    static let keyLength = 32
    static let tagLength = Int(crypto_aead_chacha20poly1305_ietf_ABYTES)

    private static let ready: Int32 = sodium_init()

    static func sha256(_ data: [UInt8]) -> [UInt8] {
        _ = ready
        var out = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        crypto_hash_sha256(&out, data, UInt64(data.count))
        return out
    }

    static func hmac(key: [UInt8], _ parts: [UInt8]...) -> [UInt8] {
        _ = ready
        var state = crypto_auth_hmacsha256_state()
        crypto_auth_hmacsha256_init(&state, key, key.count)
        for part in parts { crypto_auth_hmacsha256_update(&state, part, UInt64(part.count)) }
        var out = [UInt8](repeating: 0, count: Int(crypto_auth_hmacsha256_BYTES))
        crypto_auth_hmacsha256_final(&state, &out)
        sodium_memzero(&state, MemoryLayout<crypto_auth_hmacsha256_state>.size)
        return out
    }

    /// Noise's HKDF with two outputs.
    static func hkdf2(chainingKey: [UInt8], input: [UInt8]) -> ([UInt8], [UInt8]) {
        var temp = hmac(key: chainingKey, input)
        defer { sodium_memzero(&temp, temp.count) }
        let first = hmac(key: temp, [0x01])
        let second = hmac(key: temp, first, [0x02])
        return (first, second)
    }

    /// X25519. A result of all zeros (a small-order peer key) is refused.
    static func dh(secret: [UInt8], peer: [UInt8]) throws -> [UInt8] {
        _ = ready
        guard peer.count == 32 else { throw SecureLinkError.malformed("an X25519 key is 32 bytes, got \(peer.count)") }
        var out = [UInt8](repeating: 0, count: 32)
        guard crypto_scalarmult(&out, secret, peer) == 0 else { throw SecureLinkError.weakKey }
        return out
    }

    static func publicKey(secret: [UInt8]) -> [UInt8] {
        _ = ready
        var out = [UInt8](repeating: 0, count: 32)
        _ = crypto_scalarmult_base(&out, secret)
        return out
    }

    /// Noise's ChaChaPoly nonce: 32 zero bits, then the 64-bit counter little-endian.
    static func nonce(_ n: UInt64) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(crypto_aead_chacha20poly1305_ietf_NPUBBYTES))
        for i in 0..<8 { out[4 + i] = UInt8(truncatingIfNeeded: n >> UInt64(8 * i)) }
        return out
    }

    static func encrypt(key: [UInt8], nonce n: UInt64, ad: [UInt8], plaintext: [UInt8]) -> [UInt8] {
        _ = ready
        var out = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        var written: UInt64 = 0
        _ = crypto_aead_chacha20poly1305_ietf_encrypt(&out, &written, plaintext, UInt64(plaintext.count), ad, UInt64(ad.count),
                                                      nil, nonce(n), key)
        return out
    }

    static func decrypt(key: [UInt8], nonce n: UInt64, ad: [UInt8], ciphertext: [UInt8]) throws -> [UInt8] {
        _ = ready
        guard ciphertext.count >= tagLength else { throw SecureLinkError.malformed("sealed data shorter than its tag") }
        var out = [UInt8](repeating: 0, count: ciphertext.count - tagLength)
        var written: UInt64 = 0
        guard crypto_aead_chacha20poly1305_ietf_decrypt(&out, &written, nil, ciphertext, UInt64(ciphertext.count), ad, UInt64(ad.count),
                                                        nonce(n), key) == 0 else {
            throw SecureLinkError.decryptionFailed
        }
        return out
    }

    static func randomBytes(_ count: Int) -> [UInt8] {
        _ = ready
        var out = [UInt8](repeating: 0, count: count)
        randombytes_buf(&out, count)
        return out
    }
}

/// A Noise key that is wiped when released.
// @unchecked: the key bytes are written once, in init, and only read after (deinit wipes them).
final class NoiseKey: @unchecked Sendable {
    fileprivate(set) var bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    deinit { sodium_memzero(&bytes, bytes.count) }
}

/// Noise's CipherState: a key and a nonce counter.
struct NoiseCipher {
    let key: NoiseKey
    var n: UInt64 = 0

    init(key: [UInt8]) { self.key = NoiseKey(key) }

    mutating func encrypt(ad: [UInt8], _ plaintext: [UInt8]) throws -> [UInt8] {
        guard n < UInt64.max else { throw SecureLinkError.exhausted }
        defer { n += 1 }
        return Noise.encrypt(key: key.bytes, nonce: n, ad: ad, plaintext: plaintext)
    }

    mutating func decrypt(ad: [UInt8], _ ciphertext: [UInt8]) throws -> [UInt8] {
        let plain = try Noise.decrypt(key: key.bytes, nonce: n, ad: ad, ciphertext: ciphertext)
        n += 1
        return plain
    }
}

/// Noise's SymmetricState: chaining key, handshake hash, and the cipher once a DH was mixed in.
struct NoiseSymmetric {
    private(set) var chainingKey: [UInt8]
    private(set) var hash: [UInt8]
    private var cipher: NoiseCipher?

    init() {
        // The protocol name is exactly HASHLEN (32) bytes, so h = name with no padding or hashing.
        hash = Noise.protocolName
        chainingKey = hash
    }

    mutating func mixHash(_ data: [UInt8]) { hash = Noise.sha256(hash + data) }

    mutating func mixKey(_ input: [UInt8]) {
        let (ck, k) = Noise.hkdf2(chainingKey: chainingKey, input: input)
        chainingKey = ck
        cipher = NoiseCipher(key: k)
    }

    mutating func encryptAndHash(_ plaintext: [UInt8]) throws -> [UInt8] {
        guard var c = cipher else { mixHash(plaintext); return plaintext }
        let out = try c.encrypt(ad: hash, plaintext)
        cipher = c
        mixHash(out)
        return out
    }

    mutating func decryptAndHash(_ ciphertext: [UInt8]) throws -> [UInt8] {
        guard var c = cipher else { mixHash(ciphertext); return ciphertext }
        let out = try c.decrypt(ad: hash, ciphertext)
        cipher = c
        mixHash(ciphertext)
        return out
    }

    /// The two transport keys: the first encrypts initiator → responder.
    func split() -> (NoiseCipher, NoiseCipher) {
        let (k1, k2) = Noise.hkdf2(chainingKey: chainingKey, input: [])
        return (NoiseCipher(key: k1), NoiseCipher(key: k2))
    }
}

/// The two messages of the NN pattern: `-> e` then `<- e, ee`, each with a payload.
struct NoiseNN {
    let isInitiator: Bool
    private var symmetric = NoiseSymmetric()
    private let ephemeralSecret: NoiseKey
    let ephemeralPublic: [UInt8]
    private(set) var peerEphemeral: [UInt8]?

    /// `ephemeralSecret` is for test vectors only; normally a fresh key is drawn.
    init(isInitiator: Bool, prologue: [UInt8], ephemeralSecret: [UInt8]? = nil) {
        self.isInitiator = isInitiator
        let secret = ephemeralSecret ?? Noise.randomBytes(32)
        self.ephemeralSecret = NoiseKey(secret)
        self.ephemeralPublic = Noise.publicKey(secret: secret)
        symmetric.mixHash(prologue)
    }

    /// The handshake hash so far (for channel binding: what each side signs).
    var handshakeHash: [UInt8] { symmetric.hash }

    /// Initiator: message 1 (`e`, then the payload in clear: no key yet).
    mutating func writeFirst(payload: [UInt8]) throws -> [UInt8] {
        symmetric.mixHash(ephemeralPublic)
        return ephemeralPublic + (try symmetric.encryptAndHash(payload))
    }

    /// Responder: reads message 1 and returns its payload.
    mutating func readFirst(_ message: [UInt8]) throws -> [UInt8] {
        guard message.count >= 32 else { throw SecureLinkError.malformed("handshake message 1 is \(message.count) bytes, needs 32") }
        let e = Array(message[0..<32])
        peerEphemeral = e
        symmetric.mixHash(e)
        return try symmetric.decryptAndHash(Array(message[32...]))
    }

    /// Responder: message 2 (`e, ee`, then the encrypted payload). `payload` is built from
    /// the handshake hash at the moment it is encrypted (what the responder signs).
    mutating func writeSecond(payload: (_ hashBeforePayload: [UInt8]) throws -> [UInt8]) throws -> [UInt8] {
        guard let re = peerEphemeral else { throw SecureLinkError.unexpected("message 2 before message 1") }
        symmetric.mixHash(ephemeralPublic)
        symmetric.mixKey(try Noise.dh(secret: ephemeralSecret.bytes, peer: re))
        let body = try payload(symmetric.hash)
        return ephemeralPublic + (try symmetric.encryptAndHash(body))
    }

    /// Initiator: reads message 2; returns its payload and the hash it was encrypted under.
    mutating func readSecond(_ message: [UInt8]) throws -> (payload: [UInt8], hashBeforePayload: [UInt8]) {
        guard message.count >= 32 + Noise.tagLength else {
            throw SecureLinkError.malformed("handshake message 2 is \(message.count) bytes, needs at least \(32 + Noise.tagLength)")
        }
        let e = Array(message[0..<32])
        peerEphemeral = e
        symmetric.mixHash(e)
        symmetric.mixKey(try Noise.dh(secret: ephemeralSecret.bytes, peer: e))
        let before = symmetric.hash
        let payload = try symmetric.decryptAndHash(Array(message[32...]))
        return (payload, before)
    }

    /// The transport ciphers as (send, receive) for this side.
    func split() -> (send: NoiseCipher, receive: NoiseCipher) {
        let (i2r, r2i) = symmetric.split()
        return isInitiator ? (i2r, r2i) : (r2i, i2r)
    }
}
