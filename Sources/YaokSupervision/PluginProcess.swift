import CLinuxProcess
import Foundation
import Logging
import YaokPluginKit

/// The hub's end of one plugin process (`yaok-hub plugin-host`): spawns it with a
/// `SOCK_SEQPACKET` socket on fd 3, turns the C ABI's calls into requests with bounded waits,
/// answers its signing requests, and hands its events on. When the process ends, for whatever
/// reason, ``Events/exited`` says how, once; the ``TransportHost`` decides what comes next.
// @unchecked: its mutable state (hello, posted sends, waiters) is read and written only under `lock`.
final class PluginProcess: @unchecked Sendable {
    /// How a plugin process ended.
    struct Exit: Sendable, Equatable, CustomStringConvertible {
        var code: Int32?
        var signal: Int32?
        var description: String {
            if let signal { return Self.signalName(signal) }
            return "exit code \(code ?? -1)"
        }
        static func signalName(_ s: Int32) -> String {
            let names: [Int32: String] = [SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT", SIGILL: "SIGILL", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE",
                                          SIGKILL: "SIGKILL", SIGTERM: "SIGTERM", SIGTRAP: "SIGTRAP", SIGSYS: "SIGSYS"]
            return names[s] ?? "signal \(s)"
        }
    }

    struct Events: Sendable {
        var linkUp: @Sendable (LinkInfo) -> Void = { _ in }
        /// Whether a link-up the plugin itself reports (not a carrier's, whose handshake the hub
        /// ran) is proven; one that is not is dropped here, and the link's frames with it.
        var linkUpProven: @Sendable (LinkInfo) -> Bool = { _ in true }
        var linkDown: @Sendable (LinkID, String?) -> Void = { _, _ in }
        var frame: @Sendable ([UInt8], LinkID) -> Void = { _, _ in }
        var statusChanged: @Sendable () -> Void = {}
        /// A pipelined `send` the plugin refused, with its result code and reason (the frame is handed back).
        var sendFailed: @Sendable ([UInt8], LinkID, SendResult, String) -> Void = { _, _, _, _ in }
        var metric: @Sendable (Int32, String, Double) -> Void = { _, _, _ in }
        var log: @Sendable (Int32, String) -> Void = { _, _ in }
        /// The process (its PID) ended; `stderr` holds its last lines.
        var exited: @Sendable (Exit, [String], pid_t) -> Void = { _, _, _ in }
    }

    /// The binary that serves `plugin-host`: `$YAOK_PLUGIN_HOST`, this binary when it is
    /// `yaok-hub`, else the `yaok-hub` beside it (tests run the hub's code from an XCTest bundle).
    static var hostExecutable: String {
        if let e = ProcessInfo.processInfo.environment["YAOK_PLUGIN_HOST"], !e.isEmpty { return e }
        let me = PluginLoader.executablePath()
        if (me as NSString).lastPathComponent == "yaok-hub" { return me }
        return ((me as NSString).deletingLastPathComponent as NSString).appendingPathComponent("yaok-hub")
    }

    let pluginPath: String
    /// A standalone program (`command:`) run in place of `yaok-hub plugin-host --plugin`.
    let command: [String]?
    let sign: @Sendable ([UInt8]) -> [UInt8]
    private let events: Events
    /// Link sessions the hub runs for the program's carriers.
    private let carriers: CarrierLinks
    private let lock = NSLock()
    private var fd: Int32 = -1
    private(set) var pid: pid_t = 0
    private var nextRequest: UInt32 = 1
    private var waiters: [UInt32: Waiter] = [:]
    private var helloWaiter = DispatchSemaphore(value: 0)
    private var hello: (kind: String, version: String)?
    private var upLinks = Set<LinkID>()
    /// Sends posted and not yet answered: the frame (handed back if refused) and when it was
    /// written (nil while held: the send watchdog times only what the process could answer).
    private var posted: [UInt32: (frame: [UInt8], link: LinkID, at: UInt64?)] = [:]
    /// Room for pipelined sends: a plugin that stops answering blocks its sender at most ``sendTimeout``.
    private let postCredits = DispatchSemaphore(value: PluginProcess.postWindow)
    /// Sends in flight to one process at once.
    static let postWindow = 256
    /// Held sends (``sendFrame(_:to:timeout:held:)``) waiting for ``flushHeldSends()``, and
    /// their encoded size. Under `lock`; taken and written under `writeOrder`.
    private var heldSends: [PluginSend] = []
    private var heldBytes = 0
    /// Held sends are written at the latest when this many bytes wait (with one more frame,
    /// at most 65,511 bytes, a message stays under ``PluginMessage/maxLength``) or this many
    /// frames: the first of a long pass does not wait for the whole pass.
    static let heldSendsFlushBytes = 60 * 1024
    static let heldSendsFlushCount = 32
    /// Keeps held sends and later requests on the socket in the order they were made.
    private let writeOrder = NSLock()
    private var stderrTail: [String] = []
    private var ended = false
    private var exitStatus: Exit?

