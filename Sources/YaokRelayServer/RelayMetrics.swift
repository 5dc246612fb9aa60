/// The relay's counters and gauges, rendered in the Prometheus text format.
/// Names never carry user IDs or contents.
public struct RelayMetrics: Sendable, Equatable {
    public var datagramsIn: UInt64 = 0
    public var datagramsOut: UInt64 = 0
    public var droppedMalformed: UInt64 = 0
    public var droppedOversized: UInt64 = 0
    public var droppedRateLimited: UInt64 = 0
    public var droppedUnauthenticated: UInt64 = 0
    public var droppedReplayed: UInt64 = 0
    public var droppedOverload: UInt64 = 0
    public var handshakes: UInt64 = 0
    public var resetsSent: UInt64 = 0
    public var registrationsAccepted: UInt64 = 0
    public var registrationsRefused: UInt64 = 0
    /// Refused registrations by reason (``RegistrationStatus/metricReason``, or "v1").
    public var registrationsRefusedByReason: [String: UInt64] = [:]
    /// Carried registrations a session's hub stopped renewing, dropped to make room for a
    /// newcomer (``RelayLimits/carriedIdleMs``).
    public var carriedRegistrationsEvicted: UInt64 = 0
    /// ACKs naming a queued bundle whose recipient the session may not receive for.
    public var acksRefused: UInt64 = 0
    /// COOKIE_REPLYs sent (HELLOs without a valid cookie while under load).
    public var cookiesSent: UInt64 = 0
    /// HELLOs with a valid cookie while under load.
    public var cookiesAccepted: UInt64 = 0
    /// HELLOs dropped because their address prefix holds its share of the sessions.
    public var droppedPrefixShare: UInt64 = 0
    public var sendsQueued: UInt64 = 0
    public var sendsPushed: UInt64 = 0
    public var sendsDuplicate: UInt64 = 0
    public var sendsRefused: [String: UInt64] = [:]
    public var messagesDelivered: UInt64 = 0
    public var polls: UInt64 = 0
    public var acks: UInt64 = 0
    public var expired: UInt64 = 0
    public var fragmentsDropped: UInt64 = 0
    // Gauges, filled when rendering.
    public var sessions = 0
    public var registeredUsers = 0
    public var queued = 0

    public init() {}

    /// Every counter and gauge as a sample for the exporter (``RelayPrometheusExporter``).
    public var samples: [RelayMetricSample] {
        var out: [RelayMetricSample] = []
        func counter(_ name: String, _ help: String, _ value: UInt64, _ labels: [(String, String)] = []) {
            out.append(RelayMetricSample(name: name, help: help, kind: .counter, labels: labels, value: Int64(clamping: value)))
        }
        func gauge(_ name: String, _ help: String, _ value: Int) {
            out.append(RelayMetricSample(name: name, help: help, kind: .gauge, value: Int64(value)))
        }
        counter("datagrams_in_total", "Datagrams received.", datagramsIn)
        counter("datagrams_out_total", "Datagrams sent.", datagramsOut)
        for (reason, v) in [("malformed", droppedMalformed), ("oversized", droppedOversized), ("rate_limited", droppedRateLimited),
                            ("unauthenticated", droppedUnauthenticated), ("replayed", droppedReplayed), ("overload", droppedOverload),
                            ("prefix_share", droppedPrefixShare)] {
            counter("dropped_total", "Datagrams dropped, by reason.", v, [("reason", reason)])
        }
        counter("handshakes_total", "Completed handshakes (HELLO_REPLY sent).", handshakes)
        counter("resets_total", "RESETs sent for unknown sessions.", resetsSent)
        counter("registrations_accepted_total", "Registrations accepted.", registrationsAccepted)
        for (reason, v) in registrationsRefusedByReason.sorted(by: { $0.key < $1.key }) {
            counter("registrations_refused_total", "Registrations refused, by reason.", v, [("reason", reason)])
        }
        counter("carried_registrations_evicted_total", "Carried registrations not renewed for the idle time, dropped for a newcomer.", carriedRegistrationsEvicted)
        counter("acks_refused_total", "ACKs of bundles the session may not receive (not deleted).", acksRefused)
        counter("cookies_sent_total", "COOKIE_REPLYs sent under load.", cookiesSent)
        counter("cookies_accepted_total", "HELLOs with a valid cookie under load.", cookiesAccepted)
        counter("sends_queued_total", "Bundles queued for an offline recipient.", sendsQueued)
        counter("sends_pushed_total", "Bundles queued and pushed to an online recipient at once.", sendsPushed)
        counter("sends_duplicate_total", "SENDs of a message already held.", sendsDuplicate)
        for (reason, v) in sendsRefused.sorted(by: { $0.key < $1.key }) {
            counter("sends_refused_total", "SENDs refused, by reason.", v, [("reason", reason)])
        }
        counter("messages_sent_total", "MSGs sent to clients (push and poll).", messagesDelivered)
        counter("polls_total", "POLL rounds served.", polls)
        counter("acks_total", "Messages deleted after an ACK.", acks)
        counter("expired_total", "Messages deleted unacknowledged after their retention.", expired)
        counter("fragments_dropped_total", "Partial messages given up (timeout, bounds).", fragmentsDropped)
        gauge("sessions", "Live sessions.", sessions)
        gauge("registered_users", "Users reachable (registered directly or attached to a hub).", registeredUsers)
        gauge("queued_messages", "Messages waiting in the queue.", queued)
        return out
    }
}

/// One exported value; `name` is given without the `yaok_relay_` prefix.
public struct RelayMetricSample: Sendable {
    public enum Kind: Sendable { case counter, gauge }
    public var name: String
    public var help: String
    public var kind: Kind
    public var labels: [(String, String)]
    public var value: Int64

    public init(name: String, help: String, kind: Kind, labels: [(String, String)] = [], value: Int64) {
        self.name = name
        self.help = help
        self.kind = kind
        self.labels = labels
        self.value = value
    }
}
