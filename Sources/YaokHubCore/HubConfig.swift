import Foundation
import Yams
import YaokPluginKit
import YaokRouting
import YaokSupervision
import YaokWire

/// The hub's configuration, read from one YAML file.
///
/// YAML because operators edit it by hand in the field and it carries comments;
/// every key's line is kept so an error can name the key path and line.
public struct HubConfig: Sendable, Equatable {
    /// Where the config came from: a path, or `(embedded default)`.
    public var source: String
    public var hubName: String
    /// Data directory; `nil` means automatic (see ``Paths``).
    public var dataDir: String?
    /// Identity key file; relative paths are inside the data directory.
    public var identityFile: String
    /// Plugin directories; empty means the default (next to the binary, or `/usr/lib/yaok-hub/plugins`).
    public var pluginDirs: [String]
    /// Control socket path; `nil` means automatic.
    public var controlSocket: String?
    public var logLevel: String
    public var store: StoreSettings
    public var router: RouterSettings
    public var metrics: MetricsSettings
    /// The operator console (`console:`; Docs/console.md).
    public var console = ConsoleSettings()
    /// `clock:` — whether to believe and to set the system clock (Docs/protocol.md, clock).
    public var clock = ClockSettings()
    /// Transport sections in file order.
    public var transports: [TransportSection]
    /// What is valid but unwise, each naming its key and line (`check-config` prints them, the
    /// hub logs them at start).
    public var warnings: [String] = []

    public struct StoreSettings: Sendable, Equatable {
        /// Database key file (0600); relative paths are inside the data directory.
        public var keyFile: String
        public var sizeCapBytes: Int64
        public var vacuumIntervalMs: Int64
    }

    public struct RouterSettings: Sendable, Equatable {
        /// `epidemic` or `spray-and-wait`.
        public var policy: String
        /// Copies a source hub may hand out under spray-and-wait.
        public var sprayCopies: Int
        /// Hop limit stamped on bundles this hub originates for attached endpoints.
        public var hopLimit: Int
        /// Frames per second accepted from one link before dropping.
        public var linkFramesPerSecond: Int
        /// Envelopes per minute accepted from one sender key.
        public var senderEnvelopesPerMinute: Int
        /// How long to wait for a custody acknowledgement before retrying.
        public var custodyTimeoutMs: Int64
        /// Longest envelope lifetime (`expires − created`) accepted; at most 7 days.
        public var maxTTLMs: Int64 = EnvelopeLifetime.protocolMaxTTLMs
        /// How far ahead of our clock an envelope's `created` may be.
        public var clockSkewMs: Int64 = EnvelopeLifetime.defaultClockSkewMs
        /// Which hub peers are trusted and what the others get (`router.hub_trust` and friends).
        public var hubTrust = HubTrustSettings()
    }

    public typealias HubTrustSettings = YaokRouting.HubTrustSettings

    public struct ClockSettings: Sendable, Equatable {
        public var trustSystemClock: HubTime.SystemClockTrust = .auto
        public var setSystemClock = false
        public init(trustSystemClock: HubTime.SystemClockTrust = .auto, setSystemClock: Bool = false) {
            self.trustSystemClock = trustSystemClock
            self.setSystemClock = setSystemClock
        }
    }

    public struct MetricsSettings: Sendable, Equatable {
        public var enabled: Bool
        public var listen: String
    }

    /// `console:` — the operator console, a web page served by the hub.
    public struct ConsoleSettings: Sendable, Equatable {
        /// Off unless the config says `enabled: true` (the packaged config does).
        public var enabled = false
        /// Address and port; 127.0.0.1 unless the operator chooses another address.
        public var listen = "127.0.0.1:8480"
        /// The Argon2id password hash file (`yaok-hub console-password`); relative to data_dir.
        public var passwordFile = "console.pass"
        /// Minutes a login lasts without use.
        public var sessionMinutes = 30
        /// Seconds between the samples behind the charts, which always span one hour.
        public var sampleIntervalSeconds = 10
        /// Serve HTTPS with `tlsCertificate` and `tlsKey` (made self-signed when both are absent).
        public var tls = false
        /// The certificate chain (PEM) and its private key (PEM, 0600); relative to data_dir.
        public var tlsCertificate = "console-tls.crt"
        public var tlsKey = "console-tls.key"

