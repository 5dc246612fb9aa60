import Foundation
import YaokHubCore
import YaokSupervision
import YaokPluginKit

/// The overview: every transport as a card, the queue, message counters. The same field list
/// renders the page and feeds the live updates (``fields(_:)``), so the two cannot disagree.
enum OverviewPage {
    /// One live value: its key (`data-field`), exact value (`data-value`) and display text.
    struct Field: Equatable { var key: String; var value: String; var text: String }

    /// Plain words and a glyph per state: the glyph and the words carry the state, colour only repeats it.
    static func stateWords(_ t: TransportRuntimeStatus) -> (word: String, glyph: String, css: String) {
        switch t.status.state {
        case .running: return ("Working", "✓", "ok")
        case .starting: return ("Starting", "…", "wait")
        case .degraded: return ("Working with problems", "!", "warn")
        case .unavailable: return ("Not available on this box", "–", "warn")
        case .failed: return ("Not working", "✕", "bad")
        case .stopped: return (t.enabled ? "Stopped" : "Switched off", "○", "off")
        }
    }

    /// The reason, with the retry time when the host is backing off, and what to do about it.
    static func reason(_ t: TransportRuntimeStatus) -> String {
        var r = t.status.reason.isEmpty ? "—" : t.status.reason
        if let next = t.nextRetryInSeconds { r += " (next try in \(Int(next.rounded())) s)" }
        switch t.status.state {
        case .unavailable where t.enabled:
            r += ". To fix: give this box what is named here, or switch the transport off if it will never have it."
        case .failed where t.enabled:
            r += ". The hub keeps trying by itself; the log says more (journalctl -u yaok-hub)."
        default: break
        }
        return r
    }

