import Foundation

/// A config value as the host passes it to a plugin.
public enum ConfigValue: Sendable, Equatable, Codable, CustomStringConvertible {
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case list([ConfigValue])
    case null

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null; return }
        if let v = try? c.decode(Bool.self) { self = .bool(v); return }
        if let v = try? c.decode(Int.self) { self = .int(v); return }
        if let v = try? c.decode(Double.self) { self = .double(v); return }
        if let v = try? c.decode(String.self) { self = .string(v); return }
        self = .list(try c.decode([ConfigValue].self))
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .bool(let v): try c.encode(v)
        case .int(let v): try c.encode(v)
        case .double(let v): try c.encode(v)
        case .string(let v): try c.encode(v)
        case .list(let v): try c.encode(v)
        case .null: try c.encodeNil()
        }
    }

    /// The kind's name, for error messages.
    public var typeName: String {
        switch self {
        case .bool: return "boolean"
        case .int: return "integer"
        case .double: return "number"
        case .string: return "string"
        case .list: return "list"
        case .null: return "null"
        }
    }

    public var description: String {
        switch self {
        case .bool(let v): return String(v)
        case .int(let v): return String(v)
        case .double(let v): return String(v)
        case .string(let v): return "\"\(v)\""
        case .list(let v): return "[" + v.map(\.description).joined(separator: ", ") + "]"
        case .null: return "null"
        }
    }
}

/// A config error that names the key path and, where known, the line in the config file.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Full dotted key path, e.g. `transports.udp.port`.
    public var keyPath: String
    /// 1-based line in the config file, when known.
    public var line: Int?
    /// What is wrong.
    public var message: String
    /// Further errors found in the same file (the host's config check names them all), each
    /// described on a line of its own after this one.
    public var others: [ConfigError] = []

    public init(keyPath: String, line: Int?, message: String) {
        self.keyPath = keyPath
        self.line = line
        self.message = message
    }

    public var description: String {
        let this = line.map { "\(keyPath) (line \($0)): \(message)" } ?? "\(keyPath): \(message)"
        return ([this] + others.map(\.description)).joined(separator: "\n")
    }
}

/// One transport's config section with typed, validated access.
///
/// Every accessor names the full key path and line in its error, so an operator
/// can find the mistake: `transports.udp.port (line 42): expected integer, got string "x"`.
public struct ConfigSection: Sendable, Equatable {
    /// One entry: its value and the line it sits on.
    public struct Entry: Sendable, Equatable, Codable {
        public var line: Int?
        public var value: ConfigValue
        public init(line: Int?, value: ConfigValue) {
            self.line = line
            self.value = value
        }
    }

    /// The section's own path, e.g. `transports.udp`.
    public let path: String
    /// The line of the section's header, when known.
    public let line: Int?
    /// Flattened keys (nested maps as `a.b`) relative to ``path``.
    public let entries: [String: Entry]
    /// Ed25519 keys of the hubs this hub trusts by name (`router.trusted_hubs`), which the
    /// host adds to every section: a transport that keeps a session table may give such a hub,
    /// once it has heard its key, the place of a session with a stranger
    /// (Plugins/Mesh/README.md, "Trusted hubs").
    public var trustedHubKeys: [[UInt8]] = []

    public init(path: String, line: Int? = nil, entries: [String: Entry], trustedHubKeys: [[UInt8]] = []) {
        self.path = path
        self.line = line
        self.entries = entries
        self.trustedHubKeys = trustedHubKeys
    }

    struct Wire: Codable {
        var path: String
        var line: Int?
        var values: [String: Entry]
        var trustedHubs: [String]?

        enum CodingKeys: String, CodingKey {
            case path, line, values
            case trustedHubs = "trusted_hubs"
        }
    }

