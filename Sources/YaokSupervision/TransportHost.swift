import CYaokPlugin
import Foundation
import Logging
import YaokPluginKit

/// Receives what a transport host reports: the daemon forwards it to the router.
public protocol TransportEventHandler: AnyObject, Sendable {
    func linkUp(_ link: LinkInfo, on transport: TransportHost)
    func linkDown(_ link: LinkID, reason: String?, on transport: TransportHost)
    func frameReceived(_ frame: [UInt8], link: LinkID, on transport: TransportHost)
    func statusChanged(on transport: TransportHost)
    /// The plugin refused a frame it was handed (sends are pipelined, so this comes later),
    /// saying why as the ABI's `yaok_send_result`.
    func sendFailed(_ frame: [UInt8], link: LinkID, result: SendResult, reason: String, on transport: TransportHost)
}

/// A plugin's refusal of one `send`, with the ABI's reason code.
public struct SendRefusal: Error, CustomStringConvertible, Sendable {
    public var result: SendResult
    public var reason: String
    public var description: String { reason }
}

/// Records plugin metrics.
public protocol PluginMetricSink: Sendable {
    func record(instance: String, kind: yaok_metric_kind, name: String, value: Double)
}

/// The status of one configured transport, host view plus plugin view.
public struct TransportRuntimeStatus: Sendable, Codable, Equatable {
    public var name: String
    public var kind: String
    public var enabled: Bool
    public var pluginPath: String?
    public var pluginVersion: String?
    public var status: TransportStatus
    /// Consecutive failed starts.
    public var startFailures: Int
    /// When the host will try `start` (or a new process) again, if it is backing off.
    public var nextRetryInSeconds: Double?
    /// The plugin process serving it now.
    public var pid: Int32?
    /// Plugin processes that ended unasked and were replaced since the transport was configured.
    public var restarts: Int?
    /// How the last plugin process ended (`SIGSEGV`, `exit code 1`, `killed: no heartbeat answer`).
    public var lastExit: String?

    public init(name: String, kind: String, enabled: Bool, pluginPath: String?, pluginVersion: String?, status: TransportStatus,
                startFailures: Int, nextRetryInSeconds: Double?, pid: Int32? = nil, restarts: Int? = nil, lastExit: String? = nil) {
        self.name = name; self.kind = kind; self.enabled = enabled; self.pluginPath = pluginPath; self.pluginVersion = pluginVersion
        self.status = status; self.startFailures = startFailures; self.nextRetryInSeconds = nextRetryInSeconds
        self.pid = pid; self.restarts = restarts; self.lastExit = lastExit
    }

    /// Running, or running with problems: what the ready line, status, the console and the
    /// `yaok_transport_up` metric count as running.
    public var isRunning: Bool { status.state == .running || status.state == .degraded }
}

/// One configured transport instance, run in its own plugin process (``PluginProcess``) and
/// supervised: a failed `start` is retried with capped backoff; a process that exits, is
/// killed by a signal, stops answering its heartbeat, or does not return from `stop` is killed
/// if need be and replaced with capped backoff, its links reported down (the router keeps
/// custody). Crashing `crashLimit` times in `crashWindow` seconds leaves it `failed` until the
/// config changes or SIGHUP. The hub's secret key never enters the process.
// @unchecked: process, state and counters only under `lock`; lifecycle steps run one at a time on `queue`.
public final class TransportHost: @unchecked Sendable {
    public let name: String
    public let section: TransportSection
    public let plugin: LoadedPlugin
    public var peerRoles: Set<PeerRole> { section.peerRoles }
    public let pinnedRelayKey: [UInt8]?

    private let logger: Logger
    private let crypto: HostCrypto
    private weak var handler: TransportEventHandler?
    private let metrics: PluginMetricSink?
    private let lock = NSLock()
    private var process: PluginProcess?
    private var runningVersion: String?
    private var started = false
    private var stopping = false
    private var startFailures = 0
    private var lastStartError: String?
    private var retryAt: DispatchTime?
    private var retryWork: DispatchWorkItem?
    private var restarts = 0
    private var crashes: [DispatchTime] = []
    private var lastExit: String?
    private var crashLoop: String?
    private var killReason: String?
    private var heartbeat: DispatchSourceTimer?
    private var lastStatus: TransportStatus?
    private var logBudget = TokenBucket(capacity: 200, nowMs: 0)
    private var logsDropped = 0
    private var sendWatchArmed = false
    private let queue: DispatchQueue

