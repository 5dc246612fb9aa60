import Foundation

/// HTML building blocks. Everything that comes from the hub, a plugin or a config file is
/// escaped here: a plugin's reason string is as untrusted as any network byte.
enum HTML {
    static func esc(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for c in s.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default:
                // Control characters other than tab/newline never belong on the page.
                if c.value < 0x20 && c != "\t" && c != "\n" { out += "\u{FFFD}" } else { out.unicodeScalars.append(c) }
            }
        }
        return out
    }

    /// The pages in the navigation, in order.
    static let pages: [(path: String, title: String)] = [
        ("/", "Overview"), ("/charts", "Charts"), ("/links", "Links"), ("/plugins", "Plugins"), ("/identity", "Identity"),
    ]

    /// A whole page: header with navigation and logout (when logged in), then `body` in `<main>`.
    static func page(title: String, current: String?, hubName: String, csrf: String?, live: String? = nil, body: String) -> String {
        var nav = ""
        if let csrf {
            nav = "<nav aria-label=\"Console pages\"><ul>"
            for p in pages {
                let cur = p.path == current ? " aria-current=\"page\"" : ""
                nav += "<li><a href=\"\(p.path)\"\(cur)>\(p.title)</a></li>"
            }
            nav += "</ul></nav><form class=\"logout\" method=\"post\" action=\"/logout\"><input type=\"hidden\" name=\"csrf\" value=\"\(esc(csrf))\">"
            nav += "<button type=\"submit\">Log out</button></form>"
        }
        return """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(esc(title)) · \(esc(hubName)) · Ya OK Hub</title>
        <link rel="icon" href="/assets/icon.svg" type="image/svg+xml">
        <link rel="stylesheet" href="/assets/console.css">
        <script src="/assets/console.js" defer></script>
        </head><body\(live.map { " data-live=\"\(esc($0))\"" } ?? "")>
        <a class="skip" href="#main">Skip to content</a>
        <header><div class="brand"><img src="/assets/icon.svg" alt="" width="28" height="28"><span>Ya OK Hub</span>
        <span class="hubname">\(esc(hubName))</span></div>\(nav)</header>
        <main id="main" tabindex="-1">\(body)</main>
        </body></html>
        """
    }

    /// A definition list from (label, value, field key).
    static func facts(_ rows: [(label: String, value: String, field: String?)]) -> String {
        var s = "<dl class=\"facts\">"
        for r in rows {
            let f = r.field.map { " data-field=\"\(esc($0))\"" } ?? ""
            s += "<div><dt>\(esc(r.label))</dt><dd\(f)>\(esc(r.value))</dd></div>"
        }
        return s + "</dl>"
    }

    static func bytes(_ n: UInt64) -> String {
        if n < 1000 { return "\(n) B" }
        let units = ["kB", "MB", "GB", "TB"]
        var v = Double(n) / 1000
        var i = 0
        while v >= 1000 && i < units.count - 1 { v /= 1000; i += 1 }
        return String(format: v < 10 ? "%.1f %@" : "%.0f %@", v, units[i])
    }
}
