/// How long one link waits for a custody answer before resending, and how many bundles it
/// keeps in flight, both learnt from that link's own custody acknowledgements.
///
/// - The timeout is TCP's retransmission timer (RFC 6298): smoothed round trip plus four
///   times its variation, measured only on bundles sent once (Karn's rule: an answer to a
///   resent bundle could belong to either copy), between ``minTimeoutMs`` and the configured
///   `custody_timeout_s`. It doubles for each resend of a bundle, and for the whole link after
///   each timeout until a fresh measurement comes (RFC 6298 §5.5): a receiver that stalls
///   for a moment (a checkpoint, a burst) makes the sender wait longer, not resend its whole
///   window again and again. Before the first measurement it is `custody_timeout_s`. A frame lost on a working link is resent after about a
///   second or two instead of the whole `custody_timeout_s` (with that fixed wait, a line of
///   hubs stalled 18–45 s on frames dropped under load).
/// - The window starts at ``initialWindow``, grows by one bundle per acknowledgement (so it can
///   double each round trip) up to ``maxWindow`` and halves, down to ``minWindow``, once per
///   loss event: a link that loses frames (a slow BLE link, a neighbour whose queue is full)
///   is sent less at once.
///
/// Every input is a local measurement; nothing a peer claims goes into it. A peer can make
/// its own link slow (late answers) but cannot shrink another link's window or timeout.
struct CustodyPacing: Sendable, Equatable {
    /// Bundles in flight on a new link.
    static let initialWindow = 32
    /// Never fewer in flight than this, however lossy the link.
    static let minWindow = 8
    /// At most this many in flight: a quarter of the receiving hub's per-link queue of bundles
    /// (`FrameAdmission.maxBacklog`, 256 frames). Measured: with 128, a line of four hubs under
    /// a 20,000-bundle backlog had hundreds of frames dropped there (Docs/performance.md).
    static let maxWindow = 64
    /// The shortest wait for a custody answer. The router's tick runs once a second, and a
    /// loaded hub answers custody after its queue and a group commit: in a line of four hubs
    /// under a 20,000-message backlog a 1 s floor timed out hundreds of answers that were only
    /// late, each resend adding load.
    static let minTimeoutMs: Int64 = 2_000

    /// The configured `custody_timeout_s`: the longest wait, and the wait before any sample.
    let maxTimeoutMs: Int64
    private(set) var smoothedRTTMs: Double?
    private(set) var rttVariationMs: Double = 0
    private var windowSize = Double(Self.initialWindow)
    private var lastDecreaseMs: Int64?
    /// Link-wide doublings since the last fresh measurement (at most 4: ×16).
    private var backoffShift = 0

    init(maxTimeoutMs: Int64) {
        self.maxTimeoutMs = max(Self.minTimeoutMs, maxTimeoutMs)
    }

    /// Bundles the link may have in flight now.
    var window: Int { Int(windowSize) }

    /// How long to wait for the custody answer to a bundle sent for the `resends`-th time
    /// after its first send (0 for the first send).
    func timeoutMs(resends: Int = 0) -> Int64 {
        guard let srtt = smoothedRTTMs else { return maxTimeoutMs }
        let base = max(Self.minTimeoutMs, Int64((srtt + 4 * rttVariationMs).rounded(.up)))
        return min(maxTimeoutMs, base << Int64(min(max(resends, 0) + backoffShift, 16)))
    }

    /// A custody answer arrived `rttMs` after the bundle's only send (nil when it had been
    /// resent, so the round trip is ambiguous and not measured).
    mutating func answered(rttMs: Int64?) {
        if let r = rttMs.map({ Double(max(0, $0)) }) {
            backoffShift = 0
            if let srtt = smoothedRTTMs {
                rttVariationMs = 0.75 * rttVariationMs + 0.25 * abs(srtt - r)
                smoothedRTTMs = 0.875 * srtt + 0.125 * r
            } else {
                smoothedRTTMs = r
                rttVariationMs = r / 2
            }
        }
        windowSize = min(Double(Self.maxWindow), windowSize + 1)
    }

    /// A custody answer did not come within its timeout. Halves the window once per round
    /// trip (one lost burst is one loss event, not one per bundle in it).
    mutating func timedOut(nowMs: Int64) {
        if let last = lastDecreaseMs, nowMs - last < timeoutMs() { return }
        lastDecreaseMs = nowMs
        backoffShift = min(backoffShift + 1, 4)
        windowSize = max(Double(Self.minWindow), windowSize / 2)
    }
}
