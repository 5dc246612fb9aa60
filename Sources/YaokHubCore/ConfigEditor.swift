import Foundation
import Yams
import YaokPluginKit

/// Edits one value in the config file in place — keeping every comment, blank line and the
/// order of keys — and replaces the file atomically. Used by the operator console's
/// transport toggle; the caller then reloads exactly as SIGHUP does.
public enum ConfigEditor {
    /// Why an edit was refused; the file is unchanged in every case.
    public enum EditError: Error, Sendable, CustomStringConvertible {
        /// The edited text would not be a valid config (the key path and line say where).
        case invalid(ConfigError)
        /// The transport's own section would be refused by its plugin (`check-config`'s words).
        case refusedByPlugin(String)
        /// The file cannot be read, has no such key, or is laid out so that a one-line edit is not safe.
        case cannotEdit(String)

        public var description: String {
            switch self {
            case .invalid(let e): return "\(e)"
            case .refusedByPlugin(let s): return s
            case .cannotEdit(let s): return s
            }
        }
    }

    /// The text with `transports.<name>.enabled` set to `enabled`, validated as a whole config.
    /// Only the value on that key's line changes; a comment after it stays.
    public static func settingTransport(_ name: String, enabled: Bool, in text: String, source: String) throws -> (text: String, config: HubConfig) {
        // The current file must parse: an edit on top of a broken file would hide its error.
        let current: HubConfig
        do { current = try HubConfig.parse(yaml: text, source: source) } catch let e as ConfigError { throw EditError.invalid(e) }
        guard current.transport(named: name) != nil else { throw EditError.cannotEdit("there is no transport section named \(name)") }
        guard let line = try enabledLine(transport: name, in: text) else {
            throw EditError.cannotEdit("transports.\(name).enabled is not on a line of its own; edit the file by hand")
        }
        var lines = text.components(separatedBy: "\n")
        let index = line - 1
        guard lines.indices.contains(index) else { throw EditError.cannotEdit("transports.\(name).enabled: line \(line) is past the end of the file") }
        let pattern = #"^(\s*enabled\s*:\s*)(true|false|True|False|TRUE|FALSE)(\s*(#.*)?)$"#
        let old = lines[index]
        guard let regex = try? NSRegularExpression(pattern: pattern),
              let match = regex.firstMatch(in: old, range: NSRange(old.startIndex..., in: old)),
              let head = Range(match.range(at: 1), in: old), let tail = Range(match.range(at: 3), in: old) else {
            throw EditError.cannotEdit("transports.\(name).enabled (line \(line)) is not a plain `enabled: true|false` line; edit the file by hand")
        }
        lines[index] = String(old[head]) + (enabled ? "true" : "false") + String(old[tail])
        let edited = lines.joined(separator: "\n")
        do {
            let config = try HubConfig.parse(yaml: edited, source: source)
            guard config.transport(named: name)?.enabled == enabled else {
                throw EditError.cannotEdit("transports.\(name).enabled (line \(line)): the edit did not take; edit the file by hand")
            }
            return (edited, config)
        } catch let e as ConfigError {
            throw EditError.invalid(e)
        }
    }

    /// The 1-based line of `transports.<name>.enabled`'s value, if it is a plain scalar on its key's line.
    static func enabledLine(transport name: String, in text: String) throws -> Int? {
        guard let root = try Yams.compose(yaml: text), let transports = root["transports"], let section = transports[name] else { return nil }
        guard case .mapping(let mapping) = section else { return nil }
        for (key, value) in mapping where key.string == "enabled" {
            guard case .scalar = value, let keyLine = key.mark?.line, value.mark?.line == keyLine else { return nil }
            return keyLine
        }
        return nil
    }

