/// The protocol a transport plugin implements.
///
/// A transport only moves frames and reports links: routing, storage and
/// security live in the host. The host creates one instance per enabled
/// config section, calls ``start()``, hands it frames with ``send(_:to:)``,
/// and reads ``status`` whenever `yaok-hub status` asks.
///
/// Received frames, link changes and status changes go to the host through
/// ``TransportContext/events``.
public protocol Transport: AnyObject, Sendable {
    /// Creates the transport. Read and validate the whole config section here and throw
    /// ``ConfigError`` for a bad key; do not open sockets yet.
    init(context: TransportContext) throws

    /// Starts moving frames. Throwing marks the transport failed; the host retries with
    /// capped exponential backoff and shows the error in status.
    func start() throws

    /// Stops: closes links (reporting ``LinkEventSink/linkDown(_:reason:)``) and releases
    /// resources. Must return within 2 seconds.
    func stop()

    /// Sends one frame (a TLV record) on a link. Must not block for long.
    func send(_ frame: [UInt8], to link: LinkID) throws

    /// The current status, cheap to compute.
    var status: TransportStatus { get }
}

/// A link identifier, chosen by the transport, unique within it while the link is up.
public typealias LinkID = UInt64

/// Errors a transport throws from ``Transport/send(_:to:)`` or ``Transport/start()``.
public enum TransportError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The link is not (or no longer) up.
    case unknownLink(LinkID)
    /// The frame is larger than the link's MTU.
    case frameTooLarge(size: Int, mtu: Int)
    /// The transport is not running.
    case notRunning
    /// The platform lacks what the transport needs (no adapter, no kernel support...).
    case unavailable(String)
    /// An operating-system call failed.
    case system(call: String, errno: Int32)
    /// Anything else, with a human reason.
    case failed(String)
    /// The link is up but cannot take more now (its outbound queue is full): try later.
    case queueFull(String)

    public var description: String {
        switch self {
        case .unknownLink(let id): return "link \(id) is not up"
        case .frameTooLarge(let size, let mtu): return "frame of \(size) bytes exceeds the link MTU of \(mtu) bytes"
        case .notRunning: return "transport is not running"
        case .unavailable(let reason): return "unavailable: \(reason)"
        case .system(let call, let errno): return "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
        case .failed(let reason): return reason
        case .queueFull(let reason): return reason
        }
    }

    /// The C ABI's `yaok_send_result` for a failed `send`.
    public var sendResult: SendResult {
        switch self {
        case .queueFull: return .queueFull
        case .unknownLink, .notRunning: return .noLink
        case .frameTooLarge: return .tooLarge
        case .unavailable, .system, .failed: return .failed
        }
    }
}

/// Why a `send` failed, as the C ABI's `yaok_send_result` says it (append-only codes; an
/// unknown one is ``failed``). The host's router acts on it: back off on a full link, route
/// around a gone one, never offer a too-large frame to that link again.
public enum SendResult: Int32, Sendable, Equatable, CaseIterable {
    case failed = 1
    case queueFull = 2
    case noLink = 3
    case tooLarge = 4

    /// The result a code means; 0 (taken) is nil, an unknown code is ``failed``.
    public init?(code: Int32) {
        guard code != 0 else { return nil }
        self = SendResult(rawValue: code) ?? .failed
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