        public init(enabled: Bool = false, listen: String = "127.0.0.1:8480", passwordFile: String = "console.pass",
                    sessionMinutes: Int = 30, sampleIntervalSeconds: Int = 10,
                    tls: Bool = false, tlsCertificate: String = "console-tls.crt", tlsKey: String = "console-tls.key") {
            self.enabled = enabled; self.listen = listen; self.passwordFile = passwordFile
            self.sessionMinutes = sessionMinutes; self.sampleIntervalSeconds = sampleIntervalSeconds
            self.tls = tls; self.tlsCertificate = tlsCertificate; self.tlsKey = tlsKey
        }
    }

    public typealias TransportSection = YaokSupervision.TransportSection

    /// Looks up a transport section by name.
    public func transport(named name: String) -> TransportSection? { transports.first { $0.name == name } }
}

extension HubConfig {
    /// Reads and validates a config file.
    public static func load(path: String) throws -> HubConfig {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigError(keyPath: "(file)", line: nil, message: "cannot read \(path): \(error.localizedDescription)")
        }
        return try parse(yaml: text, source: path)
    }

    /// Parses and validates config text.
    public static func parse(yaml: String, source: String) throws -> HubConfig {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch let error as YamlError {
            throw ConfigError(keyPath: "(yaml)", line: yamlErrorLine(error), message: "YAML syntax error: \(yamlErrorSummary(error))")
        } catch {
            throw ConfigError(keyPath: "(yaml)", line: nil, message: "YAML syntax error: \(error)")
        }
        guard let root else { throw ConfigError(keyPath: "(root)", line: nil, message: "the config file is empty") }
        let top = try MappingReader(node: root, path: "")
        // A wrong value is recorded and its default used, so every wrong key is named at once.
        let problems = ConfigProblems()
        problems.record(top.unknownKeys(["hub", "store", "router", "clock", "metrics", "console", "transports"]))

        let hub = problems.take { try top.mapping("hub") }
        problems.record(hub?.unknownKeys(["name", "data_dir", "identity_file", "plugin_dirs", "control_socket", "log_level"]))
        let store = problems.take { try top.mapping("store") }
        problems.record(store?.unknownKeys(["key_file", "size_cap_mb", "vacuum_interval_h"]))
        let router = problems.take { try top.mapping("router") }
        problems.record(router?.unknownKeys(["policy", "spray_copies", "hop_limit", "link_frames_per_second", "sender_envelopes_per_minute", "custody_timeout_s",
                                  "max_ttl_h", "clock_skew_s", "hub_trust", "trusted_hubs", "network_key", "hub_certificate"]))
        let clock = problems.take { try top.mapping("clock") }
        problems.record(clock?.unknownKeys(["trust_system_clock", "set_system_clock"]))
        let metrics = problems.take { try top.mapping("metrics") }
        problems.record(metrics?.unknownKeys(["enabled", "listen"]))
        let console = problems.take { try top.mapping("console") }
        problems.record(console?.unknownKeys(["enabled", "listen", "password_file", "session_minutes", "sample_interval_s", "tls", "tls_certificate", "tls_key"]))
        if let listen = (try? console?.string("listen")) ?? nil, !Self.isHostPort(listen) {
            problems.record(console!.error("listen", "expected host:port (e.g. 127.0.0.1:8480 or [::1]:8480), got \"\(listen)\""))
        }

        var config = HubConfig(
            source: source,
            hubName: problems.take { try hub?.string("name") } ?? "yaok-hub",
            dataDir: problems.take { try hub?.string("data_dir").flatMap { $0.isEmpty ? nil : $0 } },
            identityFile: problems.take { try hub?.string("identity_file") } ?? "identity.key",
            pluginDirs: problems.take { try hub?.strings("plugin_dirs") } ?? [],
            controlSocket: problems.take { try hub?.string("control_socket").flatMap { $0.isEmpty ? nil : $0 } },
            logLevel: problems.take { try hub?.choice("log_level", ["trace", "debug", "info", "notice", "warning", "error", "critical"]) } ?? "info",
            store: StoreSettings(
                keyFile: problems.take { try store?.string("key_file") } ?? "store.key",
                sizeCapBytes: Int64(problems.take { try store?.int("size_cap_mb", range: 1...1_000_000) } ?? 500) * 1_000_000,
                vacuumIntervalMs: Int64(problems.take { try store?.int("vacuum_interval_h", range: 1...8760) } ?? 24) * 3_600_000),
            router: RouterSettings(
                policy: problems.take { try router?.choice("policy", ["epidemic", "spray-and-wait"]) } ?? "epidemic",
                sprayCopies: problems.take { try router?.int("spray_copies", range: 1...64) } ?? 4,
                hopLimit: problems.take { try router?.int("hop_limit", range: 1...255) } ?? 10,
                linkFramesPerSecond: problems.take { try router?.int("link_frames_per_second", range: 1...1_000_000) } ?? 2000,
                senderEnvelopesPerMinute: problems.take { try router?.int("sender_envelopes_per_minute", range: 1...1_000_000) } ?? 600,
                custodyTimeoutMs: Int64(problems.take { try router?.int("custody_timeout_s", range: 1...3600) } ?? 30) * 1000,
                maxTTLMs: Int64(problems.take { try router?.int("max_ttl_h", range: 1...168) } ?? 168) * 3_600_000,
                clockSkewMs: Int64(problems.take { try router?.int("clock_skew_s", range: 0...604_800) } ?? 604_800) * 1000,
                hubTrust: problems.take { try router.map(hubTrust) } ?? HubTrustSettings()),
            metrics: MetricsSettings(
                enabled: problems.take { try metrics?.bool("enabled") } ?? false,
                listen: problems.take { try metrics?.string("listen") } ?? "127.0.0.1:9478"),
            console: ConsoleSettings(
                enabled: problems.take { try console?.bool("enabled") } ?? false,
                listen: problems.take { try console?.string("listen") } ?? "127.0.0.1:8480",
                passwordFile: problems.take { try console?.string("password_file").flatMap { $0.isEmpty ? nil : $0 } } ?? "console.pass",
                sessionMinutes: problems.take { try console?.int("session_minutes", range: 1...1440) } ?? 30,
                sampleIntervalSeconds: problems.take { try console?.int("sample_interval_s", range: 1...60) } ?? 10,
                tls: problems.take { try console?.bool("tls") } ?? false,
                tlsCertificate: problems.take { try console?.string("tls_certificate").flatMap { $0.isEmpty ? nil : $0 } } ?? "console-tls.crt",
                tlsKey: problems.take { try console?.string("tls_key").flatMap { $0.isEmpty ? nil : $0 } } ?? "console-tls.key"),
            transports: [])
        if config.console.enabled, !config.console.tls, !Self.isLoopback(hostPort: config.console.listen) {
            let line = console?.entry("listen")?.1.map { " (line \($0))" } ?? ""
            config.warnings.append("console.listen\(line): \(config.console.listen) without `tls: true`: the console's password and session "
                + "cross the network in clear; set `tls: true`, or listen on 127.0.0.1 and reach it with `ssh -L 8480:127.0.0.1:8480`")
        }
        config.clock = ClockSettings(
            trustSystemClock: HubTime.SystemClockTrust(rawValue: problems.take { try clock?.choice("trust_system_clock", HubTime.SystemClockTrust.allCases.map(\.rawValue)) } ?? "auto") ?? .auto,
            setSystemClock: problems.take { try clock?.bool("set_system_clock") } ?? false)

        if let transports = problems.take({ try top.mapping("transports") }) {
            var kinds: [String: String] = [:]
            // A section's first error is recorded and the next section read.
            for (name, node, line) in transports.pairs { do {
                let path = "transports.\(name)"
                guard case .mapping = node else {
                    throw ConfigError(keyPath: path, line: line, message: "expected a mapping with at least `enabled: true|false`")
                }
                var entries: [String: ConfigSection.Entry] = [:]
                try flatten(node, prefix: "", path: path, into: &entries)
                // Host-level keys are taken out before the plugin sees the section.
                let rolesEntry = entries.removeValue(forKey: "peer_roles")
                let memoryEntry = entries.removeValue(forKey: "memory_limit_mb")
                let capabilitiesEntry = entries.removeValue(forKey: "capabilities")
                let commandEntry = entries.removeValue(forKey: "command")
                let section = ConfigSection(path: path, line: line, entries: entries)
                guard section.value("enabled") != nil else {
                    throw section.error("enabled", "is required (true or false)")
                }
                let enabled = try section.bool("enabled", default: false)
                let kind = try section.string("plugin", default: name)
                guard kind.range(of: "^[a-z0-9][a-z0-9_-]{0,31}$", options: .regularExpression) != nil else {
                    throw section.error(section.value("plugin") == nil ? "enabled" : "plugin",
                                        "plugin kind \"\(kind)\" must be 1-32 lower-case letters, digits, '-' or '_'")
                }
                kinds[name] = kind
                let roles = try peerRoles(rolesEntry, path: path, kind: kind)
                var memory = TransportSection.defaultMemoryLimitMB
                if let memoryEntry {
                    guard case .int(let mb) = memoryEntry.value, mb == 0 || (64...65_536).contains(mb) else {
                        throw ConfigError(keyPath: "\(path).memory_limit_mb", line: memoryEntry.line,
                                          message: "expected a whole number of MB from 64 to 65536, or 0 for no limit")
                    }
                    memory = mb
                }
                var capabilities = TransportSection.defaultCapabilities(kind: kind)
                if let capabilitiesEntry {
                    guard case .list(let items) = capabilitiesEntry.value else {
                        throw ConfigError(keyPath: "\(path).capabilities", line: capabilitiesEntry.line,
                                          message: "expected a list of capabilities: \(TransportSection.capabilityNumbers.keys.sorted().joined(separator: ", ")) (or [])")
                    }
                    capabilities = []
                    for item in items {
                        guard case .string(let name) = item, TransportSection.capabilityNumbers[name] != nil else {
                            throw ConfigError(keyPath: "\(path).capabilities", line: capabilitiesEntry.line,
                                              message: "unknown capability \(item); known: \(TransportSection.capabilityNumbers.keys.sorted().joined(separator: ", "))")
                        }
                        capabilities.append(name)
                    }
                }
                var command: [String]?
                if let commandEntry {
                    let problem = "expected the program and its arguments as a list of strings, the program an absolute path, e.g. [/usr/bin/python3, /etc/yaok-hub/transport.py]"
                    guard case .list(let items) = commandEntry.value, !items.isEmpty else {
                        throw ConfigError(keyPath: "\(path).command", line: commandEntry.line, message: problem)
                    }
                    command = try items.map { item in
                        guard case .string(let s) = item, !s.isEmpty, !s.contains("\0") else {
                            throw ConfigError(keyPath: "\(path).command", line: commandEntry.line, message: problem)
                        }
                        return s
                    }
                    guard command![0].hasPrefix("/") else {
                        throw ConfigError(keyPath: "\(path).command", line: commandEntry.line,
                                          message: "the program \"\(command![0])\" must be an absolute path (the hub does not search PATH)")
                    }
                }
                config.transports.append(TransportSection(name: name, kind: kind, enabled: enabled, peerRoles: roles, section: section,
                                                          memoryLimitMB: memory, capabilities: capabilities, command: command))
            } catch { problems.record(error) } }
        }
        try problems.throwIfAny()
        // Transports that keep a session table let a trusted hub displace a stranger.
        for i in config.transports.indices { config.transports[i].section.trustedHubKeys = config.router.hubTrust.trustedHubs }
        return config
    }

    /// The roles a transport kind accepts when `peer_roles` is absent: hubs on the
    /// hub-to-hub transports (mesh, LoRa), phones everywhere else. A hub link over UDP (or
    /// any other phone-facing transport) must be configured with `peer_roles: [endpoint, hub]`.
    public static func defaultPeerRoles(kind: String) -> Set<PeerRole> {
        kind == "mesh" || kind == "lora" ? [.hub] : [.endpoint]
    }

    static func peerRoles(_ entry: ConfigSection.Entry?, path: String, kind: String) throws -> Set<PeerRole> {
        guard let entry else { return defaultPeerRoles(kind: kind) }
        let keyPath = "\(path).peer_roles"
        guard case .list(let items) = entry.value, !items.isEmpty else {
            throw ConfigError(keyPath: keyPath, line: entry.line, message: "expected a non-empty list of roles: endpoint, hub")
        }
        var roles = Set<PeerRole>()
        for item in items {
            switch item {
            case .string("endpoint"): roles.insert(.endpoint)
            case .string("hub"): roles.insert(.hub)
            case .string("relay"):
                throw ConfigError(keyPath: keyPath, line: entry.line,
                                  message: "the relay role is not listed here: it is honoured only from the relay pinned by `relay_key`")
            default:
                throw ConfigError(keyPath: keyPath, line: entry.line, message: "\"\(item)\" is not a role; use endpoint and/or hub")
            }
        }
        return roles
    }

    static func hubTrust(_ router: MappingReader) throws -> HubTrustSettings {
        var t = HubTrustSettings()
        if let mode = try router.choice("hub_trust", ["open", "list", "network"]) { t.mode = HubTrustSettings.Mode(rawValue: mode) ?? .open }
        if let keys = try router.strings("trusted_hubs") {
            t.trustedHubs = try keys.map { hex in
                guard let key = Self.hexKey(hex) else {
                    throw router.error("trusted_hubs", "\"\(hex.prefix(70))\" is not an Ed25519 public key (64 hex digits)")
                }
                return key
            }
        }
        if let hex = try router.string("network_key"), !hex.isEmpty {
            guard let key = Self.hexKey(hex) else { throw router.error("network_key", "expected an Ed25519 public key (64 hex digits)") }
            t.networkKey = key
        }
        t.certificateFile = try router.string("hub_certificate").flatMap { $0.isEmpty ? nil : $0 }
        if t.mode == .network && t.networkKey == nil {
            throw router.error(router.entry("hub_trust") != nil ? "hub_trust" : "network_key", "hub_trust: network needs `network_key`")
        }
        return t
    }

    /// 64 hex digits (either case) as 32 bytes.
    /// `host:port` or `[v6]:port` with a port 0–65535 (0: any free port, for tests).
    /// Whether `host:port` names this machine only (127.0.0.0/8, ::1, localhost).
    static func isLoopback(hostPort s: String) -> Bool {
        guard let colon = s.lastIndex(of: ":") else { return false }
        let host = s[..<colon].trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    static func isHostPort(_ s: String) -> Bool {
        guard let colon = s.lastIndex(of: ":"), let port = Int(s[s.index(after: colon)...]), (0...65535).contains(port) else { return false }
        let host = s[..<colon]
        return !host.isEmpty && !host.contains(" ")
    }

    /// A 32-byte key as 64 hex digits.
    static func hexKey(_ s: String) -> [UInt8]? {
        guard s.utf8.count == 64, let key = Hex.decode(s), key.count == 32 else { return nil }
        return key
    }

    /// Flattens nested mappings into dotted keys, keeping each value's line.
    static func flatten(_ node: Node, prefix: String, path: String, into entries: inout [String: ConfigSection.Entry]) throws {
        guard case .mapping(let mapping) = node else { return }
        for (keyNode, valueNode) in mapping {
            guard let key = keyNode.string else {
                throw ConfigError(keyPath: path, line: keyNode.mark?.line, message: "keys must be strings")
            }
            let full = prefix.isEmpty ? key : "\(prefix).\(key)"
            if case .mapping = valueNode {
                try flatten(valueNode, prefix: full, path: path, into: &entries)
            } else {
                entries[full] = ConfigSection.Entry(line: keyNode.mark?.line, value: try configValue(valueNode, path: "\(path).\(full)"))
            }
        }
    }

    /// Converts a YAML node to a plugin config value, resolving scalar types.
    static func configValue(_ node: Node, path: String) throws -> ConfigValue {
        switch node {
        case .scalar(let scalar):
            switch ScalarKind(node) {
            case .null: return .null
            case .bool: return .bool(node.bool ?? false)
            case .int: return .int(node.int ?? 0)
            case .float: return .double(node.float ?? 0)
            case .string, .none: return .string(scalar.string)
            }
        case .sequence(let sequence):
            return .list(try sequence.map { try configValue($0, path: path) })
        case .mapping:
            throw ConfigError(keyPath: path, line: node.mark?.line, message: "a mapping is not allowed inside a list here")
        @unknown default:
            throw ConfigError(keyPath: path, line: node.mark?.line, message: "unsupported YAML node")
        }
    }

    static func yamlErrorLine(_ error: YamlError) -> Int? {
        switch error {
        case .scanner(_, _, let mark, _), .parser(_, _, let mark, _), .composer(_, _, let mark, _):
            return mark.line
        default:
            return nil
        }
    }

    static func yamlErrorSummary(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, _, _), .parser(_, let problem, _, _), .composer(_, let problem, _, _):
            return problem
        default:
            return String(describing: error)
        }
    }
}

