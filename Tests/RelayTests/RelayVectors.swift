import YaokCrypto
import YaokRelayProtocol
import YaokWire
import enum YaokPluginKit.Hex

/// Fixed inputs for the test vectors in Docs/relay-protocol.md ("Test vectors").
enum RelayVectorInputs {
    static let relayEd25519Seed = [UInt8](repeating: 0x01, count: 32)
    static let relayX25519Secret = [UInt8](repeating: 0x02, count: 32)
    static let clientEphemeralSecret = [UInt8](repeating: 0x03, count: 32)
    static let relayEphemeralSecret = [UInt8](repeating: 0x04, count: 32)
    static let userEd25519Seed = [UInt8](repeating: 0x05, count: 32)
    static let sessionID: UInt64 = 0x0102_0304_0506_0708
    static let timestampMs: Int64 = 1_700_000_000_000
    static let registrationNonce = [UInt8](repeating: 0x06, count: 16)
    static let hubEd25519Seed = [UInt8](repeating: 0x08, count: 32)
    static let carriedUntilMs: Int64 = timestampMs + 86_400_000
    static let cookieSecret = [UInt8](repeating: 0x09, count: 32)
    /// 192.0.2.1 port 7900 (`c0000201 1edc`).
    static let cookieAddress: [UInt8] = [192, 0, 2, 1, 0x1e, 0xdc]

    static func relay() throws -> Identity { try Identity(ed25519Seed: relayEd25519Seed, x25519Secret: relayX25519Secret) }
    static func user() throws -> Identity { try Identity(ed25519Seed: userEd25519Seed, x25519Secret: [UInt8](repeating: 0x07, count: 32)) }
    static func hub() throws -> Identity { try Identity(ed25519Seed: hubEd25519Seed, x25519Secret: [UInt8](repeating: 0x0a, count: 32)) }
    static func channel() throws -> ChannelBinding {
        ChannelBinding(sessionID: sessionID, clientKey: try EphemeralKX(secretKey: clientEphemeralSecret).publicKey,
                       relayEphemeralKey: try EphemeralKX(secretKey: relayEphemeralSecret).publicKey)
    }

    /// The vectors, computed.
    static func compute() throws -> [String: String] {
        let relay = try relay()
        let clientEph = try EphemeralKX(secretKey: clientEphemeralSecret)
        let relayEph = try EphemeralKX(secretKey: relayEphemeralSecret)
        let hello = try RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: clientEph.publicKey).encoded).encoded()
        let reply = HelloReply.make(sessionID: sessionID, clientKey: clientEph.publicKey, relayEphemeralKey: relayEph.publicKey, relay: relay)
        let replyPacket = try RelayPacket(type: .helloReply, sessionID: sessionID, counter: 0, payload: reply.encoded).encoded()
        let client = try SecureSession(side: .client, sessionID: sessionID, ours: clientEph, theirs: relayEph.publicKey)
        var w = ByteWriter()
        w.u64(UInt64(timestampMs))
        let ping = try client.seal(.ping, w.bytes)
        let channel = try channel()
        let owner = try Registration.owner(user(), relaySigningKey: relay.signingKey, channel: channel, timestampMs: timestampMs, nonce: registrationNonce)
        let carried = try Registration.carried(by: user(), relaySigningKey: relay.signingKey, collector: hub().signingKey,
                                               timestampMs: timestampMs, untilMs: carriedUntilMs, nonce: registrationNonce)
        var cookies = RelayCookie(secret: cookieSecret, previous: cookieSecret, rotatedMs: timestampMs)
        let cookie = cookies.cookie(for: cookieAddress, nowMs: timestampMs)
        let cookieReply = try RelayPacket(type: .cookieReply, sessionID: 0, counter: 0,
                                          payload: CookieReply(clientKey: clientEph.publicKey, cookie: cookie).encoded).encoded()
        return [
            "relay_signing_key": Hex.encode(relay.signingKey),
            "client_ephemeral_key": Hex.encode(clientEph.publicKey),
            "relay_ephemeral_key": Hex.encode(relayEph.publicKey),
            "hello": Hex.encode(hello),
            "hello_reply": Hex.encode(replyPacket),
            "ping_counter_1": Hex.encode(ping),
            "channel_binding": Hex.encode(channel.bytes),
            "hub_signing_key": Hex.encode(try hub().signingKey),
            "registration_owner": Hex.encode(owner.encoded),
            "registration_carried": Hex.encode(carried.encoded),
            "cookie_reply": Hex.encode(cookieReply),
        ]
    }
}
