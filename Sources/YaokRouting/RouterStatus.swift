import Foundation
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire


/// The router's part of `yaok-hub status`.
public struct RouterStatus: Sendable, Codable, Equatable {
    public struct Queue: Sendable, Codable, Equatable {
        public var queued, inFlight, handedOver, delivered, expired: Int
        public var bytes: Int64
    }
    public struct StoreCounters: Sendable, Codable, Equatable {
        public var duplicatesDropped, evicted, expired: Int64
        /// Evictions taken from the heaviest sender key, and from the heaviest origin.
        public var evictedHeaviestSender, evictedHeaviestOrigin: Int64
        public var conflicts: Int64
    }
    public struct LinkView: Sendable, Codable, Equatable {
        public var link, role, peer, kind: String
        public var remote: String?
        public var inFlight: Int
        /// Hub links: `listed` (trusted_hubs), `certified` (network certificate) or `untrusted`.
        public var trust: String?
        /// Bundles this link may have in flight now (``CustodyPacing``), its smoothed custody
        /// round trip (nil before the first answer) and the wait before a resend.
        public var window: Int?
        public var roundTripMs: Int?
        public var custodyTimeoutMs: Int64?
        /// Largest frame the link carries, when it came up (ms since 1970), what arrived on it
        /// and what its transport accepted to send on it.
        public var mtu: Int?
        public var upAtMs: Int64?
        public var framesIn: Int?
        public var bytesIn: Int?
        public var framesOut: Int?
        public var bytesOut: Int?
    }
    public struct Delivery: Sendable, Codable, Equatable {
        public var destination: String
        public var atMs: Int64
    }
    public var policy: String
    public var queue: Queue
    public var store: StoreCounters
    public var counters: Router.Counters
    public var links: [LinkView]
    public var lastDelivery: [Delivery]
    /// What the hub believes about the time (Docs/protocol.md, clock 0x0C).
    public var clock: ClockEstimate?
}