/// The errors one parse found: a wrong value is recorded and its default used, so
/// `check-config` names every wrong key at once, in file order.
final class ConfigProblems {
    private var errors: [ConfigError] = []

    /// The value `read` returns, or nil (and its error recorded) when it throws.
    func take<T>(_ read: () throws -> T?) -> T? {
        do { return try read() } catch { record(error); return nil }
    }

    func record(_ error: Error) {
        errors.append(error as? ConfigError ?? ConfigError(keyPath: "(config)", line: nil, message: "\(error)"))
    }

    func record(_ found: [ConfigError]?) { errors += found ?? [] }

    /// Throws the first error (by line) with the others attached, if any was found.
    func throwIfAny() throws {
        let sorted = errors.enumerated().sorted { ($0.element.line ?? .max, $0.offset) < ($1.element.line ?? .max, $1.offset) }.map(\.element)
        guard var first = sorted.first else { return }
        first.others = Array(sorted.dropFirst())
        throw first
    }
}

/// Typed reading of one YAML mapping, with key-path-and-line errors.
struct MappingReader {
    let path: String
    let line: Int?
    let pairs: [(String, Node, Int?)]

    init(node: Node, path: String) throws {
        guard case .mapping(let mapping) = node else {
            throw ConfigError(keyPath: path.isEmpty ? "(root)" : path, line: node.mark?.line, message: "expected a mapping")
        }
        self.path = path
        self.line = node.mark?.line
        var pairs: [(String, Node, Int?)] = []
        var seen = Set<String>()
        for (k, v) in mapping {
            guard let key = k.string else {
                throw ConfigError(keyPath: path, line: k.mark?.line, message: "keys must be strings")
            }
            guard seen.insert(key).inserted else {
                throw ConfigError(keyPath: Self.join(path, key), line: k.mark?.line, message: "duplicate key")
            }
            pairs.append((key, v, k.mark?.line))
        }
        self.pairs = pairs
    }

