/// How much a log line matters. The host maps it onto its own levels.
public enum LogLevel: Int, Sendable, Comparable, CustomStringConvertible {
    case trace, debug, info, notice, warning, error

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

    public var description: String {
        switch self {
        case .trace: return "trace"
        case .debug: return "debug"
        case .info: return "info"
        case .notice: return "notice"
        case .warning: return "warning"
        case .error: return "error"
        }
    }
}

/// Where links, received frames and diagnostics are reported: by a transport to the host
/// (``LinkEventSink``, its ``TransportContext/events``), and by a link engine
/// (``SecureStreamEngine``) to whoever owns it, which is given it at `init`.
///
/// A transport with nothing to add passes `context.events` straight into its engine; one
/// that keeps its own state from the events (a link count, a link table) passes a small type
/// of its own that updates it and passes each event on. Implementations are called from the
/// reporter's threads, never under its locks, and must be thread-safe.
///
/// The diagnostics (``log(_:_:)``, ``increment(_:by:)``, ``gauge(_:_:)``) do nothing unless
/// implemented; ``LinkEventSink`` sends them to the host's log and metrics.
public protocol LinkEvents: Sendable {
    /// An authenticated link came up. Precedes the link's frames.
    func linkUp(_ link: LinkInfo)
    /// A link went away (`reason` in words, for the log).
    func linkDown(_ id: LinkID, reason: String?)
    /// One received frame (a TLV record), opened.
    func frameReceived(_ frame: [UInt8], on link: LinkID)
    /// Status (``Transport/status``) changed.
    func statusChanged()
    /// A log line.
    func log(_ level: LogLevel, _ message: String)
    /// Adds `value` to the counter `name`.
    func increment(_ name: String, by value: Double)
    /// Sets the gauge `name`.
    func gauge(_ name: String, _ value: Double)
}

extension LinkEvents {
    /// Drops the line.
    public func log(_ level: LogLevel, _ message: String) {}
    /// Drops the count.
    public func increment(_ name: String, by value: Double) {}
    /// Drops the value.
    public func gauge(_ name: String, _ value: Double) {}
    /// Adds 1 to the counter `name`.
    public func increment(_ name: String) { increment(name, by: 1) }
}