    /// Sets `transports.<name>.enabled` in the file at `path`: the new text is checked as a whole
    /// config, and (when switching on) the transport's section by its plugin as `check-config`
    /// does, before the file is replaced by an atomic rename that keeps its mode and owner.
    public static func setTransport(_ name: String, enabled: Bool, path: String, checkPlugin: (HubConfig) -> [String]) throws -> HubConfig {
        // Two switches at once (two browsers) must not both read the old text and lose one edit.
        editLock.lock()
        defer { editLock.unlock() }
        let text: String
        do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
            throw EditError.cannotEdit("cannot read \(path): \(error.localizedDescription)")
        }
        let (edited, config) = try settingTransport(name, enabled: enabled, in: text, source: path)
        if enabled {
            var only = config
            only.transports = config.transports.filter { $0.name == name }
            let problems = checkPlugin(only)
            if !problems.isEmpty { throw EditError.refusedByPlugin(problems.joined(separator: "; ")) }
        }
        try replaceAtomically(path: path, with: Data(edited.utf8))
        return config
    }

    /// One edit at a time in this process: see ``setTransport(_:enabled:path:checkPlugin:)``.
    private static let editLock = NSLock()

    /// Writes a sibling temporary file (same mode and owner as the original), syncs it, renames
    /// it over `path` and syncs the directory: a crash leaves the old file or the new one.
    ///
    /// The temporary name is `.<name>.console-<pid>-<random>.tmp`, created with O_EXCL (which
    /// also refuses a symlink planted there) and tried again under a new name if it exists:
    /// neither a file left by a crash in an earlier process with the same PID nor one that
    /// another writer of the directory created can block or redirect the edit. It is removed
    /// on every failure. The packaged hub runs as the file's owner in a sticky directory
    /// (Docs/operations.md): its chown to its own user and group is skipped; if the file
    /// belongs to someone else and the chown is refused, the edit is refused rather than
    /// silently handing the file to the hub's user.
    static func replaceAtomically(path: String, with data: Data) throws {
        var st = stat()
        guard stat(path, &st) == 0 else { throw EditError.cannotEdit("cannot stat \(path): \(String(cString: strerror(errno)))") }
        let dir = (path as NSString).deletingLastPathComponent
        let base = (dir.isEmpty ? "." : dir) + "/." + (path as NSString).lastPathComponent + ".console-\(getpid())-"
        var tmp = ""
        var fd: Int32 = -1
        for _ in 0..<8 {
            tmp = base + String(UInt64.random(in: 0...UInt64.max), radix: 16) + ".tmp"
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0o7777)
            if fd >= 0 || errno != EEXIST { break }
        }
        guard fd >= 0 else { throw EditError.cannotEdit("cannot write next to \(path): \(String(cString: strerror(errno)))") }
        func fail(_ what: String) -> EditError {
            let why = String(cString: strerror(errno))
            close(fd)
            unlink(tmp)
            return EditError.cannotEdit("\(what) \(path): \(why)")
        }
        let written = data.withUnsafeBytes { buf -> Bool in
            var off = 0
            while off < buf.count {
                let n = write(fd, buf.baseAddress! + off, buf.count - off)
                if n < 0 { if errno == EINTR { continue }; return false }
                off += n
            }
            return true
        }
        guard written else { throw fail("cannot write the new") }
        // Owner first (a chown by a non-root user clears set-id bits), then the mode, which
        // the process's umask narrowed at open.
        if st.st_uid != geteuid() || st.st_gid != getegid() {
            guard fchown(fd, st.st_uid, st.st_gid) == 0 else { throw fail("cannot keep the owner (uid \(st.st_uid), gid \(st.st_gid)) of") }
        }
        guard fchmod(fd, st.st_mode & 0o7777) == 0 else { throw fail("cannot keep the mode of") }
        guard fsync(fd) == 0 else { throw fail("cannot sync the new") }
        close(fd)
        guard rename(tmp, path) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(tmp)
            throw EditError.cannotEdit("cannot replace \(path): \(why)")
        }
        let dfd = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { _ = fsync(dfd); close(dfd) }
    }
}
