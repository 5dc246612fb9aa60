import CLinuxProcess
import CYaokPlugin
import Foundation
import YaokPluginKit

/// The plugin-process side (`yaok-hub plugin-host`): the hub's own binary, started by the hub
/// for one transport instance. It opens the plugin file, drives its unchanged C ABI, and turns
/// every call and callback into a ``PluginMessage`` on the socket it inherited. It holds no
/// secret key: signing is a request to the hub. When the hub goes away, so does it.
public enum PluginProcessMain {
    /// `--probe PATH`: opens and checks one plugin file and prints what `yaok-hub plugins` shows,
    /// as JSON, on stdout. The hub never opens plugin code itself: a library whose loading
    /// crashes takes only this process down.
    public static func probe(path: String) -> Int32 {
        // Dies with the hub like a transport's process: a library whose loading hangs must not
        // outlive a hub killed during its start. Orphaned already (the hub died first): stop.
        _ = yaok_child_hardening()
        if getppid() == 1 { return 1 }
        let result = PluginLoader.load(path: path, existing: [:])
        guard let data = try? JSONEncoder().encode(result.discovered) else { return 1 }
        FileHandle.standardOutput.write(data)
        return 0
    }

    /// Before any plugin code runs: die with the hub, gain no privileges from exec, keep only
    /// the capabilities the transport's section grants, and bound memory.
    private static func sandbox(memoryLimitMB: Int, capabilities: UInt64) {
        _ = yaok_child_hardening()
        if yaok_limit_capabilities(capabilities) != 0 {
            FileHandle.standardError.write(Data("cannot limit capabilities: \(String(cString: strerror(errno)))\n".utf8))
            exit(4)
        }
        if memoryLimitMB > 0 {
            let bytes = rlim_t(memoryLimitMB) << 20
            var limit = rlimit(rlim_cur: bytes, rlim_max: bytes)
            _ = setrlimit(Int32(RLIMIT_AS.rawValue), &limit)
        }
    }

    /// `--exec -- PROGRAM ARGS…`: sets up the same sandbox, then becomes the standalone program
    /// (`command:`), which inherits the socket on fd 3, the parent-death signal, no-new-privileges,
    /// the capabilities (as ambient ones) and the memory bound. Returns only if exec failed.
    public static func exec(_ argv: [String], memoryLimitMB: Int, capabilities: UInt64) -> Int32 {
        guard let program = argv.first else { return 2 }
        sandbox(memoryLimitMB: memoryLimitMB, capabilities: capabilities)
        let cArgs = argv.map { strdup($0) } + [nil]
        execv(program, cArgs)
        FileHandle.standardError.write(Data("cannot run \(program): \(String(cString: strerror(errno)))\n".utf8))
        return 127
    }

    /// Serves one plugin instance over `fd` until the hub closes it. Never returns.
    public static func run(pluginPath: String, fd: Int32, memoryLimitMB: Int, capabilities: UInt64) -> Never {
        sandbox(memoryLimitMB: memoryLimitMB, capabilities: capabilities)
        signal(SIGPIPE, SIG_IGN)
        // systemd's stop and a terminal's Ctrl-C or hang-up signal the hub's whole group at
        // once. The hub ends this process itself, after the plugin's `stop` (where BLE and
        // Wi-Fi Direct tear down what they set up); if the hub dies, the parent-death signal
        // (SIGKILL) ends it.
        for sig in [SIGTERM, SIGINT, SIGHUP] { signal(sig, SIG_IGN) }
        let result = PluginLoader.load(path: pluginPath, existing: [:])
        guard let plugin = result.plugin else {
            FileHandle.standardError.write(Data("refused plugin \(pluginPath): \(result.discovered.reason ?? "unknown reason")\n".utf8))
            exit(3)
        }
        let channel = ChildChannel(fd: fd, plugin: plugin)
        channel.send(.hello(version: PluginMessage.version, kind: plugin.kind, pluginVersion: plugin.version))
        channel.serve()
        exit(0)
    }
}

/// The plugin process's end of the socket: reads requests, answers them, forwards callbacks.
// @unchecked: shared state only under `lock`; requests run one at a time on `control`, sends on `data`.
private final class ChildChannel: PluginCallbacks, @unchecked Sendable {
    let fd: Int32
    let plugin: LoadedPlugin
    private var driver: InProcessPlugin?
    /// create/start/stop/status run here, one at a time (the ABI's rule); sends on their own
    /// queue (the ABI lets `send` overlap `status_json`). The reading thread runs no plugin
    /// code: a plugin thread waiting for a signature while holding a lock that `send` needs
    /// must still get its answer.
    private let control = DispatchQueue(label: "yaok.plugin-host.control")
    private let data = DispatchQueue(label: "yaok.plugin-host.send")
    private let lock = NSLock()
    private var nextSign: UInt32 = 1
    /// Sends handed to `data` and not yet done (under `lock`), and the IDs of those that
    /// succeeded since the last answer (touched on `data` only): one `sent` answer per burst.
    private var sendsQueued = 0
    private var succeeded: [UInt32] = []
    private var signWaiters: [UInt32: (DispatchSemaphore, [UInt8]?)] = [:]