    static func join(_ a: String, _ b: String) -> String { a.isEmpty ? b : "\(a).\(b)" }

    func entry(_ key: String) -> (Node, Int?)? {
        pairs.first { $0.0 == key }.map { ($0.1, $0.2) }
    }

    func error(_ key: String, _ message: String) -> ConfigError {
        ConfigError(keyPath: Self.join(path, key), line: entry(key)?.1 ?? line, message: message)
    }

    /// An error for each key not in `keys`.
    func unknownKeys(_ keys: Set<String>) -> [ConfigError] {
        pairs.filter { !keys.contains($0.0) }.map { error($0.0, ConfigSection.unknownKeyMessage($0.0, known: keys)) }
    }

    func mapping(_ key: String) throws -> MappingReader? {
        guard let (node, _) = entry(key) else { return nil }
        if ScalarKind(node) == .null { return nil }
        return try MappingReader(node: node, path: Self.join(path, key))
    }

    func scalar(_ key: String) -> Node? {
        guard let (node, _) = entry(key) else { return nil }
        if ScalarKind(node) == .null { return nil }
        return node
    }

    func string(_ key: String) throws -> String? {
        guard let node = scalar(key) else { return nil }
        guard case .scalar(let s) = node else { throw error(key, "expected a string") }
        return s.string
    }

