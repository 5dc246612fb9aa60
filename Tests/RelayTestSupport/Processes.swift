import Foundation
import Synchronization
import YaokTesting

/// Runs a tool to completion (bounded to 60 s), returning status and combined output.
public func runTool(_ exe: String, _ args: [String], stdin: Data? = nil, timeout: TimeInterval = 60) throws -> (Int32, String) {
    try RequiredTool.require(exe, package: ["openssl": "openssl", "bash": "bash"][(exe as NSString).lastPathComponent] ?? "coreutils")
    let result = try Command.run(exe, args, stdin: stdin, timeout: timeout)
    return (result.status, result.output)
}

/// A `yaok` process in the background whose combined output is collected as it runs.
public final class ListenerProcess: Sendable {
    private let process = Process()
    private let done = DispatchSemaphore(value: 0)
    /// Signalled when the output pipe reaches its end (after the exit, the last bytes).
    private let eof = DispatchSemaphore(value: 0)
    /// The output so far, and whether the exit was seen.
    private let state = Mutex((collected: Data(), finished: false))

    public init(_ exe: String, _ args: [String]) throws {
        process.executableURL = URL(fileURLWithPath: exe)
        process.arguments = args
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        pipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let chunk = h.availableData
            guard let self else { return }
            if chunk.isEmpty {
                h.readabilityHandler = nil
                self.eof.signal()
                return
            }
            self.state.withLock { $0.collected.append(chunk) }
        }
        process.terminationHandler = { [weak self] _ in self?.done.signal() }
        try process.run()
    }

    /// Waits (at most `seconds`) for the process to end; whether it did.
    public func exited(within seconds: TimeInterval) -> Bool {
        if state.withLock({ $0.finished }) { return true }
        guard done.wait(timeout: .now() + seconds) == .success else { return false }
        state.withLock { $0.finished = true }
        // The pipe's last bytes may still be on their way after the exit: wait for its end.
        _ = eof.wait(timeout: .now() + 5)
        return true
    }

    /// The exit status; -1 while it still runs (Foundation traps on a running process's status,
    /// which would end the whole test run where an assertion should fail).
    public var status: Int32 { process.isRunning ? -1 : process.terminationStatus }

    public func output() -> String { state.withLock { String(decoding: $0.collected, as: UTF8.self) } }

    public func kill() { if process.isRunning { process.terminate() } }
}
