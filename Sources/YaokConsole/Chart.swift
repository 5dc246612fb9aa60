import Foundation

/// A small line chart as inline SVG over the last hour. Each line is labelled at its right
/// end and has its own dash pattern, so no legend and no colour is needed to tell lines apart;
/// the caption repeats the latest values in words for screen readers.
enum Chart {
    static let width = 640.0, height = 220.0
    static let left = 48.0, right = 96.0, top = 14.0, bottom = 28.0
    static let dashes = ["", "6 4", "2 3", "10 3 2 3", "1 5"]
    static let colours = ["#1b4f9c", "#8a3b00", "#246b2d", "#6b2a7a", "#333333"]

    static func number(_ v: Double) -> String {
        if v == 0 { return "0" }
        if v >= 100 { return String(format: "%.0f", v) }
        if v >= 10 { return String(format: "%.1f", v) }
        return String(format: "%.2f", v)
    }

    static func svg(id: String, title: String, unit: String, series: [(name: String, points: History.Series)],
                    now: Double = Date().timeIntervalSince1970) -> String {
        let span = 3600.0
        let t0 = now - span
        let maxV = max(1, series.flatMap { $0.points.map(\.v) }.max() ?? 1)
        let plotW = width - left - right, plotH = height - top - bottom
        func x(_ t: Double) -> Double { left + max(0, min(1, (t - t0) / span)) * plotW }
        func y(_ v: Double) -> Double { top + plotH - (v / maxV) * plotH }
        var s = "<figure class=\"chart\"><svg id=\"\(id)\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-labelledby=\"\(id)-t\">"
        s += "<title id=\"\(id)-t\">\(HTML.esc(title))</title>"
        // Axes and grid: 0, half and max, with the unit.
        for frac in [0.0, 0.5, 1.0] {
            let yy = y(maxV * frac)
            s += "<line x1=\"\(left)\" y1=\"\(yy)\" x2=\"\(width - right)\" y2=\"\(yy)\" class=\"grid\"/>"
            s += "<text x=\"\(left - 6)\" y=\"\(yy + 4)\" text-anchor=\"end\" class=\"axis\">\(number(maxV * frac))</text>"
        }
        s += "<text x=\"\(left)\" y=\"\(height - 8)\" class=\"axis\">60 min ago</text>"
        s += "<text x=\"\(left + plotW / 2)\" y=\"\(height - 8)\" text-anchor=\"middle\" class=\"axis\">30 min</text>"
        s += "<text x=\"\(width - right)\" y=\"\(height - 8)\" text-anchor=\"end\" class=\"axis\">now · \(HTML.esc(unit))</text>"
        var latest: [String] = []
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
                s += "<text x=\"\(x(last.t) + 6)\" y=\"\(y(last.v) + 4 + Double(i) * 0)\" class=\"label\" fill=\"\(colour)\">\(HTML.esc(line.name))</text>"
                latest.append("\(line.name) \(number(last.v))")
            }
        }
        s += "</svg><figcaption><strong>\(HTML.esc(title)).</strong> "
        s += latest.isEmpty ? "No samples yet: the first appear a sampling interval after the hub starts."
            : "Latest: " + HTML.esc(latest.joined(separator: ", ")) + " \(HTML.esc(unit))."
        return s + "</figcaption></figure>"
    }
}
