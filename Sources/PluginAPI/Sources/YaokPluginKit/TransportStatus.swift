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

    /// Set to `true` in an encoder's `userInfo` to write `details` values that are numbers as
    /// JSON numbers (the hub's `status --json`); plugins write them as strings, the C ABI's form.
    public static let detailsAsNumbers = CodingUserInfoKey(rawValue: "yaok.detailsAsNumbers")!

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        state = try c.decode(TransportState.self, forKey: .state)
        reason = try c.decode(String.self, forKey: .reason)
        links = try c.decode(Int.self, forKey: .links)
        peers = try c.decode(Int.self, forKey: .peers)
        framesIn = try c.decode(UInt64.self, forKey: .framesIn)
        framesOut = try c.decode(UInt64.self, forKey: .framesOut)
        bytesIn = try c.decode(UInt64.self, forKey: .bytesIn)
        bytesOut = try c.decode(UInt64.self, forKey: .bytesOut)
        lastError = try c.decodeIfPresent(String.self, forKey: .lastError)
        details = try c.decode([String: DetailValue].self, forKey: .details).mapValues(\.text)
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(state, forKey: .state)
        try c.encode(reason, forKey: .reason)
        try c.encode(links, forKey: .links)
        try c.encode(peers, forKey: .peers)
        try c.encode(framesIn, forKey: .framesIn)
        try c.encode(framesOut, forKey: .framesOut)
        try c.encode(bytesIn, forKey: .bytesIn)
        try c.encode(bytesOut, forKey: .bytesOut)
        try c.encodeIfPresent(lastError, forKey: .lastError)
        if encoder.userInfo[Self.detailsAsNumbers] as? Bool == true {
            try c.encode(details.mapValues(DetailValue.init(text:)), forKey: .details)
        } else {
            try c.encode(details, forKey: .details)
        }
    }

    /// A `details` value: read from a JSON string, number or boolean; written as a number
    /// when its text is one exactly as a number prints (`12`, `-3`, `0.25`; not `007`).
    struct DetailValue: Codable {
        let text: String

        init(text: String) { self.text = text }

        init(from decoder: Decoder) throws {
            let c = try decoder.singleValueContainer()
            if let s = try? c.decode(String.self) { text = s }
            else if let i = try? c.decode(Int64.self) { text = String(i) }
            else if let d = try? c.decode(Double.self) { text = String(d) }
            else { text = String(try c.decode(Bool.self)) }
        }

        func encode(to encoder: Encoder) throws {
            var c = encoder.singleValueContainer()
            if let i = Int64(text), String(i) == text { try c.encode(i) }
            else if text.contains("."), let d = Double(text), d.isFinite, String(d) == text { try c.encode(d) }
            else { try c.encode(text) }
        }
    }
}
