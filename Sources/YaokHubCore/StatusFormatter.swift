import Foundation
import YaokPluginKit
import YaokRouting
import YaokSupervision

/// Human text for `yaok-hub status`.
public enum StatusFormatter {
    /// The answers to "is mail flowing?": what `yaok-hub status` prints first and the
    /// console's first screen shows, made once from one status report so the two agree.
    public struct Glance: Sendable, Equatable {
        /// "2 of 4 transports running (1 switched off)": ``transportsRunning(_:)``.
        public var transports: String
        /// Phones (endpoint links) attached now.
        public var phones: Int
        /// Hubs linked now.
        public var hubs: Int
        /// Messages held for someone: waiting to be sent, or sent and not yet acknowledged.
        public var waiting: Int
        /// When this hub last delivered a message (its store's newest delivery), if ever.
        public var lastDeliveryAtMs: Int64?
        /// "3 min ago", or "none yet".
        public var lastDelivery: String
        /// Whether a link to the internet relay is up; nil when no relay transport is switched on.
        public var relayUp: Bool?
        /// The relay link in words, with the reason when it is down.
        public var relay: String
        /// Whether the hub's clock is right, and how it knows.
        public var clock: String?
    }

    /// How many switched-on transports run (or run with problems): one phrase for the ready
    /// log line, `yaok-hub status` and the console.
    public static func transportsRunning(_ transports: [TransportRuntimeStatus]) -> String {
        let on = transports.filter(\.enabled)
        let running = on.filter(\.isRunning).count
        let off = transports.count - on.count
        return "\(running) of \(on.count) transports running" + (off > 0 ? " (\(off) switched off)" : "")
    }

    public static func glance(_ r: Hub.StatusReport, nowMs: Int64) -> Glance {
        let roles = r.router.links.map(\.role)
        let last = r.router.lastDelivery.map(\.atMs).max()
        let relays = r.transports.filter { $0.enabled && $0.kind == "relay" }
        let relayUp: Bool? = roles.contains(PeerRole.relay.description) ? true : (relays.isEmpty ? nil : false)
        let relay: String
        switch relayUp {
        case true?: relay = "connected"
        case false?:
            let why = relays.map { $0.status.reason }.filter { !$0.isEmpty }.joined(separator: "; ")
            relay = "not connected" + (why.isEmpty ? "" : ": \(why)")
        case nil: relay = "none switched on"
        }
        return Glance(transports: transportsRunning(r.transports),
                      phones: roles.filter { $0 == PeerRole.endpoint.description }.count,
                      hubs: roles.filter { $0 == PeerRole.hub.description }.count,
                      waiting: r.router.queue.queued + r.router.queue.inFlight,
                      lastDeliveryAtMs: last, lastDelivery: last.map { ago($0, in: r, nowMs: nowMs) } ?? "none yet",
                      relayUp: relayUp, relay: relay, clock: r.router.clock?.summary)
    }

    /// How long before `nowMs` (this machine's clock) a time in `r` was. Times in a status
    /// report are on the hub's estimate of true time, not its system clock, which on a Pi booted
    /// offline may be days off: `nowMs` is put on the same estimate first.
    public static func ago(_ shownMs: Int64, in r: Hub.StatusReport, nowMs: Int64) -> String {
        ago(nowMs &- (r.router.clock?.systemClockErrorMs ?? 0) &- shownMs)
    }

    /// "just now", "42 s ago", "5 min ago", "3 h 5 min ago", "2 days ago", for a span in ms (a
    /// time "in the future", from a clock set back since, reads "just now").
    public static func ago(_ ms: Int64) -> String {
        let s = max(0, ms / 1000)
        if s < 5 { return "just now" }
        if s < 120 { return "\(s) s ago" }
        if s < 7200 { return "\(s / 60) min ago" }
        if s < 172_800 { return "\(s / 3600) h \((s % 3600) / 60) min ago" }
        return "\(s / 86_400) days ago"
    }

