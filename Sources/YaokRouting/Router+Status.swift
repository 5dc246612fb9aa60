import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire

// The router's part of `yaok-hub status`.
extension Router {
    // MARK: Status

    /// A status snapshot (runs on the router queue).
    public func statusSnapshot() -> RouterStatus {
        queue.sync {
            // Status reports what is durable: the open group commits first.
            commitGroup()
            let counts = (storeCall("counts", { try store.counts() })) ?? [:]
            // Being sent is known here, not stored: of the queued bundles, those on the wire.
            let sending = (storeCall("queuedCount", { try store.queuedCount(of: Array(onTheWire())) })) ?? 0
            let last = (storeCall("lastDelivery", { try store.lastDelivery() })) ?? []
            // Times shown to people are on our best estimate of true time, not the hub clock.
            let clock = time.estimate
            let shown = { (hubMs: Int64) in hubMs &+ clock.trueMinusHubMs }
            return RouterStatus(
                policy: policy.name,
                queue: RouterStatus.Queue(
                    queued: (counts[.queued] ?? 0) - sending, inFlight: (counts[.inFlight] ?? 0) + sending, handedOver: counts[.handedOver] ?? 0,
                    delivered: counts[.delivered] ?? 0, expired: counts[.expired] ?? 0,
                    bytes: (storeCall("totalBytes", { try store.totalBytes() })) ?? 0),
                store: RouterStatus.StoreCounters(duplicatesDropped: store.statistics.duplicatesDropped,
                                                  evicted: store.statistics.evicted, expired: store.statistics.expired,
                                                  evictedHeaviestSender: store.statistics.evictedHeaviestSender,
                                                  evictedHeaviestOrigin: store.statistics.evictedHeaviestOrigin,
                                                  conflicts: store.statistics.conflicts),
                counters: countersWithAdmission(),
                links: links.values.sorted { $0.key.description < $1.key.description }.map {
                    RouterStatus.LinkView(link: $0.key.description, role: $0.info.peerRole.description, peer: $0.peerName,
                                          kind: $0.info.kind, remote: $0.info.remote, inFlight: $0.inFlight.count, trust: Self.trustLabel($0),
                                          window: $0.pacing.window, roundTripMs: $0.pacing.smoothedRTTMs.map { Int($0.rounded()) },
                                          custodyTimeoutMs: $0.pacing.timeoutMs(),
                                          mtu: $0.info.mtu, upAtMs: shown($0.upAtMs), framesIn: $0.framesIn, bytesIn: $0.bytesIn,
                                          framesOut: $0.framesOut, bytesOut: $0.bytesOut)
                },
                lastDelivery: last.prefix(50).map { RouterStatus.Delivery(destination: Self.shortID($0.destination), atMs: shown($0.atMs)) },
                clock: clock)
        }
    }

    /// The one place the router's store calls fail: the operation is counted
    /// (`storeFailures`, in `yaok-hub status`) and logged — as an error the first time it fails
    /// after working, at debug while it keeps failing — and the caller gets nil and carries on
    /// as if the answer were "nothing": a bundle stays where it is and is tried again on a
    /// later tick, so a full or failing disk costs progress, never a message.
    @discardableResult
    func storeCall<T>(_ operation: StaticString, _ body: () throws -> T?) -> T? {
        do {
            let value = try body()
            if !failingStoreOperations.isEmpty { failingStoreOperations.remove("\(operation)") }
            return value
        } catch {
            counters.storeFailures += 1
            if failingStoreOperations.insert("\(operation)").inserted {
                logger.error("store: \(operation) failed: \(error); the router carries on and tries again on later ticks")
            } else {
                logger.debug("store: \(operation) failed again: \(error)")
            }
            return nil
        }
    }

    func countersWithAdmission() -> Counters {
        var c = counters
        let dropped = admission.dropped
        c.framesRateLimited += dropped.rateLimited
        c.framesQueueFull += dropped.backlogFull
        c.framesQueueFullOther += dropped.backlogFullOther
        c.hopLatencySamples = hopLatency.samples
        c.hopLatencyP50Us = hopLatency.percentileUs(0.5)
        c.hopLatencyP99Us = hopLatency.percentileUs(0.99)
        c.hopLatencyMaxUs = hopLatency.maxUs
        c.custodyLatencySamples = custodyLatency.samples
        c.custodyLatencyP50Us = custodyLatency.percentileUs(0.5)
        c.custodyLatencyP99Us = custodyLatency.percentileUs(0.99)
        c.custodyLatencyMaxUs = custodyLatency.maxUs
        c.commitDurationP50Us = commitDuration.percentileUs(0.5)
        c.commitDurationP99Us = commitDuration.percentileUs(0.99)
        c.commitDurationMaxUs = commitDuration.maxUs
        return c
    }

    static func trustLabel(_ link: Link) -> String? {
        guard link.info.peerRole == .hub else { return nil }
        return link.listed ? "listed" : link.certifiedUntilMs != nil ? "certified" : "untrusted"
    }

    /// Whether a link is the relay this hub pinned: it belongs to a transport of the relay
    /// plugin, and its peer key is that section's `relay_key`.
    static func isPinnedRelay(_ info: LinkInfo, on transport: any RouterTransport) -> Bool {
        guard let pinned = transport.pinnedRelayKey else { return false }
        return pinned == info.peerSigningKey
    }

    /// The first 8 hex digits of an ID: enough for an operator, not a full identifier in logs.
    static func shortID(_ id: [UInt8]) -> String { YaokPluginKit.Hex.encode(id.prefix(4)) }

    /// A peer by the name its people know it by: a phone by its user ID (what `yaok` shows for
    /// a contact), a hub or the relay by its Ed25519 key (what `trusted_hubs` and `relay_key`
    /// hold), each as its first 8 hex digits.
    static func peerName(_ info: LinkInfo, peerID: [UInt8]) -> String {
        info.peerRole == .endpoint ? shortID(peerID) : shortID(info.peerSigningKey)
    }

    /// The fairness principal of a link: the transport and the network of the remote address
    /// (``IPEndpoint/crowd``: its /24 or /64 — a device picks ports freely and addresses within
    /// its network nearly so), the remote text for other transports (a BLE address), or the
    /// peer's key if the transport reports no address.
    static func origin(transport: String, remote: String?, peerID: [UInt8]) -> String {
        guard var host = remote, !host.isEmpty else { return "\(transport):\(YaokPluginKit.Hex.encode(peerID.prefix(8)))" }
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") {
            host = String(host[host.index(after: host.startIndex)..<close])
        } else if host.filter({ $0 == ":" }).count == 1, let colon = host.lastIndex(of: ":"),
                  host[host.index(after: colon)...].allSatisfy(\.isNumber) {
            host = String(host[..<colon])
        }
        if let percent = host.firstIndex(of: "%") { host = String(host[..<percent]) }   // fe80::1%wlan0
        return "\(transport):\(IPEndpoint(host: host, port: 0).crowd)"
    }
}
