import CSodium
import YaokCrypto
import YaokWire

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
// @unchecked: not thread-safe by design; its owner serialises every call (the client's or engine's lock/queue).
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

/// The HELLO payload: the client's ephemeral kx key, then a cookie (16 bytes, zeros when the
/// client has none; Docs/relay-protocol.md §2.1), zero-padded so a HELLO is never smaller
/// than the HELLO_REPLY or COOKIE_REPLY it provokes (no amplification).
public struct Hello: Sendable, Equatable {
    public static let length = 192
    public let clientKey: [UInt8]
    /// The relay's cookie for this client's address, or nil.
    public let cookie: [UInt8]?

    public init(clientKey: [UInt8], cookie: [UInt8]? = nil) {
        self.clientKey = clientKey
        self.cookie = cookie?.count == RelayCookie.length ? cookie : nil
    }

    public init(parsing payload: [UInt8]) throws {
        guard payload.count == Self.length else { throw RelayProtocolError.badLength(what: "HELLO", detail: "must be \(Self.length) bytes, got \(payload.count)") }
        clientKey = Array(payload[0..<32])
        let c = Array(payload[32..<48])
        cookie = c.allSatisfy { $0 == 0 } ? nil : c
    }

    public var encoded: [UInt8] {
        clientKey + (cookie ?? [UInt8](repeating: 0, count: RelayCookie.length)) + [UInt8](repeating: 0, count: Self.length - 32 - RelayCookie.length)
    }
}

/// COOKIE_REPLY payload: `echo(16) cookie(16)`. `echo` is the first 16 bytes of the HELLO's
/// client key, so a client takes cookies only from someone who saw its HELLO.
public struct CookieReply: Sendable, Equatable {
    public static let length = 32
    public let echo: [UInt8]
    public let cookie: [UInt8]

    public init(clientKey: [UInt8], cookie: [UInt8]) {
        echo = Array(clientKey.prefix(16))
        self.cookie = cookie
    }

    public init(parsing payload: [UInt8]) throws {
        guard payload.count == Self.length else { throw RelayProtocolError.badLength(what: "COOKIE_REPLY", detail: "must be \(Self.length) bytes, got \(payload.count)") }
        echo = Array(payload[0..<16])
        cookie = Array(payload[16..<32])
    }

    public var encoded: [UInt8] { echo + cookie }

    /// Whether this reply answers a HELLO with `clientKey`.
    public func answers(clientKey: [UInt8]) -> Bool { constantTimeEqual(echo, Array(clientKey.prefix(16))) }
}

/// The relay's stateless HELLO cookie: BLAKE2b-128 keyed with a secret that changes every
/// ``rotationMs``, over `"yaok-relay-cookie-v1" || source IP || source port`. Valid with the
/// current or the previous secret. Not thread-safe (the relay engine's queue owns it).
public struct RelayCookie: Sendable {
    public static let length = 16
    public static let context = Array("yaok-relay-cookie-v1".utf8)
    public static let rotationMs: Int64 = 120_000
    private var current: [UInt8]
    private var previous: [UInt8]
    private var rotatedMs: Int64

    public init(nowMs: Int64) {
        current = Random.bytes(32)
        previous = Random.bytes(32)
        rotatedMs = nowMs
    }

    /// Secrets and time fixed (test vectors).
    public init(secret: [UInt8], previous: [UInt8], rotatedMs: Int64) {
        current = secret
        self.previous = previous
        self.rotatedMs = rotatedMs
    }

    static func mac(secret: [UInt8], address: [UInt8]) -> [UInt8] {
        Blake2b.hash(context + address, length: length, key: secret)
    }

    private mutating func rotate(nowMs: Int64) {
        guard nowMs - rotatedMs >= Self.rotationMs else { return }
        // After two rotations without traffic the previous secret is stale too.
        previous = nowMs - rotatedMs >= 2 * Self.rotationMs ? Random.bytes(32) : current
        current = Random.bytes(32)
        rotatedMs = nowMs
    }

    /// The cookie for `address` (IP bytes followed by the 2-byte port).
    public mutating func cookie(for address: [UInt8], nowMs: Int64) -> [UInt8] {
        rotate(nowMs: nowMs)
        return Self.mac(secret: current, address: address)
    }

    /// Whether `cookie` was made for `address` with the current or the previous secret.
    public mutating func verify(_ cookie: [UInt8], for address: [UInt8], nowMs: Int64) -> Bool {
        rotate(nowMs: nowMs)
        return constantTimeEqual(cookie, Self.mac(secret: current, address: address))
            || constantTimeEqual(cookie, Self.mac(secret: previous, address: address))
    }
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
        var w = ByteWriter(capacity: 160)
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
