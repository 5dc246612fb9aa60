import CLinuxProcess
import Foundation
import Synchronization
import YaokPluginKit
import YaokWire

/// The hub clock: milliseconds that only move forward, for every deadline the hub keeps
/// (bundle lifetimes, tombstones, retries). It starts from the wall clock the first time a
/// store is opened, then advances with the monotonic clock, and is persisted in the store so
/// a restart resumes it (Docs/protocol.md §2.2, Docs/store.md "Hub clock"). A jump of the
/// wall clock, in either direction, moves no deadline.
public struct HubClockStart: Sendable, Equatable {
    /// The longest wall-clock gap between the last persisted reading and a restart that is
    /// counted as time that passed (a restart, a short power cut). A longer or negative gap is
    /// a clock that jumped or was restored from a saved time: nothing is counted then.
    public static let countedGapMs: Int64 = 10 * 60 * 1000

    /// The hub clock's value at start, from the last persisted reading (hub clock, wall clock
    /// then) and the wall clock now.
    public static func resume(persisted: (hubMs: Int64, wallMs: Int64)?, wallNowMs: Int64) -> Int64 {
        guard let p = persisted, p.hubMs > 0 else { return wallNowMs }
        let gap = wallNowMs &- p.wallMs
        return gap >= 0 && gap <= countedGapMs ? p.hubMs + gap : p.hubMs
    }
}

/// Estimates true time from the sources Docs/protocol.md describes (clock, 0x0C): the
/// kernel's synchronised clock, the pinned relay, trusted hubs whose own source is one of
/// those, a vote of phones. A value type with no clock of its own: every call says what the
/// hub clock reads, so it is tested in memory.
public struct ClockEstimator: Sendable {
    /// A sample's offset from the hub clock (true time − hub clock) and when it was taken.
    struct Sample: Sendable { var offsetMs: Int64; var atHubMs: Int64 }

    /// How long a relay, hub or phone sample counts.
    public static let sampleLifetimeMs: Int64 = 24 * 3_600_000
    /// At most this many phones are remembered (the oldest gives way).
    public static let maxPhones = 256
    /// At most this many hubs are remembered.
    public static let maxHubs = 64
    /// A phone vote needs this many distinct phones…
    public static let minPhones = 3
    /// …more than half of them within this of the median.
    public static let phoneAgreementMs: Int64 = 5 * 60 * 1000

    private(set) var systemSynchronised = false
    /// Wall clock − hub clock at the last look.
    private(set) var wallOffsetMs: Int64 = 0
    private var relay: Sample?
    private var hubs: [[UInt8]: Sample] = [:]
    private var phones: [[UInt8]: Sample] = [:]

    public init() {}

    /// The wall clock read `wallMs` when the hub clock read `hubMs`; the kernel (or the
    /// operator) says whether it is synchronised.
    public mutating func observeSystem(wallMs: Int64, hubMs: Int64, synchronised: Bool) {
        wallOffsetMs = wallMs &- hubMs
        systemSynchronised = synchronised
    }

    /// The pinned relay's time, as measured by the relay plugin (Docs/protocol.md, clock).
    public mutating func observeRelay(timeMs: Int64, hubMs: Int64) {
        relay = Sample(offsetMs: timeMs &- hubMs, atHubMs: hubMs)
    }

    /// A trusted hub's `clock` frame. Only a hub whose own source is the system or the relay
    /// counts (so no circle of hubs can believe each other); another source removes its sample.
    public mutating func observeHub(_ hubID: [UInt8], frame: ClockFrame, hubMs: Int64) {
        guard frame.source == .system || frame.source == .relay else { hubs[hubID] = nil; return }
        if hubs[hubID] == nil, hubs.count >= Self.maxHubs, let oldest = hubs.min(by: { $0.value.atHubMs < $1.value.atHubMs })?.key {
            hubs[oldest] = nil
        }
        hubs[hubID] = Sample(offsetMs: frame.timeMs &- hubMs, atHubMs: hubMs)
    }

    /// A phone's time (its `clock` frame), one sample per phone key: the latest.
    public mutating func observePhone(_ userID: [UInt8], timeMs: Int64, hubMs: Int64) {
        if phones[userID] == nil, phones.count >= Self.maxPhones, let oldest = phones.min(by: { $0.value.atHubMs < $1.value.atHubMs })?.key {
            phones[oldest] = nil
        }
        phones[userID] = Sample(offsetMs: timeMs &- hubMs, atHubMs: hubMs)
    }

    /// Forgets samples older than ``sampleLifetimeMs``.
    public mutating func forgetOld(hubMs: Int64) {
        let horizon = hubMs &- Self.sampleLifetimeMs
        if let r = relay, r.atHubMs < horizon { relay = nil }
        hubs = hubs.filter { $0.value.atHubMs >= horizon }
        phones = phones.filter { $0.value.atHubMs >= horizon }
    }

