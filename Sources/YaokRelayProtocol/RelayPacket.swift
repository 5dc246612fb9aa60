import YaokWire

/// The relay's datagram format. Every packet, cleartext or sealed, starts with the same
/// 24-byte header (big-endian; Docs/relay-protocol.md):
///
/// `magic "YAOK"(4) version(1)=1 type(1) sessionID(8) counter(8) payloadLength(2) payload`
///
/// The header never carries user IDs: the only identifier in clear is the random 8-byte
/// session ID the relay chose in the handshake, so an observer cannot tell which users a
/// packet concerns. Full 32-byte user IDs travel inside the encrypted payload where a
/// message needs them (REGISTER, REGISTERED) or inside the envelope itself (SEND, MSG).
public struct RelayPacket: Sendable, Equatable {
    public static let magic: [UInt8] = Array("YAOK".utf8)
    public static let version: UInt8 = 1
    public static let headerLength = 24
    /// Largest datagram on the wire: a 1500-byte Ethernet MTU minus IPv4 (20) and UDP (8) headers.
    public static let maxDatagramLength = 1472
    public static let maxPayloadLength = maxDatagramLength - headerLength

    public var type: RelayPacketType
    public var sessionID: UInt64
    public var counter: UInt64
    public var payload: [UInt8]

    public init(type: RelayPacketType, sessionID: UInt64, counter: UInt64, payload: [UInt8]) {
        self.type = type
        self.sessionID = sessionID
        self.counter = counter
        self.payload = payload
    }

    /// The 24 header bytes for a payload of `payloadLength` bytes (also the AEAD associated data).
    public static func header(type: RelayPacketType, sessionID: UInt64, counter: UInt64, payloadLength: Int) -> [UInt8] {
        var w = ByteWriter(capacity: headerLength)
        w.raw(magic)
        w.u8(version)
        w.u8(type.rawValue)
        w.u64(sessionID)
        w.u64(counter)
        w.u16(UInt16(clamping: payloadLength))
        return w.bytes
    }

    /// The datagram's bytes. Throws when the payload does not fit one datagram.
    public func encoded() throws -> [UInt8] {
        guard payload.count <= Self.maxPayloadLength else {
            throw RelayProtocolError.oversized(what: "packet payload", size: payload.count, limit: Self.maxPayloadLength)
        }
        return Self.header(type: type, sessionID: sessionID, counter: counter, payloadLength: payload.count) + payload
    }

    /// Parses one datagram. Checks the size before anything else, then magic, version, type
    /// and that the length field matches the bytes that follow.
    public init(parsing bytes: [UInt8]) throws {
        guard bytes.count <= Self.maxDatagramLength else {
            throw RelayProtocolError.oversized(what: "datagram", size: bytes.count, limit: Self.maxDatagramLength)
        }
        guard bytes.count >= Self.headerLength else {
            throw RelayProtocolError.truncated(what: "packet header", needed: Self.headerLength, have: bytes.count)
        }
        guard Array(bytes[0..<4]) == Self.magic else { throw RelayProtocolError.badMagic }
        guard bytes[4] == Self.version else { throw RelayProtocolError.unsupportedVersion(bytes[4]) }
        guard let type = RelayPacketType(rawValue: bytes[5]) else { throw RelayProtocolError.unknownType(bytes[5]) }
        var r = RelayReader(bytes, what: "packet header", offset: 6)
        let session = try r.u64()
        let counter = try r.u64()
        let length = Int(try r.u16())
        guard length == bytes.count - Self.headerLength else {
            throw RelayProtocolError.badLength(what: "packet", detail: "length field says \(length) bytes, \(bytes.count - Self.headerLength) follow")
        }
        self.init(type: type, sessionID: session, counter: counter, payload: Array(bytes[Self.headerLength...]))
    }
}

/// Packet types. HELLO, HELLO_REPLY and RESET travel in clear; every other type is sealed
/// with the session keys.
public enum RelayPacketType: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Client → relay: the client's ephemeral X25519 key (cleartext, padded).
    case hello = 0x01
    /// Relay → client: session ID, the relay's ephemeral key and its long-term signature.
    case helloReply = 0x02
    /// Relay → client, cleartext: "I do not know this session" (e.g. after a restart): handshake again.
    case reset = 0x03
    /// Relay → client under load: a stateless cookie to repeat in the HELLO (Docs §2.1).
    case cookieReply = 0x04
    /// Signed user registrations.
    case register = 0x10
    /// Per-registration results.
    case registered = 0x11
    /// A bundle for the relay to route.
    case send = 0x12
    /// The relay has durably queued a sent bundle (custody moved to the relay).
    case queued = 0x13
    /// A bundle for a user registered on this session.
    case msg = 0x14
    /// Message IDs whose bundles the client has durably stored: the relay deletes them.
    case ack = 0x15
    /// Ask for queued messages.
    case poll = 0x16
    /// End of a poll round, with the count still waiting.
    case noMessages = 0x17
    case ping = 0x18
    case pong = 0x19
    /// A request failed; code, reference and when to retry.
    case error = 0x1A
    /// One piece of a message larger than one datagram.
    case fragment = 0x1B

    /// Whether packets of this type are sealed with the session keys.
    public var isSealed: Bool {
        switch self {
        case .hello, .helloReply, .reset, .cookieReply: return false
        default: return true
        }
    }

    public var description: String {
        switch self {
        case .hello: return "HELLO"
        case .helloReply: return "HELLO_REPLY"
        case .reset: return "RESET"
        case .cookieReply: return "COOKIE_REPLY"
        case .register: return "REGISTER"
        case .registered: return "REGISTERED"
        case .send: return "SEND"
        case .queued: return "QUEUED"
        case .msg: return "MSG"
        case .ack: return "ACK"
        case .poll: return "POLL"
        case .noMessages: return "NO_MESSAGES"
        case .ping: return "PING"
        case .pong: return "PONG"
        case .error: return "ERROR"
        case .fragment: return "FRAGMENT"
        }
    }
}

/// The relay messages' reader: it throws ``RelayProtocolError``.
public typealias RelayReader = BigEndianReader<RelayProtocolError>

extension RelayProtocolError: ByteReaderError {}
