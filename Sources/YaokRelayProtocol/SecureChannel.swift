import CSodium
import YaokCrypto

/// An ephemeral X25519 key pair for `crypto_kx` (one per handshake).
public struct EphemeralKX: Sendable {
    public let publicKey: [UInt8]
    let secretKey: SecretBytes

    /// A fresh key pair (`crypto_kx_keypair`).
    public static func generate() -> EphemeralKX {
        _ = sodium_init()
        var pk = [UInt8](repeating: 0, count: Int(crypto_kx_PUBLICKEYBYTES))
        var sk = [UInt8](repeating: 0, count: Int(crypto_kx_SECRETKEYBYTES))
        _ = crypto_kx_keypair(&pk, &sk)
        defer { wipe(&sk) }
        return EphemeralKX(publicKey: pk, secretKey: SecretBytes(copying: sk))
    }

    /// The key pair for a given 32-byte secret (test vectors).
    public init(secretKey sk: [UInt8]) throws {
        guard sk.count == Int(crypto_kx_SECRETKEYBYTES) else { throw RelayProtocolError.invalid("kx secret must be 32 bytes") }
        var pk = [UInt8](repeating: 0, count: 32)
        guard crypto_scalarmult_base(&pk, sk) == 0 else { throw RelayProtocolError.crypto("crypto_scalarmult_base") }
        self.init(publicKey: pk, secretKey: SecretBytes(copying: sk))
    }

    private init(publicKey: [UInt8], secretKey: SecretBytes) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }
}

/// Which end of the channel we are; decides which `crypto_kx` function derives the keys.
public enum ChannelSide: Sendable { case client, relay }

/// One direction-keyed secure session: XChaCha20-Poly1305 with a 64-bit packet counter as
/// the nonce, the 24-byte packet header as associated data, and a sliding replay window.
///
/// Keys come from `crypto_kx` over the two ephemeral keys, so each handshake yields fresh
/// keys (forward secrecy) and each direction has its own key (a reflected packet fails).
/// Not thread-safe: the owner serialises access.
public final class SecureSession: @unchecked Sendable {
    public static let tagLength = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
    /// Largest plaintext one sealed datagram carries.
    public static let maxPlaintextLength = RelayPacket.maxPayloadLength - tagLength
    /// Counters up to this far behind the highest seen are accepted once (UDP reorders).
    public static let replayWindow: UInt64 = 64

    public let sessionID: UInt64
    private let rxKey: SecretBytes
    private let txKey: SecretBytes
    private var sendCounter: UInt64 = 0
    private var highestReceived: UInt64 = 0
    private var window: UInt64 = 0

    /// Derives the session keys. Throws when the peer key is unusable (small order).
    public init(side: ChannelSide, sessionID: UInt64, ours: EphemeralKX, theirs: [UInt8]) throws {
        guard theirs.count == 32 else { throw RelayProtocolError.invalid("peer kx key must be 32 bytes") }
        var rx = [UInt8](repeating: 0, count: Int(crypto_kx_SESSIONKEYBYTES))
        var tx = [UInt8](repeating: 0, count: Int(crypto_kx_SESSIONKEYBYTES))
        defer { wipe(&rx); wipe(&tx) }
        let rc = ours.secretKey.withUnsafeBytes { sk -> Int32 in
            let s = sk.baseAddress!.assumingMemoryBound(to: UInt8.self)
            switch side {
            case .client: return crypto_kx_client_session_keys(&rx, &tx, ours.publicKey, s, theirs)
            case .relay: return crypto_kx_server_session_keys(&rx, &tx, ours.publicKey, s, theirs)
            }
        }
        guard rc == 0 else { throw RelayProtocolError.crypto("crypto_kx session keys (weak peer key)") }
        self.sessionID = sessionID
        self.rxKey = SecretBytes(copying: rx)
        self.txKey = SecretBytes(copying: tx)
    }

