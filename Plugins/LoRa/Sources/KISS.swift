/// KISS framing, as the RNode host protocol uses it on the serial line (Docs/protocol.md
/// §10.1): `FEND`, a command byte, the payload with 0xC0 and 0xDB escaped, `FEND`.
public enum KISS {
    public static let fend: UInt8 = 0xC0
    public static let fesc: UInt8 = 0xDB
    public static let tfend: UInt8 = 0xDC
    public static let tfesc: UInt8 = 0xDD

    /// The bytes of one frame.
    public static func frame(command: UInt8, payload: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [fend, command]
        out.reserveCapacity(payload.count + 4)
        for b in payload {
            switch b {
            case fend: out += [fesc, tfend]
            case fesc: out += [fesc, tfesc]
            default: out.append(b)
            }
        }
        out.append(fend)
        return out
    }
}

/// One KISS frame read from the line.
public struct KISSFrame: Sendable, Equatable {
    public var command: UInt8
    public var payload: [UInt8]

    public init(command: UInt8, payload: [UInt8]) {
        self.command = command
        self.payload = payload
    }
}

/// Splits the bytes read from a serial line into KISS frames. Holds at most one frame of at
/// most `maxPayload` bytes: a longer one, or a bad escape, drops that frame (counted) and the
/// decoder waits for the next `FEND`. Bytes before the first `FEND` are line noise.
public struct KISSDecoder: Sendable {
    public let maxPayload: Int
    /// Frames dropped: oversized or with an escape that means nothing.
    public private(set) var dropped = 0

    private enum State { case outside, command, payload, escaped, discarding }
    private var state = State.outside
    private var command: UInt8 = 0
    private var payload: [UInt8] = []

    /// `maxPayload`: the RNode's own limit is 508 bytes.
    public init(maxPayload: Int = 508) {
        self.maxPayload = maxPayload
    }

    /// Whether part of a frame is waiting for its end.
    public var hasPartialFrame: Bool { state == .payload || state == .escaped }

    /// Feeds bytes; returns every frame they complete.
    public mutating func feed(_ bytes: [UInt8]) -> [KISSFrame] {
        var frames: [KISSFrame] = []
        for b in bytes {
            if b == KISS.fend {
                if state == .payload { frames.append(KISSFrame(command: command, payload: payload)) }
                if state == .escaped { dropped += 1 }
                payload.removeAll(keepingCapacity: true)
                state = .command
                continue
            }
            switch state {
            case .outside, .discarding:
                break
            case .command:
                command = b
                state = .payload
            case .payload:
                if b == KISS.fesc { state = .escaped } else { append(b) }
            case .escaped:
                switch b {
                case KISS.tfend: state = .payload; append(KISS.fend)
                case KISS.tfesc: state = .payload; append(KISS.fesc)
                default: discard()
                }
            }
        }
        return frames
    }

    /// Drops a partial frame (the line went quiet in the middle of one).
    public mutating func dropPartialFrame() {
        guard hasPartialFrame else { return }
        discard()
    }

    private mutating func append(_ b: UInt8) {
        guard payload.count < maxPayload else { return discard() }
        payload.append(b)
    }

    private mutating func discard() {
        dropped += 1
        payload.removeAll(keepingCapacity: true)
        state = .discarding
    }
}
