#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Errors talking to wpa_supplicant's control interface.
public enum WPAControlError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The control socket file does not exist (supplicant not running, wrong path).
    case socketMissing(path: String)
    /// The path is longer than a UNIX socket address allows.
    case pathTooLong(String)
    /// connect/sendto to the control socket failed (the supplicant went away).
    case unreachable(path: String, reason: String)
    /// No reply within the timeout.
    case timeout(command: String, seconds: Double)
    /// The supplicant answered FAIL (or FAIL-…).
    case refused(command: String, reply: String)
    /// The supplicant does not know the command.
    case unknownCommand(String)
    /// A local socket call failed.
    case system(call: String, reason: String)
    /// ``WPAControlSocket/cancel()`` was called (the transport is stopping).
    case cancelled

    public var description: String {
        switch self {
        case .socketMissing(let path): return "wpa_supplicant control socket \(path) does not exist (is wpa_supplicant running with that ctrl_interface?)"
        case .pathTooLong(let path): return "control socket path \(path) is longer than 107 bytes"
        case .unreachable(let path, let reason): return "wpa_supplicant control socket \(path) is not answering: \(reason)"
        case .timeout(let command, let seconds): return "wpa_supplicant did not answer \(command) within \(seconds) s"
        case .refused(let command, let reply): return "wpa_supplicant refused \(command): \(reply)"
        case .unknownCommand(let command): return "wpa_supplicant does not know the command \(command) (built without P2P?)"
        case .system(let call, let reason): return "\(call) failed: \(reason)"
        case .cancelled: return "the control socket was cancelled (stopping)"
        }
    }
}

/// One client socket on wpa_supplicant's control interface, spoken directly: a UNIX datagram
/// socket bound to a path of our own (the supplicant replies to it) and connected to the
/// supplicant's socket. Commands are single datagrams, replies too. After ``attach()`` the
/// supplicant also sends unsolicited events, each starting with `<level>`; use one socket for
/// commands and another for events (as wpa_cli does), so replies and events never mix.
// @unchecked: `fd` only under `lock`, `cancelled` under `cancelLock`; paths are `let`.
public final class WPAControlSocket: @unchecked Sendable {
    public let path: String
    private let localPath: String
    private var fd: Int32
    private let lock = NSLock()
    // nonisolated(unsafe): read and written only under `counterLock`.
    nonisolated(unsafe) private static var counter = 0
    private static let counterLock = NSLock()

    /// Largest reply read (wpa_supplicant's own replies fit in 4 KB; P2P_PEER and STATUS are
    /// well below 8 KB).
    static let maxReply = 16_384