    /// Backoff for failed starts and restarts: 1 s doubling to at most 60 s.
    public static let maxBackoffSeconds = 60.0
    package static func backoffSeconds(failures: Int) -> Double {
        Double(Backoff.delayMs(failures: failures, baseMs: 1_000, capMs: Int64(maxBackoffSeconds * 1_000))) / 1_000
    }
    /// Crashes within ``crashWindow`` seconds that leave the transport `failed`.
    public static let crashLimit = 5
    public static let crashWindow = 60.0
    /// A process that does not answer a status request within this is killed.
    public static let heartbeatTimeout = 5.0
    public static let heartbeatInterval = 5.0
    /// `stop` must return within this, or the process is killed.
    public static let stopTimeout = 2.0
    /// Bound on one `send`: a plugin stuck in `send` is killed after it.
    public static let sendTimeout = 2.0

    public init(section: TransportSection, plugin: LoadedPlugin, crypto: HostCrypto,
                handler: TransportEventHandler, metrics: PluginMetricSink?, logger: Logger) {
        self.name = section.name
        self.section = section
        self.plugin = plugin
        self.pinnedRelayKey = section.kind == "relay" && plugin.command == nil ? (try? section.section.hexKey("relay_key")) ?? nil : nil
        self.crypto = crypto
        self.handler = handler
        self.metrics = metrics
        var logger = logger
        logger[metadataKey: "transport"] = .string(section.name)
        self.logger = logger
        self.queue = DispatchQueue(label: "yaok.transport.\(section.name)")
    }

    /// Starts the plugin process, creates the instance (its config is validated there), and
    /// starts it. A config error is permanent (until reload); a start error is retried with backoff.
    public func launch() throws {
        try prepare()
        begin()
    }

    /// Starts the plugin process and creates the instance, without starting it (plugins open
    /// no sockets in `create`, so this may run beside the instance it is to replace).
    public func prepare() throws { try spawnAndCreate() }

    /// Starts a prepared instance (retried with backoff) and its heartbeat.
    public func begin() {
        queue.async { self.attemptStart() }
        startHeartbeat()
    }

    /// Creates and destroys an instance in a plugin process without starting it: validates the
    /// plugin's config section. Used by `check-config`.
    public func validate() throws {
        try spawnAndCreate()
        let p = lock.withLock { () -> PluginProcess? in stopping = true; return process }
        _ = try? p?.call(timeout: Self.stopTimeout) { .stop(request: $0) }
        p?.close(grace: 0.5)
    }

    private func spawnAndCreate() throws {
        let policy = HostSigningPolicy(signingKey: crypto.signingKey, kxKey: crypto.kxKey, kind: plugin.kind, isProgram: plugin.command != nil)
        let p = PluginProcess(pluginPath: plugin.path, command: plugin.command, signingKey: crypto.signingKey, kxKey: crypto.kxKey,
                              sign: { [crypto, weak self] message in
                                  if let why = policy.refusal(of: message) {
                                      self?.refusedSigning(why)
                                      return []
                                  }
                                  self?.noteSigned(message)
                                  return crypto.sign(message)
                              }, events: processEvents())
        let hello: (kind: String, version: String)
        do {
            hello = try p.spawn(memoryLimitMB: section.memoryLimitMB, capabilities: section.capabilityMask)
        } catch PluginProcessError.timedOut(let seconds) {
            throw TransportHostError.noAnswer(transport: name, reason: "the plugin process did not say hello within \(Int(seconds)) s")
        } catch {
            throw TransportHostError.createFailed(transport: name, reason: "\(error)")
        }
        guard hello.kind == plugin.kind else {
            p.close(grace: 0.5)
            let why = plugin.command != nil
                ? "the program says it is kind \"\(hello.kind)\"; set `plugin: \(hello.kind)` in transports.\(name) if that is what you mean"
                : "\(plugin.path) now provides kind \"\(hello.kind)\", not \"\(plugin.kind)\""
            throw TransportHostError.createFailed(transport: name, reason: why)
        }
        let reply: (code: Int32, text: String)
        do {
            reply = try p.call(timeout: 10) {
                .create(request: $0, signingKey: crypto.signingKey, kxKey: crypto.kxKey, instance: name, configJSON: section.section.json())
            }
        } catch PluginProcessError.timedOut(let seconds) {
            p.close(grace: 0.5)
            throw TransportHostError.noAnswer(transport: name, reason: "the plugin process did not answer the create request within \(Int(seconds)) s")
        } catch {
            p.close(grace: 0.5)
            throw TransportHostError.createFailed(transport: name, reason: "\(error)")
        }
        guard reply.code == 0 else {
            p.close(grace: 0.5)
            throw TransportHostError.createFailed(transport: name, reason: reply.text)
        }
        // Only now is it this transport's process: the end of one that failed to become it
        // is the caller's error, not a crash to count and restart.
        lock.withLock { process = p; runningVersion = hello.version }
        metrics?.record(instance: name, kind: YAOK_METRIC_GAUGE_SET, name: "plugin_pid", value: Double(p.pid))
    }

