import Foundation
import Logging

/// The hub's local control socket: one JSON request line in, one JSON response out.
///
/// `{"command":"status"}` → `{"ok":true,"result":{...}}` or `{"ok":false,"error":"..."}`.
/// The socket file has mode 0660 so the service user's group (operators) may use it.
///
/// Bounded: one thread serves every connection with `poll`; at most ``maxConnections``
/// are open at once (a new one closes the oldest that has not finished its request line),
/// each gets ``requestTimeoutMs`` to send at most ``maxRequestBytes``. A client that
/// connects and says nothing costs a descriptor for a moment, never a thread, so a flood of
/// idle connections cannot keep `yaok-hub status` from being answered.
// @unchecked: its listener and connections only under `lock`.
public final class ControlServer: @unchecked Sendable {
    public typealias Handler = @Sendable (_ command: String) -> Result<Data, ControlError>

    /// Connections served at once; more close the oldest waiting one.
    public static let maxConnections = 32
    /// Longest request line read.
    public static let maxRequestBytes = 4096
    /// Time a client has to send its request line.
    public static let requestTimeoutMs: Int64 = 2000
    /// Time a response write may block (a client that stops reading).
    public static let writeTimeoutSeconds = 2

    public let path: String
    private let handler: Handler
    private let logger: Logger
    private var fd: Int32 = -1
    private var thread: Thread?
    private let lock = NSLock()
    private var closed = false
    /// Written to by `stop` to wake the serving thread.
    private var wake: (read: Int32, write: Int32) = (-1, -1)

    public init(path: String, logger: Logger, handler: @escaping Handler) {
        self.path = path
        self.logger = logger
        self.handler = handler
    }

