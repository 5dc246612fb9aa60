import ArgumentParser
import Foundation
import Logging
import YaokConsole
import YaokHubCore
import YaokSupervision
import YaokPluginKit
import YaokProcess

/// sysexits.h EX_CONFIG: what systemd and operators expect for a bad config.
let exitConfigError: Int32 = 78

struct YaokHubCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "yaok-hub",
        abstract: "Ya OK Hub: the field node of the Ya OK delay-tolerant messenger.",
        subcommands: [Run.self, CheckConfig.self, Status.self, Plugins.self, IdentityCommand.self, DefaultConfigCommand.self] + extraSubcommands,
        defaultSubcommand: Run.self)
}

struct ConfigOption: ParsableArguments {
    @Option(name: .shortAndLong, help: "Config file (default: the embedded default config).")
    var config: String?

    /// The config, or exit with EX_CONFIG and the reason on stderr.
    func loadOrExit() throws -> HubConfig { try loadConfigOrExit(config) }
}

/// The config at `path` (the embedded default without one), or exit with EX_CONFIG and the
/// reason on stderr: what every command that works on a hub's files does with a bad config.
func loadConfigOrExit(_ path: String?) throws -> HubConfig {
    do {
        return try path.map { try HubConfig.load(path: $0) } ?? DefaultConfig.load()
    } catch {
        FileHandle.standardError.write(Data("yaok-hub: bad config: \(error)\n".utf8))
        throw ExitCode(exitConfigError)
    }
}

func makeLogger(level: String) -> Logger {
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = Logger.Level(rawValue: level) ?? .info
        return handler
    }
    return Logger(label: "yaok-hub")
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the hub until SIGTERM (SIGHUP reloads the config).")
    @OptionGroup var options: ConfigOption

    func run() throws {
        let config = try options.loadOrExit()
        let logger = makeLogger(level: config.logLevel)
        for w in config.warnings { logger.warning("config: \(w)") }
        let hub: Hub
        do {
            hub = try Hub(config: config, logger: logger)
            hub.installSignalHandlers()
            try hub.start()
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(1)
        }
        // The console is optional like metrics: a port in use is logged, the hub runs on. A
        // reload applies a changed `console:` section.
        let console = ConsoleRunner(backend: HubConsoleBackend(hub: hub, logger: logger), dataDirectory: hub.dataDirectory, logger: logger)
        console.apply(config.console)
        hub.onReload { console.apply($0.console) }
        hub.runUntilSignalled()
        console.stop()
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config", abstract: "Validate a config file, including every enabled transport's section.")
    @Argument(help: "The config file.") var file: String
    @Flag(help: "Only check the file's syntax and host keys, not the plugins' sections.") var skipPlugins = false

    func run() throws {
        let config: HubConfig
        do {
            config = try HubConfig.load(path: file)
        } catch let e as ConfigError {
            // Every wrong key, one line each, in file order.
            for one in [e] + e.others {
                var alone = one
                alone.others = []
                print("\(file): \(alone)")
            }
            if !e.others.isEmpty { print("\(file): \(e.others.count + 1) errors") }
            throw ExitCode(exitConfigError)
        } catch {
            print("\(file): \(error)")
            throw ExitCode(exitConfigError)
        }
        var logger = Logger(label: "yaok-hub")
        logger.logLevel = .critical
        for w in config.warnings { print("\(file): warning: \(w)") }
        let problems = skipPlugins ? [] : ConfigCheck.checkTransports(config, logger: logger)
        for p in problems { print("\(file): \(p)") }
        if !problems.isEmpty { throw ExitCode(exitConfigError) }
        let enabled = config.transports.filter(\.enabled).map(\.name)
        print("\(file): OK (\(config.transports.count) transports, enabled: \(enabled.joined(separator: ", ")))")
    }
}

struct ClientOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: "Config file used to find the control socket.") var config: String?
    @Option(help: "Control socket path (overrides the config).") var socket: String?
    @Flag(help: "Print JSON for scripts.") var json = false

    func client() throws -> ControlClient {
        if let socket { return ControlClient(path: socket) }
        let cfg = try config.map { try HubConfig.load(path: $0) } ?? DefaultConfig.load()
        let data = Paths.dataDirectory(configured: cfg.dataDir)
        return ControlClient(path: Paths.controlSocket(configured: cfg.controlSocket, dataDirectory: data))
    }

    func request(_ command: String) throws -> Data {
        do {
            return try client().request(command)
        } catch {
            FileHandle.standardError.write(Data("yaok-hub: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show each transport's state, links and counters, and the message queue.")
    @OptionGroup var options: ClientOptions

    func run() throws {
        let data = try options.request("status")
        if options.json { print(String(decoding: data, as: UTF8.self)); return }
        let report = try JSONDecoder().decode(Hub.StatusReport.self, from: data)
        print(StatusFormatter.text(report))
    }
}

struct Plugins: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List discovered plugins: kind, version, ABI, path, loaded or refused and why.")
    @OptionGroup var options: ClientOptions

    func run() throws {
        let data = try options.request("plugins")
        if options.json { print(String(decoding: data, as: UTF8.self)); return }
        struct Plugins: Codable { var directories: [String]; var plugins: [DiscoveredPlugin]; var hostABI: UInt32 }
        let p = try JSONDecoder().decode(Plugins.self, from: data)
        print("host ABI \(p.hostABI); directories: \(p.directories.joined(separator: ", "))")
        for d in p.plugins {
            let head = "\(d.kind ?? "?") \(d.version ?? "?") (ABI \(d.abiVersion.map(String.init) ?? "?"))"
            print("\(d.state == .loaded ? "loaded " : "REFUSED") \(head)  \(d.path)")
            if let reason = d.reason { print("        \(reason)") }
        }
    }
}

struct IdentityCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "identity", abstract: "Show the hub's ID and fingerprint.")
    @OptionGroup var options: ClientOptions

    func run() throws {
        let data = try options.request("identity")
        if options.json { print(String(decoding: data, as: UTF8.self)); return }
        let obj = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
        print("hub ID       \(obj["id"] ?? "?")")
        print("fingerprint  \(obj["fingerprint"] ?? "?")")
        print("signing key  \(obj["signingKey"] ?? "?")   (phones pin it: yaok --trust-hub KEY)")
    }
}

struct DefaultConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "default-config", abstract: "Print the embedded default config.")
    func run() throws { print(DefaultConfig.yaml) }
}

// Only the commands that read signals through SignalWaiter install its handlers, before any
// thread exists (signals then reach only its thread); every other command keeps the default
// dispositions, so Ctrl-C and SIGTERM stop it (under SignalWaiter's handlers they would be
// written to a pipe nobody reads).
do {
    signal(SIGPIPE, SIG_IGN)   // for every command: a closed socket is an error, not a death
    var command = try YaokHubCommand.parseAsRoot()
    if command is Run || command is ATTServeCommand { SignalWaiter.installEarly() }
    try command.run()
} catch {
    YaokHubCommand.exit(withError: error)
}
