import Foundation
import YaokProcess
import YaokCrypto
import enum YaokPluginKit.Hex

/// A relay node as a real `yaok-relay run` process: its ports, key and TLS pin from the lines
/// it prints at startup, its `/metrics`, and its memory from `/proc/PID/status`. Used by
/// `yaok-relay bench` for its nodes (the same binary), and by the tests. Its stderr goes to
/// `node.log` in its data directory.
// @unchecked: ports and key are set in init and only read after; `process` is started in init.
public final class RelayNodeProcess: @unchecked Sendable {
    /// The node's `--data-dir` (its `node.log` too).
    public let dataDir: String
    /// The running process (for a test's SIGKILL).
    public let process = Process()
    /// The UDP port it listens on.
    public private(set) var port = 0
    /// The WebSocket/TLS port and the certificate's SPKI pin, when started with `--wss-listen`.
    public private(set) var wssPort = 0
    public private(set) var tlsPin: [UInt8] = []
    /// Its Prometheus `/metrics` port on 127.0.0.1.
    public private(set) var metricsPort = 0
    /// The relay's public signing key.
    public private(set) var key: [UInt8] = []

    /// Memory of the process in KiB, as `/proc/PID/status` reports it.
    public struct Memory: Sendable {
        /// Resident now (VmRSS).
        public var rssKiB = 0
        /// Highest resident so far (VmHWM).
        public var peakKiB = 0
    }

    /// A node that did not come up.
    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Starts `executable run --listen listen --data-dir dataDir --metrics 127.0.0.1:0
    /// --log-level warning` plus `arguments`, and waits at most `startTimeout` seconds (a
    /// PostgreSQL node migrates first) for its startup lines; a node that prints none in time
    /// is killed.
    public init(executable: String, dataDir: String, listen: String = "127.0.0.1:0", arguments: [String] = [],
                startTimeout: TimeInterval = 60) throws {
        self.dataDir = dataDir
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["run", "--listen", listen, "--data-dir", dataDir, "--metrics", "127.0.0.1:0",
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
        // Read on another thread so the wait is bounded: killing a node that hangs before
        // printing ends the read.
        let reader = out.fileHandleForReading
        let done = DispatchSemaphore(value: 0)
        // nonisolated(unsafe): written by the reader thread only; read here after `done` says it finished.
        nonisolated(unsafe) var text = ""
        Thread.detachNewThread {
            // "key" is the last startup line.
            while !(text.hasPrefix("key ") || text.contains("\nkey ")) || !text.hasSuffix("\n") {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            done.signal()
        }
        if done.wait(timeout: .now() + startTimeout) == .timedOut {
            stop()
            _ = done.wait(timeout: .now() + 5)
            throw StartError(description: "yaok-relay run in \(dataDir) printed no startup lines within \(Int(startTimeout)) s; \(logTail())")
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
            throw StartError(description: "yaok-relay run in \(dataDir) did not start: \(text) \(logTail())")
        }
    }

    /// Its process ID.
    public var pid: Int32 { process.processIdentifier }

    /// VmRSS and VmHWM of the node (zero once it has exited).
    public func memory() -> Memory {
        var m = Memory()
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return m }
        for line in s.split(separator: "\n") {
            let kib = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
            if line.hasPrefix("VmRSS:") { m.rssKiB = kib } else if line.hasPrefix("VmHWM:") { m.peakKiB = kib }
        }
        return m
    }

    /// The last lines the node logged (for a failure message).
    public func logTail() -> String {
        let text = (try? String(contentsOfFile: dataDir + "/node.log", encoding: .utf8)) ?? ""
        let tail = text.split(separator: "\n").suffix(5).joined(separator: " | ")
        return tail.isEmpty ? "(its log is empty)" : "its log: " + tail
    }

    /// `GET /metrics`: the Prometheus text, or "" when the node does not answer.
    public func metricsText() -> String {
        guard let response = Self.httpGet(port: metricsPort, path: "/metrics"), let body = response.range(of: "\r\n\r\n") else { return "" }
        return String(response[body.upperBound...])
    }

    /// Every metric: `name` or `name{labels}` → value, from one `GET /metrics`.
    public func metrics() -> [String: Double] {
        var out: [String: Double] = [:]
        for line in metricsText().split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let v = Double(line[line.index(after: space)...]) else { continue }
            out[String(line[..<space])] = v
        }
        return out
    }

    /// One metric by its exact name with labels (`yaok_relay_dropped_total{reason="overload"}`), or nil.
    public func metric(_ name: String) -> Double? { metrics()[name] }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s. Returns whether SIGTERM was enough.
    @discardableResult
    public func stop() -> Bool { process.terminateWithin(seconds: 10) }

    /// A TCP socket connected to 127.0.0.1:`port` with a receive timeout; nil if the connect fails.
    public static func connectLoopbackTCP(port: Int, receiveTimeoutSeconds: Int = 10) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var tv = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr)
        let rc = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { close(fd); return nil }
        return fd
    }

    /// A plain HTTP/1.0 GET to 127.0.0.1 (the relay's metrics listener): the whole response,
    /// headers included, or nil if nothing answers.
    public static func httpGet(port: Int, path: String) -> String? {
        guard let fd = connectLoopbackTCP(port: port, receiveTimeoutSeconds: 10) else { return nil }
        defer { close(fd) }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: localhost\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        var response: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            response += buf[0..<n]
        }
        return String(decoding: response, as: UTF8.self)
    }
}
