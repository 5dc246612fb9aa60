import Foundation
import YaokCrypto

/// One relay node of a benchmark: a real `yaok-relay run` process (the same binary as the
/// benchmark), so its memory is its own and can be read from `/proc/PID/status`. Its stderr
/// goes to `node.log` in its data directory; the startup lines it prints on stdout give its
/// ports and key.
final class RelayBenchmarkNode {
    let index: Int
    let dataDir: String
    let process = Process()
    private(set) var port = 0
    private(set) var wssPort = 0
    private(set) var metricsPort = 0
    private(set) var key: [UInt8] = []
    private(set) var tlsPin: [UInt8] = []

    /// Memory of the process in KiB, as `/proc/PID/status` reports it.
    struct Memory: Sendable {
        /// Resident now (VmRSS).
        var rssKiB = 0
        /// Highest resident so far (VmHWM).
        var peakKiB = 0
    }

    /// Starts `executable run --listen 127.0.0.1:0 --data-dir dataDir --metrics 127.0.0.1:0`
    /// plus `arguments` and waits (at most 60 s: a PostgreSQL node migrates first) for its
    /// startup lines.
    init(index: Int, executable: String, dataDir: String, arguments: [String]) throws {
        self.index = index
        self.dataDir = dataDir
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["run", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--metrics", "127.0.0.1:0",
                             "--log-level", "warning"] + arguments
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "NOTIFY_SOCKET")
        process.environment = env
        try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = FileManager.default.createFile(atPath: dataDir + "/node.log", contents: nil, attributes: [.posixPermissions: 0o600])
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: dataDir + "/node.log"))
        defer { try? log.close() }
        let out = Pipe()
        process.standardOutput = out
        process.standardError = log
        try process.run()
        // Read on another thread so the wait is bounded: a node that hangs before printing is
        // killed, which ends the read.
        let reader = out.fileHandleForReading
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var text = ""
        Thread.detachNewThread {
            while !(text.contains("\nkey ") && text.hasSuffix("\n")) {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            done.signal()
        }
        if done.wait(timeout: .now() + 60) == .timedOut {
            stop()
            _ = done.wait(timeout: .now() + 5)
            throw RelayBenchmark.Failure.incomplete("relay node \(index) printed no startup lines within 60 s; \(logTail())")
        }
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2 else { continue }
            let port = Int(parts[1].split(separator: ":").last ?? "") ?? 0
            switch parts[0] {
            case "listening": self.port = port
            case "wss": wssPort = port
            case "metrics": metricsPort = port
            case "tls-pin": tlsPin = Hex.decode(String(parts[1])) ?? []
            case "key": key = Hex.decode(String(parts[1])) ?? []
            default: break
            }
        }
        guard port > 0, metricsPort > 0, key.count == 32 else {
            stop()
            throw RelayBenchmark.Failure.incomplete("relay node \(index) did not start: \(text) \(logTail())")
        }
    }

    var pid: Int32 { process.processIdentifier }

    /// VmRSS and VmHWM of the node (zero once it has exited).
    func memory() -> Memory {
        var m = Memory()
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return m }
        for line in s.split(separator: "\n") {
            let kib = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
            if line.hasPrefix("VmRSS:") { m.rssKiB = kib } else if line.hasPrefix("VmHWM:") { m.peakKiB = kib }
        }
        return m
    }

    /// The last lines the node logged (for a failure message).
    func logTail() -> String {
        let text = (try? String(contentsOfFile: dataDir + "/node.log", encoding: .utf8)) ?? ""
        let tail = text.split(separator: "\n").suffix(5).joined(separator: " | ")
        return tail.isEmpty ? "(its log is empty)" : "its log: " + tail
    }

    /// The node's metrics: `name` or `name{labels}` → value, from one `GET /metrics`.
    func metrics() -> [String: Double] {
        var out: [String: Double] = [:]
        for line in Self.httpGet(port: metricsPort, path: "/metrics").split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let v = Double(line[line.index(after: space)...]) else { continue }
            out[String(line[..<space])] = v
        }
        return out
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            kill(pid, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// A plain HTTP/1.0 GET to 127.0.0.1 (the node's metrics listener); the body, or "" on failure.
    static func httpGet(port: Int, path: String) -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr)
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { return "" }
        let request = Array("GET \(path) HTTP/1.0\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        var all: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            all += buf[0..<n]
        }
        let text = String(decoding: all, as: UTF8.self)
        guard let body = text.range(of: "\r\n\r\n") else { return "" }
        return String(text[body.upperBound...])
    }
}
