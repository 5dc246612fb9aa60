/// A transport's state as shown by `yaok-hub status`.
public enum TransportState: String, Sendable, Codable, CaseIterable {
    /// Starting up; not yet able to move frames.
    case starting
    /// Moving frames normally.
    case running
    /// Running, but something is wrong (e.g. one of several interfaces is down).
    case degraded
    /// The hardware or kernel support it needs is absent; the reason says what.
    case unavailable
    /// Failed; the host retries `start` with backoff.
    case failed
    /// Disabled in the config, or stopped.
    case stopped
}

/// A snapshot of a transport's status. A value type: build it on demand.
public struct TransportStatus: Sendable, Equatable, Codable {
    public var state: TransportState
    /// A human reason for the state, e.g. "no Bluetooth adapter (hci0 missing)".
    public var reason: String
    /// Links currently up.
    public var links: Int
    /// Distinct peers seen (up or recently).
    public var peers: Int
    public var framesIn: UInt64
    public var framesOut: UInt64
    public var bytesIn: UInt64
    public var bytesOut: UInt64
    /// The last error, if any.
    public var lastError: String?
    /// Transport-specific key/value details (e.g. "listen": "0.0.0.0:7811").
    public var details: [String: String]

    public init(state: TransportState, reason: String = "", links: Int = 0, peers: Int = 0,
                framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0,
                lastError: String? = nil, details: [String: String] = [:]) {
        self.state = state
        self.reason = reason
        self.links = links
        self.peers = peers
        self.framesIn = framesIn
        self.framesOut = framesOut
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
        self.lastError = lastError
        self.details = details
    }

    enum CodingKeys: String, CodingKey {
        case state, reason, links, peers, details
        case framesIn = "frames_in", framesOut = "frames_out", bytesIn = "bytes_in", bytesOut = "bytes_out"
        case lastError = "last_error"
    }
}
