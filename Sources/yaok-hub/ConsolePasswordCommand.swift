import ArgumentParser
import Foundation
import YaokConsole
import YaokHubCore

/// `yaok-hub console-password`: sets the operator console's password (Argon2id hash, 0600).
struct ConsolePasswordCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console-password",
        abstract: "Set the operator console's password (stored as an Argon2id hash, mode 0600).",
        discussion: "Reads the password twice from the terminal, or once from standard input with --stdin. Logged-in browsers stay logged in until they log out or the hub restarts.")
    @Option(name: .shortAndLong, help: "Config file (default: the embedded default config).") var config: String?
    @Flag(help: "Read the password from standard input (one line) instead of asking.") var stdin = false

    func run() throws {
        let (cfg, dataDir) = try consoleConfig(config)
        let path = Paths.resolve(cfg.console.passwordFile, in: dataDir)
        let password: String
        if stdin {
            guard let line = readLine(strippingNewline: true) else { throw ValidationError("no password on standard input") }
            password = line
        } else {
            guard let first = readSecret("New console password: "), let second = readSecret("Again: ") else {
                throw ValidationError("no terminal to ask on: use --stdin")
            }
            guard first == second else { throw ValidationError("the two passwords differ; nothing changed") }
            password = first
        }
        do {
            try PasswordFile.write(hash: PasswordFile.hash(password), path: path)
        } catch {
            FileHandle.standardError.write(Data("yaok-hub: \(error); nothing changed\n".utf8))
            throw ExitCode(1)
        }
        print("console password set (\(path), mode 0600)")
    }

    /// A line from the terminal without echo (getpass is obsolete but does exactly this).
    private func readSecret(_ prompt: String) -> String? {
        guard isatty(0) == 1, let p = getpass(prompt) else { return nil }
        return String(cString: p)
    }
}

/// The config a console verb works on (the embedded default without `--config`; a bad one
/// exits with EX_CONFIG) and its data directory, made 0700 if absent.
func consoleConfig(_ path: String?) throws -> (HubConfig, String) {
    let cfg: HubConfig
    do { cfg = try path.map { try HubConfig.load(path: $0) } ?? DefaultConfig.load() } catch {
        FileHandle.standardError.write(Data("yaok-hub: bad config: \(error)\n".utf8))
        throw ExitCode(exitConfigError)
    }
    let dataDir = Paths.dataDirectory(configured: cfg.dataDir)
    try Paths.ensureDirectory(dataDir, mode: 0o700)
    return (cfg, dataDir)
}
