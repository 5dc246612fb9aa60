import CYaokPlugin
import Foundation
import Logging
import YaokCrypto
import YaokPluginKit
import YaokProcess
import YaokRouting
import YaokStore
import YaokSupervision
import YaokWire

/// The running hub: identity, store, router, transports, control socket, signals.
///
/// One transport failing, throwing or being misconfigured never stops the others:
/// each is created, started and stopped on its own, and its problem shows in status.
// @unchecked: config, transports, catalog and observers only under `lock`; reloads run one at a time on `reloadQueue`.
public final class Hub: @unchecked Sendable {
    public let identity: Identity
    public private(set) var config: HubConfig
    public let dataDirectory: String
    public let controlSocketPath: String
    public let startedAtMs: Int64

    private let logger: Logger
    /// Held for the process's life: no second hub, and no `yaok-hub store` command, works on
    /// this data directory meanwhile.
    private let dataDirectoryLock: DataDirectoryLock
    private let database: SQLCipherDatabase
    private let store: BundleStore
    public let router: Router
    public let metrics: MetricsRegistry
    private var catalog: PluginCatalog
    private var pluginDirectories: [String]
    private var transports: [String: TransportHost] = [:]
    /// Sections that are enabled but could not be created (no plugin, bad config), with the reason.
    private var failedSections: [String: (kind: String, reason: String)] = [:]
    /// Sections whose plugin process did not answer in time while being created (a slow or
    /// loaded box, not a refusal): tried again on the transports' restart backoff. `due` tells
    /// the retry that is still wanted from one a later reload has replaced.
    private var createRetries: [String: (failures: Int, due: DispatchTime)] = [:]
    private var shuttingDown = false
    /// Set when `start` has given every transport its first start attempt.
    private var ready = false
    private var control: ControlServer?
    private var metricsServer: MetricsHTTPServer?
    private let notifier = SystemdNotifier()
    private let lock = NSLock()
    private var reloadObservers: [@Sendable (HubConfig) -> Void] = []

    /// Calls `observer` on the reload queue with each config a reload (SIGHUP or the console's
    /// switch) has applied: for parts of the process outside the hub, such as the console.
    public func onReload(_ observer: @escaping @Sendable (HubConfig) -> Void) {
        lock.withLock { reloadObservers.append(observer) }
    }
    private let reloadQueue = DispatchQueue(label: "yaok.hub.reload")
    private var signalsInstalled = false
    private var watchdog: DispatchSourceTimer?
    private let stopped = DispatchSemaphore(value: 0)

    /// Opens identity and store and loads plugins; does not start transports yet.
    public init(config: HubConfig, logger: Logger) throws {
        self.config = config
        self.logger = logger
        self.startedAtMs = WallClock.nowMilliseconds()
        let dataDir = Paths.dataDirectory(configured: config.dataDir)
        self.dataDirectory = dataDir
        try Paths.ensureDirectory(dataDir, mode: 0o700)
        self.controlSocketPath = Paths.controlSocket(configured: config.controlSocket, dataDirectory: dataDir)
        dataDirectoryLock = try DataDirectoryLock(dataDirectory: dataDir)

        identity = try IdentityFile.loadOrCreate(path: Paths.resolve(config.identityFile, in: dataDir))
        let key = try DatabaseKey.load(keyFile: Paths.resolve(config.store.keyFile, in: dataDir))
        let storePath = Paths.storeFile(dataDirectory: dataDir)
        // An interrupted `yaok-hub store rewrite` may have left its half-built copy, as big as
        // the store; with the lock held, no rewrite is running.
        SQLCipherDatabase.removeRewriteLeftovers(for: storePath)
        database = try SQLCipherDatabase(path: storePath, key: key)
        store = try BundleStore(database: database, sizeCapBytes: config.store.sizeCapBytes)
        // The page size is what the `sqlcipher` CLI must be told to open the file (key rotation).
        logger.notice("store \(database.path): pages of \(database.pageSize) bytes")
        if database.pageSize != SQLCipherDatabase.defaultPageSize {
            logger.notice("store \(database.path) was made with \(database.pageSize)-byte pages; with \(SQLCipherDatabase.defaultPageSize)-byte pages a lightly loaded hub writes about 40 % fewer bytes per message: stop the hub and run `yaok-hub store rewrite` (Docs/operations.md)")
        }
        metrics = MetricsRegistry()
        let certificate = Self.ownCertificate(config, identity: identity, dataDirectory: dataDir, logger: logger)
        // The hub clock resumes where the store last left it (Docs/store.md, "Hub clock").
        let persisted = try store.persistedHubClock()
        let time = HubTime(startHubMs: HubClockStart.resume(persisted: persisted, wallNowMs: WallClock.nowMilliseconds()),
                           trust: config.clock.trustSystemClock)
        logger.notice("clock: \(time.estimate.summary)")
        router = Router(hubIdentity: identity, store: store, settings: Self.routerSettings(config, certificate: certificate),
                        policy: Self.policy(config), logger: logger, time: time)
        pluginDirectories = config.pluginDirs.isEmpty ? PluginLoader.defaultDirectories() : config.pluginDirs
        catalog = PluginLoader.scan(directories: pluginDirectories, logger: logger)
    }

