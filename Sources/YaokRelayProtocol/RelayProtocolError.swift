import YaokCrypto
import enum YaokPluginKit.Hex

/// Errors parsing relay packets, running the secure channel, or talking to a relay.
public enum RelayProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated(what: String, needed: Int, have: Int)
    case oversized(what: String, size: Int, limit: Int)
    case badLength(what: String, detail: String)
    case badMagic
    case unsupportedVersion(UInt8)
    case unknownType(UInt8)
    /// The relay presented another long-term key than the one pinned in the config.
    case relayKeyMismatch(expected: [UInt8], got: [UInt8])
    /// The relay's handshake signature does not verify.
    case badHandshakeSignature
    /// A sealed packet did not authenticate (wrong key, altered, or not for this session).
    case authenticationFailed
    /// A packet counter was already seen (or is too old): a replay or duplicate.
    case replayed(counter: UInt64)
    /// The packet is not for this session.
    case wrongSession
    /// A bad value in a field.
    case invalid(String)
    /// The relay refused a request.
    case refused(RelayErrorNotice)
    /// No answer in time.
    case timeout(String)
    /// The client is not connected to the relay.
    case notConnected
    /// A socket call failed.
    case system(call: String, errno: Int32)
    case crypto(String)
    /// The relay could not be reached (ICMP unreachable, TCP refused, connection lost).
    case unreachable(String)
    /// The TLS certificate's SubjectPublicKeyInfo SHA-256 is not the pinned one (WebSocket transport).
    case tlsPinMismatch(expected: [UInt8], got: [UInt8])
    /// TLS or WebSocket set-up failed for another reason (version, protocol, upgrade refused).
    case tlsFailed(String)
    /// A registration (or REGISTER) in the refused v1 format (a bearer token; see
    /// Docs/relay-protocol.md §3).
    case registrationV1

    /// Whether the relay's identity could not be trusted (retrying will not help until the config changes).
    public var isTrustFailure: Bool {
        switch self {
        case .relayKeyMismatch, .badHandshakeSignature, .tlsPinMismatch, .tlsFailed: return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .truncated(let what, let needed, let have): return "truncated \(what): need \(needed) bytes, have \(have)"
        case .oversized(let what, let size, let limit): return "\(what) of \(size) bytes exceeds the limit of \(limit)"
        case .badLength(let what, let detail): return "bad length in \(what): \(detail)"
        case .badMagic: return "not a Ya OK relay packet (bad magic)"
        case .unsupportedVersion(let v): return "unsupported relay protocol version \(v)"
        case .unknownType(let t): return "unknown relay packet type 0x\(String(t, radix: 16))"
        case .relayKeyMismatch(let expected, let got):
            return "relay key mismatch: expected \(Self.short(expected)), got \(Self.short(got))"
        case .badHandshakeSignature: return "the relay's handshake signature does not verify"
        case .authenticationFailed: return "packet failed authentication"
        case .replayed(let counter): return "packet counter \(counter) was already seen (replay or duplicate)"
        case .wrongSession: return "packet belongs to another session"
        case .invalid(let what): return what
        case .refused(let notice): return notice.description
        case .timeout(let what): return "timed out waiting for \(what)"
        case .notConnected: return "not connected to the relay"
        case .system(let call, let errno): return "\(call) failed (errno \(errno))"
        case .crypto(let what): return "libsodium \(what) failed"
        case .unreachable(let what): return what
        case .tlsPinMismatch(let expected, let got):
            return "relay TLS certificate pin mismatch: expected SPKI SHA-256 \(Self.short(expected)), got \(Self.short(got))"
        case .tlsFailed(let what): return "relay TLS/WebSocket connection failed: \(what)"
        case .registrationV1: return Self.registrationV1Text
        }
    }

    /// What the relay answers a v1 REGISTER with (ERROR `malformed`, which v1 clients parse).
    public static let registrationV1Text = "registration format v1 is refused: it was a bearer token; this relay needs yaok-relay-register-v2 (channel- or collector-bound); update the client"

    /// The first 4 bytes of a key as hex followed by an ellipsis: enough to compare, short in logs.
    static func short(_ key: [UInt8]) -> String { Hex.encode(key.prefix(4)) + "…" }
}
