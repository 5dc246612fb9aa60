#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Errors running helper programs (wpa_supplicant, dnsmasq, ip).
public enum ChildProcessError: Error, Sendable, Equatable, CustomStringConvertible {
    case binaryMissing(path: String, hint: String)
    case launchFailed(path: String, reason: String)
    case exited(program: String, status: Int32, output: String)
    case timeout(program: String, seconds: Double)

    public var description: String {
        switch self {
        case .binaryMissing(let path, let hint): return "\(path) does not exist or is not executable (\(hint))"
        case .launchFailed(let path, let reason): return "cannot start \(path): \(reason)"
        case .exited(let program, let status, let output):
            return "\(program) exited with status \(status)" + (output.isEmpty ? "" : ": \(output)")
        case .timeout(let program, let seconds): return "\(program) did not finish within \(seconds) s"
        }
    }
}

/// A long-running helper (wpa_supplicant, dnsmasq) started by the plugin: output goes to a log
/// file in the runtime directory; stopped with SIGTERM, then SIGKILL.
// @unchecked: only `let`s; the Foundation `Process` is launched in init and after only queried and signalled.
public final class ChildProcess: @unchecked Sendable {
    public let executable: String
    public let logPath: String
    private let process = Process()

    /// Starts `executable` with `arguments`; its stdout and stderr go to `logPath` (truncated).
    public init(executable: String, arguments: [String], logPath: String, hint: String) throws {
        self.executable = executable
        self.logPath = logPath
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ChildProcessError.binaryMissing(path: executable, hint: hint)
        }
        guard FileManager.default.createFile(atPath: logPath, contents: nil, attributes: [.posixPermissions: 0o600]),
              let log = FileHandle(forWritingAtPath: logPath) else {
            throw ChildProcessError.launchFailed(path: executable, reason: "cannot write its log \(logPath)")
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch {
            throw ChildProcessError.launchFailed(path: executable, reason: "\(error)")
        }
        try? log.close()
    }

    /// Records our child's pid in `path`, so a later start can end it if this process died
    /// without stopping it (a crashed hub must not leave a supplicant holding the radio).
    /// False if the file could not be written: only the clean-up after a crash of this process is lost.
    @discardableResult
    public func writePIDFile(_ path: String) -> Bool {
        FileManager.default.createFile(atPath: path, contents: Data("\(pid)\n".utf8), attributes: [.posixPermissions: 0o600])
    }

    /// Ends the process named in `pidFile` if it is still running and its command name is
    /// `command` (so a recycled pid of an unrelated process is never touched). Returns the pid it ended.
    @discardableResult
    public static func endStale(pidFile: String, command: String, grace: Double = 1.0) -> Int32? {
        guard let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 1 else { return nil }
        defer { unlink(pidFile) }
        guard let comm = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8),
              comm.trimmingCharacters(in: .whitespacesAndNewlines) == command else { return nil }
        kill(pid, SIGTERM)
        let deadline = Date().addingTimeInterval(grace)
        while kill(pid, 0) == 0 && Date() < deadline {
            // A zombie (our own child, not yet reaped) counts as gone.
            if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), stat.contains(") Z ") { break }
            usleep(20_000)
        }
        if kill(pid, 0) == 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), !stat.contains(") Z ") {
            kill(pid, SIGKILL)
        }
        return pid
    }

    public var isRunning: Bool { process.isRunning }
    public var pid: Int32 { process.processIdentifier }
    public var exitStatus: Int32? { process.isRunning ? nil : process.terminationStatus }

    /// The last lines of its log, for error messages.
    public func logTail(lines: Int = 5) -> String {
        guard let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return "" }
        return text.split(separator: "\n").suffix(lines).joined(separator: " | ")
    }

    /// SIGTERM, wait up to `grace` seconds, then SIGKILL.
    public func stop(grace: Double = 1.0) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(grace)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            // Bounded: a child that changed its user (dnsmasq drops to nobody) cannot be signalled
            // without CAP_KILL, and the caller must not hang on it.
            let end = Date().addingTimeInterval(2)
            while process.isRunning && Date() < end { usleep(20_000) }
        }
    }

    /// Runs a short command to completion (e.g. `ip addr add`); throws with its output on failure.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String], timeout: Double = 5) throws -> String {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ChildProcessError.binaryMissing(path: executable, hint: "install iproute2")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        do { try p.run() } catch { throw ChildProcessError.launchFailed(path: executable, reason: "\(error)") }
        let deadline = Date().addingTimeInterval(timeout)
        while p.isRunning && Date() < deadline { usleep(5_000) }
        if p.isRunning {
            p.terminate()
            throw ChildProcessError.timeout(program: ([executable] + arguments).joined(separator: " "), seconds: timeout)
        }
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard p.terminationStatus == 0 else {
            throw ChildProcessError.exited(program: ([URL(fileURLWithPath: executable).lastPathComponent] + arguments).joined(separator: " "),
                                           status: p.terminationStatus, output: out)
        }
        return out
    }
}
