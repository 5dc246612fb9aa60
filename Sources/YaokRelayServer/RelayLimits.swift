import YaokRelayWebSocket
import YaokWire

/// The relay's limits and timings. Defaults follow the Ya OK design.
public struct RelayLimits: Sendable {
    /// Messages queued for one user.
    public var maxQueuedPerUser = 1_000
    /// Messages queued in total.
    public var maxQueuedTotal = 100_000
    /// How long a message waits at most (also capped by the envelope's own expiry).
    public var retentionMs: Int64 = 7 * 24 * 3600 * 1000
    /// The longest `expires − created` accepted in a SEND (ERROR `lifetime too long` above
    /// it): 7 days, the protocol's ceiling; an operator may set it lower, never higher
    /// (``YaokWire/EnvelopeLifetime`` clamps it). Without it a throwaway key could queue
    /// junk that never expires.
    public var maxTTLMs: Int64 = EnvelopeLifetime.protocolMaxTTLMs
    /// How far an envelope's `created` may be ahead of the relay's clock (ERROR `created in
    /// the future` beyond it).
    public var clockSkewMs: Int64 = EnvelopeLifetime.defaultClockSkewMs
    /// MSGs per POLL round.
    public var pollBatch = 10
    /// Messages one sender (envelope signer) may send per hour.
    public var messagesPerHour = 100
    /// New messages (SEND) accepted per hour from one IP address, whoever signed them
    /// (token bucket, burst = this). A hub uploads for all its phones, so this is far above
    /// ``messagesPerHour``; raise it for carrier-grade NAT.
    public var sendsPerHourPerIP = 2_000
    /// Datagrams per second from one IP address (token bucket; burst is twice this).
    public var packetsPerSecondPerIP = 500
    /// HELLOs per second from one IP (each costs the relay a signature; burst is twice this).
    public var hellosPerSecondPerIP = 20
    /// Sessions at once.
    public var maxSessions = 20_000
    /// Registered users at once (direct plus attached).
    public var maxRegistrations = 100_000
    /// Registrations accepted per minute from one IP address (token bucket, burst 5× this):
    /// keyless identities are free to make, so this keeps one address from filling the table.
    public var registrationsPerMinutePerIP = 120
    /// Registrations on one session (a hub and its phones).
    public var maxRegistrationsPerSession = 512
    /// A carried registration its hub has not renewed for this long (an attached phone renews
    /// every 4 minutes) gives its place on a full session to a newcomer; renewals are never
    /// refused. Throwaway phones that registered and left cannot hold the session's places.
    public var carriedIdleMs: Int64 = 15 * 60 * 1000
    /// A session not heard from this long is dropped (clients PING every 60 s).
    public var staleAfterMs: Int64 = 5 * 60 * 1000
    /// A session that never sent an authenticated packet is dropped after this long.
    public var handshakeTimeoutMs: Int64 = 30_000
    /// Registration timestamps must be within this much of the relay's clock.
    public var registrationWindowMs: Int64 = 5 * 60 * 1000
    /// A pushed/polled message is not offered again for this long unless ACKed.
    public var leaseMs: Int64 = 30_000
    /// How long the relay remembers that a phone is reachable through its hub.
    public var attachmentTTLMs: Int64 = 24 * 3600 * 1000
    /// Bytes held in fragment reassembly across all sessions.
    public var maxReassemblyBytes = 16 << 20
    /// Limits "per address" are kept per IPv4 address and per IPv6 prefix of this length
    /// (``AddressPrefix``; 32...128).
    public var ipv6PrefixLength = AddressPrefix.defaultIPv6PrefixLength
    /// Above this many HELLOs per second (all addresses together) a HELLO needs a cookie
    /// (Docs §2.1); 0 = always. Half of ``maxSessions`` in use also counts as load.
    public var cookieHellosPerSecond = 100
    /// Sessions one address prefix may hold.
    public var maxSessionsPerPrefix = 2_000
    /// Queued bundles one envelope sender may hold (its share of ``maxQueuedTotal``).
    public var maxQueuedPerSender = 1_000
    /// Queued bundles sent from one address prefix (its share of ``maxQueuedTotal``).
    public var maxQueuedPerPrefix = 10_000
    /// Reassembly bytes one address prefix's sessions may hold (share of ``maxReassemblyBytes``).
    public var maxReassemblyBytesPerPrefix = 1 << 20
    /// Datagrams waiting for the engine; more are dropped.
    public var maxPendingDatagrams = 10_000

    public init() {}

    /// The lifetime rules SENDs are checked against.
    public var lifetime: EnvelopeLifetime { EnvelopeLifetime(maxTTLMs: maxTTLMs, clockSkewMs: clockSkewMs) }
}