    /// The plugin asked for a signature the hub does not give (``HostSigningPolicy``): counted
    /// (`yaok_transport_signatures_refused_total`) and logged, the first and then every 100th.
    private func refusedSigning(_ why: String) {
        let n = lock.withLock { () -> Int in signaturesRefused += 1; return signaturesRefused }
        metrics?.record(instance: name, kind: YAOK_METRIC_COUNTER_ADD, name: "signatures_refused_total", value: 1)
        if n == 1 || n % 100 == 0 {
            logger.warning("transport \(name): refused to sign \(why) (\(n) refused so far); a transport may have only its link handshakes signed")
        }
    }
    private var signaturesRefused = 0

    /// The handshakes the hub signed for this transport, against which its link-ups are checked.
    private var proofs = LinkProofLedger()
    private var linksRefused = 0

    private func noteSigned(_ message: [UInt8]) {
        lock.withLock { proofs.noteSigned(message, nowNs: DispatchTime.now().uptimeNanoseconds) }
    }

    /// Whether a link-up the plugin reports is proven (``LinkProofLedger``); one that is not is
    /// counted (`yaok_transport_links_refused_total`) and logged, the first and every 100th.
    private func linkUpProven(_ info: LinkInfo) -> Bool {
        let (why, n) = lock.withLock { () -> (String?, Int) in
            guard let why = proofs.refusal(of: info, nowNs: DispatchTime.now().uptimeNanoseconds) else { return (nil, 0) }
            linksRefused += 1
            return (why, linksRefused)
        }
        guard let why else { return true }
        metrics?.record(instance: name, kind: YAOK_METRIC_COUNTER_ADD, name: "links_refused_total", value: 1)
        if n == 1 || n % 100 == 0 {
            logger.warning("transport \(name): refused a link-up claiming the \(info.peerRole) role: \(why) (\(n) refused so far)")
        }
        return false
    }

    /// Signalled when the first start attempt has returned, whatever its outcome.
    private let firstAttempt = DispatchSemaphore(value: 0)
    private var attempted = false

    /// Waits until the first start attempt has returned (or `deadline`): the hub reports ready
    /// once every transport had its chance to bind, so a peer that connects at once is heard.
    public func waitForFirstStart(until deadline: DispatchTime) {
        if firstAttempt.wait(timeout: deadline) == .success { firstAttempt.signal() }
    }

