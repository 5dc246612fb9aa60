import CSodium
import YaokPluginKit

/// A hub's two-byte name on the air (Docs/protocol.md §10.2): the first two bytes of
/// BLAKE2b-128 over its Ed25519 key. A hint that picks the session to open a frame with,
/// never an identity: anyone may claim any short ID, and the session's keys decide.
public struct ShortID: Hashable, Sendable, CustomStringConvertible {
    public let value: UInt16
    /// Every neighbour (the receiver of beacons).
    public static let everyone = ShortID(value: 0xFFFF)

    public init(value: UInt16) { self.value = value }

    /// The short ID of a hub's Ed25519 key.
    public init(signingKey: [UInt8]) {
        var digest = [UInt8](repeating: 0, count: 16)
        crypto_generichash(&digest, 16, signingKey, UInt64(signingKey.count), nil, 0)
        value = UInt16(digest[0]) << 8 | UInt16(digest[1])
    }

    public var description: String { Hex.encode([UInt8(value >> 8), UInt8(value & 0xFF)]) }
}

/// One LoRa frame of ours (Docs/protocol.md §10.2): `version ‖ kind`, sender's and receiver's
/// short IDs, the body. At most ``maxLength`` bytes, so the device never splits it.
public struct AirFrame: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        /// "I am here": the body is the sender's Ed25519 key (32 bytes), in clear.
        case beacon = 1
        /// One `SecureLink` record in datagram mode: the handshake in clear, then sealed frames.
        case link = 2
    }

    public static let version: UInt8 = 1
    public static let headerLength = 5
    /// What the RNode sends as one LoRa frame (Docs/protocol.md §10.1).
    public static let maxLength = RNodeRequest.maxPacket

    public var kind: Kind
    public var sender: ShortID
    public var receiver: ShortID
    public var body: [UInt8]

    public init(kind: Kind, sender: ShortID, receiver: ShortID, body: [UInt8]) {
        self.kind = kind
        self.sender = sender
        self.receiver = receiver
        self.body = body
    }

    public var encoded: [UInt8] {
        [Self.version << 4 | kind.rawValue, UInt8(sender.value >> 8), UInt8(sender.value & 0xFF),
         UInt8(receiver.value >> 8), UInt8(receiver.value & 0xFF)] + body
    }

    /// Why a received packet is not one of our frames (anyone can transmit anything).
    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case tooShort(Int)
        case tooLong(Int)
        case otherVersion(UInt8)
        case unknownKind(UInt8)

        public var description: String {
            switch self {
            case .tooShort(let n): return "a LoRa frame of \(n) bytes is shorter than the \(AirFrame.headerLength)-byte header"
            case .tooLong(let n): return "a LoRa frame of \(n) bytes exceeds \(AirFrame.maxLength)"
            case .otherVersion(let v): return "a LoRa frame of version \(v) (this hub speaks \(AirFrame.version))"
            case .unknownKind(let k): return "a LoRa frame of unknown kind \(k)"
            }
        }
    }

    public init(parsing bytes: [UInt8]) throws(ParseError) {
        guard bytes.count >= Self.headerLength else { throw .tooShort(bytes.count) }
        guard bytes.count <= Self.maxLength else { throw .tooLong(bytes.count) }
        guard bytes[0] >> 4 == Self.version else { throw .otherVersion(bytes[0] >> 4) }
        guard let kind = Kind(rawValue: bytes[0] & 0x0F) else { throw .unknownKind(bytes[0] & 0x0F) }
        self.kind = kind
        sender = ShortID(value: UInt16(bytes[1]) << 8 | UInt16(bytes[2]))
        receiver = ShortID(value: UInt16(bytes[3]) << 8 | UInt16(bytes[4]))
        body = Array(bytes[Self.headerLength...])
    }
}

/// A host frame too long for one LoRa frame, cut into slices, each sealed on its own inside a
/// `linkFragment` record (Docs/protocol.md §10.2): `tag ‖ index ‖ count ‖ slice`. The header is
/// inside the seal, so a forged or damaged fragment is refused by the session before it
/// touches a reassembly.
public enum Fragments {
    public static let headerLength = 3
    public static let maxCount = 64
    /// The longest inner record that fits one LoRa frame once sealed.
    public static let maxInner = AirFrame.maxLength - AirFrame.headerLength - SecureLink.overhead
    /// The longest slice of a host frame one fragment carries.
    public static let maxSlice = maxInner - TLVRecord.headerLength - headerLength
    /// The longest host frame a LoRa link carries.
    public static let maxFrame = maxCount * maxSlice

    /// The inner records (each to be sealed) for `frame`, which must be longer than ``maxInner``.
    public static func split(_ frame: [UInt8], tag: UInt8) -> [[UInt8]] {
        let count = (frame.count + maxSlice - 1) / maxSlice
        return (0..<count).map { i in
            let slice = frame[(i * maxSlice)..<min(frame.count, (i + 1) * maxSlice)]
            return TLVRecord(.linkFragment, value: [tag, UInt8(i), UInt8(count)] + slice).encoded
        }
    }

    /// Partial frames from one neighbour: at most ``perNeighbour``, each dropped after its timer.
    public struct Reassembly: Sendable {
        public static let perNeighbour = 2
        struct Partial {
            var count: Int
            var slices: [Int: [UInt8]]
            var deadline: Double
        }
        private var partial: [UInt8: Partial] = [:]
        public private(set) var dropped = 0

        public init() {}

        public var partialCount: Int { partial.count }

        /// Takes one opened fragment (the `linkFragment` record's value); returns the whole host
        /// frame once every slice is in. `timeout`: how long a partial frame may wait.
        public mutating func add(_ value: [UInt8], now: Double, timeout: Double) -> [UInt8]? {
            guard value.count > headerLength else { dropped += 1; return nil }
            let tag = value[0], index = Int(value[1]), count = Int(value[2])
            guard count >= 2, count <= maxCount, index < count else { dropped += 1; return nil }
            let slice = Array(value[headerLength...])
            // Every slice but the last is full; a frame's slices agree on their count.
            guard slice.count <= maxSlice, index == count - 1 || slice.count == maxSlice else { dropped += 1; return nil }
            if let p = partial[tag], p.count != count {
                partial[tag] = nil
                dropped += 1
            }
            if partial[tag] == nil {
                expire(now: now)
                if partial.count >= Self.perNeighbour, let oldest = partial.min(by: { $0.value.deadline < $1.value.deadline })?.key {
                    partial[oldest] = nil
                    dropped += 1
                }
                partial[tag] = Partial(count: count, slices: [:], deadline: now + timeout)
            }
            partial[tag]!.slices[index] = slice
            guard let p = partial[tag], p.slices.count == p.count else { return nil }
            partial[tag] = nil
            return (0..<p.count).flatMap { p.slices[$0]! }
        }

        /// Drops partial frames whose time is up.
        public mutating func expire(now: Double) {
            for (tag, p) in partial where p.deadline <= now {
                partial[tag] = nil
                dropped += 1
            }
        }
    }
}
