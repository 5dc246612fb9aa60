import CYaokPlugin
import Foundation
import Logging
import YaokPluginKit

/// What the host's crypto offers plugins: signing with the hub key (the secret never
/// leaves the host), verification and randomness.
public struct HostCrypto: Sendable {
    public var signingKey: [UInt8]
    public var kxKey: [UInt8]
    public var sign: @Sendable ([UInt8]) -> [UInt8]
    public var verify: @Sendable (_ publicKey: [UInt8], _ message: [UInt8], _ signature: [UInt8]) -> Bool
    public var random: @Sendable (Int) -> [UInt8]

    public init(signingKey: [UInt8], kxKey: [UInt8], sign: @escaping @Sendable ([UInt8]) -> [UInt8],
                verify: @escaping @Sendable ([UInt8], [UInt8], [UInt8]) -> Bool, random: @escaping @Sendable (Int) -> [UInt8]) {
        self.signingKey = signingKey
        self.kxKey = kxKey
        self.sign = sign
        self.verify = verify
        self.random = random
    }
}

/// Receives what transports report. The router implements it.
public protocol TransportEventHandler: AnyObject, Sendable {
    func linkUp(_ link: LinkInfo, on transport: TransportHost)
    func linkDown(_ link: LinkID, reason: String?, on transport: TransportHost)
    func frameReceived(_ frame: [UInt8], link: LinkID, on transport: TransportHost)
    func statusChanged(on transport: TransportHost)
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
    /// When the host will try `start` again, if it is backing off.
    public var nextRetryInSeconds: Double?
}

/// One configured transport instance: owns the C host table handed to the plugin,
/// starts the plugin with capped exponential backoff, and forwards its callbacks.
public final class TransportHost: @unchecked Sendable {
    public let name: String
    public let section: HubConfig.TransportSection
    public let plugin: LoadedPlugin

    private let logger: Logger
    private let crypto: HostCrypto
    private weak var handler: TransportEventHandler?
    private let metrics: PluginMetricSink?
    private let lock = NSLock()
    private var api: UnsafeMutablePointer<yaok_host_api>?
    private var cStrings: [UnsafeMutablePointer<CChar>] = []
    private var instance: OpaquePointer?
    private var started = false
    private var stopping = false
    private var startFailures = 0
    private var lastStartError: String?
    private var retryAt: DispatchTime?
    private var retryWork: DispatchWorkItem?
    private var unmanagedSelf: Unmanaged<TransportHost>?
    private let queue: DispatchQueue

    /// Backoff for failed starts: 1 s doubling to at most 60 s.
    public static let maxBackoffSeconds = 60.0

    public init(section: HubConfig.TransportSection, plugin: LoadedPlugin, crypto: HostCrypto,
                handler: TransportEventHandler, metrics: PluginMetricSink?, logger: Logger) {
        self.name = section.name
        self.section = section
        self.plugin = plugin
        self.crypto = crypto
        self.handler = handler
        self.metrics = metrics
        var logger = logger
        logger[metadataKey: "transport"] = .string(section.name)
        self.logger = logger
        self.queue = DispatchQueue(label: "yaok.transport.\(section.name)")
    }

    deinit {
        for s in cStrings { free(s) }
        api?.deallocate()
    }

    private var descriptor: yaok_plugin_descriptor { plugin.descriptor.pointee }

    /// Creates the plugin instance (config is validated here) and starts it.
    /// A config error is permanent (until reload); a start error is retried with backoff.
    public func launch() throws {
        try create()
        queue.async { self.attemptStart() }
    }

    private func create() throws {
        let api = UnsafeMutablePointer<yaok_host_api>.allocate(capacity: 1)
        let name = strdup(self.name)!
        let config = strdup(section.section.json())!
        cStrings = [name, config]
        let me = Unmanaged.passRetained(self)
        unmanagedSelf = me
        var table = yaok_host_api()
        table.abi_version = YAOK_PLUGIN_ABI_VERSION
        table.struct_size = UInt32(MemoryLayout<yaok_host_api>.size)
        table.host_ctx = me.toOpaque()
        table.instance_name = UnsafePointer(name)
        table.config_json = UnsafePointer(config)
        withUnsafeMutableBytes(of: &table.hub_signing_key) { dst in for (i, b) in crypto.signingKey.prefix(32).enumerated() { dst[i] = b } }
        withUnsafeMutableBytes(of: &table.hub_kx_key) { dst in for (i, b) in crypto.kxKey.prefix(32).enumerated() { dst[i] = b } }
        table.log = TransportHost.logThunk
        table.sign = TransportHost.signThunk
        table.verify = TransportHost.verifyThunk
        table.random_bytes = TransportHost.randomThunk
        table.now_ms = TransportHost.nowThunk
        table.monotonic_ns = TransportHost.monotonicThunk
        table.metric = TransportHost.metricThunk
        table.link_up = TransportHost.linkUpThunk
        table.link_down = TransportHost.linkDownThunk
        table.frame_received = TransportHost.frameThunk
        table.status_changed = TransportHost.statusChangedThunk
        api.initialize(to: table)
        self.api = api

        var error = [CChar](repeating: 0, count: 1024)
        let created = error.withUnsafeMutableBufferPointer { descriptor.create(api, $0.baseAddress, $0.count) }
        guard let created else {
            me.release()
            unmanagedSelf = nil
            throw TransportHostError.createFailed(transport: self.name, reason: String(cString: error))
        }
        lock.withLock { instance = created }
    }