    private func attemptStart() {
        defer {
            if lock.withLock({ () -> Bool in defer { attempted = true }; return !attempted }) { firstAttempt.signal() }
        }
        guard let p = lock.withLock({ stopping || crashLoop != nil ? nil : process }), p.isRunning else { return }
        let reason: String
        do {
            let reply = try p.call(timeout: 30) { .start(request: $0) }
            if reply.code == 0 {
                let after: Int = lock.withLock {
                    defer { started = true; startFailures = 0; lastStartError = nil; retryAt = nil }
                    return startFailures
                }
                if after > 0 {
                    logger.notice("transport \(name) (\(plugin.kind)) started in process \(p.pid) after \(after) failed attempts")
                } else {
                    logger.info("transport \(name) (\(plugin.kind)) started in process \(p.pid)")
                }
                handler?.statusChanged(on: self)
                return
            }
            reason = reply.text
        } catch {
            // The process died or hung during start: the exit handler restarts it.
            if case PluginProcessError.timedOut = error { kill(p, because: "start did not return within 30 s") }
            return
        }
        let (delay, reasonChanged): (Double, Bool) = lock.withLock {
            startFailures += 1
            let changed = lastStartError != reason
            lastStartError = reason
            let d = Self.backoffSeconds(failures: startFailures)
            retryAt = .now() + d
            return (d, changed)
        }
        // Said once, at the level it deserves, and again only when the reason changes: a box
        // without Bluetooth is not an error every 1, 2, 4, 8 … seconds.
        if reasonChanged {
            let pluginSays = (try? p.call(timeout: 1) { .status(request: $0) })
                .flatMap { try? JSONDecoder().decode(TransportStatus.self, from: Data($0.text.utf8)) }
            if pluginSays?.state == .unavailable {
                logger.warning("transport \(name) unavailable on this box: \(reason); checking again with backoff (next in \(Int(delay)) s)")
            } else {
                logger.error("transport \(name) failed to start: \(reason); retrying with backoff (next in \(Int(delay)) s)")
            }
        } else {
            logger.debug("transport \(name) still not started (\(reason)); next attempt in \(Int(delay)) s")
        }
        schedule(after: delay) { [weak self] in self?.attemptStart() }
        handler?.statusChanged(on: self)
    }

    private func schedule(after delay: Double, _ body: @escaping @Sendable () -> Void) {
        let work = DispatchWorkItem(block: body)
        lock.withLock { retryWork = work }
        queue.asyncAfter(deadline: .now() + delay, execute: work)
    }

    private func kill(_ p: PluginProcess, because reason: String) {
        lock.withLock { killReason = reason }
        logger.error("transport \(name): killing plugin process \(p.pid): \(reason)")
        p.kill()
    }

    /// Stops the instance and ends its process. A `stop` that does not return within 2 s gets the process killed.
    public func shutdown(timeout: Double = 2.5) {
        let p: PluginProcess? = lock.withLock {
            stopping = true
            retryWork?.cancel()
            heartbeat?.cancel()
            heartbeat = nil
            return process
        }
        guard let p, p.isRunning else { return }
        do {
            _ = try p.call(timeout: min(timeout, Self.stopTimeout)) { .stop(request: $0) }
            p.close(grace: 0.5)
        } catch {
            logger.error("transport \(name) did not stop within \(min(timeout, Self.stopTimeout)) s; killing its process \(p.pid)")
            p.kill()
        }
        lock.withLock { started = false }
    }

    /// Whether it crashed too often and waits for the config to change or SIGHUP.
    public var isCrashLooping: Bool { lock.withLock { crashLoop != nil } }

    /// Sends a frame on a link. The plugin's answer is not awaited (sends are pipelined across
    /// the process boundary): a refusal reaches the handler's `sendFailed`; a plugin that leaves
    /// a send unanswered for ``sendTimeout`` is killed.
    ///
    /// `held`: more sends follow in this pass; the frame may wait for ``flushHeldSends()``
    /// (``PluginProcess/sendFrame(_:to:timeout:held:)``). Returns whether it waits.
    @discardableResult
    public func send(_ frame: [UInt8], to link: LinkID, held: Bool = false) throws -> Bool {
        guard let p = lock.withLock({ process }) else { throw TransportError.notRunning }
        let waits: Bool
        do {
            waits = try p.sendFrame(frame, to: link, timeout: Self.sendTimeout, held: held)
        } catch PluginProcessError.timedOut {
            kill(p, because: "send did not return within \(Self.sendTimeout) s")
            throw TransportError.failed("transport \(name) did not take the frame within \(Self.sendTimeout) s")
        }
        watchSends(p, after: Self.sendTimeout)
        return waits
    }

    /// Writes the frames held by ``send(_:to:held:)`` to the plugin process, in one message.
    public func flushHeldSends() {
        lock.withLock { process }?.flushHeldSends()
    }