    private final class Waiter {
        let semaphore = DispatchSemaphore(value: 0)
        var reply: (Int32, String)?
    }

    /// `signingKey` and `kxKey` are the hub's public keys: carriers' link sessions run here and present them.
    init(pluginPath: String, command: [String]? = nil, signingKey: [UInt8] = [], kxKey: [UInt8] = [],
         sign: @escaping @Sendable ([UInt8]) -> [UInt8], events: Events) {
        self.pluginPath = pluginPath
        self.command = command
        self.sign = sign
        self.events = events
        self.carriers = CarrierLinks(identity: HostLinkIdentity(crypto: HostCrypto(signingKey: signingKey, kxKey: kxKey, sign: sign)))
    }

    /// Starts the process and waits (at most `timeout`) for its hello: the plugin file opened and passed its checks.
    func spawn(memoryLimitMB: Int, capabilities: UInt64 = 0, timeout: Double = 10) throws -> (kind: String, version: String) {
        var pair: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw TransportError.system(call: "socketpair", errno: errno)
        }
        var errPipe: [Int32] = [0, 0]
        guard yaok_pipe_cloexec(&errPipe) == 0 else {
            Glibc.close(pair[0]); Glibc.close(pair[1])
            throw TransportError.system(call: "pipe2", errno: errno)
        }
        for f in pair { PosixSocket.setOption(f, SOL_SOCKET, SO_SNDBUF, 1 << 20); PosixSocket.setOption(f, SOL_SOCKET, SO_RCVBUF, 1 << 20) }
        let exe = Self.hostExecutable
        let limits = ["--fd", "3", "--memory-limit-mb", String(memoryLimitMB), "--capabilities", String(capabilities, radix: 16)]
        // A program gets the same sandbox: plugin-host sets it up, then becomes the program.
        let args = command.map { [exe, "plugin-host"] + limits + ["--exec", "--"] + $0 }
            ?? [exe, "plugin-host", "--plugin", pluginPath] + limits
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pair[1], 3)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        let cArgs = args.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) } }
        // The Swift runtime's crash report is dozens of lines the hub would cut to its last 10;
        // without it the plugin's own last words survive. An operator's SWIFT_BACKTRACE wins.
        var env = ProcessInfo.processInfo.environment
        if env["SWIFT_BACKTRACE"] == nil { env["SWIFT_BACKTRACE"] = "enable=no" }
        let cEnv = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { cEnv.forEach { free($0) } }
        var child: pid_t = 0
        // The child starts with only the ambient capabilities it is granted (under systemd the
        // hub's own come from AmbientCapabilities=); it then trims the rest itself.
        let ambient = yaok_ambient_keep_only(capabilities)
        let rc = posix_spawn(&child, exe, &actions, nil, cArgs, cEnv)
        yaok_ambient_raise(ambient)
        Glibc.close(pair[1])
        Glibc.close(errPipe[1])
        guard rc == 0 else {
            Glibc.close(pair[0]); Glibc.close(errPipe[0])
            throw TransportError.failed("cannot start the plugin process \(exe): \(String(cString: strerror(rc)))")
        }
        lock.withLock { fd = pair[0]; pid = child; ended = false; helloWaiter = DispatchSemaphore(value: 0) }
        let readFD = pair[0], errFD = errPipe[0]
        Thread.detachNewThread { [self] in readStderr(errFD) }
        let reader = Thread { [self] in readLoop(readFD) }
        reader.name = "yaok.plugin-process"
        reader.start()
        let waiter = lock.withLock { helloWaiter }
        guard waiter.wait(timeout: .now() + timeout) == .success, let h = lock.withLock({ hello }) else {
            kill()
            // Its last words (a wrong ABI, a missing library) say why; silence is only slowness.
            guard let why = lock.withLock({ stderrTail.last }) else { throw PluginProcessError.timedOut(seconds: timeout) }
            throw TransportError.failed("the plugin process for \(pluginPath) did not start: \(why)")
        }
        return h
    }

    /// Sends a request and waits for its reply; throws when the process is gone or the wait runs out.
    func call(timeout: Double, _ make: (UInt32) -> PluginMessage) throws -> (code: Int32, text: String) {
        flushHeldSends()
        let w = Waiter()
        let (r, socket): (UInt32, Int32) = try lock.withLock {
            guard !ended, self.fd >= 0 else { throw TransportError.notRunning }
            let r = nextRequest
            nextRequest &+= 1
            waiters[r] = w
            return (r, self.fd)
        }
        guard write(make(r), to: socket) else {
            lock.withLock { waiters[r] = nil }
            throw TransportError.failed("the plugin process is gone")
        }
        guard w.semaphore.wait(timeout: .now() + timeout) == .success else {
            lock.withLock { waiters[r] = nil }
            throw PluginProcessError.timedOut(seconds: timeout)
        }
        guard let reply = w.reply else { throw TransportError.failed("the plugin process is gone") }
        return reply
    }

    /// Hands a frame to the process for `link` without waiting for the plugin: a carrier's frame
    /// is sealed here and passed on; any other is a `send` request whose answer comes later
    /// (a refusal through ``Events/sendFailed``). At most ``postWindow`` wait for answers; when
    /// that many do, this waits up to `timeout` for room and then throws ``PluginProcessError/timedOut(seconds:)``.
    ///
    /// `held`: the caller has more to send in this pass (the router, while its queue has work)
    /// and will call ``flushHeldSends()`` when done. The hub's own plugin host then gets the
    /// pass's sends in one message (``PluginMessage/sends(_:)``): one system call and one
    /// wake-up on each side for the lot instead of one per frame. Returns whether the frame
    /// was held; a `command:` program and a carrier get every frame at once.
    @discardableResult
    func sendFrame(_ frame: [UInt8], to link: LinkID, timeout: Double, held: Bool = false) throws -> Bool {
        guard carriers.isCarrier(link) else { return try post(frame, to: link, timeout: timeout, held: held && command == nil) }
        let message = try carriers.seal(frame, on: link)
        guard let socket = lock.withLock({ ended ? nil : fd }), socket >= 0 else { throw TransportError.notRunning }
        // Never block the router on a program that stopped reading: a full socket is back-pressure.
        guard write(message, to: socket, blocking: false) else {
            throw TransportError.failed(errno == EAGAIN ? "the program is not reading (its socket buffer is full)" : "the program is gone")
        }
        return false
    }

    private func post(_ frame: [UInt8], to link: LinkID, timeout: Double, held: Bool) throws -> Bool {
        // Room is taken per frame, held or not: a full window still blocks here, and a held
        // frame counts as posted (its answer, or the process's end, gives the room back).
        guard postCredits.wait(timeout: .now() + timeout) == .success else {
            flushHeldSends()
            throw PluginProcessError.timedOut(seconds: timeout)
        }
        let (r, socket, full): (UInt32, Int32, Bool) = try lock.withLock {
            guard !ended, self.fd >= 0 else { postCredits.signal(); throw TransportError.notRunning }
            let r = nextRequest
            nextRequest &+= 1
            posted[r] = (frame, link, held ? nil : DispatchTime.now().uptimeNanoseconds)
            if held {
                let send = PluginSend(request: r, link: link, frame: frame)
                heldSends.append(send)
                heldBytes += send.encodedLength
            }
            return (r, self.fd, heldBytes >= Self.heldSendsFlushBytes || heldSends.count >= Self.heldSendsFlushCount)
        }
        if held {
            if full { flushHeldSends() }
            return true
        }
        flushHeldSends()
        let written = writeOrder.withLock { write(.send(request: r, link: link, frame: frame), to: socket) }
        guard written else {
            if lock.withLock({ posted.removeValue(forKey: r) }) != nil { postCredits.signal() }
            throw TransportError.failed("the plugin process is gone")
        }
        return false
    }

    /// Writes the held sends as one message (a lone one as a plain `send`). If the process is
    /// gone they are refused as failed (``Events/sendFailed``), as a refusal from the plugin
    /// would be: the router takes each bundle out of flight there.
    func flushHeldSends() {
        writeOrder.withLock {
            let (sends, socket): ([PluginSend], Int32) = lock.withLock {
                defer { heldSends.removeAll(keepingCapacity: true); heldBytes = 0 }
                return (heldSends, fd)
            }
            guard let first = sends.first else { return }
            let message: PluginMessage = sends.count == 1 ? .send(request: first.request, link: first.link, frame: first.frame) : .sends(sends)
            if socket >= 0, write(message, to: socket) {
                let written = DispatchTime.now().uptimeNanoseconds
                lock.withLock { for s in sends { posted[s.request]?.at = written } }
                return
            }
            let refused: [PluginSend] = lock.withLock { sends.filter { posted.removeValue(forKey: $0.request) != nil } }
            for s in refused {
                postCredits.signal()
                events.sendFailed(s.frame, s.link, .failed, "the plugin process is gone")
            }
        }
    }

    /// Sends posted (written or held) and not yet answered.
    var unansweredSends: Int { lock.withLock { posted.count } }

    /// Sends held for ``flushHeldSends()``.
    var heldSendCount: Int { lock.withLock { heldSends.count } }

    /// How long the oldest unanswered send has waited, seconds (0: none waits).
    var oldestSendWait: Double {
        lock.withLock {
            guard let oldest = posted.values.compactMap(\.at).min() else { return 0 }
            return Double(DispatchTime.now().uptimeNanoseconds - oldest) / 1e9
        }
    }

    /// Ends carrier handshakes that did not finish in time (called with the heartbeat).
    func expireCarriers() {
        guard let socket = lock.withLock({ ended ? nil : fd }) else { return }
        perform(carriers.expire(), fd: socket)
    }

    private func write(_ message: PluginMessage, to socket: Int32, blocking: Bool = true) -> Bool {
        let bytes = message.encoded
        let flags = Int32(MSG_NOSIGNAL) | (blocking ? 0 : Int32(MSG_DONTWAIT))
        return bytes.withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, flags) } == bytes.count
    }

    private func perform(_ effects: [CarrierLinks.Effect], fd: Int32) {
        for effect in effects {
            switch effect {
            case .send(let m): _ = write(m, to: fd)
            case .linkUp(let info):
                lock.withLock { _ = upLinks.insert(info.id) }
                events.linkUp(info)
            case .frame(let f, let id): events.frame(f, id)
            case .linkDown(let id, let reason):
                lock.withLock { _ = upLinks.remove(id) }
                events.linkDown(id, reason)
            case .log(let level, let m): events.log(level, m)
            }
        }
    }

    /// SIGKILL; the exit is reported through ``Events/exited`` as usual.
    func kill() {
        let p = lock.withLock { ended ? 0 : pid }
        if p > 0 { Glibc.kill(p, SIGKILL) }
    }

    /// Closes the hub's end: a healthy process exits on its own; one that does not within
    /// `grace` seconds is killed.
    func close(grace: Double) {
        let (f, p) = lock.withLock { (fd, pid) }
        if f >= 0 { shutdown(f, Int32(SHUT_RDWR)) }
        let deadline = Date().addingTimeInterval(grace)
        while Date() < deadline {
            if lock.withLock({ ended }) { return }
            usleep(10_000)
        }
        if p > 0 { Glibc.kill(p, SIGKILL) }
    }

    var isRunning: Bool { lock.withLock { !ended && pid > 0 } }

    // MARK: Reading

    private func readLoop(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: PluginMessage.maxLength)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            guard let message = try? PluginMessage(parsing: Array(buffer[0..<n])) else {
                events.log(Int32(4), "the plugin process sent a malformed message (\(n) bytes); ignored")
                continue
            }
            dispatch(message, fd: fd)
        }
        // The process closed its end: it exited (or is about to). Reap it and say how.
        let p = lock.withLock { pid }
        var status: Int32 = 0
        var how = Exit(code: nil, signal: nil)
        if p > 0, waitpid(p, &status, 0) == p {
            // WIFSIGNALED / WEXITSTATUS, spelled out (the C macros are not imported).
            if status & 0x7f != 0 { how.signal = status & 0x7f } else { how.code = (status >> 8) & 0xff }
        }
        let exit = how
        usleep(20_000) // let the stderr reader take the last lines
        let (links, waiting, tail): ([LinkID], [Waiter], [String]) = lock.withLock {
            ended = true
            exitStatus = exit
            Glibc.close(self.fd)
            self.fd = -1
            defer { upLinks.removeAll(); waiters.removeAll(); carriers.reset() }
            // Senders waiting for room wake up and find the process gone.
            for _ in posted { postCredits.signal() }
            posted.removeAll()
            heldSends.removeAll()
            heldBytes = 0
            return (upLinks.sorted(), Array(waiters.values), stderrTail)
        }
        lock.withLock { helloWaiter }.signal()
        for w in waiting { w.semaphore.signal() }
        for l in links { events.linkDown(l, "plugin process ended (\(exit))") }
        events.exited(exit, tail, p)
    }

    private func dispatch(_ message: PluginMessage, fd: Int32) {
        switch message {
        case .hello(let version, let kind, let pluginVersion):
            guard version == PluginMessage.version else {
                events.log(5, "the plugin process speaks protocol version \(version), this hub \(PluginMessage.version)")
                kill()
                return
            }
            lock.withLock { () -> DispatchSemaphore in hello = (kind, pluginVersion); return helloWaiter }.signal()
        case .sent(let requests):
            // Unknown IDs (already timed out, or never posted) are ignored, as replies are.
            let freed = lock.withLock { requests.reduce(0) { $0 + (posted.removeValue(forKey: $1) == nil ? 0 : 1) } }
            for _ in 0..<freed { postCredits.signal() }
        case .reply(let r, let code, let text):
            if let sent = lock.withLock({ posted.removeValue(forKey: r) }) {
                postCredits.signal()
                if let result = SendResult(code: code) { events.sendFailed(sent.frame, sent.link, result, text) }
                return
            }
            let w = lock.withLock { waiters.removeValue(forKey: r) }
            w?.reply = (code, text)
            w?.semaphore.signal()
        case .sign(let r, let m):
            // The secret key stays here; the process gets only the signature.
            _ = write(.signature(request: r, signature: sign(m)), to: fd)
        // Events go on from this thread, as a plugin's own thread would hand them in process:
        // the router only queues them (its per-link admission bounds a flood right here), so
        // it never waits on this thread, which must stay free to read the replies it waits for.
        case .log(let level, let m): events.log(level, m)
        case .metric(let kind, let name, let value): events.metric(kind, name, value)
        case .linkUp(let info):
            guard events.linkUpProven(info) else { return }
            lock.withLock { _ = upLinks.insert(info.id) }
            events.linkUp(info)
        case .linkDown(let id, let reason):
            // A carrier's link was up only if its handshake finished.
            if carriers.isCarrier(id) && !carriers.down(id) { return }
            lock.withLock { _ = upLinks.remove(id) }
            events.linkDown(id, reason.isEmpty ? nil : reason)
        case .frame(let id, let f): events.frame(f, id)
        case .statusChanged: events.statusChanged()
        case .carrierUp(let info): perform(carriers.up(info), fd: fd)
        case .carrierRecord(let id, let record): perform(carriers.record(record, on: id), fd: fd)
        case .create, .start, .stop, .send, .sends, .status, .signature, .carrierSend, .carrierClose:
            events.log(4, "the plugin process sent a hub-to-plugin message; ignored")
        }
    }

    private static let traceNote = "(stack trace: "

    /// `Current stack trace:` or a numbered frame (`3    libswiftCore.so    0x00007f… symbol + 221`).
    static func isStackTraceLine(_ line: String) -> Bool {
        if line.hasPrefix("Current stack trace:") { return true }
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        return fields.count >= 3 && fields[0].allSatisfy(\.isNumber) && fields[2].hasPrefix("0x")
    }

    private func readStderr(_ fd: Int32) {
        defer { Glibc.close(fd) }
        var partial: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            partial += buffer[0..<n]
            while let nl = partial.firstIndex(of: 10) {
                let line = String(decoding: partial[..<nl], as: UTF8.self)
                partial.removeSubrange(...nl)
                if line.allSatisfy(\.isWhitespace) { continue }
                lock.withLock {
                    // A stack trace (Swift's "Current stack trace:" and its numbered frames) would
                    // push the plugin's own last words out of the 10 lines kept: count it instead.
                    if Self.isStackTraceLine(line) {
                        let frames = (stderrTail.last?.hasPrefix(Self.traceNote) == true ? Int(stderrTail.removeLast().dropFirst(Self.traceNote.count).prefix { $0.isNumber }) ?? 0 : 0) + 1
                        stderrTail.append("\(Self.traceNote)\(frames) lines, not shown)")
                    } else {
                        stderrTail.append(String(line.prefix(300)))
                    }
                    if stderrTail.count > 10 { stderrTail.removeFirst() }
                }
            }
            // A process that writes without newlines does not grow this without bound.
            if partial.count > 4096 { partial.removeAll() }
        }
    }
}

enum PluginProcessError: Error, CustomStringConvertible {
    case timedOut(seconds: Double)
    var description: String {
        switch self {
        case .timedOut(let s): return "the plugin process did not answer within \(s) s"
        }
    }
}