    /// Decodes the JSON form the host passes across the ABI.
    public init(json: String) throws {
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(json.utf8))
        } catch {
            throw ConfigError(keyPath: "(plugin config)", line: nil, message: "the host passed unreadable config JSON: \(error)")
        }
        let keys = try (wire.trustedHubs ?? []).map { hex in
            guard let key = Hex.decode(hex), key.count == 32 else {
                throw ConfigError(keyPath: "(plugin config)", line: nil, message: "the host passed a trusted hub key that is not 64 hex digits")
            }
            return key
        }
        self.init(path: wire.path, line: wire.line, entries: wire.values, trustedHubKeys: keys)
    }

    /// The JSON form the host passes across the ABI.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let wire = Wire(path: path, line: line, values: entries, trustedHubs: trustedHubKeys.isEmpty ? nil : trustedHubKeys.map { Hex.encode($0) })
        let data = (try? encoder.encode(wire)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// All keys present.
    public var keys: [String] { entries.keys.sorted() }

    /// The full dotted path of a key.
    public func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// The line a key is on, when known.
    public func line(of key: String) -> Int? { entries[key]?.line }

    /// An error about `key`, with its path and line.
    public func error(_ key: String, _ message: String) -> ConfigError {
        ConfigError(keyPath: keyPath(key), line: entries[key]?.line ?? line, message: message)
    }

    /// Rejects keys the plugin does not know, so a typo is an error rather than silently ignored.
    /// `enabled` and `plugin` are always allowed (the host reads them, and `peer_roles`).
    public func rejectUnknownKeys(allowed: Set<String>) throws {
        let hostKeys: Set<String> = ["enabled", "plugin", "peer_roles"]
        for key in keys where !allowed.contains(key) && !hostKeys.contains(key) {
            throw error(key, Self.unknownKeyMessage(key, known: allowed.union(hostKeys)))
        }
    }

    /// "unknown key; did you mean `x`? known keys are: …" — the nearest known key (at most
    /// two edits, or a third of its length) is suggested.
    public static func unknownKeyMessage(_ key: String, known: Set<String>) -> String {
        let list = known.sorted().joined(separator: ", ")
        guard let nearest = known.map({ ($0, editDistance(key, $0)) }).min(by: { ($0.1, $0.0) < ($1.1, $1.0) }),
              nearest.1 <= max(2, nearest.0.count / 3) else { return "unknown key; known keys are: \(list)" }
        return "unknown key; did you mean `\(nearest.0)`? known keys are: \(list)"
    }

    /// Levenshtein distance between two short strings.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(1, b.count) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }

    /// An IPv4 `host:port` (the UDP and mesh transports listen and dial IPv4), with the
    /// address parser's own reason when the text is not one (a port of 99999, a missing port).
    public func ipv4Endpoint(_ key: String, text: String) throws -> IPEndpoint {
        let endpoint: IPEndpoint
        do {
            endpoint = try IPEndpoint.parse(text)
        } catch {
            throw self.error(key, "\(error)")
        }
        guard !endpoint.isIPv6 else { throw self.error(key, "\"\(text)\": expected an IPv4 address here (host:port)") }
        return endpoint
    }

    /// The raw value, or nil when absent or null.
    public func value(_ key: String) -> ConfigValue? {
        guard let v = entries[key]?.value, v != .null else { return nil }
        return v
    }

    private func mismatch(_ key: String, _ expected: String, _ got: ConfigValue) -> ConfigError {
        error(key, "expected \(expected), got \(got.typeName) \(got)")
    }

    /// A string, or `defaultValue` when absent.
    public func string(_ key: String, default defaultValue: String) throws -> String {
        try optionalString(key) ?? defaultValue
    }

    /// A string, or nil when absent.
    public func optionalString(_ key: String) throws -> String? {
        guard let v = value(key) else { return nil }
        guard case .string(let s) = v else { throw mismatch(key, "string", v) }
        return s
    }

    /// A required string.
    public func requiredString(_ key: String) throws -> String {
        guard let s = try optionalString(key) else { throw error(key, "is required") }
        return s
    }

    /// An integer within `range`, or `defaultValue` when absent.
    public func int(_ key: String, default defaultValue: Int, range: ClosedRange<Int>? = nil) throws -> Int {
        guard let v = value(key) else { return defaultValue }
        guard case .int(let i) = v else { throw mismatch(key, "integer", v) }
        if let range, !range.contains(i) {
            throw error(key, "\(i) is out of range \(range.lowerBound)...\(range.upperBound)")
        }
        return i
    }

    /// A number (integer or decimal) within `range`, or `defaultValue` when absent.
    public func double(_ key: String, default defaultValue: Double, range: ClosedRange<Double>? = nil) throws -> Double {
        guard let v = value(key) else { return defaultValue }
        let d: Double
        switch v {
        case .int(let i): d = Double(i)
        case .double(let x): d = x
        default: throw mismatch(key, "number", v)
        }
        if let range, !range.contains(d) {
            throw error(key, "\(d) is out of range \(range.lowerBound)...\(range.upperBound)")
        }
        return d
    }

    /// A boolean, or `defaultValue` when absent.
    public func bool(_ key: String, default defaultValue: Bool) throws -> Bool {
        guard let v = value(key) else { return defaultValue }
        guard case .bool(let b) = v else { throw mismatch(key, "true or false", v) }
        return b
    }

    /// A list of strings, or `defaultValue` when absent.
    public func strings(_ key: String, default defaultValue: [String]) throws -> [String] {
        guard let v = value(key) else { return defaultValue }
        guard case .list(let items) = v else { throw mismatch(key, "list of strings", v) }
        return try items.map { item in
            guard case .string(let s) = item else { throw mismatch(key, "list of strings", item) }
            return s
        }
    }

    /// One of `choices`, or `defaultValue` when absent.
    public func choice(_ key: String, _ choices: [String], default defaultValue: String) throws -> String {
        let s = try string(key, default: defaultValue)
        guard choices.contains(s) else {
            throw error(key, "\"\(s)\" is not one of: \(choices.joined(separator: ", "))")
        }
        return s
    }

    /// A 32-byte key given as 64 hex digits, or nil when absent.
    public func hexKey(_ key: String, bytes: Int = 32) throws -> [UInt8]? {
        guard let s = try optionalString(key) else { return nil }
        guard let decoded = Hex.decode(s), decoded.count == bytes else {
            throw error(key, "expected \(bytes * 2) hex digits")
        }
        return decoded
    }
}
