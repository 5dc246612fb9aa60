/// An unsolicited wpa_supplicant event: `<level>NAME arg arg key=value key="quoted value"`.
public struct WPAEvent: Sendable, Equatable {
    /// The message level from the `<N>` prefix (2 = INFO, 3 = WARNING ...).
    public var level: Int
    /// The event name, e.g. `P2P-GROUP-STARTED`.
    public var name: String
    /// Words that are not `key=value`, in order.
    public var arguments: [String]
    /// `key=value` words, quotes removed.
    public var fields: [String: String]

    public init(level: Int, name: String, arguments: [String] = [], fields: [String: String] = [:]) {
        self.level = level
        self.name = name
        self.arguments = arguments
        self.fields = fields
    }

    /// Parses one event datagram; nil when it is not `<N>NAME...`.
    public init?(parsing text: String) {
        guard text.hasPrefix("<"), let close = text.firstIndex(of: ">") else { return nil }
        guard let level = Int(text[text.index(after: text.startIndex)..<close]) else { return nil }
        let words = Self.split(String(text[text.index(after: close)...]))
        guard let name = words.first, !name.isEmpty else { return nil }
        self.level = level
        self.name = name
        arguments = []
        fields = [:]
        for word in words.dropFirst() {
            if let eq = word.firstIndex(of: "="), eq != word.startIndex {
                fields[String(word[..<eq])] = String(word[word.index(after: eq)...])
            } else {
                arguments.append(word)
            }
        }
    }

    /// Splits on spaces, keeping `key="a b"` together and dropping the quotes.
    static func split(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        var quoted = false
        for c in text {
            if c == "\"" { quoted.toggle(); continue }
            if (c == " " || c == "\n" || c == "\t") && !quoted {
                if !current.isEmpty { words.append(current); current = "" }
                continue
            }
            current.append(c)
        }
        if !current.isEmpty { words.append(current) }
        return words
    }

    /// The event without secrets, for logs: passphrases and PSKs are masked.
    public var redacted: String {
        let shown = fields.keys.sorted().map { key -> String in
            ["passphrase", "psk", "pin"].contains(key) ? "\(key)=…" : "\(key)=\(fields[key]!)"
        }
        return ([name] + arguments + shown).joined(separator: " ")
    }
}
