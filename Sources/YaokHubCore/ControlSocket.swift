import Foundation
import Logging

/// The hub's local control socket: one JSON request line in, one JSON response out.
///
/// `{"command":"status"}` → `{"ok":true,"result":{...}}` or `{"ok":false,"error":"..."}`.
/// The socket file has mode 0660 so the service user's group (operators) may use it.
public final class ControlServer: @unchecked Sendable {
    public typealias Handler = @Sendable (_ command: String) -> Result<Data, ControlError>

    public let path: String
    private let handler: Handler
    private let logger: Logger
    private var fd: Int32 = -1
    private var thread: Thread?
    private let lock = NSLock()
    private var closed = false

    public init(path: String, logger: Logger, handler: @escaping Handler) {
        self.path = path
        self.logger = logger
        self.handler = handler
    }

    /// Binds and starts serving on a background thread.
    public func start() throws {
        try Paths.ensureDirectory((path as NSString).deletingLastPathComponent, mode: 0o750)
        if FileManager.default.fileExists(atPath: path) {
            if (try? ControlClient(path: path, timeoutSeconds: 1).request("ping")) != nil {
                throw ControlError.inUse(path)
            }
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ControlError.system("socket", errno) }
        var addr = try ControlClient.address(path)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { let e = errno; close(fd); throw ControlError.system("bind \(path)", e) }
        chmod(path, 0o660)
        guard listen(fd, 16) == 0 else { let e = errno; close(fd); throw ControlError.system("listen", e) }
        self.fd = fd
        let thread = Thread { [weak self] in self?.acceptLoop(fd) }
        thread.name = "yaok-control"
        self.thread = thread
        thread.start()
    }

    /// Stops serving and removes the socket file.
    public func stop() {
        lock.withLock {
            guard !closed else { return }
            closed = true
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
            unlink(path)
        }
    }

    private func acceptLoop(_ fd: Int32) {
        while true {
            let client = accept(fd, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                if lock.withLock({ closed }) { return }
                logger.warning("control socket accept failed: \(String(cString: strerror(errno)))")
                return
            }
            // Requests are tiny and answered from memory; serve each on its own thread so a
            // stuck client cannot block others.
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            Thread.detachNewThread { [handler] in
                Self.serve(client, handler: handler)
            }
        }
    }

    static func serve(_ client: Int32, handler: Handler) {
        defer { close(client) }
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var request = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 1024)
        while request.count < 4096 {
            let n = read(client, &buf, buf.count)
            if n <= 0 { break }
            request += buf[0..<n]
            if request.contains(UInt8(ascii: "\n")) { break }
        }
        let line = String(decoding: request.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        var response: [String: Any]
        if let obj = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
           let command = obj["command"] as? String {
            switch handler(command) {
            case .success(let data):
                let result = (try? JSONSerialization.jsonObject(with: data)) ?? [:]
                response = ["ok": true, "result": result]
            case .failure(let error):
                response = ["ok": false, "error": error.description]
            }
        } else {
            response = ["ok": false, "error": "expected one JSON line like {\"command\":\"status\"}"]
        }
        var out = (try? JSONSerialization.data(withJSONObject: response, options: [.sortedKeys])) ?? Data()
        out.append(UInt8(ascii: "\n"))
        _ = out.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
    }
}

/// Talks to a running hub's control socket.
public struct ControlClient: Sendable {
    public let path: String
    public let timeoutSeconds: Int

    public init(path: String, timeoutSeconds: Int = 10) {
        self.path = path
        self.timeoutSeconds = timeoutSeconds
    }

    static func address(_ path: String) throws -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw ControlError.pathTooLong(path) }
        withUnsafeMutableBytes(of: &addr.sun_path) { dst in
            for (i, b) in bytes.enumerated() { dst[i] = b }
            dst[bytes.count] = 0
        }
        return addr
    }

    /// Sends a command and returns the `result` JSON object's bytes.
    public func request(_ command: String) throws -> Data {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ControlError.system("socket", errno) }
        defer { close(fd) }
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var addr = try Self.address(path)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            let e = errno
            if e == ENOENT || e == ECONNREFUSED { throw ControlError.notRunning(path) }
            throw ControlError.system("connect \(path)", e)
        }
        let line = Array(#"{"command":"\#(command)"}"#.utf8) + [UInt8(ascii: "\n")]
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var response = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buf, buf.count)
            if n < 0 { throw ControlError.system("read", errno) }
            if n == 0 { break }
            response += buf[0..<n]
        }
        guard let obj = try JSONSerialization.jsonObject(with: Data(response)) as? [String: Any] else {
            throw ControlError.badResponse
        }
        if obj["ok"] as? Bool == true {
            return try JSONSerialization.data(withJSONObject: obj["result"] ?? [:], options: [.sortedKeys, .prettyPrinted])
        }
        throw ControlError.remote(obj["error"] as? String ?? "unknown error")
    }
}

/// Control socket errors.
public enum ControlError: Error, CustomStringConvertible, Sendable {
    case system(String, Int32)
    case pathTooLong(String)
    case inUse(String)
    case notRunning(String)
    case badResponse
    case remote(String)
    case unknownCommand(String)

    public var description: String {
        switch self {
        case .system(let call, let e): return "\(call): \(String(cString: strerror(e)))"
        case .pathTooLong(let p): return "control socket path is too long: \(p)"
        case .inUse(let p): return "another hub is already serving \(p)"
        case .notRunning(let p): return "no hub is running (nothing listens on \(p))"
        case .badResponse: return "the hub sent an unreadable response"
        case .remote(let m): return m
        case .unknownCommand(let c): return "unknown command \"\(c)\"; known: status, plugins, identity, ping"
        }
    }
}
