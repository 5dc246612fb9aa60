import Foundation
import YaokHubCore
import YaokSupervision
import YaokPluginKit
import YaokQR

/// The pages other than the overview. Each is a pure function of what the hub reports.
enum Pages {
    static func login(hubName: String, csrf: String, message: String?, passwordSet: Bool) -> String {
        var s = "<h1>Log in</h1>"
        if !passwordSet {
            s += "<div class=\"banner warn\" role=\"alert\">No console password is set yet. On the hub, run "
            s += "<code>yaok-hub console-password</code> (with the same <code>--config</code> as the hub), then log in here.</div>"
        }
        if let message { s += "<div class=\"banner bad\" role=\"alert\" id=\"login-error\">\(HTML.esc(message))</div>" }
        s += """
        <form method="post" action="/login" class="login">
        <input type="hidden" name="csrf" value="\(HTML.esc(csrf))">
        <label for="password">Console password</label>
        <input id="password" name="password" type="password" autocomplete="current-password" required maxlength="256" autofocus>
        <button type="submit">Log in</button>
        </form>
        <p class="hint">Forgot it? Set a new one on the hub with <code>yaok-hub console-password</code>.</p>
        """
        return HTML.page(title: "Log in", current: nil, hubName: hubName, csrf: nil, body: s)
    }

