import YaokLoRaPlugin
import YaokTesting

/// A shared LoRa channel for tests: which radios hear which, how long each frame is on the
/// air (the LoRa formula), frames that overlap at a receiver destroy each other, a radio that
/// is sending hears nothing, and a seeded share of the rest is lost. Times are seconds.
public struct SimulatedAir: Sendable {
    /// One frame on the air.
    public struct Transmission: Sendable, Equatable {
        public var sender: Int
        public var bytes: [UInt8]
        public var start: Double
        public var end: Double
        /// The radio settings it was sent with: only radios set the same way hear it.
        public var channel: Channel
    }

    /// What must match for two radios to hear each other.
    public struct Channel: Sendable, Hashable {
        public var frequencyHz: UInt32
        public var bandwidthHz: UInt32
        public var spreadingFactor: UInt8
        public var codingRate: UInt8

        public init(frequencyHz: UInt32, bandwidthHz: UInt32, spreadingFactor: UInt8, codingRate: UInt8) {
            self.frequencyHz = frequencyHz
            self.bandwidthHz = bandwidthHz
            self.spreadingFactor = spreadingFactor
            self.codingRate = codingRate
        }

        /// Seconds on the air for `bytes` as the device sends it (its one-byte header added).
        public func airtime(_ bytes: Int) -> Double {
            LoRaModulation(spreadingFactor: Int(spreadingFactor), bandwidthHz: Int(bandwidthHz), codingRate: Int(codingRate))
                .timeOnAir(payloadBytes: bytes + 1)
        }
    }

    /// A frame that reached a radio whole.
    public struct Reception: Sendable, Equatable {
        public var receiver: Int
        public var bytes: [UInt8]
        public var channel: Channel
        public var at: Double
        public var rssiDBm: Int
        public var snrDB: Double
    }

    /// `inRange[a]`: the radios that hear radio `a` (symmetric or not, as given).
    public var inRange: [Int: Set<Int>]
    /// The share of otherwise good receptions lost (0.05 = 5 %).
    public var loss: Double
    public private(set) var collisions = 0
    public private(set) var lost = 0
    private var inFlight: [Transmission] = []
    private var finished: [Transmission] = []
    private var random: SplitMix64
    /// Packets handed to each radio, not yet on the air (listen before talk).
    private var waiting: [Int: [(bytes: [UInt8], channel: Channel)]] = [:]
    private var nextTry: [Int: Double] = [:]

    public init(inRange: [Int: Set<Int>], loss: Double = 0, seed: UInt64 = 1) {
        self.inRange = inRange
        self.loss = loss
        self.random = SplitMix64(seed: seed)
    }

    /// Whether `radio` is sending, or hears a transmission, at `now`.
    public func busy(for radio: Int, at now: Double) -> Bool {
        inFlight.contains { $0.start <= now && now < $0.end && ($0.sender == radio || (inRange[$0.sender]?.contains(radio) ?? false)) }
    }

    /// A device hands its radio a packet: it goes on the air by ``startWaiting(at:)``, listen
    /// before talk as the RNode firmware does — after a random pause of up to 50 ms, and while
    /// the radio hears the channel busy, again after random 10–100 ms backoffs. (Two radios
    /// that cannot hear each other still collide at a third: the hidden terminal.)
    public mutating func queue(from sender: Int, bytes: [UInt8], channel: Channel, at now: Double) {
        if waiting[sender, default: []].isEmpty { nextTry[sender] = now + Double.random(in: 0...0.05, using: &random) }
        waiting[sender, default: []].append((bytes, channel))
    }

    /// Packets handed to radios and not yet sent.
    public var waitingCount: Int { waiting.values.reduce(0) { $0 + $1.count } }

    /// Starts the waiting packets whose radio finds the channel free at `now`; returns them.
    public mutating func startWaiting(at now: Double) -> [Transmission] {
        var started: [Transmission] = []
        for sender in waiting.keys.sorted() {
            guard let next = waiting[sender]?.first, now >= nextTry[sender] ?? 0 else { continue }
            if busy(for: sender, at: now) {
                nextTry[sender] = now + Double.random(in: 0.01...0.1, using: &random)
                continue
            }
            waiting[sender]!.removeFirst()
            transmit(from: sender, bytes: next.bytes, channel: next.channel, at: now)
            started.append(inFlight[inFlight.count - 1])
            nextTry[sender] = now + Double.random(in: 0...0.05, using: &random)
        }
        return started
    }

    /// A radio starts sending `bytes` at `now`; returns when it ends.
    @discardableResult
    public mutating func transmit(from sender: Int, bytes: [UInt8], channel: Channel, at now: Double) -> Double {
        let end = now + channel.airtime(bytes.count)
        inFlight.append(Transmission(sender: sender, bytes: bytes, start: now, end: end, channel: channel))
        return end
    }

    /// The receptions of every frame that ended by `now`, in the order they ended. A
    /// frame is kept until no frame that started before its end can still overlap it.
    public mutating func receptions(until now: Double) -> [Reception] {
        var out: [Reception] = []
        let done = inFlight.filter { $0.end <= now }.sorted { $0.end < $1.end }
        inFlight.removeAll { $0.end <= now }
        finished += done
        let onAir = finished + inFlight
        for t in done {
            for r in (inRange[t.sender] ?? []) where r != t.sender {
                // Half duplex: a radio sending hears nothing; a frame on the same channel that
                // reaches this receiver at the same time destroys both there.
                let hearsOther = onAir.contains { o in
                    o != t && o.start < t.end && t.start < o.end
                        && (o.sender == r || (o.channel == t.channel && (inRange[o.sender]?.contains(r) ?? false)))
                }
                if hearsOther { collisions += 1; continue }
                if loss > 0 && Double.random(in: 0..<1, using: &random) < loss { lost += 1; continue }
                out.append(Reception(receiver: r, bytes: t.bytes, channel: t.channel, at: t.end, rssiDBm: -100, snrDB: 5))
            }
        }
        // Frames that ended more than the longest frame ago can no longer overlap anything new.
        finished.removeAll { $0.end < now - 30 }
        return out
    }
}
