import Foundation

/// A small line chart as inline SVG over the last hour. Each line is labelled at its right
/// end and has its own dash pattern, so no legend and no colour is needed to tell lines apart;
/// the caption repeats the latest values in words for screen readers.
enum Chart {
    // Drawn small and scaled up to at most 720 px (CSS), so 12 px text stays legible on a 360 px phone.
    static let width = 400.0, height = 200.0
    static let left = 40.0, right = 84.0, top = 12.0, bottom = 26.0
    static let dashes = ["", "6 4", "2 3", "10 3 2 3", "1 5"]
    static let colours = ["#1b4f9c", "#8a3b00", "#246b2d", "#6b2a7a", "#333333"]

    static func number(_ v: Double) -> String {
        if v == 0 { return "0" }
        if v >= 100 { return String(format: "%.0f", v) }
        if v >= 10 { return String(format: "%.1f", v) }
        return String(format: "%.2f", v)
    }

    /// One chart: the figure with its SVG and a caption that says the latest values in words.
    static func svg(id: String, title: String, unit: String, series: [(name: String, points: History.Series)],
                    now: Double = Date().timeIntervalSince1970) -> String {
        let drawn = draw(id: id, title: title, unit: unit, series: series, now: now)
        return "<figure class=\"chart\" id=\"fig-\(id)\">\(drawn.svg)<figcaption><strong>\(HTML.esc(title)).</strong> "
            + "<span class=\"latest\">\(HTML.esc(drawn.latest))</span></figcaption></figure>"
    }

    /// The chart's `<svg>` element (standalone XML, so the page's script can swap in a newer
    /// one parsed as `image/svg+xml`) and the caption's words for its latest values.
    static func draw(id: String, title: String, unit: String, series: [(name: String, points: History.Series)],
                     now: Double = Date().timeIntervalSince1970) -> (svg: String, latest: String) {
        // The hour, or on a younger hub the time since its first sample (whole minutes), so a
        // fresh hub's few points are a line across the chart, not a spike at its right edge.
        let oldest = series.flatMap { $0.points.map(\.t) }.min() ?? now
        let span = min(3600, max(60, ((now - oldest) / 60).rounded(.up) * 60))
        let t0 = now - span
        let minutes = Int(span / 60)
        let maxV = max(1, series.flatMap { $0.points.map(\.v) }.max() ?? 1)
        let plotW = width - left - right, plotH = height - top - bottom
        func x(_ t: Double) -> Double { left + max(0, min(1, (t - t0) / span)) * plotW }
        func y(_ v: Double) -> Double { top + plotH - (v / maxV) * plotH }
        var s = "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"\(id)\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-labelledby=\"\(id)-t\">"
        s += "<title id=\"\(id)-t\">\(HTML.esc(title))</title>"
        // Axes and grid: 0, half and max, with the unit.
        for frac in [0.0, 0.5, 1.0] {
            let yy = y(maxV * frac)
            s += "<line x1=\"\(left)\" y1=\"\(yy)\" x2=\"\(width - right)\" y2=\"\(yy)\" class=\"grid\"/>"
            s += "<text x=\"\(left - 6)\" y=\"\(yy + 4)\" text-anchor=\"end\" class=\"axis\">\(number(maxV * frac))</text>"
        }
        s += "<text x=\"\(left)\" y=\"\(height - 8)\" class=\"axis\">\(minutes) min ago</text>"
        s += "<text x=\"\(left + plotW / 2)\" y=\"\(height - 8)\" text-anchor=\"middle\" class=\"axis mid\">\(minutes % 2 == 0 ? "\(minutes / 2) min" : String(format: "%.1f min", Double(minutes) / 2))</text>"
        s += "<text x=\"\(width - right)\" y=\"\(height - 8)\" text-anchor=\"end\" class=\"axis\">now · \(HTML.esc(unit))</text>"
        var latest: [String] = []
        // End labels sit at their line's last value, pushed apart so that none overlap.
        var labelY: [Int: Double] = [:]
        let ends = series.enumerated().compactMap { i, l in l.points.last(where: { $0.t >= t0 }).map { (i, y($0.v) + 4) } }.sorted { $0.1 < $1.1 }
        var lastY = -Double.infinity
        for (i, yy) in ends { let placed = max(yy, lastY + 14); labelY[i] = placed; lastY = placed }
        for (i, line) in series.enumerated() {
            let pts = line.points.filter { $0.t >= t0 }
            let dash = dashes[i % dashes.count], colour = colours[i % colours.count]
            if pts.count >= 2 {
                let d = pts.map { "\(String(format: "%.1f", x($0.t))),\(String(format: "%.1f", y($0.v)))" }.joined(separator: " ")
                s += "<polyline fill=\"none\" stroke=\"\(colour)\" stroke-width=\"2\"\(dash.isEmpty ? "" : " stroke-dasharray=\"\(dash)\"") points=\"\(d)\"/>"
            } else if let p = pts.first {
                s += "<circle cx=\"\(x(p.t))\" cy=\"\(y(p.v))\" r=\"3\" fill=\"\(colour)\"/>"
            }
            if let last = pts.last {
                s += "<text x=\"\(x(last.t) + 6)\" y=\"\(labelY[i] ?? y(last.v) + 4)\" class=\"label\" fill=\"\(colour)\">\(HTML.esc(line.name))</text>"
                latest.append("\(line.name) \(number(last.v))")
            }
        }
        s += "</svg>"
        let words = latest.isEmpty ? "No samples yet: the first appear a sampling interval after the hub starts."
            : "Latest: " + latest.joined(separator: ", ") + " \(unit)."
        return (s, words)
    }
}
