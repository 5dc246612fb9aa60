import CYaokPlugin
import Foundation
import Logging

/// What `yaok-hub plugins` shows for one plugin file.
public struct DiscoveredPlugin: Sendable, Codable, Equatable {
    public enum State: String, Sendable, Codable { case loaded, refused }
    public var path: String
    public var kind: String?
    public var version: String?
    public var abiVersion: UInt32?
    public var summary: String?
    public var state: State
    /// Why it was refused.
    public var reason: String?
}

/// A plugin library that passed every check and stays mapped for the life of the process.
///
/// Swift images cannot be safely unloaded, so the host never calls dlclose.
public final class LoadedPlugin: @unchecked Sendable {
    public let path: String
    public let kind: String
    public let version: String
    let descriptor: UnsafePointer<yaok_plugin_descriptor>

    init(path: String, kind: String, version: String, descriptor: UnsafePointer<yaok_plugin_descriptor>) {
        self.path = path
        self.kind = kind
        self.version = version
        self.descriptor = descriptor
    }
}

/// The result of a plugin scan.
public struct PluginCatalog: Sendable {
    public var discovered: [DiscoveredPlugin] = []
    public var loaded: [String: LoadedPlugin] = [:]
    /// Directories scanned, with a refusal reason for unsafe or missing ones.
    public var directories: [(path: String, problem: String?)] = []
}

/// Finds, checks and loads transport plugins (`libyaok-plugin-*.so`).
///
/// Every refusal is one log line and never stops the other plugins: missing entry
/// symbol, ABI mismatch (both versions printed), duplicate kind, and files or
/// directories that someone other than root or the service user could modify.
public enum PluginLoader {
    /// File names the loader considers: `libyaok-plugin-<name>.so`.
    public static func isPluginFileName(_ name: String) -> Bool {
        name.hasPrefix("libyaok-plugin-") && name.hasSuffix(".so")
    }

    /// The default plugin directories: `/usr/lib/yaok-hub/plugins` for an installed binary,
    /// otherwise the directory of the running binary (a development build).
    public static func defaultDirectories(executablePath: String = Paths.executablePath()) -> [String] {
        let dir = (executablePath as NSString).deletingLastPathComponent
        if dir == "/usr/bin" || dir == "/usr/sbin" || dir.hasPrefix("/usr/lib/yaok-hub") {
            return ["/usr/lib/yaok-hub/plugins"]
        }
        return [dir]
    }

    /// Checks that a plugin file or directory can only be changed by root or this process's user.
    public static func ownershipProblem(path: String, isDirectory: Bool) -> String? {
        var st = stat()
        guard stat(path, &st) == 0 else { return "cannot stat \(path): \(String(cString: strerror(errno)))" }
        let what = isDirectory ? "directory" : "file"
        let mode = st.st_mode & 0o7777
        if mode & 0o022 != 0 {
            return "\(what) \(path) is writable by group or others (mode \(String(mode, radix: 8))); run chmod go-w"
        }
        let me = geteuid()
        if st.st_uid != 0 && st.st_uid != me {
            return "\(what) \(path) is owned by uid \(st.st_uid), not root or the service user (uid \(me))"
        }
        return nil
    }

    /// Scans `directories` in order and loads every acceptable plugin.
    public static func scan(directories: [String], logger: Logger) -> PluginCatalog {
        var catalog = PluginCatalog()
        for dir in directories {
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir), isDir.boolValue else {
                catalog.directories.append((dir, "does not exist"))
                logger.warning("plugin directory \(dir) does not exist")
                continue
            }
            if let problem = ownershipProblem(path: dir, isDirectory: true) {
                catalog.directories.append((dir, problem))
                logger.error("refusing plugin directory: \(problem)")
                continue
            }
            catalog.directories.append((dir, nil))
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter(isPluginFileName).sorted()
            for name in names {
                let path = (dir as NSString).appendingPathComponent(name)
                let result = load(path: path, existing: catalog.loaded)
                catalog.discovered.append(result.discovered)
                if let plugin = result.plugin {
                    catalog.loaded[plugin.kind] = plugin
                    logger.info("loaded plugin \(plugin.kind) \(plugin.version) from \(path)")
                } else {
                    logger.error("refused plugin \(path): \(result.discovered.reason ?? "unknown reason")")
                }
            }
        }
        return catalog
    }

    /// Loads one plugin file, or explains why not.
    static func load(path: String, existing: [String: LoadedPlugin]) -> (discovered: DiscoveredPlugin, plugin: LoadedPlugin?) {
        var found = DiscoveredPlugin(path: path, state: .refused)
        func refuse(_ reason: String) -> (DiscoveredPlugin, LoadedPlugin?) {
            found.reason = reason
            return (found, nil)
        }
        if let problem = ownershipProblem(path: path, isDirectory: false) { return refuse(problem) }
        // RTLD_NOW: a plugin needing a symbol the host lacks fails here, cleanly, not later.
        // RTLD_LOCAL: plugins do not see each other's symbols.
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            return refuse("dlopen failed: \(String(cString: dlerror()))")
        }
        guard let symbol = dlsym(handle, YAOK_PLUGIN_ENTRY_SYMBOL) else {
            return refuse("missing entry symbol \(YAOK_PLUGIN_ENTRY_SYMBOL); is this a Ya OK transport plugin?")
        }
        let entry = unsafeBitCast(symbol, to: yaok_plugin_entry_fn.self)
        guard let raw = entry() else { return refuse("entry symbol returned no descriptor") }
        // Read only the first two fields until the version is known to match.
        let header = UnsafeRawPointer(raw)
        let abi = header.load(as: UInt32.self)
        let size = header.load(fromByteOffset: 4, as: UInt32.self)
        found.abiVersion = abi
        guard abi == YAOK_PLUGIN_ABI_VERSION else {
            return refuse("ABI mismatch: plugin has ABI version \(abi), this hub has ABI version \(YAOK_PLUGIN_ABI_VERSION); rebuild the plugin against this hub's YaokPluginAPI")
        }
        guard Int(size) >= MemoryLayout<yaok_plugin_descriptor>.size else {
            return refuse("descriptor is \(size) bytes, ABI version \(abi) needs \(MemoryLayout<yaok_plugin_descriptor>.size)")
        }
        let d = raw.pointee
        guard let kindPtr = d.kind else { return refuse("descriptor has no kind") }
        let kind = String(cString: kindPtr)
        let version = d.version.map { String(cString: $0) } ?? "?"
        found.kind = kind
        found.version = version
        found.summary = d.description.map { String(cString: $0) }
        guard d.create != nil, d.start != nil, d.stop != nil, d.send != nil, d.status_json != nil,
              d.free_string != nil, d.destroy != nil else {
            return refuse("descriptor is missing a function pointer")
        }
        guard kind.range(of: "^[a-z0-9][a-z0-9_-]{0,31}$", options: .regularExpression) != nil else {
            return refuse("kind \"\(kind)\" is not a valid plugin kind")
        }
        if let other = existing[kind] {
            return refuse("duplicate kind \"\(kind)\": already provided by \(other.path)")
        }
        found.state = .loaded
        return (found, LoadedPlugin(path: path, kind: kind, version: version, descriptor: raw))
    }
}
