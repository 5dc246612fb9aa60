import Foundation
import YaokHubCore

/// The last hour of a few figures, sampled from the status report into a fixed ring (no
/// allocation growth): frames per transport (in + out), queue depth (queued + in flight), and
/// messages delivered. The charts draw rates from the differences between samples.
// @unchecked: the ring and its index only under `lock`.
public final class History: @unchecked Sendable {
    public struct Sample: Sendable, Equatable {
        public var at: Double
        /// Frames in + out, per transport name (cumulative, as counted by the transport).
        public var frames: [String: UInt64]
        public var queueDepth: Int
        /// Cumulative deliveries to attached recipients.
        public var delivered: Int
    }

    public let capacity: Int
    private var ring: [Sample?]
    private var next = 0
    private let lock = NSLock()

    /// One hour at the given sampling interval (360 samples at 10 s).
    public init(capacity: Int = 360) {
        self.capacity = max(2, capacity)
        ring = Array(repeating: nil, count: self.capacity)
    }

    public func record(_ report: Hub.StatusReport, at time: Double = Date().timeIntervalSince1970) {
        var frames: [String: UInt64] = [:]
        for t in report.transports { frames[t.name] = t.status.framesIn &+ t.status.framesOut }
        let q = report.router.queue
        let sample = Sample(at: time, frames: frames, queueDepth: q.queued + q.inFlight, delivered: report.router.counters.deliveredDirect)
        lock.withLock {
            ring[next] = sample
            next = (next + 1) % capacity
        }
    }

    /// Samples oldest first.
    public func samples() -> [Sample] {
        lock.withLock { (0..<capacity).compactMap { ring[(next + $0) % capacity] } }
    }

    /// A series of (time, value) points for one chart.
    public typealias Series = [(t: Double, v: Double)]

    /// Frames per second per transport, between consecutive samples (a counter that went back —
    /// the transport restarted — gives no point rather than a negative one).
    public func frameRates() -> [String: Series] {
        let s = samples()
        var out: [String: Series] = [:]
        for (a, b) in zip(s, s.dropFirst()) where b.at > a.at {
            for (name, nb) in b.frames {
                guard let na = a.frames[name], nb >= na else { continue }
                out[name, default: []].append((b.at, Double(nb - na) / (b.at - a.at)))
            }
        }
        return out
    }

    public func queueDepth() -> Series { samples().map { ($0.at, Double($0.queueDepth)) } }

    /// Deliveries in the minute up to each sample: the count since the sample a minute earlier
    /// (or since the oldest one, on a hub younger than that), never scaled up from a shorter
    /// interval — 2 deliveries in the first 10 s are 2 per minute, not 12.
    public func deliveriesPerMinute() -> Series {
        let s = samples()
        var out: Series = []
        var from = 0  // the newest sample at least a minute before b, else the oldest
        for (i, b) in s.enumerated() where i > 0 {
            while from + 1 < i, b.at - s[from + 1].at >= 60 { from += 1 }
            let a = s[from]
            guard b.at > a.at, b.delivered >= a.delivered else { continue }
            out.append((b.at, Double(b.delivered - a.delivered) * 60 / max(60, b.at - a.at)))
        }
        return out
    }
}
