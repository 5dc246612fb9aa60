/// How long a LoRa frame occupies the channel (the Semtech time-on-air formula, Docs/protocol.md
/// §10.3): explicit header and CRC on, as the RNode transmits.
public struct LoRaModulation: Sendable, Equatable {
    /// 7...12 (the formula below is the SX127x/SX126x one for these).
    public var spreadingFactor: Int
    public var bandwidthHz: Int
    /// The coding rate's denominator: 5 (4/5) ... 8 (4/8).
    public var codingRate: Int
    /// Programmed preamble length in symbols.
    public var preambleSymbols: Int

    public init(spreadingFactor: Int, bandwidthHz: Int, codingRate: Int, preambleSymbols: Int? = nil) {
        self.spreadingFactor = spreadingFactor
        self.bandwidthHz = bandwidthHz
        self.codingRate = codingRate
        self.preambleSymbols = preambleSymbols ?? Self.rnodePreambleSymbols(spreadingFactor: spreadingFactor, bandwidthHz: bandwidthHz)
    }

    /// One symbol: 2^SF / bandwidth, in seconds.
    public var symbolSeconds: Double { Double(1 << spreadingFactor) / Double(bandwidthHz) }

    /// Low-data-rate optimisation: required (and so used by both ends) when a symbol lasts
    /// more than 16 ms — SF11 and SF12 at 125 kHz.
    public var lowDataRateOptimisation: Bool { symbolSeconds > 0.016 }

    /// The preamble an RNode programs: about 24 ms, at least 18 symbols, rounded up.
    public static func rnodePreambleSymbols(spreadingFactor: Int, bandwidthHz: Int) -> Int {
        let symbol = Double(1 << spreadingFactor) / Double(bandwidthHz)
        return max(18, Int((0.024 / symbol).rounded(.up)))
    }

    /// Seconds on air for a frame of `payloadBytes` (what the radio sends, the device's
    /// one-byte header included).
    public func timeOnAir(payloadBytes: Int) -> Double {
        let sf = Double(spreadingFactor)
        let de = lowDataRateOptimisation ? 1.0 : 0.0
        let numerator = 8 * Double(payloadBytes) - 4 * sf + 28 + 16   // explicit header (IH 0), CRC on
        let blocks = (numerator / (4 * (sf - 2 * de))).rounded(.up)
        let payloadSymbols = 8 + max(blocks * Double(codingRate), 0)
        return (Double(preambleSymbols) + 4.25 + payloadSymbols) * symbolSeconds
    }
}

/// The airtime this hub spent in the last hour, so that no transmission takes it over its
/// duty cycle in **any** hour (Docs/protocol.md §10.3). Times are seconds on a monotonic clock.
///
/// A frame of airtime `a` sent at `t` is allowed when what was sent in `[t + a − window, t]`
/// plus `a` fits the budget: that window is the fullest of those the new frame touches,
/// because transmissions never overlap, so moving a window's end back by `d` adds at most `d`
/// of history and removes `d` of the new frame.
public struct AirtimeLedger: Sendable {
    public let window: Double
    /// Seconds of airtime allowed per window: duty cycle × window.
    public let budget: Double
    private var sent: [(start: Double, airtime: Double)] = []
    private var first = 0

    /// `dutyCycle`: 0.01 for 1 %.
    public init(dutyCycle: Double, window: Double = 3600) {
        self.window = window
        self.budget = dutyCycle * window
    }

    /// Airtime spent within `[from, to]` (the part of each transmission inside it).
    public func spent(from: Double, to: Double) -> Double {
        var total = 0.0
        for i in first..<sent.count {
            let s = sent[i]
            total += max(0, min(s.start + s.airtime, to) - max(s.start, from))
        }
        return total
    }

    /// Airtime spent in the hour (window) before `now`.
    public func spent(now: Double) -> Double { spent(from: now - window, to: now) }

    /// Seconds of airtime left now: what a frame sent at `now` may take at most.
    public func headroom(now: Double) -> Double { max(0, budget - spent(now: now)) }

    /// Whether a frame of `airtime` seconds may start at `now`, leaving `reserve` seconds of
    /// the budget unspent in every hour it falls in.
    public func allows(_ airtime: Double, at now: Double, reserve: Double = 0) -> Bool {
        airtime + reserve <= budget && spent(from: now + airtime - window, to: now) + airtime + reserve <= budget + 1e-9
    }

    /// The earliest time from `now` at which a frame of `airtime` seconds may start, to a
    /// millisecond (nil: never, it is longer than the whole budget). Nothing sent after `now`
    /// is counted: allowance then only grows with time, and a window later it is certain.
    public func earliestStart(of airtime: Double, from now: Double) -> Double? {
        guard airtime <= budget else { return nil }
        if allows(airtime, at: now) { return now }
        var lo = now, hi = now + window
        while hi - lo > 0.001 {
            let mid = (lo + hi) / 2
            if allows(airtime, at: mid) { hi = mid } else { lo = mid }
        }
        return hi
    }

    /// Records a transmission; forgets those that ended more than a window ago.
    public mutating func record(start: Double, airtime: Double) {
        sent.append((start, airtime))
        while first < sent.count, sent[first].start + sent[first].airtime < start - window { first += 1 }
        if first > 64 && first * 2 > sent.count {
            sent.removeFirst(first)
            first = 0
        }
    }

    /// Transmissions remembered (bounded by the budget over the shortest frame).
    public var remembered: Int { sent.count - first }
}