    static func routerSettings(_ c: HubConfig, certificate: [UInt8]?) -> Router.Settings {
        var settings = Router.Settings(hopLimit: c.router.hopLimit, linkFramesPerSecond: c.router.linkFramesPerSecond,
                        senderEnvelopesPerMinute: c.router.senderEnvelopesPerMinute, custodyTimeoutMs: c.router.custodyTimeoutMs,
                        lifetime: EnvelopeLifetime(maxTTLMs: c.router.maxTTLMs, clockSkewMs: c.router.clockSkewMs),
                        trust: c.router.hubTrust, ownCertificate: certificate, setSystemClock: c.clock.setSystemClock)
        settings.relayKey = c.transports.first { $0.enabled && $0.kind == "relay" }.flatMap { (try? $0.section.hexKey("relay_key")) ?? nil }
        settings.testing = testSwitches(ProcessInfo.processInfo.environment)
        return settings
    }

    /// The router's test switches from `YAOK_TEST_*` variables, which tests that run a hub
    /// process set (in-memory tests set ``Router/Testing`` directly). Debug builds only: a
    /// release build, what is installed in the field, reads no test variable.
    static func testSwitches(_ environment: [String: String]) -> Router.Testing {
        var t = Router.Testing()
        #if DEBUG
        t.noReconcile = environment["YAOK_TEST_NO_RECONCILE"] != nil
        t.commitDelayUs = environment["YAOK_TEST_COMMIT_DELAY_MS"].flatMap { UInt32($0) }.map { min($0, 2000) * 1000 } ?? 0
        if let quiet = environment["YAOK_TEST_WAL_QUIET_MS"].flatMap({ Int64($0) }) { t.walQuietMs = max(quiet, 100) }
        #endif
        return t
    }

    /// This hub's certificate (`router.hub_certificate`), if configured and usable. A missing,
    /// unreadable or foreign certificate is logged and not sent: the hub still runs, and
    /// peers in network trust give it nothing, which the log explains.
    static func ownCertificate(_ c: HubConfig, identity: Identity, dataDirectory: String, logger: Logger) -> [UInt8]? {
        if c.router.hubTrust.mode == .list && c.router.hubTrust.trustedHubs.isEmpty {
            logger.notice("hub_trust: list with no trusted_hubs: hub peers get no bundles until their keys are listed")
        }
        guard let file = c.router.hubTrust.certificateFile else { return nil }
        let path = Paths.resolve(file, in: dataDirectory)
        guard let data = FileManager.default.contents(atPath: path) else {
            logger.error("hub_certificate \(path) cannot be read; not sending a certificate")
            return nil
        }
        do {
            let cert = try HubCertificate(parsing: [UInt8](data))
            guard cert.hubKey == identity.signingKey else {
                logger.error("hub_certificate \(path) was issued for another hub key; not sending it")
                return nil
            }
            guard cert.signatureVerifies else {
                logger.error("hub_certificate \(path): the network key's signature does not verify; not sending it")
                return nil
            }
            let now = WallClock.nowMilliseconds()
            // By our wall clock, which may be days off: peers judge it by their estimate of true time.
            if now > cert.notAfterMs { logger.warning("hub_certificate \(path) has expired by this hub's clock (if the clock is right, peers will refuse it; see clock: in yaok-hub status)") }
            if now < cert.notBeforeMs { logger.warning("hub_certificate \(path) is not valid yet by this hub's clock (if the clock is right, peers will refuse it; see clock: in yaok-hub status)") }
            return cert.encoded
        } catch {
            logger.error("hub_certificate \(path): \(error); not sending it")
            return nil
        }
    }