    /// One timer at a time checks that the oldest unanswered send is younger than
    /// ``sendTimeout``; a plugin stuck in `send` is killed within twice that.
    private func watchSends(_ p: PluginProcess, after delay: Double) {
        guard lock.withLock({ () -> Bool in defer { sendWatchArmed = true }; return !sendWatchArmed }) else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [weak self, weak p] in
            guard let self, let p else { return }
            lock.withLock { self.sendWatchArmed = false }
            let waited = p.oldestSendWait
            if waited > Self.sendTimeout {
                kill(p, because: "send did not return within \(Self.sendTimeout) s")
            } else if waited > 0 {
                watchSends(p, after: Self.sendTimeout - waited + 0.05)
            }
        }
    }

    // MARK: Supervision

    private func processEvents() -> PluginProcess.Events {
        var e = PluginProcess.Events()
        e.linkUpProven = { [weak self] info in self?.linkUpProven(info) ?? false }
        e.linkUp = { [weak self] info in
            guard let self else { return }
            handler?.linkUp(info, on: self)
        }
        e.linkDown = { [weak self] id, reason in
            guard let self else { return }
            handler?.linkDown(id, reason: reason, on: self)
        }
        e.frame = { [weak self] frame, id in
            guard let self else { return }
            handler?.frameReceived(frame, link: id, on: self)
        }
        e.sendFailed = { [weak self] frame, id, result, reason in
            guard let self else { return }
            handler?.sendFailed(frame, link: id, result: result, reason: reason, on: self)
        }
        e.statusChanged = { [weak self] in
            guard let self else { return }
            handler?.statusChanged(on: self)
        }
        e.metric = { [weak self] kind, name, value in
            guard let self else { return }
            metrics?.record(instance: self.name, kind: yaok_metric_kind(UInt32(bitPattern: kind)), name: name, value: value)
        }
        e.log = { [weak self] level, message in self?.pluginLog(level, message) }
        e.exited = { [weak self] exit, tail, pid in self?.processExited(exit, stderr: tail, pid: pid) }
        return e
    }

    /// A plugin's log lines, bounded: 200 at once, 50 a second after that; the rest are counted.
    private func pluginLog(_ level: Int32, _ message: String) {
        let (ok, dropped): (Bool, Int) = lock.withLock {
            let now = Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000)
            guard logBudget.take(capacity: 200, perMs: 0.05, nowMs: now) == nil else {
                logsDropped += 1
                return (false, 0)
            }
            defer { logsDropped = 0 }
            return (true, logsDropped)
        }
        guard ok else { return }
        if dropped > 0 { logger.warning("transport \(name): \(dropped) log lines from the plugin dropped (over 50 lines/s)") }
        let levels: [Logger.Level] = [.trace, .debug, .info, .notice, .warning, .error, .critical]
        logger.log(level: levels[Int(max(0, min(6, level)))], "\(String(message.prefix(2000)))", metadata: ["plugin": .string(plugin.kind)])
    }

    private func processExited(_ exit: PluginProcess.Exit, stderr: [String], pid ended: pid_t) {
        guard lock.withLock({ process?.pid == ended }) else { return }
        let (expected, why, pid): (Bool, String, Int32) = lock.withLock {
            let why = killReason.map { "killed: \($0)" } ?? exit.description
            killReason = nil
            lastExit = why
            started = false
            return (stopping, why, process?.pid ?? 0)
        }
        if expected { return }
        for line in stderr { logger.error("transport \(name) plugin process \(pid) stderr: \(line)") }
        let now = DispatchTime.now()
        let (loop, delay): (String?, Double) = lock.withLock {
            restarts += 1
            crashes = crashes.filter { now.uptimeNanoseconds - $0.uptimeNanoseconds < UInt64(Self.crashWindow * 1e9) } + [now]
            if crashes.count >= Self.crashLimit {
                crashLoop = "crashed \(crashes.count) times in \(Int(Self.crashWindow)) s (last: \(why))"
                retryAt = nil
                return (crashLoop, 0)
            }
            let d = Self.backoffSeconds(failures: crashes.count)
            retryAt = .now() + d
            return (nil, d)
        }
        metrics?.record(instance: name, kind: YAOK_METRIC_COUNTER_ADD, name: "plugin_restarts_total", value: 1)
        if let loop {
            logger.critical("transport \(name) plugin process \(pid) ended (\(why)); \(loop): left failed until the config changes or SIGHUP")
        } else {
            logger.error("transport \(name) plugin process \(pid) ended (\(why)); its links are down, custody stays with the hub; restarting in \(Int(delay)) s")
            schedule(after: delay) { [weak self] in self?.respawn() }
        }
        handler?.statusChanged(on: self)
    }

    private func respawn() {
        guard !lock.withLock({ stopping || crashLoop != nil }) else { return }
        do {
            try spawnAndCreate()
            lock.withLock { retryAt = nil }
            attemptStart()
        } catch {
            logger.error("transport \(name): cannot restart its plugin process: \(error)")
            // Counts as a crash: the same backoff and the same crash-loop limit.
            processExited(PluginProcess.Exit(code: nil, signal: nil), stderr: [], pid: lock.withLock { process?.pid ?? 0 })
            lock.withLock { lastExit = "\(error)" }
        }
    }

    private func startHeartbeat() {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + Self.heartbeatInterval, repeating: Self.heartbeatInterval)
        timer.setEventHandler { [weak self] in self?.beat() }
        lock.withLock { heartbeat = timer }
        timer.resume()
    }

    private func beat() {
        guard let p = lock.withLock({ stopping ? nil : process }), p.isRunning else { return }
        p.expireCarriers()
        do {
            let reply = try p.call(timeout: Self.heartbeatTimeout) { .status(request: $0) }
            if let s = try? JSONDecoder().decode(TransportStatus.self, from: Data(reply.text.utf8)) { lock.withLock { lastStatus = s } }
        } catch PluginProcessError.timedOut {
            kill(p, because: "no answer to the heartbeat within \(Int(Self.heartbeatTimeout)) s")
        } catch {}
    }

    /// The host and plugin view of this transport.
    public func runtimeStatus() -> TransportRuntimeStatus {
        let (p, started, failures, lastError, retryAt, restarts, lastExit, loop, cached) = lock.withLock {
            (process, self.started, startFailures, lastStartError, self.retryAt, self.restarts, self.lastExit, crashLoop, lastStatus)
        }
        var status = cached ?? TransportStatus(state: .starting, reason: "starting")
        if let p, p.isRunning {
            if let reply = try? p.call(timeout: 1, { .status(request: $0) }), !reply.text.isEmpty {
                if let decoded = try? JSONDecoder().decode(TransportStatus.self, from: Data(reply.text.utf8)) {
                    status = decoded
                    lock.withLock { lastStatus = decoded }
                } else {
                    status = TransportStatus(state: .degraded, reason: "plugin returned unreadable status")
                }
            }
        }
        var next: Double?
        if let retryAt {
            next = max(0, Double(Int64(retryAt.uptimeNanoseconds) - Int64(DispatchTime.now().uptimeNanoseconds)) / 1e9)
        }
        if let loop {
            status.state = .failed
            status.reason = loop
            status.lastError = loop
            next = nil
        } else if p?.isRunning != true, let lastExit {
            status.state = .failed
            status.reason = "plugin process ended (\(lastExit)); restarting"
            status.lastError = status.reason
        } else if !started, let lastError {
            // A start failure overrides whatever the plugin says about itself.
            if status.state != .unavailable { status.state = .failed }
            status.reason = lastError
            status.lastError = lastError
        }
        let version = lock.withLock { runningVersion } ?? plugin.version
        return TransportRuntimeStatus(name: name, kind: plugin.kind, enabled: true, pluginPath: plugin.path,
                                      pluginVersion: version, status: status, startFailures: failures,
                                      nextRetryInSeconds: next, pid: p?.isRunning == true ? p?.pid : nil,
                                      restarts: restarts, lastExit: lastExit)
    }
}

/// Errors creating a transport instance.
public enum TransportHostError: Error, CustomStringConvertible, Sendable {
    /// The plugin refused the section, or its process failed to start: the same again would fail.
    case createFailed(transport: String, reason: String)
    /// The plugin process did not answer in time (a slow or loaded box): worth trying again.
    case noAnswer(transport: String, reason: String)
    case noPlugin(transport: String, kind: String, searched: [String])

    public var description: String {
        switch self {
        case .createFailed(_, let reason), .noAnswer(_, let reason): return reason
        case .noPlugin(_, let kind, let searched):
            return "no plugin of kind \"\(kind)\" found in \(searched.joined(separator: ", "))"
        }
    }
}