    /// Creates and destroys an instance without starting it: validates the plugin's config
    /// section (plugins must not open sockets in `create`). Used by `check-config`.
    public func validate() throws {
        try create()
        let instance = lock.withLock { () -> OpaquePointer? in
            let i = self.instance
            self.instance = nil
            return i
        }
        if let instance { descriptor.destroy(instance) }
        unmanagedSelf?.release()
        unmanagedSelf = nil
    }

    private func attemptStart() {
        guard let instance = lock.withLock({ stopping ? nil : self.instance }) else { return }
        var error = [CChar](repeating: 0, count: 1024)
        let rc = error.withUnsafeMutableBufferPointer { descriptor.start(instance, $0.baseAddress, $0.count) }
        if rc == 0 {
            lock.withLock {
                started = true
                startFailures = 0
                lastStartError = nil
                retryAt = nil
            }
            logger.info("transport \(name) (\(plugin.kind)) started")
            handler?.statusChanged(on: self)
            return
        }
        let reason = String(cString: error)
        let delay: Double = lock.withLock {
            startFailures += 1
            lastStartError = reason
            let d = min(Self.maxBackoffSeconds, pow(2.0, Double(startFailures - 1)))
            retryAt = .now() + d
            return d
        }
        logger.error("transport \(name) failed to start: \(reason); retrying in \(Int(delay)) s")
        let work = DispatchWorkItem { [weak self] in self?.attemptStart() }
        lock.withLock { retryWork = work }
        queue.asyncAfter(deadline: .now() + delay, execute: work)
        handler?.statusChanged(on: self)
    }

    /// Stops and destroys the plugin instance. Waits at most `timeout` for the plugin's `stop`.
    public func shutdown(timeout: Double = 2.5) {
        let instance: OpaquePointer? = lock.withLock {
            stopping = true
            retryWork?.cancel()
            let i = self.instance
            return i
        }
        guard let instance else { return }
        let done = DispatchSemaphore(value: 0)
        let d = descriptor
        // Serialised after any in-progress start on the transport queue.
        queue.async {
            d.stop(instance)
            done.signal()
        }
        if done.wait(timeout: .now() + timeout) == .timedOut {
            logger.error("transport \(name) did not stop within \(timeout) s; abandoning it")
            return
        }
        lock.withLock {
            self.instance = nil
            started = false
        }
        d.destroy(instance)
        unmanagedSelf?.release()
        unmanagedSelf = nil
    }

