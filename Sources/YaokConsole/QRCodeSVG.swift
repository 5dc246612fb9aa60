import YaokQR

extension QRCode {
    /// The symbol as SVG for the identity page: one path of unit squares with the quiet zone
    /// (no image library, no script).
    func svg(title: String) -> String {
        let q = Self.quietZone
        let full = size + 2 * q
        var d = ""
        for y in 0..<size {
            var x = 0
            while x < size {
                if isDark(x: x, y: y) {
                    var run = 1
                    while x + run < size && isDark(x: x + run, y: y) { run += 1 }
                    d += "M\(x + q) \(y + q)h\(run)v1h-\(run)z"
                    x += run
                } else { x += 1 }
            }
        }
        return "<svg class=\"qrcode\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(full) \(full)\" role=\"img\" aria-label=\"\(HTML.esc(title))\" shape-rendering=\"crispEdges\">"
            + "<rect width=\"\(full)\" height=\"\(full)\" fill=\"#fff\"/><path fill=\"#000\" d=\"\(d)\"/></svg>"
    }
}