    static func policy(_ c: HubConfig) -> RoutingPolicy {
        c.router.policy == "spray-and-wait" ? SprayAndWaitPolicy(copies: c.router.sprayCopies) : EpidemicPolicy()
    }

    private var hostCrypto: HostCrypto {
        let signing = identity.signingKeyPair
        return HostCrypto(signingKey: identity.signingKey, kxKey: identity.kxKey,
                          sign: { signing.sign($0) })
    }

    /// Starts router, transports and control socket; tells systemd it is ready.
    public func start() throws {
        router.start()
        let control = ControlServer(path: controlSocketPath, logger: logger) { [weak self] command in
            guard let self else { return .failure(.remote("hub is shutting down")) }
            return self.handleControl(command)
        }
        try control.start()
        self.control = control
        lock.withLock { applyTransports(config) }
        if config.metrics.enabled {
            // Metrics are optional: a bad address or a port in use is logged, the hub runs on.
            do {
                let server = try MetricsHTTPServer(listen: config.metrics.listen, logger: logger) { [weak self] in self?.prometheusText() ?? "" }
                let port = try server.start()
                metricsServer = server
                logger.notice("metrics on http://\(config.metrics.listen.split(separator: ":").dropLast().joined(separator: ":")):\(port)/metrics")
            } catch {
                logger.error("metrics endpoint not started: \(error)")
            }
        }
        lock.withLock { ready = true }
        let states = transportStatuses().filter(\.enabled)
        logger.notice("hub \(identity.fingerprint.prefix(9)) ready: \(Self.readySummary(states)), control socket \(controlSocketPath)")
        notifier.notify("READY=1\nSTATUS=running")
        if let interval = notifier.watchdogInterval {
            let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "yaok.watchdog"))
            timer.schedule(deadline: .now(), repeating: interval / 2)
            timer.setEventHandler { [notifier] in notifier.notify("WATCHDOG=1") }
            timer.resume()
            watchdog = timer
        }
    }

    /// Starts SIGTERM/SIGINT (stop) and SIGHUP (reload) handling. The process must have
    /// called `SignalWaiter.installEarly()` first thing in `main`; signals sent before this
    /// call stay pending and are handled here.
    public func installSignalHandlers() {
        guard !signalsInstalled else { return }
        signalsInstalled = true
        SignalWaiter.start { [weak self] sig in
            guard let self else { return }
            if sig == SIGHUP {
                self.reload()
            } else {
                self.logger.notice("received \(sig == SIGTERM ? "SIGTERM" : "SIGINT"); shutting down")
                self.stopped.signal()
            }
        }
    }

    /// Runs until SIGTERM or SIGINT; SIGHUP reloads the config file.
    public func runUntilSignalled() {
        installSignalHandlers()
        stopped.wait()
        shutdown()
    }

    /// Asks a running `runUntilSignalled` to return (as SIGTERM would).
    public func requestStop() { stopped.signal() }

    /// Stops every transport (in parallel, bounded) and flushes the store.
    public func shutdown() {
        notifier.notify("STOPPING=1")
        lock.withLock { shuttingDown = true }
        watchdog?.cancel()
        control?.stop()
        metricsServer?.stop()
        let hosts = lock.withLock { Array(transports.values) }
        let group = DispatchGroup()
        for host in hosts {
            group.enter()
            DispatchQueue.global().async {
                host.shutdown(timeout: 2.5)
                group.leave()
            }
        }
        if group.wait(timeout: .now() + 3.5) == .timedOut {
            logger.error("some transports did not stop in time")
        }
        router.stop()
        database.close()
        logger.notice("hub stopped")
    }

    // MARK: Reload

    /// Re-reads the config file; on error keeps the running config and logs why.
    public func reload() {
        reloadQueue.async { [self] in
            guard config.source.hasPrefix("/") || FileManager.default.fileExists(atPath: config.source) else {
                logger.warning("SIGHUP ignored: running on the embedded default config, there is no file to re-read")
                return
            }
            notifier.notify("RELOADING=1")
            defer { notifier.notify("READY=1") }
            let newConfig: HubConfig
            do {
                newConfig = try HubConfig.load(path: config.source)
            } catch {
                logger.error("reload: keeping the running config; \(config.source): \(error)")
                return
            }
            lock.withLock {
                if newConfig.pluginDirs != config.pluginDirs {
                    pluginDirectories = newConfig.pluginDirs.isEmpty ? PluginLoader.defaultDirectories() : newConfig.pluginDirs
                }
                // Pick up plugins installed or replaced since start (a replaced file restarts the
                // transports of its kind below); a kind whose file is gone keeps its running process.
                let rescanned = PluginLoader.scan(directories: pluginDirectories, logger: logger)
                for (kind, plugin) in rescanned.loaded { catalog.loaded[kind] = plugin }
                catalog.discovered = rescanned.discovered
                let certificate = Self.ownCertificate(newConfig, identity: identity, dataDirectory: dataDirectory, logger: logger)
                router.update(settings: Self.routerSettings(newConfig, certificate: certificate), policy: Self.policy(newConfig))
                applyTransports(newConfig)
                config = newConfig
            }
            logger.notice("reloaded \(newConfig.source)")
            for observer in lock.withLock({ reloadObservers }) { observer(newConfig) }
        }
    }

    /// Makes the running transports match `newConfig`: stops removed and disabled sections,
    /// starts new ones, replaces changed ones (and those whose plugin file was replaced, or that
    /// gave up after a crash loop), and leaves unchanged ones (and their links) alone. A changed
    /// section is created in a new plugin process first: if the plugin refuses it, the running
    /// instance stays, and the log says why.
    private func applyTransports(_ newConfig: HubConfig) {
        let wanted = Dictionary(uniqueKeysWithValues: newConfig.transports.filter(\.enabled).map { ($0.name, $0) })
        func unchanged(_ host: TransportHost, _ section: HubConfig.TransportSection) -> Bool {
            let replaced = host.plugin.command != nil ? host.plugin.isReplaced
                : catalog.loaded[host.plugin.kind].map { $0.fileIdentity != host.plugin.fileIdentity } ?? false
            return section.kind == host.section.kind && section.settings == host.section.settings
                && section.peerRoles == host.section.peerRoles && section.memoryLimitMB == host.section.memoryLimitMB
                && section.capabilities == host.section.capabilities && section.command == host.section.command
                && !replaced && !host.isCrashLooping
        }
        for (name, host) in transports where wanted[name] == nil {
            logger.info("stopping transport \(name)")
            host.shutdown()
            router.forgetLinks(of: name)
            transports[name] = nil
        }
        failedSections = failedSections.filter { wanted[$0.key] != nil && transports[$0.key] == nil }
        createRetries = createRetries.filter { wanted[$0.key] != nil }
        var begun: [TransportHost] = []
        // Every transport gets its first start attempt before this returns (bounded): readiness
        // means the transports had their chance to bind.
        defer {
            let deadline = DispatchTime.now() + 5
            for host in begun { host.waitForFirstStart(until: deadline) }
        }
        for section in newConfig.transports where section.enabled {
            if let old = transports[section.name], unchanged(old, section) { continue }
            if let host = startTransport(section) { begun.append(host) }
        }
    }

    /// Creates `section`'s transport in a new plugin process (or takes one `prepared` outside
    /// the lock) and begins it, replacing the one running (if any) once the new one exists; nil
    /// (and the reason logged) when it cannot be created. A plugin process that did not answer
    /// in time is tried again later by itself. Called with the lock held.
    private func startTransport(_ section: HubConfig.TransportSection,
                                prepared: (host: TransportHost, outcome: Result<Void, any Error>)? = nil) -> TransportHost? {
        let old = transports[section.name]
        guard let plugin = prepared?.host.plugin ?? catalog.plugin(for: section) else {
            let reason = catalog.whyNoPlugin(kind: section.kind, transport: section.name, searched: pluginDirectories)
            if old != nil {
                logger.error("reload: keeping transport \(section.name) as it runs: \(reason)")
            } else {
                failedSections[section.name] = (section.kind, reason)
                logger.error("transport \(section.name) not started: \(reason)")
            }
            return nil
        }
        let host = prepared?.host
            ?? TransportHost(section: section, plugin: plugin, crypto: hostCrypto, handler: router, metrics: metrics, logger: logger)
        do {
            try prepared?.outcome.get() ?? host.prepare()
        } catch {
            if old != nil {
                logger.error("reload: keeping transport \(section.name) as it runs; its new section is refused: \(error)")
            } else if case TransportHostError.noAnswer = error {
                let delay = scheduleCreateRetry(section.name)
                failedSections[section.name] = (section.kind, "\(error)")
                logger.error("transport \(section.name) not started: \(error); trying again in \(Int(delay)) s")
            } else {
                createRetries[section.name] = nil
                failedSections[section.name] = (section.kind, "\(error)")
                logger.error("transport \(section.name) not started: \(error)")
            }
            return nil
        }
        if let old {
            let why = old.isCrashLooping ? ": restarting it after its crash loop"
                : old.plugin.fileIdentity != plugin.fileIdentity ? ": its plugin file (or program) was replaced" : ": its section changed"
            logger.info("restarting transport \(section.name)\(why)")
            old.shutdown()
            router.forgetLinks(of: section.name)
        }
        transports[section.name] = host
        failedSections[section.name] = nil
        createRetries[section.name] = nil
        host.begin()
        return host
    }

    /// Schedules another attempt to create `name` (lock held); returns its delay in seconds.
    private func scheduleCreateRetry(_ name: String) -> Double {
        let failures = (createRetries[name]?.failures ?? 0) + 1
        let delay = TransportHost.backoffSeconds(failures: failures)
        let due = DispatchTime.now() + delay
        createRetries[name] = (failures, due)
        reloadQueue.asyncAfter(deadline: due) { [weak self] in self?.retryCreate(name, due: due) }
        return delay
    }

    /// One more attempt at a section whose plugin process did not answer in time. The process
    /// is created outside the lock: one that is slow again holds up neither status nor shutdown.
    private func retryCreate(_ name: String, due: DispatchTime) {
        func stillWanted() -> HubConfig.TransportSection? {
            guard !shuttingDown, createRetries[name]?.due == due, transports[name] == nil else { return nil }
            return config.transports.first { $0.name == name && $0.enabled }
        }
        guard let (section, plugin) = lock.withLock({ () -> (HubConfig.TransportSection, LoadedPlugin)? in
            guard let section = stillWanted(), let plugin = catalog.plugin(for: section) else { return nil }
            logger.info("transport \(name): creating it again (attempt \(createRetries[name]!.failures + 1))")
            return (section, plugin)
        }) else { return }
        let host = TransportHost(section: section, plugin: plugin, crypto: hostCrypto, handler: router, metrics: metrics, logger: logger)
        let outcome = Result<Void, any Error> { try host.prepare() }
        let started = lock.withLock { () -> TransportHost? in
            guard stillWanted() == section else { return nil }
            return startTransport(section, prepared: (host, outcome))
        }
        if let started {
            started.waitForFirstStart(until: .now() + 5)
        } else if case .success = outcome {
            host.shutdown()
        }
    }

    // MARK: Status and control

    /// Every configured transport with a truthful state, in config order.
    public func transportStatuses() -> [TransportRuntimeStatus] {
        lock.withLock {
            config.transports.map { section in
                if let host = transports[section.name] { return host.runtimeStatus() }
                if let failed = failedSections[section.name] {
                    let retry = createRetries[section.name]
                    let next = retry.map { Double($0.due.uptimeNanoseconds &- min($0.due.uptimeNanoseconds, DispatchTime.now().uptimeNanoseconds)) / 1e9 }
                    return TransportRuntimeStatus(name: section.name, kind: failed.kind, enabled: true, pluginPath: catalog.loaded[failed.kind]?.path,
                                                  pluginVersion: catalog.loaded[failed.kind]?.version,
                                                  status: TransportStatus(state: .failed, reason: failed.reason, lastError: failed.reason),
                                                  startFailures: retry?.failures ?? 0, nextRetryInSeconds: next)
                }
                return TransportRuntimeStatus(name: section.name, kind: section.kind, enabled: false, pluginPath: catalog.loaded[section.kind]?.path,
                                              pluginVersion: catalog.loaded[section.kind]?.version,
                                              status: TransportStatus(state: .stopped, reason: "disabled in config"),
                                              startFailures: 0, nextRetryInSeconds: nil)
            }
        }
    }

    public struct StatusReport: Codable, Sendable {
        public struct HubInfo: Codable, Sendable {
            public var id: String
            public var fingerprint: String
            public var name: String
            public var config: String
            public var dataDirectory: String
            public var uptimeSeconds: Int64
            public var pid: Int32
            /// The hub's Ed25519 key, hex: the name other hubs' logs and status give it, and
            /// what their `trusted_hubs` list.
            public var signingKey: String?
        }
        public var hub: HubInfo
        public var transports: [TransportRuntimeStatus]
        public var router: RouterStatus
    }

    /// What the ready line says about the transports: how many of the enabled ones run, and
    /// each that does not with its state, e.g. `1 of 3 transports running (udp); not running:
    /// ble unavailable (no Bluetooth adapter), wifidirect failed (…)`. Before, it counted every
    /// enabled transport as running, even those the box cannot run.
    static func readySummary(_ states: [TransportRuntimeStatus]) -> String {
        let running = states.filter(\.isRunning)
        var line = StatusFormatter.transportsRunning(states)
        if !running.isEmpty { line += " (" + running.map(\.name).joined(separator: ", ") + ")" }
        let others = states.filter { !$0.isRunning }
        if !others.isEmpty {
            line += "; not running: " + others.map { "\($0.name) \($0.status.state.rawValue) (\($0.status.reason))" }.joined(separator: ", ")
        }
        return line
    }

    public func statusReport() -> StatusReport {
        StatusReport(hub: .init(id: YaokPluginKit.Hex.encode(identity.userID), fingerprint: identity.fingerprint, name: config.hubName,
                                config: config.source, dataDirectory: dataDirectory,
                                uptimeSeconds: (WallClock.nowMilliseconds() - startedAtMs) / 1000, pid: getpid(),
                                signingKey: YaokPluginKit.Hex.encode(identity.signingKey)),
                     transports: transportStatuses(), router: router.statusSnapshot())
    }

    public var discoveredPlugins: [DiscoveredPlugin] { lock.withLock { catalog.discovered } }

    /// The directories scanned for plugins (configured, or the defaults).
    public var pluginDirectoriesInUse: [String] { lock.withLock { pluginDirectories } }

    private func handleControl(_ command: String) -> Result<Data, ControlError> {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.userInfo[TransportStatus.detailsAsNumbers] = true
        do {
            switch command {
            // Ready once every transport had its first start attempt (as READY=1 to systemd):
            // a client that waits for this may talk to the transports at once.
            case "ping": return lock.withLock { ready } ? .success(Data("{\"pong\":true}".utf8)) : .failure(.remote("starting"))
            case "status": return .success(try encoder.encode(statusReport()))
            case "plugins":
                struct Plugins: Codable { var directories: [String]; var plugins: [DiscoveredPlugin]; var hostABI: UInt32 }
                return .success(try encoder.encode(Plugins(directories: lock.withLock { pluginDirectories }, plugins: discoveredPlugins, hostABI: YAOK_PLUGIN_ABI_VERSION)))
            case "identity":
                struct IdentityView: Codable { var id: String; var fingerprint: String; var signingKey: String; var kxKey: String }
                return .success(try encoder.encode(IdentityView(id: YaokPluginKit.Hex.encode(identity.userID), fingerprint: identity.fingerprint,
                                                                signingKey: YaokPluginKit.Hex.encode(identity.signingKey), kxKey: YaokPluginKit.Hex.encode(identity.kxKey))))
            case "metrics":
                return .success(try encoder.encode(["text": prometheusText()]))
            default:
                return .failure(.unknownCommand(command))
            }
        } catch {
            return .failure(.remote("cannot encode \(command): \(error)"))
        }
    }
}