    /// Opens a socket to the supplicant's control socket at `path`; binds our end under `localDirectory`.
    public init(path: String, localDirectory: String = "/tmp") throws {
        self.path = path
        guard FileManager.default.fileExists(atPath: path) else { throw WPAControlError.socketMissing(path: path) }
        let n: Int = Self.counterLock.withLock { Self.counter += 1; return Self.counter }
        localPath = "\(localDirectory)/yaok-wpa-\(getpid())-\(n)"
        guard path.utf8.count < 108, localPath.utf8.count < 108 else { throw WPAControlError.pathTooLong(path.utf8.count >= 108 ? path : localPath) }
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw WPAControlError.system(call: "socket(AF_UNIX)", reason: String(cString: strerror(errno))) }
        unlink(localPath)
        if Self.withAddress(localPath, { Glibc.bind(fd, $0, $1) }) != 0 {
            let e = errno
            Glibc.close(fd)
            throw WPAControlError.system(call: "bind \(localPath)", reason: String(cString: strerror(e)))
        }
        if Self.withAddress(path, { Glibc.connect(fd, $0, $1) }) != 0 {
            let e = errno
            Glibc.close(fd)
            unlink(localPath)
            if e == ENOENT { throw WPAControlError.socketMissing(path: path) }
            throw WPAControlError.unreachable(path: path, reason: String(cString: strerror(e)))
        }
    }

    deinit { close() }

    /// Closes the socket and removes our bound path.
    public func close() {
        lock.withLock {
            guard fd >= 0 else { return }
            Glibc.close(fd)
            fd = -1
            unlink(localPath)
        }
    }

    static func withAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var sa = sockaddr_un()
        sa.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8.prefix(107))
        withUnsafeMutableBytes(of: &sa.sun_path) { dst in
            for (i, b) in bytes.enumerated() { dst[i] = b }
            dst[bytes.count] = 0
        }
        return withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
    }

    /// Sends `command` and returns the reply (trailing newline kept as the supplicant sent it).
    /// Unsolicited events that arrive meanwhile (an attached socket) are skipped.
    public func request(_ command: String, timeout: Double = 5) throws -> String {
        try lock.withLock {
            guard fd >= 0 else { throw WPAControlError.unreachable(path: path, reason: "socket closed") }
            if isCancelled { throw WPAControlError.cancelled }
            let sent = command.utf8CString.withUnsafeBufferPointer { Glibc.send(fd, $0.baseAddress, $0.count - 1, Int32(MSG_NOSIGNAL)) }
            guard sent >= 0 else {
                let e = errno
                throw WPAControlError.unreachable(path: path, reason: String(cString: strerror(e)))
            }
            let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeout * 1e9)
            while true {
                guard let reply = try receiveLocked(deadline: deadline) else {
                    throw WPAControlError.timeout(command: Self.verb(command), seconds: timeout)
                }
                if reply.hasPrefix("<") { continue } // an event on an attached socket
                return reply
            }
        }
    }

    /// Sends `command` and requires the reply `OK`; throws ``WPAControlError/refused(command:reply:)`` on FAIL.
    public func expectOK(_ command: String, timeout: Double = 5) throws {
        let reply = try checked(command, timeout: timeout)
        guard reply.trimmingCharacters(in: .whitespacesAndNewlines) == "OK" else {
            throw WPAControlError.refused(command: Self.verb(command), reply: reply.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    /// Sends `command`; throws on FAIL / UNKNOWN COMMAND, returns any other reply.
    public func checked(_ command: String, timeout: Double = 5) throws -> String {
        let reply = try request(command, timeout: timeout)
        let trimmed = reply.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed == "UNKNOWN COMMAND" { throw WPAControlError.unknownCommand(Self.verb(command)) }
        if trimmed.hasPrefix("FAIL") { throw WPAControlError.refused(command: Self.verb(command), reply: trimmed) }
        return reply
    }

    /// Subscribes this socket to unsolicited events.
    public func attach() throws { try expectOK("ATTACH") }

    /// Waits for the next datagram (an event on an attached socket); nil on timeout.
    public func receive(timeout: Double) throws -> String? {
        try lock.withLock {
            guard fd >= 0 else { throw WPAControlError.unreachable(path: path, reason: "socket closed") }
            return try receiveLocked(deadline: DispatchTime.now().uptimeNanoseconds + UInt64(timeout * 1e9))
        }
    }

    /// Makes every wait on this socket (now or later) end within 0.1 s with
    /// ``WPAControlError/cancelled``, without taking the request lock: a thread blocked in a
    /// long request cannot hold up the transport's stop.
    public func cancel() { cancelLock.withLock { cancelled = true } }
    private let cancelLock = NSLock()
    private var cancelled = false
    private var isCancelled: Bool { cancelLock.withLock { cancelled } }

    private func receiveLocked(deadline: UInt64) throws -> String? {
        var buffer = [UInt8](repeating: 0, count: Self.maxReply)
        while true {
            if isCancelled { throw WPAControlError.cancelled }
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else { return nil }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let waitMs = Int32(min(100, (deadline - now) / 1_000_000 + 1))
            let rc = poll(&pfd, 1, waitMs)
            if rc < 0 && errno == EINTR { continue }
            if rc <= 0 { continue }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                let e = errno
                if e == EAGAIN || e == EINTR { continue }
                throw WPAControlError.unreachable(path: path, reason: String(cString: strerror(e)))
            }
            return String(decoding: buffer[0..<n], as: UTF8.self)
        }
    }

    /// The command's first word, for messages: arguments may hold a PIN or a passphrase.
    static func verb(_ command: String) -> String {
        String(command.split(separator: " ", maxSplits: 1).first ?? "")
    }
}
