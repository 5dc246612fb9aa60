import Foundation

/// Where the hub keeps its files when the config leaves it to the hub.
public enum Paths {
    /// The data directory: the config's, else systemd's `$STATE_DIRECTORY`, else
    /// `/var/lib/yaok-hub` for root, else `$XDG_DATA_HOME/yaok-hub` (or `~/.local/share/yaok-hub`).
    public static func dataDirectory(configured: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let configured { return configured }
        if let state = environment["STATE_DIRECTORY"], !state.isEmpty {
            return state.split(separator: ":").first.map(String.init) ?? state
        }
        if geteuid() == 0 { return "/var/lib/yaok-hub" }
        if let xdg = environment["XDG_DATA_HOME"], !xdg.isEmpty { return xdg + "/yaok-hub" }
        return (environment["HOME"] ?? NSTemporaryDirectory()) + "/.local/share/yaok-hub"
    }

    /// The control socket: the config's, else `$RUNTIME_DIRECTORY/control.sock`, else
    /// `/run/yaok-hub/control.sock` for root, else `control.sock` in the data directory.
    public static func controlSocket(configured: String?, dataDirectory: String,
                                     environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let configured { return configured }
        if let runtime = environment["RUNTIME_DIRECTORY"], !runtime.isEmpty {
            return (runtime.split(separator: ":").first.map(String.init) ?? runtime) + "/control.sock"
        }
        if geteuid() == 0 { return "/run/yaok-hub/control.sock" }
        return dataDirectory + "/control.sock"
    }

    /// The hub's SQLCipher store inside its data directory.
    public static func storeFile(dataDirectory: String) -> String { resolve("store.db", in: dataDirectory) }

    /// Resolves `path` against `base` unless it is absolute.
    public static func resolve(_ path: String, in base: String) -> String {
        path.hasPrefix("/") ? path : (base as NSString).appendingPathComponent(path)
    }

    /// Creates a directory (and parents) with the given mode if missing.
    public static func ensureDirectory(_ path: String, mode: mode_t = 0o750) throws {
        if !FileManager.default.fileExists(atPath: path) {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: NSNumber(value: mode)])
        }
    }
}
