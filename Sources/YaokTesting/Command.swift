import Foundation
import Synchronization

/// A command run to completion: its exit status and its stdout and stderr, interleaved as written.
public struct CommandResult: Sendable {
    public var status: Int32
    public var output: String
}

/// Runs programs from tests, bounded: never a test that hangs on a child that does not end.
public enum Command {
    /// Runs `executable` with `arguments` to completion and returns its status and combined
    /// output. Its stdin is a pipe holding `stdin` (or nothing), then end of file: a child
    /// never reads the test runner's own input. After `timeout` seconds the
    /// child is terminated and this throws, with the output so far in the error.
    public static func run(_ executable: String, _ arguments: [String], stdin: Data? = nil,
                           environment: [String: String]? = nil, timeout: TimeInterval = 120) throws -> CommandResult {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        if let environment { p.environment = environment }
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        let input = Pipe()
        p.standardInput = input
        let done = DispatchSemaphore(value: 0)
        p.terminationHandler = { _ in done.signal() }
        try p.run()
        if let stdin { input.fileHandleForWriting.write(stdin) }
        try? input.fileHandleForWriting.close()
        // A Mutex, not a plain var: after a timeout the output is read while the reader may
        // still be writing it.
        let output = Mutex(Data())
        let readDone = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            output.withLock { $0 = data }
            readDone.signal()
        }
        if done.wait(timeout: .now() + timeout) == .timedOut {
            p.terminate()
            _ = done.wait(timeout: .now() + 5)
            _ = readDone.wait(timeout: .now() + 5)
            throw CommandError.timedOut(command: ([executable] + arguments).joined(separator: " "), seconds: timeout,
                                        output: String(decoding: output.withLock { $0 }, as: UTF8.self))
        }
        _ = readDone.wait(timeout: .now() + 10)
        return CommandResult(status: p.terminationStatus, output: String(decoding: output.withLock { $0 }, as: UTF8.self))
    }
}

/// Why ``Command/run(_:_:stdin:environment:timeout:)`` gave up.
public enum CommandError: Error, CustomStringConvertible {
    case timedOut(command: String, seconds: TimeInterval, output: String)

    public var description: String {
        switch self {
        case .timedOut(let command, let seconds, let output): "\(command) timed out after \(seconds) s: \(output)"
        }
    }
}