    static func time(_ ms: Int64) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// Links: kind, peer role, fingerprint prefix, MTU, up since, frames and bytes received.
    /// The peer appears only as the router's short ID prefix, never a full ID.
    static func links(_ r: Hub.StatusReport, now: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> String {
        var s = "<h1>Links</h1>"
        if r.router.links.isEmpty {
            s += "<p id=\"no-links\">No links are up. Phones and hubs appear here while they are connected.</p>"
            return s
        }
        s += "<div class=\"scroll\" role=\"region\" aria-labelledby=\"links-cap\" tabindex=\"0\"><table class=\"grid\" id=\"links\">"
        s += "<caption id=\"links-cap\">\(r.router.links.count) \(r.router.links.count == 1 ? "link" : "links") up</caption><thead><tr><th scope=\"col\">Kind</th>"
        s += "<th scope=\"col\">Peer role</th><th scope=\"col\">Peer (fingerprint prefix)</th><th scope=\"col\">MTU</th>"
        s += "<th scope=\"col\">Up since</th><th scope=\"col\">Frames in / out</th><th scope=\"col\">Bytes in / out</th><th scope=\"col\">Awaiting ack</th></tr></thead><tbody>"
        for l in r.router.links {
            let role = l.trust.map { "\(l.role) (\($0))" } ?? l.role
            s += "<tr><td data-label=\"Kind\">\(HTML.esc(l.kind))</td><td data-label=\"Peer role\">\(HTML.esc(role))</td>"
            s += "<td data-label=\"Peer\"><code>\(HTML.esc(String(l.peer.prefix(8))))</code></td>"
            s += "<td data-label=\"MTU\">\(l.mtu.map { "\($0) B" } ?? "—")</td>"
            s += "<td data-label=\"Up since\">\(l.upAtMs.map { "<time datetime=\"\(time($0))\">\(StatusFormatter.ago($0, in: r, nowMs: now))</time>" } ?? "—")</td>"
            func count(_ n: Int?) -> String { n.map(String.init) ?? "—" }
            func bytes(_ n: Int?) -> String { n.map { HTML.bytes(UInt64(max(0, $0))) } ?? "—" }
            s += "<td data-label=\"Frames in / out\">\(count(l.framesIn)) / \(count(l.framesOut))</td>"
            s += "<td data-label=\"Bytes in / out\">\(bytes(l.bytesIn)) / \(bytes(l.bytesOut))</td>"
            s += "<td data-label=\"Awaiting ack\">\(l.inFlight)</td></tr>"
        }
        return s + "</tbody></table></div>"
    }

    static func plugins(directories: [String], plugins: [DiscoveredPlugin]) -> String {
        var s = "<h1>Plugins</h1><p>Searched: " + directories.map { "<code>\(HTML.esc($0))</code>" }.joined(separator: ", ") + "</p>"
        if plugins.isEmpty { return s + "<p>No plugin files were found there.</p>" }
        s += "<div class=\"scroll\" role=\"region\" aria-labelledby=\"plugins-cap\" tabindex=\"0\"><table class=\"grid\" id=\"plugins\">"
        s += "<caption id=\"plugins-cap\">\(plugins.filter { $0.state == .loaded }.count) loaded, \(plugins.filter { $0.state == .refused }.count) refused</caption>"
        s += "<thead><tr><th scope=\"col\">State</th><th scope=\"col\">Kind</th><th scope=\"col\">Version</th><th scope=\"col\">ABI</th>"
        s += "<th scope=\"col\">Path</th><th scope=\"col\">Why refused</th></tr></thead><tbody>"
        for p in plugins {
            let loaded = p.state == .loaded
            s += "<tr data-state=\"\(p.state.rawValue)\"><td data-label=\"State\"><span class=\"pill \(loaded ? "ok" : "bad")\"><span aria-hidden=\"true\">\(loaded ? "✓" : "✕")</span> "
            s += "\(loaded ? "Loaded" : "Refused")</span></td><td data-label=\"Kind\">\(HTML.esc(p.kind ?? "?"))</td>"
            s += "<td data-label=\"Version\">\(HTML.esc(p.version ?? "?"))</td><td data-label=\"ABI\">\(p.abiVersion.map(String.init) ?? "?")</td>"
            s += "<td data-label=\"Path\" class=\"path\"><code>\(HTML.esc(p.path))</code></td>"
            s += "<td data-label=\"Why refused\">\(HTML.esc(p.reason ?? (loaded ? "—" : "")))</td></tr>"
        }
        return s + "</tbody></table></div>"
    }

    /// The hub's fingerprint and its contact code as a QR code. The contact code is the hub's
    /// public card (public keys, self-signed): what a phone scans to pin the hub.
    static func identity(fingerprint: String, contact: String?, hubIDPrefix: String) -> String {
        var s = "<h1>Hub identity</h1>"
        s += HTML.facts([("Fingerprint", fingerprint, "identity.fingerprint"), ("Hub ID (start)", hubIDPrefix + "…", nil)])
        guard let contact else {
            return s + "<p>The hub's name cannot go into a contact code (2 to 50 characters), so there is no QR code.</p>"
        }
        do {
            let qr = try QRCode.encode(Array(contact.utf8), level: .medium)
            s += "<figure class=\"qr\">\(qr.svg(title: "Contact QR code of this hub (fingerprint \(fingerprint))"))"
            s += "<figcaption>Scan with the Ya OK app to pin this hub. Compare the fingerprint the app shows with the one above.</figcaption></figure>"
        } catch {
            s += "<p>The contact code does not fit a QR code: \(HTML.esc("\(error)"))</p>"
        }
        return s
    }

    /// One chart of the charts page: what it shows, from the history.
    struct ChartSpec {
        var id, title, unit: String
        var series: [(name: String, points: History.Series)]
    }

    /// The charts page's three charts, and the transports that moved no frame all hour (named,
    /// not drawn: they would only be a flat line on zero).
    static func chartSpecs(_ h: History) -> (charts: [ChartSpec], idle: [String]) {
        let rates = h.frameRates()
        let names = rates.keys.sorted()
        let series: [(name: String, points: History.Series)] = names.filter { n in rates[n]?.contains { $0.v > 0 } == true }
            .map { ($0, rates[$0] ?? []) }
        let idle = names.filter { n in !series.contains { $0.name == n } }
        return ([
            ChartSpec(id: "chart-frames", title: "Frames per second, per transport", unit: "frames/s", series: series),
            ChartSpec(id: "chart-queue", title: "Queue depth (waiting + awaiting acknowledgement)", unit: "messages", series: [("queue", h.queueDepth())]),
            ChartSpec(id: "chart-deliveries", title: "Deliveries per minute", unit: "per min", series: [("delivered", h.deliveriesPerMinute())]),
        ], idle)
    }

    static func idleText(_ idle: [String]) -> String {
        idle.isEmpty ? "" : "No frames in the last hour: \(idle.joined(separator: ", "))."
    }

    static func charts(_ h: History, interval: Double) -> String {
        var s = "<h1>Last hour</h1><p>Sampled every \(Int(interval)) s; the newest point is on the right. "
        s += "<span id=\"live\" role=\"status\">The charts follow new samples while this page is open.</span></p>"
        let specs = chartSpecs(h)
        s += "<p class=\"hint\" id=\"charts-idle\">\(HTML.esc(idleText(specs.idle)))</p><div class=\"charts\">"
        for c in specs.charts { s += Chart.svg(id: c.id, title: c.title, unit: c.unit, series: c.series) }
        return s + "</div>"
    }

    /// The live update of the charts page: each chart's new `<svg>` (drawn and escaped as on the
    /// page) and its caption and the idle line as plain text.
    static func chartsJSON(_ h: History, now: Double = Date().timeIntervalSince1970) -> String {
        struct Drawn: Encodable { var id, svg, latest: String }
        struct Update: Encodable { var charts: [Drawn]; var idle: String }
        let specs = chartSpecs(h)
        let drawn = specs.charts.map { c in
            let d = Chart.draw(id: c.id, title: c.title, unit: c.unit, series: c.series, now: now)
            return Drawn(id: c.id, svg: d.svg, latest: d.latest)
        }
        let data = (try? JSONEncoder().encode(Update(charts: drawn, idle: idleText(specs.idle)))) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