    static func nonce(_ counter: UInt64) -> [UInt8] {
        var n = [UInt8](repeating: 0, count: Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES))
        for i in 0..<8 { n[16 + i] = UInt8(truncatingIfNeeded: counter >> UInt64(56 - 8 * i)) }
        return n
    }

    /// Seals `plaintext` as one datagram of `type` with the next counter.
    public func seal(_ type: RelayPacketType, _ plaintext: [UInt8]) throws -> [UInt8] {
        guard plaintext.count <= Self.maxPlaintextLength else {
            throw RelayProtocolError.oversized(what: "\(type) plaintext", size: plaintext.count, limit: Self.maxPlaintextLength)
        }
        sendCounter += 1
        let counter = sendCounter
        let header = RelayPacket.header(type: type, sessionID: sessionID, counter: counter, payloadLength: plaintext.count + Self.tagLength)
        var out = [UInt8](repeating: 0, count: plaintext.count + Self.tagLength)
        var outLen: UInt64 = 0
        let nonce = Self.nonce(counter)
        let rc = txKey.withUnsafeBytes { k in
            crypto_aead_xchacha20poly1305_ietf_encrypt(&out, &outLen, plaintext, UInt64(plaintext.count), header, UInt64(header.count),
                                                       nil, nonce, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard rc == 0 else { throw RelayProtocolError.crypto("crypto_aead_xchacha20poly1305_ietf_encrypt") }
        return header + out
    }

    /// Opens a sealed packet: checks the session, authenticates, then checks and records the
    /// counter (only after authentication, so forged packets cannot poison the window).
    public func open(_ packet: RelayPacket) throws -> [UInt8] {
        guard packet.sessionID == sessionID else { throw RelayProtocolError.wrongSession }
        guard packet.type.isSealed else { throw RelayProtocolError.invalid("\(packet.type) is not a sealed type") }
        guard packet.payload.count >= Self.tagLength else { throw RelayProtocolError.authenticationFailed }
        guard packet.counter > 0, !isReplay(packet.counter) else { throw RelayProtocolError.replayed(counter: packet.counter) }
        let header = RelayPacket.header(type: packet.type, sessionID: packet.sessionID, counter: packet.counter, payloadLength: packet.payload.count)
        var out = [UInt8](repeating: 0, count: packet.payload.count - Self.tagLength)
        var outLen: UInt64 = 0
        let nonce = Self.nonce(packet.counter)
        let rc = rxKey.withUnsafeBytes { k in
            crypto_aead_xchacha20poly1305_ietf_decrypt(&out, &outLen, nil, packet.payload, UInt64(packet.payload.count), header, UInt64(header.count),
                                                       nonce, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard rc == 0 else { throw RelayProtocolError.authenticationFailed }
        record(packet.counter)
        return out
    }

    private func isReplay(_ c: UInt64) -> Bool {
        if c > highestReceived { return false }
        let age = highestReceived - c
        if age >= Self.replayWindow { return true }
        return window & (1 << age) != 0
    }

    private func record(_ c: UInt64) {
        if c > highestReceived {
            let shift = c - highestReceived
            window = shift >= 64 ? 0 : window << shift
            window |= 1
            highestReceived = c
        } else {
            window |= 1 << (highestReceived - c)
        }
    }
}

/// The HELLO payload: the client's ephemeral kx key, zero-padded so a HELLO is never smaller
/// than the HELLO_REPLY it provokes (no amplification).
public struct Hello: Sendable, Equatable {
    public static let length = 192
    public let clientKey: [UInt8]

    public init(clientKey: [UInt8]) { self.clientKey = clientKey }

    public init(parsing payload: [UInt8]) throws {
        guard payload.count == Self.length else { throw RelayProtocolError.badLength(what: "HELLO", detail: "must be \(Self.length) bytes, got \(payload.count)") }
        clientKey = Array(payload[0..<32])
    }

    public var encoded: [UInt8] { clientKey + [UInt8](repeating: 0, count: Self.length - 32) }
}

/// The HELLO_REPLY payload: `relayEphemeralKey(32) relaySigningKey(32) relayKXKey(32) signature(64)`.
/// The Ed25519 signature by the relay's long-term key covers
/// `"yaok-relay-hello-v1" || sessionID(8) || clientKey(32) || relayEphemeralKey(32) || relaySigningKey(32) || relayKXKey(32)`,
/// proving the pinned relay chose this ephemeral key for this client's HELLO.
public struct HelloReply: Sendable, Equatable {
    public static let context = Array("yaok-relay-hello-v1".utf8)
    public static let length = 160
    public let relayEphemeralKey: [UInt8]
    public let relaySigningKey: [UInt8]
    public let relayKXKey: [UInt8]
    public let signature: [UInt8]

    public static func signedBody(sessionID: UInt64, clientKey: [UInt8], relayEphemeralKey: [UInt8], relaySigningKey: [UInt8], relayKXKey: [UInt8]) -> [UInt8] {
        var w = RelayWriter(capacity: 160)
        w.raw(context)
        w.u64(sessionID)
        w.raw(clientKey)
        w.raw(relayEphemeralKey)
        w.raw(relaySigningKey)
        w.raw(relayKXKey)
        return w.bytes
    }

    /// Builds and signs a reply with the relay's identity.
    public static func make(sessionID: UInt64, clientKey: [UInt8], relayEphemeralKey: [UInt8], relay: Identity) -> HelloReply {
        let body = signedBody(sessionID: sessionID, clientKey: clientKey, relayEphemeralKey: relayEphemeralKey,
                              relaySigningKey: relay.signingKey, relayKXKey: relay.kxKey)
        return HelloReply(relayEphemeralKey: relayEphemeralKey, relaySigningKey: relay.signingKey, relayKXKey: relay.kxKey, signature: relay.sign(body))
    }

    init(relayEphemeralKey: [UInt8], relaySigningKey: [UInt8], relayKXKey: [UInt8], signature: [UInt8]) {
        self.relayEphemeralKey = relayEphemeralKey
        self.relaySigningKey = relaySigningKey
        self.relayKXKey = relayKXKey
        self.signature = signature
    }

    public init(parsing payload: [UInt8]) throws {
        guard payload.count == Self.length else { throw RelayProtocolError.badLength(what: "HELLO_REPLY", detail: "must be \(Self.length) bytes, got \(payload.count)") }
        relayEphemeralKey = Array(payload[0..<32])
        relaySigningKey = Array(payload[32..<64])
        relayKXKey = Array(payload[64..<96])
        signature = Array(payload[96..<160])
    }

    public var encoded: [UInt8] { relayEphemeralKey + relaySigningKey + relayKXKey + signature }

    /// Checks the pinned key first (clear error naming both keys), then the signature.
    public func verify(pinnedKey: [UInt8], sessionID: UInt64, clientKey: [UInt8]) throws {
        guard constantTimeEqual(relaySigningKey, pinnedKey) else {
            throw RelayProtocolError.relayKeyMismatch(expected: pinnedKey, got: relaySigningKey)
        }
        let body = Self.signedBody(sessionID: sessionID, clientKey: clientKey, relayEphemeralKey: relayEphemeralKey,
                                   relaySigningKey: relaySigningKey, relayKXKey: relayKXKey)
        guard SigningKeyPair.verify(signature: signature, message: body, publicKey: relaySigningKey) else {
            throw RelayProtocolError.badHandshakeSignature
        }
    }
}