    static func fields(_ r: Hub.StatusReport, nowMs: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> [Field] {
        var f: [Field] = []
        func n<T: BinaryInteger>(_ key: String, _ v: T) { f.append(Field(key: key, value: String(v), text: String(v))) }
        for t in r.transports {
            let p = "t.\(t.name)."
            let s = stateWords(t)
            f.append(Field(key: p + "state", value: t.status.state.rawValue, text: s.word))
            f.append(Field(key: p + "glyph", value: s.css, text: s.glyph))
            f.append(Field(key: p + "reason", value: reason(t), text: reason(t)))
            n(p + "links", t.status.links)
            n(p + "peers", t.status.peers)
            n(p + "framesIn", t.status.framesIn)
            n(p + "framesOut", t.status.framesOut)
            f.append(Field(key: p + "bytesIn", value: String(t.status.bytesIn), text: HTML.bytes(t.status.bytesIn)))
            f.append(Field(key: p + "bytesOut", value: String(t.status.bytesOut), text: HTML.bytes(t.status.bytesOut)))
            // Said once: a last error that is the reason above is not repeated.
            let last = t.status.lastError ?? ""
            f.append(Field(key: p + "lastError", value: last, text: last.isEmpty ? "none" : last == t.status.reason ? "the reason above" : last))
            let restarts = t.restarts ?? 0
            f.append(Field(key: p + "restarts", value: String(restarts),
                           text: restarts == 0 ? "0" : "\(restarts) (last: \(t.lastExit ?? "?"))"))
        }
        let q = r.router.queue
        n("queue.queued", q.queued); n("queue.inFlight", q.inFlight); n("queue.handedOver", q.handedOver)
        n("queue.delivered", q.delivered); n("queue.expired", q.expired)
        f.append(Field(key: "queue.bytes", value: String(q.bytes), text: HTML.bytes(UInt64(max(0, q.bytes)))))
        let c = r.router.counters
        n("msg.accepted", c.accepted); n("msg.forwarded", c.forwarded); n("msg.delivered", c.deliveredDirect)
        n("msg.duplicates", c.duplicates)
        let refused = StatusFormatter.refusedByReason(c)
        n("msg.refused", refused.reduce(0) { $0 + $1.count })
        for (i, item) in refused.enumerated() { n("refused.\(i)", item.count) }
        // The first screen: is mail flowing? (the same answers as `yaok-hub status`).
        let g = StatusFormatter.glance(r, nowMs: nowMs)
        f.append(Field(key: "glance.transports", value: g.transports, text: g.transports))
        n("glance.phones", g.phones)
        n("glance.hubs", g.hubs)
        n("glance.waiting", g.waiting)
        f.append(Field(key: "glance.lastDelivery", value: g.lastDeliveryAtMs.map(String.init) ?? "", text: g.lastDelivery))
        f.append(Field(key: "glance.relay", value: g.relayUp.map { $0 ? "up" : "down" } ?? "none", text: g.relay))
        // Whether the hub's clock is right, and how it knows (Docs/protocol.md, clock).
        if let clock = r.router.clock {
            f.append(Field(key: "hub.clock", value: clock.known ? "known" : (clock.source == .none ? "unknown" : "estimated"), text: clock.summary))
        }
        return f
    }

    /// `confirmOff`: a transport the operator asked to switch off while links are up on it; the
    /// page asks again before it drops them.
    static func render(_ r: Hub.StatusReport, csrf: String, notice: String?, error: String?,
                       confirmOff: (name: String, links: Int)? = nil) -> String {
        let fields = Dictionary(fields(r).map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
        func v(_ key: String, _ tag: String = "span") -> String {
            guard let x = fields[key] else { return "" }
            return "<\(tag) data-field=\"\(HTML.esc(key))\" data-value=\"\(HTML.esc(x.value))\">\(HTML.esc(x.text))</\(tag)>"
        }
        var s = "<h1>Overview</h1>"
        if let error {
            s += "<div class=\"banner bad\" role=\"alert\" id=\"toggle-error\"><strong>Not changed.</strong> \(HTML.esc(error))</div>"
        }
        if let notice { s += "<div class=\"banner ok\" role=\"status\" id=\"toggle-notice\">\(HTML.esc(notice))</div>" }
        if let c = confirmOff {
            let what = c.links == 1 ? "its 1 link" : "its \(c.links) links"
            s += "<div class=\"banner warn\" role=\"alertdialog\" aria-labelledby=\"confirm-h\" id=\"toggle-confirm\">"
            s += "<p id=\"confirm-h\"><strong>Switch \(HTML.esc(c.name)) off?</strong> That drops \(what) now: the phones and hubs "
            s += "attached through it lose their connection until it is switched on again (nothing they gave the hub is lost).</p>"
            s += "<form method=\"post\" action=\"/transports/\(HTML.esc(c.name))\" class=\"toggle\">"
            s += "<input type=\"hidden\" name=\"csrf\" value=\"\(HTML.esc(csrf))\">"
            s += "<input type=\"hidden\" name=\"enabled\" value=\"false\"><input type=\"hidden\" name=\"confirm\" value=\"yes\">"
            s += "<button type=\"submit\" class=\"off\" id=\"confirm-off\">Switch \(HTML.esc(c.name)) off and drop \(what)</button> "
            s += "<a href=\"/\" id=\"keep-on\">Keep it on</a></form></div>"
        }
        // First, on a phone's first screen: is mail flowing?
        s += "<section class=\"glance\" id=\"glance\" aria-labelledby=\"glance-h\"><h2 id=\"glance-h\" class=\"section\">Now</h2><dl>"
        // Counts two to a row; the answers in words a row each, so a phone's narrow screen holds them all.
        var rows = [("Phones attached", "glance.phones", ""), ("Hubs linked", "glance.hubs", ""), ("Messages waiting", "glance.waiting", ""),
                    ("Last delivery", "glance.lastDelivery", ""), ("Internet relay", "glance.relay", " class=\"wide\"")]
        if fields["hub.clock"] != nil { rows.append(("Clock", "hub.clock", " class=\"wide\"")) }
        rows.append(("Transports", "glance.transports", " class=\"wide\""))
        for (label, key, css) in rows { s += "<div\(css)><dt>\(label)</dt><dd>\(v(key))</dd></div>" }
        s += "</dl></section><p class=\"summary\"><span id=\"live\">Live updates: connecting…</span></p>"
        s += "<h2 class=\"section\">Transports</h2><div class=\"cards\">"
        for t in r.transports {
            let p = "t.\(t.name)."
            let id = "t-" + t.name.map { $0.isLetter || $0.isNumber ? String($0) : "-" }.joined()
            let st = stateWords(t)
            s += "<section class=\"card\" id=\"\(HTML.esc(id))\" data-transport=\"\(HTML.esc(t.name))\" data-css=\"\(st.css)\" aria-labelledby=\"\(HTML.esc(id))-h\">"
            s += "<h3 id=\"\(HTML.esc(id))-h\">\(HTML.esc(t.name))"
            if t.kind != t.name { s += " <span class=\"kind\">(\(HTML.esc(t.kind)))</span>" }
            s += "</h3>"
            s += "<p class=\"state\"><span class=\"glyph\" aria-hidden=\"true\" data-field=\"\(HTML.esc(p))glyph\" data-value=\"\(st.css)\">\(st.glyph)</span> "
            s += "<strong>\(v(p + "state"))</strong></p>"
            s += "<p class=\"reason\">\(v(p + "reason"))</p>"
            s += "<dl class=\"facts\">"
            s += "<div><dt>Links</dt><dd>\(v(p + "links"))</dd></div><div><dt>Peers</dt><dd>\(v(p + "peers"))</dd></div>"
            s += "<div><dt>Frames in / out</dt><dd>\(v(p + "framesIn")) / \(v(p + "framesOut"))</dd></div>"
            s += "<div><dt>Bytes in / out</dt><dd>\(v(p + "bytesIn")) / \(v(p + "bytesOut"))</dd></div>"
            s += "<div><dt>Restarts</dt><dd>\(v(p + "restarts"))</dd></div>"
            s += "<div class=\"wide\"><dt>Last error</dt><dd>\(v(p + "lastError"))</dd></div></dl>"
            let label = t.enabled ? "Switch \(t.name) off" : "Switch \(t.name) on"
            s += "<form method=\"post\" action=\"/transports/\(HTML.esc(t.name))\" class=\"toggle\">"
            s += "<input type=\"hidden\" name=\"csrf\" value=\"\(HTML.esc(csrf))\">"
            s += "<input type=\"hidden\" name=\"enabled\" value=\"\(t.enabled ? "false" : "true")\">"
            s += "<button type=\"submit\" class=\"\(t.enabled ? "off" : "on")\">\(HTML.esc(label))</button></form>"
            s += "</section>"
        }
        s += "</div>"
        s += "<div class=\"two\"><section aria-labelledby=\"queue-h\"><h2 id=\"queue-h\" class=\"section\">Queue</h2><table><tbody>"
        for (label, key) in [("Waiting to be sent", "queue.queued"), ("Sent, waiting for acknowledgement", "queue.inFlight"),
                             ("Handed over to the next hop", "queue.handedOver"), ("Delivered", "queue.delivered"),
                             ("Expired", "queue.expired"), ("Stored", "queue.bytes")] {
            s += "<tr><th scope=\"row\">\(label)</th><td>\(v(key))</td></tr>"
        }
        s += "</tbody></table></section>"
        s += "<section aria-labelledby=\"msg-h\"><h2 id=\"msg-h\" class=\"section\">Messages</h2><table><tbody>"
        for (label, key) in [("Accepted", "msg.accepted"), ("Forwarded", "msg.forwarded"), ("Delivered here", "msg.delivered"),
                             ("Duplicates dropped", "msg.duplicates"), ("Refused", "msg.refused")] {
            s += "<tr><th scope=\"row\">\(label)</th><td>\(v(key))</td></tr>"
        }
        s += "</tbody></table><h3 class=\"sub\">Refused, by reason</h3><table><tbody>"
        for (i, item) in StatusFormatter.refusedByReason(r.router.counters).enumerated() {
            s += "<tr><th scope=\"row\">\(HTML.esc(item.reason))</th><td>\(v("refused.\(i)"))</td></tr>"
        }
        s += "</tbody></table></section></div>"
        return s
    }

    /// The live update: every field as `{key: [value, text]}`, plus the transport names so the
    /// page reloads itself when a reload added or removed one.
    static func json(_ r: Hub.StatusReport) -> String {
        var obj: [String: [String]] = [:]
        for f in fields(r) { obj[f.key] = [f.value, f.text] }
        struct Update: Encodable { var fields: [String: [String]]; var transports: [String] }
        let data = (try? JSONEncoder().encode(Update(fields: obj, transports: r.transports.map(\.name)))) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