    init(fd: Int32, plugin: LoadedPlugin) {
        self.fd = fd
        self.plugin = plugin
    }

    func send(_ message: PluginMessage) {
        let bytes = message.encoded
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func serve() {
        var buffer = [UInt8](repeating: 0, count: PluginMessage.maxLength)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            // The hub closed its end (or died): nothing more to do here.
            guard n > 0 else { return }
            guard let message = try? PluginMessage(parsing: Array(buffer[0..<n])) else { continue }
            handle(message)
        }
    }

    private func handle(_ message: PluginMessage) {
        switch message {
        case .create(let r, let key, let kx, let name, let json):
            control.async { [self] in
                let d = InProcessPlugin(plugin: plugin, callbacks: self)
                reply(to: r) {
                    try d.create(instanceName: name, configJSON: json, signingKey: key, kxKey: kx)
                    lock.withLock { driver = d }
                }
            }
        case .start(let r):
            control.async { [self] in
                reply(to: r) {
                    guard let d = lock.withLock({ driver }) else { throw TransportError.notRunning }
                    try d.start()
                }
            }
        case .stop(let r):
            control.async { [self] in
                let d = lock.withLock { driver }
                d?.stop()
                d?.destroy()
                lock.withLock { driver = nil }
                send(.reply(request: r, code: 0, text: ""))
            }
        case .status(let r):
            control.async { [self] in
                send(.reply(request: r, code: 0, text: lock.withLock({ driver })?.statusJSON() ?? ""))
            }
        case .send(let r, let link, let frame):
            perform([PluginSend(request: r, link: link, frame: frame)])
        case .sends(let sends):
            perform(sends)
        case .signature(let r, let sig):
            lock.withLock {
                guard let (semaphore, _) = signWaiters[r] else { return }
                signWaiters[r] = (semaphore, sig.count == 64 ? sig : nil)
                semaphore.signal()
            }
        default:
            break // a message only the hub receives: ignored
        }
    }

    /// Hands `sends` to the plugin in order, on the send queue, in one block; answers each
    /// failure on its own and the successes together when the burst is over (or every 64).
    private func perform(_ sends: [PluginSend]) {
        lock.withLock { sendsQueued += sends.count }
        data.async { [self] in
            for s in sends {
                do {
                    guard let d = lock.withLock({ driver }) else { throw TransportError.notRunning }
                    try d.send(s.frame, to: s.link)
                    succeeded.append(s.request)
                } catch {
                    replyFailure(to: s.request, error)
                }
                // The burst is over (nothing else queued) or big: answer for it at once.
                let idle = lock.withLock { sendsQueued -= 1; return sendsQueued == 0 }
                if !succeeded.isEmpty && (idle || succeeded.count >= 64) {
                    send(.sent(requests: succeeded))
                    succeeded.removeAll(keepingCapacity: true)
                }
            }
        }
    }

    /// Answers request `r`: code 0 once `body` returns, else as ``replyFailure(to:_:)``.
    private func reply(to r: UInt32, _ body: () throws -> Void) {
        do {
            try body()
            send(.reply(request: r, code: 0, text: ""))
        } catch {
            replyFailure(to: r, error)
        }
    }

    /// Answers request `r` that failed with `error`: its send result (a refusal's, a transport
    /// error's, or failed) and its text.
    private func replyFailure(to r: UInt32, _ error: any Error) {
        let result = (error as? SendRefusal)?.result ?? (error as? TransportError)?.sendResult ?? .failed
        send(.reply(request: r, code: result.rawValue, text: "\(error)"))
    }

    // MARK: PluginCallbacks

    func log(level: Int32, _ message: String) { send(.log(level: level, message: message)) }

    func sign(_ message: [UInt8]) -> [UInt8]? {
        let semaphore = DispatchSemaphore(value: 0)
        let r: UInt32 = lock.withLock {
            let r = nextSign
            nextSign &+= 1
            signWaiters[r] = (semaphore, nil)
            return r
        }
        send(.sign(request: r, message: message))
        let answered = semaphore.wait(timeout: .now() + 5) == .success
        return lock.withLock {
            defer { signWaiters[r] = nil }
            return answered ? signWaiters[r]?.1 : nil
        }
    }

    func metric(kind: Int32, name: String, value: Double) { send(.metric(kind: kind, name: name, value: value)) }
    func linkUp(_ link: LinkInfo) { send(.linkUp(link)) }
    func linkDown(_ link: LinkID, reason: String?) { send(.linkDown(link: link, reason: reason ?? "")) }
    func frame(_ frame: [UInt8], link: LinkID) { send(.frame(link: link, frame: frame)) }
    func statusChanged() { send(.statusChanged) }
}