    public static func text(_ r: Hub.StatusReport, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> String {
        var out: [String] = []
        // The key prefix is how other hubs name this one (their logs, status and trusted_hubs).
        out.append("hub \(r.hub.name)  key \(r.hub.signingKey.map { String($0.prefix(8)) } ?? "?")  up \(duration(r.hub.uptimeSeconds))  config \(r.hub.config)")
        out.append("fingerprint \(r.hub.fingerprint)")
        let g = glance(r, nowMs: nowMs)
        out.append("now: \(g.phones) phone\(g.phones == 1 ? "" : "s") attached, \(g.hubs) hub\(g.hubs == 1 ? "" : "s") linked, "
            + "\(g.waiting) message\(g.waiting == 1 ? "" : "s") waiting, last delivery \(g.lastDelivery)")
        out.append("relay: \(g.relay)")
        // Whether this hub's clock can be believed, and from whom it knows (Docs/protocol.md, clock).
        if let clock = g.clock { out.append("clock: \(clock)") }
        out.append("transports: \(g.transports)")
        out.append("")
        let header = ["TRANSPORT", "KIND", "STATE", "LINKS", "PEERS", "FRAMES IN/OUT", "BYTES IN/OUT", "REASON"]
        var rows = [header]
        for t in r.transports {
            var reason = t.status.reason
            if let next = t.nextRetryInSeconds { reason += " (retry \(t.startFailures) in \(Int(next.rounded())) s)" }
            rows.append([t.name, t.kind, t.status.state.rawValue, String(t.status.links), String(t.status.peers),
                         "\(t.status.framesIn)/\(t.status.framesOut)", "\(t.status.bytesIn)/\(t.status.bytesOut)", reason])
        }
        let widths = (0..<header.count - 1).map { i in rows.map { $0[i].count }.max() ?? 0 }
        for row in rows {
            var line = ""
            for (i, cell) in row.enumerated() {
                line += i < widths.count ? cell.padding(toLength: widths[i] + 2, withPad: " ", startingAt: 0) : cell
            }
            out.append(line)
        }
        for t in r.transports where t.status.lastError != nil && t.status.lastError != t.status.reason {
            out.append("  \(t.name): last error: \(t.status.lastError ?? "")")
        }
        // The plugin processes: which serves each transport, and how often one was replaced.
        let processes = r.transports.filter { $0.pid != nil || ($0.restarts ?? 0) > 0 }.map { t in
            "\(t.name) \(t.pid.map { "pid \($0)" } ?? "no process")\((t.restarts ?? 0) > 0 ? ", \(t.restarts ?? 0) restarts, last \(t.lastExit ?? "?")" : "")"
        }
        if !processes.isEmpty { out.append("processes: " + processes.joined(separator: "; ")) }
        let q = r.router.queue
        out.append("")
        out.append("queue (\(r.router.policy)): queued \(q.queued), in flight \(q.inFlight), handed over \(q.handedOver), delivered \(q.delivered), expired \(q.expired); \(q.bytes) bytes")
        let c = r.router.counters
        let refused = refusedByReason(c)
        out.append("messages: accepted \(c.accepted), duplicates \(c.duplicates), forwarded \(c.forwarded), delivered \(c.deliveredDirect), refused \(refused.reduce(0) { $0 + $1.1 }), evicted \(r.router.store.evicted)")
        if c.groupCommits > 0 {
            // A custody answer waits for its commit's fsync: a slow disk shows here first.
            let ms = { (us: Int) in String(format: "%.1f", Double(us) / 1000) }
            out.append("  custody answers: median \(ms(c.custodyLatencyP50Us)) ms, 99th percentile \(ms(c.custodyLatencyP99Us)) ms; store commits \(c.groupCommits): median \(ms(c.commitDurationP50Us)) ms, longest \(ms(c.commitDurationMaxUs)) ms")
        }
        let why = refused.filter { $0.1 > 0 }.map { "\($0.0) \($0.1)" }
        if !why.isEmpty { out.append("  refused: " + why.joined(separator: ", ")) }
        let defended: [(String, Int)] = [
            ("frames over a link's rate", c.framesRateLimited), ("frames over a link's backlog", c.framesQueueFull), ("of them not bundles", c.framesQueueFullOther),
            ("offered IDs dropped", c.offersDropped), ("unverified receipts", c.receiptsUnverified),
            ("altered receipts replaced by the real one", c.receiptsReplaced),
            ("attachments refused", c.attachmentsRefused), ("already delivered", c.alreadyDelivered),
            ("links refused for their claimed role", c.rolesRefused),
            ("certificates refused", c.certificatesRefused), ("frames from untrusted hubs refused", c.untrustedHubFramesRefused),
            ("hand-overs to untrusted hubs (custody kept)", c.untrustedHandOvers),
            ("of them receipts (kept, not retried)", c.untrustedReceiptHandOvers),
            ("frames refused for the link's role", c.framesRefusedForRole),
            ("sends to the wrong endpoint prevented", c.endpointMisroutesPrevented),
        ]
        let seen = defended.filter { $0.1 > 0 }.map { "\($0.0) \($0.1)" }
        if !seen.isEmpty { out.append("  also: " + seen.joined(separator: ", ")) }
        if r.router.store.evicted > 0 {
            out.append("  evicted from the heaviest sender \(r.router.store.evictedHeaviestSender), from the heaviest origin \(r.router.store.evictedHeaviestOrigin)")
        }
        if !r.router.links.isEmpty {
            var byRole: [String: Int] = [:]
            for l in r.router.links { byRole[l.trust.map { "\(l.role) (\($0))" } ?? l.role, default: 0] += 1 }
            out.append("links: " + byRole.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            for l in r.router.links {
                out.append("  \(l.link)  \(l.role)\(l.trust.map { " (\($0))" } ?? "") \(l.peer)  \(l.kind) \(l.remote ?? "")  in flight \(l.inFlight)\(l.window.map { "/\($0)" } ?? "")\(l.roundTripMs.map { ", round trip \($0) ms" } ?? "")")
            }
        }
        if !r.router.lastDelivery.isEmpty {
            out.append("last delivery:")
            let f = ISO8601DateFormatter()
            for d in r.router.lastDelivery.prefix(10) {
                out.append("  \(d.destination)  \(f.string(from: Date(timeIntervalSince1970: Double(d.atMs) / 1000)))")
            }
        }
        return out.joined(separator: "\n")
    }

    /// Messages refused, by reason in plain words, in a fixed order (status text and the console).
    public static func refusedByReason(_ c: Router.Counters) -> [(reason: String, count: Int)] {
        [
            ("malformed", c.refusedMalformed), ("bad signature", c.refusedSignature), ("expired", c.refusedExpired),
            ("lifetime", c.refusedLifetime), ("hop limit", c.refusedHopLimit), ("rate limited", c.refusedRateLimited),
            ("store full", c.refusedStoreFull), ("over share", c.refusedOverShare), ("conflict", c.refusedConflict),
        ]
    }

    static func duration(_ s: Int64) -> String {
        if s < 120 { return "\(s)s" }
        if s < 7200 { return "\(s / 60)m" }
        return "\(s / 3600)h\((s % 3600) / 60)m"
    }
}
