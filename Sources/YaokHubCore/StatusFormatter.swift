import Foundation

/// Human text for `yaok-hub status`.
public enum StatusFormatter {
    public static func text(_ r: Hub.StatusReport) -> String {
        var out: [String] = []
        out.append("hub \(r.hub.name)  id \(r.hub.id.prefix(16))…  up \(duration(r.hub.uptimeSeconds))  config \(r.hub.config)")
        out.append("fingerprint \(r.hub.fingerprint)")
        // Whether this hub's clock can be believed, and from whom it knows (Docs/protocol.md, clock).
        if let clock = r.router.clock { out.append("clock: \(clock.summary)") }
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
