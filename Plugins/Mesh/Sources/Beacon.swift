import YaokPluginKit

/// A hub's discovery beacon, sent by UDP multicast:
///
/// `"YKMB"(4) version(1) ed25519_key(32) x25519_key(32) tcp_port(2, BE) timestamp_ms(8, BE) signature(64)`
///
/// The Ed25519 signature covers every byte before it. A beacon only tells a hub
/// where to dial; the link handshake on the TCP session proves the identity again.
public struct Beacon: Sendable, Equatable {
    public static let magic: [UInt8] = HostSigning.meshBeaconMagic
    public static let version: UInt8 = 1
    /// Bytes covered by the signature.
    public static let signedLength = HostSigning.meshBeaconSignedLength
    /// Whole beacon.
    public static let length = signedLength + 64
    /// How far a beacon's timestamp may be from our clock: 7 days, because a hub's clock may be
    /// days off (a Raspberry Pi boots offline with its last saved time; Docs/protocol.md §2.2).
    /// Replays are stopped by the engine instead: each hub's beacons must be newer than its last,
    /// and a replayed beacon only makes us try a handshake that its key must complete.
    public static let maxClockSkewMs: Int64 = 7 * 24 * 3_600_000

    /// The sender's Ed25519 public key.
    public var signingKey: [UInt8]
    /// The sender's X25519 public key.
    public var kxKey: [UInt8]
    /// The sender's TCP listening port.
    public var tcpPort: UInt16
    /// The sender's wall clock when it signed, UTC ms.
    public var timestampMs: Int64

    public init(signingKey: [UInt8], kxKey: [UInt8], tcpPort: UInt16, timestampMs: Int64) {
        self.signingKey = signingKey
        self.kxKey = kxKey
        self.tcpPort = tcpPort
        self.timestampMs = timestampMs
    }

    /// The bytes the signature covers.
    public var signedBytes: [UInt8] {
        var out = Self.magic
        out.reserveCapacity(Self.length)
        out.append(Self.version)
        out += signingKey.prefix(32) + [UInt8](repeating: 0, count: max(0, 32 - signingKey.count))
        out += kxKey.prefix(32) + [UInt8](repeating: 0, count: max(0, 32 - kxKey.count))
        out.append(UInt8(tcpPort >> 8))
        out.append(UInt8(tcpPort & 0xff))
        let ts = UInt64(bitPattern: timestampMs)
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: ts >> UInt64(shift))) }
        return out
    }

    /// The whole beacon, signed with `sign` (the host's Ed25519 signer).
    public func encoded(sign: ([UInt8]) throws -> [UInt8]) throws -> [UInt8] {
        let body = signedBytes
        let signature = try sign(body)
        guard signature.count == 64 else { throw BeaconError.badSignatureLength(signature.count) }
        return body + signature
    }

    /// Parses and checks a beacon: layout, version, timestamp within ``maxClockSkewMs`` of `nowMs`,
    /// then the signature with `verify(signature, message, publicKey)`. Never traps on input.
    public static func parse(_ bytes: [UInt8], nowMs: Int64,
                             verify: ([UInt8], [UInt8], [UInt8]) -> Bool) throws -> Beacon {
        guard bytes.count == length else { throw BeaconError.wrongLength(bytes.count) }
        guard Array(bytes[0..<4]) == magic else { throw BeaconError.badMagic }
        guard bytes[4] == version else { throw BeaconError.unsupportedVersion(bytes[4]) }
        let signingKey = Array(bytes[5..<37])
        let kxKey = Array(bytes[37..<69])
        let port = UInt16(bytes[69]) << 8 | UInt16(bytes[70])
        var ts: UInt64 = 0
        for b in bytes[71..<79] { ts = ts << 8 | UInt64(b) }
        let timestamp = Int64(bitPattern: ts)
        // Checked before the signature so stale floods cost no verification.
        let skew = timestamp.subtractingReportingOverflow(nowMs)
        guard !skew.overflow, skew.partialValue.magnitude <= UInt64(maxClockSkewMs) else {
            throw BeaconError.stale(skewMs: skew.overflow ? Int64.max : skew.partialValue)
        }
        guard port != 0 else { throw BeaconError.zeroPort }
        let signature = Array(bytes[signedLength..<length])
        guard verify(signature, Array(bytes[0..<signedLength]), signingKey) else { throw BeaconError.badSignature }
        return Beacon(signingKey: signingKey, kxKey: kxKey, tcpPort: port, timestampMs: timestamp)
    }
}

/// Why a beacon was refused.
public enum BeaconError: Error, Sendable, Equatable, CustomStringConvertible {
    case wrongLength(Int)
    case badMagic
    case unsupportedVersion(UInt8)
    case stale(skewMs: Int64)
    case zeroPort
    case badSignature
    case badSignatureLength(Int)

    public var description: String {
        switch self {
        case .wrongLength(let n): return "beacon must be \(Beacon.length) bytes, got \(n)"
        case .badMagic: return "not a mesh beacon (magic is not YKMB)"
        case .unsupportedVersion(let v): return "beacon version \(v) is not supported (expected \(Beacon.version))"
        case .stale(let skew): return "beacon timestamp is \(skew / 1000) s away from our clock (limit \(Beacon.maxClockSkewMs / 1000) s)"
        case .zeroPort: return "beacon announces TCP port 0"
        case .badSignature: return "beacon signature does not verify"
        case .badSignatureLength(let n): return "signer returned \(n) bytes, expected 64"
        }
    }
}