    /// Sends a frame on a link.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard let instance = lock.withLock({ self.instance }) else { throw TransportError.notRunning }
        var error = [CChar](repeating: 0, count: 512)
        let rc = frame.withUnsafeBufferPointer { f in
            error.withUnsafeMutableBufferPointer { e in
                descriptor.send(instance, link, f.baseAddress, f.count, e.baseAddress, e.count)
            }
        }
        guard rc == 0 else { throw TransportError.failed(String(cString: error)) }
    }

    /// The host and plugin view of this transport.
    public func runtimeStatus() -> TransportRuntimeStatus {
        let (instance, started, failures, lastError, retryAt) = lock.withLock {
            (self.instance, self.started, self.startFailures, self.lastStartError, self.retryAt)
        }
        var status = TransportStatus(state: .starting, reason: "starting")
        if let instance, let json = descriptor.status_json(instance) {
            let text = String(cString: json)
            descriptor.free_string(json)
            if let decoded = try? JSONDecoder().decode(TransportStatus.self, from: Data(text.utf8)) {
                status = decoded
            } else {
                status = TransportStatus(state: .degraded, reason: "plugin returned unreadable status")
            }
        }
        var next: Double?
        if !started, let lastError {
            // A start failure overrides whatever the plugin says about itself.
            if status.state != .unavailable { status.state = .failed }
            status.reason = lastError
            status.lastError = lastError
            if let retryAt {
                next = max(0, Double(Int64(retryAt.uptimeNanoseconds) - Int64(DispatchTime.now().uptimeNanoseconds)) / 1e9)
            }
        }
        return TransportRuntimeStatus(name: name, kind: plugin.kind, enabled: true, pluginPath: plugin.path,
                                      pluginVersion: plugin.version, status: status, startFailures: failures,
                                      nextRetryInSeconds: next)
    }

    // MARK: C callbacks. host_ctx is an Unmanaged<TransportHost> kept alive until destroy returns.

    static func host(_ ctx: UnsafeMutableRawPointer?) -> TransportHost? {
        guard let ctx else { return nil }
        return Unmanaged<TransportHost>.fromOpaque(ctx).takeUnretainedValue()
    }

    static let logThunk: @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?) -> Void = { ctx, level, message in
        guard let host = host(ctx), let message else { return }
        let levels: [Logger.Level] = [.trace, .debug, .info, .notice, .warning, .error, .critical]
        let l = levels[Int(max(0, min(6, level)))]
        host.logger.log(level: l, "\(String(cString: message))", metadata: ["plugin": .string(host.plugin.kind)])
    }

    static let signThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt8>?) -> Int32 = { ctx, message, len, out in
        guard let host = host(ctx), let out else { return 1 }
        let m = message.map { Array(UnsafeBufferPointer(start: $0, count: len)) } ?? []
        let sig = host.crypto.sign(m)
        guard sig.count == 64 else { return 2 }
        for i in 0..<64 { out[i] = sig[i] }
        return 0
    }

    static let verifyThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?) -> Int32 = { ctx, key, message, len, sig in
        guard let host = host(ctx), let key, let sig else { return 0 }
        let k = Array(UnsafeBufferPointer(start: key, count: 32))
        let m = message.map { Array(UnsafeBufferPointer(start: $0, count: len)) } ?? []
        let s = Array(UnsafeBufferPointer(start: sig, count: 64))
        return host.crypto.verify(k, m, s) ? 1 : 0
    }

    static let randomThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, Int) -> Void = { ctx, out, len in
        guard let host = host(ctx), let out else { return }
        let r = host.crypto.random(len)
        for i in 0..<len { out[i] = r[i] }
    }

    static let nowThunk: @convention(c) (UnsafeMutableRawPointer?) -> Int64 = { _ in Clock.nowMilliseconds() }

    static let monotonicThunk: @convention(c) (UnsafeMutableRawPointer?) -> UInt64 = { _ in DispatchTime.now().uptimeNanoseconds }

    static let metricThunk: @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?, Double) -> Void = { ctx, kind, name, value in
        guard let host = host(ctx), let name else { return }
        host.metrics?.record(instance: host.name, kind: yaok_metric_kind(UInt32(bitPattern: kind)), name: String(cString: name), value: value)
    }

    static let linkUpThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<yaok_link_info>?) -> Void = { ctx, info in
        guard let host = host(ctx), let info else { return }
        let i = info.pointee
        guard i.struct_size >= UInt32(MemoryLayout<yaok_link_info>.size), let role = PeerRole(rawValue: i.peer_role) else {
            host.logger.error("plugin reported a malformed link (size \(i.struct_size), role \(i.peer_role)); ignored")
            return
        }
        let link = LinkInfo(
            id: i.link_id,
            peerSigningKey: withUnsafeBytes(of: i.peer_signing_key) { Array($0) },
            peerKXKey: withUnsafeBytes(of: i.peer_kx_key) { Array($0) },
            peerRole: role, mtu: Int(i.mtu), cost: Int(i.cost),
            kind: i.link_kind.map { String(cString: $0) } ?? host.plugin.kind,
            remote: i.remote.map { String(cString: $0) })
        host.handler?.linkUp(link, on: host)
    }

    static let linkDownThunk: @convention(c) (UnsafeMutableRawPointer?, UInt64, UnsafePointer<CChar>?) -> Void = { ctx, link, reason in
        guard let host = host(ctx) else { return }
        host.handler?.linkDown(link, reason: reason.map { String(cString: $0) }, on: host)
    }

    static let frameThunk: @convention(c) (UnsafeMutableRawPointer?, UInt64, UnsafePointer<UInt8>?, Int) -> Void = { ctx, link, bytes, len in
        guard let host = host(ctx), let bytes else { return }
        host.handler?.frameReceived(Array(UnsafeBufferPointer(start: bytes, count: len)), link: link, on: host)
    }

    static let statusChangedThunk: @convention(c) (UnsafeMutableRawPointer?) -> Void = { ctx in
        guard let host = host(ctx) else { return }
        host.handler?.statusChanged(on: host)
    }
}

/// Errors creating a transport instance.
public enum TransportHostError: Error, CustomStringConvertible, Sendable {
    case createFailed(transport: String, reason: String)
    case noPlugin(transport: String, kind: String, searched: [String])

    public var description: String {
        switch self {
        case .createFailed(_, let reason): return reason
        case .noPlugin(_, let kind, let searched):
            return "no plugin of kind \"\(kind)\" found in \(searched.joined(separator: ", "))"
        }
    }
}

/// Wall-clock helpers.
public enum Clock {
    /// UTC milliseconds since the Unix epoch.
    public static func nowMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
