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
        try checkRootMayWrite(path, named: "password_file", configPath: config, dataDirectory: dataDir)
        let password: String
        if stdin {
            guard let line = readLine(strippingNewline: true) else { throw runtimeFailure("no password on standard input", code: 66) }
            password = line
        } else {
            guard let first = readSecret("New console password: "), let second = readSecret("Again: ") else {
                throw ValidationError("no terminal to ask on: use --stdin")
            }
            guard first == second else { throw runtimeFailure("the two passwords differ; nothing changed", code: 1) }
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
    let cfg = try loadConfigOrExit(path)
    let dataDir = Paths.dataDirectory(configured: cfg.dataDir)
    try Paths.ensureDirectory(dataDir, mode: 0o700)
    return (cfg, dataDir)
}

/// Root writing a console file a config names: when that config is one another user can
/// write (the packaged hub owns its `hub.yaml`, so the console's switch works), the file
/// must land directly in the data directory and that directory must belong to the config's
/// owner. Otherwise a compromised hub could name `/etc/shadow` as its `password_file` and
/// have root replace it. A root-owned config that only root can write is root's own choice.
func checkRootMayWrite(_ file: String, named key: String, configPath: String?, dataDirectory: String) throws {
    guard geteuid() == 0, let configPath else { return }
    var config = stat()
    guard stat(configPath, &config) == 0 else { return }
    guard config.st_uid != 0 || config.st_mode & 0o022 != 0 else { return }
    let parent = ((file as NSString).deletingLastPathComponent as NSString).resolvingSymlinksInPath
    let data = (dataDirectory as NSString).resolvingSymlinksInPath
    var dir = stat()
    guard parent == data, stat(data, &dir) == 0, dir.st_uid == config.st_uid, dir.st_uid != 0 else {
        FileHandle.standardError.write(Data(("yaok-hub: refusing to write \(file) as root: \(configPath) can be written by another user "
            + "(uid \(config.st_uid)), so console.\(key) must name a file directly in hub.data_dir (\(data)), "
            + "and that directory must belong to the same user. Nothing was written.\n").utf8))
        throw ExitCode(1)
    }
}