    /// The best estimate now.
    public func estimate() -> ClockEstimate {
        let hubOffsets = hubs.values.map(\.offsetMs)
        let phoneOffsets = phones.values.map(\.offsetMs)
        let vote = Self.phoneVote(phoneOffsets)
        let source: ClockFrame.Source
        let offset: Int64
        if systemSynchronised {
            (source, offset) = (.system, wallOffsetMs)
        } else if let relay {
            (source, offset) = (.relay, relay.offsetMs)
        } else if !hubOffsets.isEmpty {
            (source, offset) = (.hubs, Self.median(hubOffsets))
        } else if let vote {
            (source, offset) = (.phones, vote)
        } else {
            (source, offset) = (.none, wallOffsetMs)
        }
        return ClockEstimate(source: source, trueMinusHubMs: offset, wallMinusHubMs: wallOffsetMs,
                             systemSynchronised: systemSynchronised, relay: relay != nil, hubs: hubOffsets.count,
                             phones: phoneOffsets.count, phonesAgree: vote != nil)
    }

    /// The phones' vote: the median offset, if at least ``minPhones`` voted and more than half
    /// lie within ``phoneAgreementMs`` of it; nil otherwise.
    static func phoneVote(_ offsets: [Int64]) -> Int64? {
        guard offsets.count >= minPhones else { return nil }
        let m = median(offsets)
        let close = offsets.filter { ($0 &- m).magnitude <= UInt64(phoneAgreementMs) }.count
        return close * 2 > offsets.count ? m : nil
    }

    static func median(_ values: [Int64]) -> Int64 {
        let s = values.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : s[s.count / 2 - 1] / 2 + s[s.count / 2] / 2
    }
}

/// What a hub believes about the time: shown in status, `/metrics` and the console.
public struct ClockEstimate: Sendable, Codable, Equatable {
    /// Where the estimate comes from.
    public var source: ClockFrame.Source
    /// Estimated true time − hub clock.
    public var trueMinusHubMs: Int64
    /// Wall clock − hub clock.
    public var wallMinusHubMs: Int64
    public var systemSynchronised: Bool
    /// Which samples exist: the relay's, how many trusted hubs', how many phones'.
    public var relay: Bool
    public var hubs: Int
    public var phones: Int
    /// Whether the phones' vote stands (enough of them, agreeing).
    public var phonesAgree: Bool

    /// Whether true time is known (Docs/protocol.md §2.2): only from system, relay or hubs.
    public var known: Bool { source.makesTimeKnown }

    /// How far the system clock is behind (−) or ahead (+) of the estimate, ms.
    public var systemClockErrorMs: Int64 { wallMinusHubMs &- trueMinusHubMs }

    /// The tolerance certificates and attachment announcements are judged with.
    public var toleranceMs: Int64 {
        switch source {
        case .system, .relay, .hubs: return 10 * 60 * 1000
        case .phones: return 3_600_000
        case .none: return EnvelopeLifetime.protocolMaxTTLMs
        }
    }

    /// E.g. `synchronised (system)`, or `unsynchronised, about 47 h behind (relay, 3 hubs, 12 phones)`.
    public var summary: String {
        var sources: [String] = []
        if relay { sources.append("relay") }
        if hubs > 0 { sources.append("\(hubs) hub\(hubs == 1 ? "" : "s")") }
        if phones > 0 { sources.append("\(phones) phone\(phones == 1 ? "" : "s")\(phonesAgree || phones < ClockEstimator.minPhones ? "" : " disagreeing")") }
        let list = sources.isEmpty ? "" : " (\(sources.joined(separator: ", ")))"
        if systemSynchronised { return "synchronised (system)\(list)" }
        guard source != .none else { return "unsynchronised, nothing to check it against\(list)" }
        let error = systemClockErrorMs
        let how: String
        if error.magnitude < 60_000 { how = "within a minute of \(source)" } else {
            how = "about \(Self.span(error.magnitude)) \(error < 0 ? "behind" : "ahead")"
        }
        return "unsynchronised, \(how)\(list)\(known ? "" : "; lifetimes judged by age only")"
    }

    static func span(_ ms: UInt64) -> String {
        let minutes = ms / 60_000
        if minutes < 120 { return "\(minutes) min" }
        let hours = (ms + 1_800_000) / 3_600_000
        if hours < 72 { return "\(hours) h" }
        return "\((ms + 43_200_000) / 86_400_000) d"
    }
}

/// The hub's time: the hub clock, and its estimate of true time. Shared by the router (which
/// feeds it), status, metrics and the console; a lock paired with its state.
public final class HubTime: Sendable {
    /// Whether to believe the system clock: as the kernel says, or as the operator says (an
    /// RTC the kernel does not call synchronised; a lab).
    public enum SystemClockTrust: String, Sendable, CaseIterable {
        case auto, always, never
    }

