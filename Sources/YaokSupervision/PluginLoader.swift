import CYaokPlugin
import Foundation
import Synchronization
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

/// A plugin file that passed every check. In the hub it is only a name and a file (the hub
/// never maps plugin code: a probe process checked it); in a plugin process it is also the
/// mapped descriptor, which stays mapped for the life of that process (Swift images cannot be
/// safely unloaded, so nothing calls dlclose).
// @unchecked: immutable; `descriptor` points into a plugin image that is never unloaded.
public final class LoadedPlugin: @unchecked Sendable {
    public let path: String
    public let kind: String
    public let version: String
    /// The file as it was probed (device, inode, size, mtime): a file replaced since is a new plugin.
    public let fileIdentity: String
    let descriptor: UnsafePointer<yaok_plugin_descriptor>?

    /// The argument vector when a standalone program serves the transport (`command:`), not a library.
    public let command: [String]?

    init(path: String, kind: String, version: String, descriptor: UnsafePointer<yaok_plugin_descriptor>?) {
        self.path = path
        self.kind = kind
        self.version = version
        self.descriptor = descriptor
        self.fileIdentity = PluginLoader.fileIdentity(path)
        self.command = nil
    }

    /// A standalone program (`command:`); its version is what its hello says.
    init(command: [String], kind: String) {
        self.path = command.joined(separator: " ")
        self.kind = kind
        self.version = "?"
        self.descriptor = nil
        self.command = command
        self.fileIdentity = Self.identity(of: command)
    }

    /// Every argument naming a file (the program, its script) as it is now: a replaced one is a new program.
    static func identity(of command: [String]) -> String {
        command.filter { FileManager.default.fileExists(atPath: $0) }.map(PluginLoader.fileIdentity).joined(separator: ",")
    }

    /// Whether the file (or, for a program, any file it names) was replaced since it was probed.
    public var isReplaced: Bool { command.map { Self.identity(of: $0) != fileIdentity } ?? false }
}

/// The result of a plugin scan.
public struct PluginCatalog: Sendable {
    public var discovered: [DiscoveredPlugin] = []
    public var loaded: [String: LoadedPlugin] = [:]
    /// Directories scanned, with a refusal reason for unsafe or missing ones.
    public var directories: [(path: String, problem: String?)] = []

    /// What serves a section: its program (`command:`), else the plugin of its kind.
    public func plugin(for section: TransportSection) -> LoadedPlugin? {
        if let command = section.command { return LoadedPlugin(command: command, kind: section.kind) }
        return loaded[section.kind]
    }

    /// Why no plugin serves `kind`: the refusal of a file that claimed it or is named for it
    /// (wrong ABI, permissions, a crash while loading), else where the hub looked.
    public func whyNoPlugin(kind: String, transport: String, searched: [String]) -> String {
        let named = "libyaok-plugin-\(kind).so"
        if let refused = discovered.first(where: { $0.state == .refused && ($0.kind == kind || ($0.path as NSString).lastPathComponent == named) }) {
            return "the plugin for kind \"\(kind)\" was refused: \(refused.path): \(refused.reason ?? "unknown reason")"
        }
        return TransportHostError.noPlugin(transport: transport, kind: kind, searched: searched).description
    }
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

    /// This process's executable (a plugin process is this binary again, and plugins sit beside it).
    public static func executablePath() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }

    /// The default plugin directories: `/usr/lib/yaok-hub/plugins` for an installed binary,
    /// otherwise the directory of the running binary (a development build).
    public static func defaultDirectories(executablePath: String = PluginLoader.executablePath()) -> [String] {
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
            // Each file is opened in its own probe process, all at once: a library that crashes
            // or hangs while loading costs only its probe.
            let paths = names.map { (dir as NSString).appendingPathComponent($0) }
            let probes = Mutex([DiscoveredPlugin?](repeating: nil, count: paths.count))
            DispatchQueue.concurrentPerform(iterations: paths.count) { i in
                let d = probe(path: paths[i])
                probes.withLock { $0[i] = d }
            }
            let probed = probes.withLock { $0 }
            for (path, result) in zip(paths, probed) {
                var found = result ?? DiscoveredPlugin(path: path, state: .refused, reason: "not probed")
                if found.state == .loaded, let kind = found.kind, let other = catalog.loaded[kind] {
                    found.state = .refused
                    found.reason = "duplicate kind \"\(kind)\": already provided by \(other.path)"
                }
                catalog.discovered.append(found)
                if found.state == .loaded, let kind = found.kind {
                    let plugin = LoadedPlugin(path: path, kind: kind, version: found.version ?? "?", descriptor: nil)
                    catalog.loaded[kind] = plugin
                    logger.info("loaded plugin \(plugin.kind) \(plugin.version) from \(path)")
                } else {
                    logger.error("refused plugin \(path): \(found.reason ?? "unknown reason")")
                }
            }
        }
        return catalog
    }

    /// Checks one plugin file in a probe process (`yaok-hub plugin-host --probe`), bounded to 10 s.
    static func probe(path: String) -> DiscoveredPlugin {
        var refused = DiscoveredPlugin(path: path, state: .refused)
        if let problem = ownershipProblem(path: path, isDirectory: false) {
            refused.reason = problem
            return refused
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: PluginProcess.hostExecutable)
        process.arguments = ["plugin-host", "--probe", path]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let done = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in done.signal() }
        do {
            try process.run()
        } catch {
            refused.reason = "cannot run the plugin probe \(PluginProcess.hostExecutable): \(error)"
            return refused
        }
        // Read while it runs (a full pipe would stall it), on threads of their own: a probe
        // whose plugin hangs while loading never closes them, and the wait below must end.
        let captured = Mutex([Data(), Data()])
        let read = DispatchGroup()
        for (i, pipe) in [out, err].enumerated() {
            read.enter()
            Thread.detachNewThread {
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                captured.withLock { $0[i] = data }
                read.leave()
            }
        }
        if done.wait(timeout: .now() + 10) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            refused.reason = "loading it did not finish within 10 s"
            return refused
        }
        _ = read.wait(timeout: .now() + 2)
        if process.terminationReason == .uncaughtSignal {
            let last = String(decoding: captured.withLock { $0[1] }, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? ""
            refused.reason = "loading it crashed the probe process (\(PluginProcess.Exit.signalName(process.terminationStatus)))\(last.isEmpty ? "" : ": \(last)")"
            return refused
        }
        guard let found = try? JSONDecoder().decode(DiscoveredPlugin.self, from: captured.withLock { $0[0] }) else {
            refused.reason = "the plugin probe gave no answer (exit code \(process.terminationStatus))"
            return refused
        }
        return found
    }

    /// Device, inode, size and modification time of a file: changes when the file is replaced or rewritten.
    static func fileIdentity(_ path: String) -> String {
        var st = stat()
        guard stat(path, &st) == 0 else { return "" }
        return "\(st.st_dev):\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
    }

    /// Loads one plugin file into this process, or explains why not (plugin and probe processes only).
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