    func int(_ key: String, range: ClosedRange<Int>) throws -> Int? {
        guard let node = scalar(key) else { return nil }
        guard ScalarKind(node) == .int, let v = node.int else { throw error(key, "expected an integer, got \"\(node.string ?? "?")\"") }
        guard range.contains(v) else { throw error(key, "\(v) is out of range \(range.lowerBound)...\(range.upperBound)") }
        return v
    }

    func bool(_ key: String) throws -> Bool? {
        guard let node = scalar(key) else { return nil }
        guard ScalarKind(node) == .bool, let v = node.bool else { throw error(key, "expected true or false, got \"\(node.string ?? "?")\"") }
        return v
    }

    func strings(_ key: String) throws -> [String]? {
        guard let node = scalar(key) else { return nil }
        guard case .sequence(let seq) = node else { throw error(key, "expected a list of strings") }
        return try seq.map { item in
            guard case .scalar(let s) = item else { throw error(key, "expected a list of strings") }
            return s.string
        }
    }

    func choice(_ key: String, _ choices: [String]) throws -> String? {
        guard let s = try string(key) else { return nil }
        guard choices.contains(s) else { throw error(key, "\"\(s)\" is not one of: \(choices.joined(separator: ", "))") }
        return s
    }
}

/// The type of a YAML scalar: quoted scalars are strings; plain ones are resolved
/// by the YAML 1.2 core schema's patterns (null, bool, decimal or hex int, float)
/// before falling back to string. Not YAML 1.1's: there `0.0.0.0:7811` is a
/// base-60 integer and `no` is false, which surprises operators.
enum ScalarKind: Equatable {
    case null, bool, int, float, string

    init?(_ node: Node) {
        guard case .scalar(let scalar) = node else { return nil }
        if scalar.style == .singleQuoted || scalar.style == .doubleQuoted || scalar.style == .literal || scalar.style == .folded {
            self = .string
        } else if ["", "~", "null", "Null", "NULL"].contains(scalar.string) {
            self = .null
        } else if ["true", "false", "True", "False", "TRUE", "FALSE"].contains(scalar.string) {
            self = .bool
        } else if scalar.string.range(of: #"^[-+]?([0-9]+|0x[0-9a-fA-F]+)$"#, options: .regularExpression) != nil, node.int != nil {
            self = .int
        } else if scalar.string.range(of: #"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"#, options: .regularExpression) != nil, node.float != nil {
            self = .float
        } else {
            self = .string
        }
    }
}