    private struct State: Sendable {
        var estimator = ClockEstimator()
        var estimate: ClockEstimate
    }

    private let startHubMs: Int64
    private let startMonotonicNs: UInt64
    private let monotonicNs: @Sendable () -> UInt64
    private let trust: SystemClockTrust
    private let wallClock: @Sendable () -> Int64
    private let systemSynchronised: @Sendable () -> Bool
    private let state: Mutex<State>

    /// - Parameters:
    ///   - startHubMs: the hub clock's value now (``HubClockStart/resume(persisted:wallNowMs:)``).
    ///   - monotonicNs: the monotonic clock the hub clock advances with (tests pass one they move).
    public init(startHubMs: Int64, trust: SystemClockTrust = .auto,
                wallClock: @escaping @Sendable () -> Int64 = { WallClock.nowMilliseconds() },
                systemSynchronised: @escaping @Sendable () -> Bool = { HubTime.kernelSaysSynchronised() },
                monotonicNs: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds }) {
        self.startHubMs = startHubMs
        self.monotonicNs = monotonicNs
        self.startMonotonicNs = monotonicNs()
        self.trust = trust
        self.wallClock = wallClock
        self.systemSynchronised = systemSynchronised
        var estimator = ClockEstimator()
        estimator.observeSystem(wallMs: wallClock(), hubMs: startHubMs, synchronised: Self.believe(trust, systemSynchronised))
        state = Mutex(State(estimator: estimator, estimate: estimator.estimate()))
    }

    /// The hub clock, ms.
    public func hubNowMs() -> Int64 {
        startHubMs + Int64((monotonicNs() &- startMonotonicNs) / 1_000_000)
    }

    /// The current estimate.
    public var estimate: ClockEstimate { state.withLock { $0.estimate } }

    /// True time now, if known (Docs/protocol.md §2.2); nil otherwise.
    public func knownTrueTimeMs() -> Int64? {
        let e = estimate
        return e.known ? hubNowMs() &+ e.trueMinusHubMs : nil
    }

    /// The best estimate of true time now, known or not, and the tolerance to judge with.
    public func bestTrueTimeMs() -> (timeMs: Int64, toleranceMs: Int64, source: ClockFrame.Source) {
        let e = estimate
        return (hubNowMs() &+ e.trueMinusHubMs, e.toleranceMs, e.source)
    }

    /// What this hub tells its peers (its `clock` frame).
    public func frame() -> ClockFrame {
        let best = bestTrueTimeMs()
        return ClockFrame(source: best.source, timeMs: best.timeMs)
    }

    /// Feeds the estimator; returns whether the estimate's source changed.
    @discardableResult
    public func update(_ body: (inout ClockEstimator, _ hubNowMs: Int64) -> Void) -> Bool {
        let h = hubNowMs()
        return state.withLock { s in
            body(&s.estimator, h)
            let before = s.estimate.source
            s.estimate = s.estimator.estimate()
            return s.estimate.source != before
        }
    }

    /// Looks at the system clock again (each tick) and forgets old samples.
    @discardableResult
    public func refresh() -> Bool {
        let synchronised = Self.believe(trust, systemSynchronised)
        let wall = wallClock()
        return update { e, h in
            e.observeSystem(wallMs: wall, hubMs: h, synchronised: synchronised)
            e.forgetOld(hubMs: h)
        }
    }

    private static func believe(_ trust: SystemClockTrust, _ kernel: () -> Bool) -> Bool {
        switch trust {
        case .always: return true
        case .never: return false
        case .auto: return kernel()
        }
    }

    /// Whether the kernel's clock discipline says the system clock is synchronised. Where
    /// `adjtimex` is refused (the packaged unit's `ProtectClock=yes` filters it), the file
    /// systemd-timesyncd keeps while it has synchronised the clock answers instead.
    public static func kernelSaysSynchronised() -> Bool {
        var maxError = 0
        switch yaok_system_clock_synchronised(&maxError) {
        case 1: return true
        case 0: return false
        default: return FileManager.default.fileExists(atPath: "/run/systemd/timesync/synchronized")
        }
    }

    /// Steps the system clock to `ms` (needs CAP_SYS_TIME); throws with errno's text.
    public static func setSystemClock(toMs ms: Int64) throws {
        guard yaok_set_system_clock_ms(ms) == 0 else {
            throw HubTimeError.cannotSetSystemClock(String(cString: strerror(errno)))
        }
    }
}

public enum HubTimeError: Error, CustomStringConvertible {
    case cannotSetSystemClock(String)
    public var description: String {
        switch self {
        case .cannotSetSystemClock(let why): return "cannot set the system clock: \(why) (needs CAP_SYS_TIME)"
        }
    }
}
