import Foundation
import YaokTesting

/// `yaok-rnode-sim` as tests run it: a process with its devices in a directory of its own
/// (`path(k)` is what a hub's `device:` names), commands on its stdin, its lines read as
/// they come.
public final class RNodeSimulator {
    public let dir: String
    public let process = Process()
    public let lines: OutputLines
    private let input = Pipe()
    private let output = Pipe()
    private var finished = false

    /// Starts it with `arguments` (`--devices N`, `--range`, `--loss`, faults) and waits for `ready`.
    public init(_ arguments: [String]) throws {
        dir = NSTemporaryDirectory() + "rnode-sim-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: BuildProducts.directory(containing: "yaok-rnode-sim") + "/yaok-rnode-sim")
        process.arguments = ["--dir", dir] + arguments
        process.standardInput = input
        process.standardOutput = output
        lines = OutputLines(output.fileHandleForReading)
        try process.run()
        guard lines.wait(for: "ready") else {
            finish()
            throw NSError(domain: "yaok-rnode-sim", code: 1, userInfo: [NSLocalizedDescriptionKey: "yaok-rnode-sim never said ready"])
        }
    }

    deinit { finish() }

    /// Device `k`'s serial path.
    public func path(_ k: Int) -> String { dir + "/rnode\(k)" }

    /// One command line: `unplug K`, `plug K`, `garbage K`.
    public func command(_ line: String) throws { try input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8)) }

    /// Ends the emulator (once) and waits for it; its last line (`stats …`) is then in `lines`.
    public func finish() {
        guard !finished else { return }
        finished = true
        try? command("quit")
        _ = lines.wait(for: "stats", timeout: 5)
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// The lines a process prints, read as they come.
public final class OutputLines: @unchecked Sendable {
    private let lock = NSCondition()
    private var text = ""

    public init(_ handle: FileHandle) {
        handle.readabilityHandler = { [weak self] h in
            let data = h.availableData
            guard let self, !data.isEmpty else { h.readabilityHandler = nil; return }
            self.lock.lock()
            self.text += String(decoding: data, as: UTF8.self)
            self.lock.broadcast()
            self.lock.unlock()
        }
    }

    /// Everything printed so far.
    public var all: String { lock.withLock { text } }

    /// Whether a line starting with `prefix` was printed within `timeout` seconds.
    public func wait(for prefix: String, timeout: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock()
        defer { lock.unlock() }
        while !text.split(separator: "\n").contains(where: { $0.hasPrefix(prefix) }) {
            guard lock.wait(until: deadline) else { return false }
        }
        return true
    }
}