    /// Binds and starts serving on a background thread.
    public func start() throws {
        try Paths.ensureDirectory((path as NSString).deletingLastPathComponent, mode: 0o750)
        if FileManager.default.fileExists(atPath: path) {
            // Any answer, even "starting", means another hub owns it.
            do {
                _ = try ControlClient(path: path, timeoutSeconds: 1).request("ping")
                throw ControlError.inUse(path)
            } catch ControlError.remote {
                throw ControlError.inUse(path)
            } catch ControlError.inUse(let p) {
                throw ControlError.inUse(p)
            } catch {}
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw ControlError.system("socket", errno) }
        var addr = try ControlClient.address(path)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { let e = errno; close(fd); throw ControlError.system("bind \(path)", e) }
        chmod(path, 0o660)
        guard listen(fd, 64) == 0 else { let e = errno; close(fd); throw ControlError.system("listen", e) }
        var pipeFDs: [Int32] = [-1, -1]
        guard pipe(&pipeFDs) == 0 else { let e = errno; close(fd); throw ControlError.system("pipe", e) }
        for p in pipeFDs { Self.setFlags(p) }
        self.fd = fd
        self.wake = (pipeFDs[0], pipeFDs[1])
        let wakeRead = pipeFDs[0]
        let thread = Thread { [weak self] in self?.serveLoop(fd, wake: wakeRead) }
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
            var one: UInt8 = 1
            if wake.write >= 0 { _ = write(wake.write, &one, 1) }
            unlink(path)
        }
    }

    /// One connection waiting for its request line.
    private struct Pending {
        var fd: Int32
        var deadlineMs: Int64
        var request: [UInt8] = []
    }

    private func serveLoop(_ listener: Int32, wake: Int32) {
        var pending: [Pending] = []
        defer {
            for p in pending { close(p.fd) }
            close(listener)
            close(wake)
            lock.withLock {
                close(self.wake.write)
                self.wake.write = -1
            }
        }
        while !lock.withLock({ closed }) {
            let now = Self.monotonicMs()
            // Clients that took too long get nothing: they were idle or trickling. One whose line
            // is complete but waited while this thread answered a slow request is answered.
            for i in pending.indices where pending[i].deadlineMs <= now {
                if !readRequest(&pending[i]) { close(pending[i].fd) }
                pending[i].deadlineMs = .min
            }
            pending.removeAll { $0.deadlineMs == .min }
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            fds += pending.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            let nextDeadline = pending.map(\.deadlineMs).min().map { max(0, $0 - now) } ?? 1000
            let n = poll(&fds, nfds_t(fds.count), Int32(min(nextDeadline, 1000)))
            if n < 0 {
                if errno == EINTR { continue }
                logger.warning("control socket poll failed: \(String(cString: strerror(errno)))")
                return
            }
            if fds[1].revents != 0 { return }
            // Requests first, then new connections, so a flood of connects cannot starve a
            // client that has already written its line.
            var finished = Set<Int32>()
            for (i, p) in pending.enumerated() where fds[i + 2].revents != 0 {
                if readRequest(&pending[i]) { finished.insert(p.fd) }
            }
            pending.removeAll { finished.contains($0.fd) }
            if fds[0].revents != 0 { acceptSome(listener, into: &pending) }
        }
    }

    /// Accepts what is waiting (a bounded number per turn). A client whose line is already
    /// there is answered at once; the others wait, oldest closed first when full.
    private func acceptSome(_ listener: Int32, into pending: inout [Pending]) {
        for _ in 0..<Self.maxConnections {
            let client = accept(listener, nil, nil)
            if client >= 0 { Self.setFlags(client) }
            if client < 0 {
                if errno == EINTR { continue }
                if errno != EAGAIN && errno != EWOULDBLOCK && !lock.withLock({ closed }) {
                    logger.warning("control socket accept failed: \(String(cString: strerror(errno)))")
                }
                return
            }
            var p = Pending(fd: client, deadlineMs: Self.monotonicMs() + Self.requestTimeoutMs)
            if readRequest(&p) { continue }
            if pending.count >= Self.maxConnections {
                close(pending.removeFirst().fd)
            }
            pending.append(p)
        }
    }

    /// Reads what is there; when the line is complete (or too long, or the peer closed),
    /// answers, closes and returns true.
    private func readRequest(_ p: inout Pending) -> Bool {
        var buf = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = read(p.fd, &buf, buf.count)
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { return false }
                close(p.fd)
                return true
            }
            if n == 0 { close(p.fd); return true }
            p.request += buf[0..<n]
            if p.request.contains(UInt8(ascii: "\n")) || p.request.count >= Self.maxRequestBytes {
                respond(p.fd, request: p.request)
                close(p.fd)
                return true
            }
        }
    }

    private func respond(_ client: Int32, request: [UInt8]) {
        let out = Self.response(to: request, handler: handler)
        // The response goes out blocking but bounded: a client that stops reading is dropped.
        let flags = fcntl(client, F_GETFL)
        _ = fcntl(client, F_SETFL, flags & ~O_NONBLOCK)
        var tv = timeval(tv_sec: Self.writeTimeoutSeconds, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var written = 0
        while written < out.count {
            let n = out.withUnsafeBytes { write(client, $0.baseAddress! + written, out.count - written) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            written += n
        }
    }

    static func response(to request: [UInt8], handler: Handler) -> Data {
        let line = String(decoding: request.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        var response: [String: Any]
        if request.contains(UInt8(ascii: "\n")),
           let obj = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
           let command = obj["command"] as? String {
            switch handler(command) {
            case .success(let data):
                let result = (try? JSONSerialization.jsonObject(with: data)) ?? [:]
                response = ["ok": true, "result": result]
            case .failure(let error):
                response = ["ok": false, "error": error.description]
            }
        } else {
            response = ["ok": false, "error": "expected one JSON line (at most \(maxRequestBytes) bytes) like {\"command\":\"status\"}"]
        }
        // Never an empty answer: a response that cannot be encoded says so.
        var out = (try? JSONSerialization.data(withJSONObject: response, options: [.sortedKeys]))
            ?? Data(#"{"error":"the hub could not encode its answer","ok":false}"#.utf8)
        out.append(UInt8(ascii: "\n"))
        return out
    }

    /// Close-on-exec and non-blocking.
    static func setFlags(_ fd: Int32) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    static func monotonicMs() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
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
        case .notRunning(let p):
            return "no hub is running (nothing listens on \(p)); a hub started with another config listens elsewhere: give that --config FILE, or --socket PATH (its hub.control_socket)"
        case .badResponse: return "the hub sent an unreadable response"
        case .remote(let m): return m
        case .unknownCommand(let c): return "unknown command \"\(c)\"; known: status, plugins, identity, ping"
        }
    }
}
