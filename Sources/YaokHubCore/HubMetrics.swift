import Foundation
import YaokSupervision

/// The hub's Prometheus exposition: per-transport state, links, frames, bytes and errors,
/// queue depths per state, router counters, and whatever plugins recorded.
extension Hub {
    public func prometheusText() -> String {
        let report = statusReport()
        var lines: [String] = []
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: Double)]) {
            lines.append("# HELP \(name) \(help)")
            lines.append("# TYPE \(name) \(type)")
            for s in samples {
                let v = s.value.rounded() == s.value ? String(Int64(s.value)) : String(s.value)
                lines.append(s.labels.isEmpty ? "\(name) \(v)" : "\(name){\(s.labels)} \(v)")
            }
        }
        func label(_ t: TransportRuntimeStatus) -> String { "transport=\"\(t.name)\",kind=\"\(t.kind)\"" }
        let ts = report.transports
        metric("yaok_transport_up", "gauge", "1 when the transport is running or degraded",
               ts.map { (label($0), $0.isRunning ? 1 : 0) })
        metric("yaok_transport_state", "gauge", "the transport's current state (1 for the state it is in)",
               ts.map { ("\(label($0)),state=\"\($0.status.state.rawValue)\"", 1) })
        metric("yaok_transport_links", "gauge", "links currently up", ts.map { (label($0), Double($0.status.links)) })
        metric("yaok_transport_peers", "gauge", "distinct peers seen", ts.map { (label($0), Double($0.status.peers)) })
        metric("yaok_transport_frames_total", "counter", "frames moved", ts.flatMap {
            [("\(label($0)),direction=\"in\"", Double($0.status.framesIn)), ("\(label($0)),direction=\"out\"", Double($0.status.framesOut))]
        })
        metric("yaok_transport_bytes_total", "counter", "bytes moved", ts.flatMap {
            [("\(label($0)),direction=\"in\"", Double($0.status.bytesIn)), ("\(label($0)),direction=\"out\"", Double($0.status.bytesOut))]
        })
        metric("yaok_transport_start_failures", "gauge", "consecutive failed starts (retried with backoff)",
               ts.map { (label($0), Double($0.startFailures)) })
        metric("yaok_transport_errors", "gauge", "1 when the transport reports a last error",
               ts.map { (label($0), $0.status.lastError == nil ? 0 : 1) })
        let q = report.router.queue
        metric("yaok_queue_bundles", "gauge", "bundles in the store by state", [
            ("state=\"queued\"", Double(q.queued)), ("state=\"in_flight\"", Double(q.inFlight)),
            ("state=\"handed_over\"", Double(q.handedOver)), ("state=\"delivered\"", Double(q.delivered)),
            ("state=\"expired\"", Double(q.expired)),
        ])
        metric("yaok_queue_bytes", "gauge", "bytes of bundles held", [("", Double(q.bytes))])
        let c = report.router.counters
        metric("yaok_router_bundles_total", "counter", "bundles by outcome", [
            ("outcome=\"accepted\"", Double(c.accepted)), ("outcome=\"duplicate\"", Double(c.duplicates)),
            ("outcome=\"forwarded\"", Double(c.forwarded)), ("outcome=\"delivered\"", Double(c.deliveredDirect)),
            ("outcome=\"expired\"", Double(c.expired)), ("outcome=\"already_delivered\"", Double(c.alreadyDelivered)),
        ])
        metric("yaok_router_refused_total", "counter", "bundles refused, by reason", [
            ("reason=\"malformed\"", Double(c.refusedMalformed)), ("reason=\"bad_signature\"", Double(c.refusedSignature)),
            ("reason=\"expired\"", Double(c.refusedExpired)), ("reason=\"hop_limit\"", Double(c.refusedHopLimit)),
            ("reason=\"rate_limited\"", Double(c.refusedRateLimited)), ("reason=\"store_full\"", Double(c.refusedStoreFull)),
            ("reason=\"over_share\"", Double(c.refusedOverShare)), ("reason=\"lifetime\"", Double(c.refusedLifetime)),
            ("reason=\"conflict\"", Double(c.refusedConflict)),
        ])
        if let clock = report.router.clock {
            // The system clock's error against the hub's best estimate of true time, and whether
            // that estimate comes from a source that makes true time known (Docs/protocol.md, clock).
            metric("yaok_hub_clock_offset_seconds", "gauge", "system clock minus the estimate of true time (negative: behind)",
                   [("source=\"\(clock.source)\"", Double(clock.systemClockErrorMs) / 1000)])
            metric("yaok_hub_clock_known", "gauge", "1 if true time is known (system synchronised, relay or trusted hubs), else 0",
                   [("", clock.known ? 1 : 0)])
            metric("yaok_hub_clock_samples", "gauge", "time samples held, by source", [
                ("source=\"relay\"", clock.relay ? 1 : 0), ("source=\"hubs\"", Double(clock.hubs)), ("source=\"phones\"", Double(clock.phones)),
            ])
        }
        metric("yaok_router_custody_timeouts_total", "counter", "custody acknowledgements that did not come in time", [("", Double(c.custodyTimeouts))])
        metric("yaok_router_stalls_deferred_total", "counter", "times the hub found it had not run for a while and moved custody deadlines on by that time",
               [("", Double(c.stallsDeferred))])
        metric("yaok_router_receipts_unverified_total", "counter", "delivery receipts that named no held message of theirs (suppressed nothing)",
               [("", Double(c.receiptsUnverified))])
        metric("yaok_router_receipts_proven_total", "counter", "delivery receipts admitted by the proof their message committed to, without a signature check",
               [("", Double(c.receiptsProven))])
        metric("yaok_router_receipts_replaced_total", "counter", "held receipts whose signature failed, replaced by a conflicting copy that verified",
               [("", Double(c.receiptsReplaced))])
        metric("yaok_router_frames_dropped_total", "counter", "frames dropped before the router queue, by why", [
            ("why=\"rate\"", Double(c.framesRateLimited)), ("why=\"backlog\"", Double(c.framesQueueFull)),
        ])
        metric("yaok_router_answers_dropped_total", "counter",
               "of the frames dropped at a full backlog, those that were not bundles (offers, requests, answers)",
               [("", Double(c.framesQueueFullOther))])
        metric("yaok_router_custody_ack_lists_total", "counter", "custodyAcks lists, by direction", [
            ("direction=\"sent\"", Double(c.ackListsSent)), ("direction=\"received\"", Double(c.ackListsReceived)),
        ])
        metric("yaok_router_offers_dropped_total", "counter", "offered bundle IDs dropped at a full per-link backlog",
               [("", Double(c.offersDropped))])
        metric("yaok_router_attachments_refused_total", "counter", "attachment announcements refused", [("", Double(c.attachmentsRefused))])
        metric("yaok_router_roles_refused_total", "counter", "links ignored because their claimed role was not authorised",
               [("", Double(c.rolesRefused))])
        metric("yaok_router_certificates_total", "counter", "hub certificates received, by outcome", [
            ("outcome=\"accepted\"", Double(c.certificatesAccepted)), ("outcome=\"refused\"", Double(c.certificatesRefused)),
        ])
        metric("yaok_router_untrusted_hub_frames_refused_total", "counter", "frames from untrusted hubs dropped under list/network trust",
               [("", Double(c.untrustedHubFramesRefused))])
        metric("yaok_router_untrusted_handovers_total", "counter", "custody acknowledgements from untrusted hubs (custody kept)",
               [("", Double(c.untrustedHandOvers))])
        metric("yaok_router_untrusted_receipt_handovers_total", "counter", "of those, receipts: handed over (kept, not retried), a receipt has no receipt",
               [("", Double(c.untrustedReceiptHandOvers))])
        metric("yaok_router_frames_refused_for_role_total", "counter", "frames the link's role does not allow (offers, requests from endpoints)",
               [("", Double(c.framesRefusedForRole))])
        var byRoleAndTrust: [String: Int] = [:]
        for l in report.router.links { byRoleAndTrust["role=\"\(l.role)\",trust=\"\(l.trust ?? "n/a")\"", default: 0] += 1 }
        metric("yaok_router_links", "gauge", "links at the router by peer role and (hubs) trust",
               byRoleAndTrust.sorted { $0.key < $1.key }.map { ($0.key, Double($0.value)) })
        metric("yaok_store_evicted_total", "counter", "bundles evicted because the store was full, by the share they were taken from", [
            ("from=\"heaviest_sender\"", Double(report.router.store.evictedHeaviestSender)),
            ("from=\"heaviest_origin\"", Double(report.router.store.evictedHeaviestOrigin)),
        ])
        metric("yaok_store_commit_seconds", "gauge", "how long the store's group commits took (write and fsync); custody answers wait for them", [
            ("quantile=\"0.5\"", Double(c.commitDurationP50Us) / 1e6), ("quantile=\"0.99\"", Double(c.commitDurationP99Us) / 1e6),
            ("quantile=\"1\"", Double(c.commitDurationMaxUs) / 1e6),
        ])
        metric("yaok_store_duplicates_dropped_total", "counter", "duplicate bundles dropped", [("", Double(report.router.store.duplicatesDropped))])
        return lines.joined(separator: "\n") + "\n" + metrics.prometheusText()
    }
}
