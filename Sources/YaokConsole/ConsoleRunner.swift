import Foundation
import Logging
import YaokHubCore

/// Runs the console a config's `console:` section asks for, and applies a changed section
/// when the hub reloads (SIGHUP or the console's own switch): an unchanged section leaves the
/// running console alone; a changed one stops it (freeing its port) and starts it anew, so a
/// new address, TLS or session lifetime takes effect without a restart. Logins end with the
/// old server; failed-login delays carry over, and so do the charts' samples while the
/// sampling interval stays the same.
/// A console that cannot start is logged and the hub runs on, as with metrics.
// @unchecked: settings, server and history only under `lock`.
public final class ConsoleRunner: @unchecked Sendable {
    private let lock = NSLock()
    private let backend: any ConsoleBackend
    private let dataDirectory: String
    private let logger: Logger
    // Guarded by `lock`.
    private var settings: HubConfig.ConsoleSettings?
    private var server: ConsoleServer?
    private var history: History?
    /// Failed logins count across restarts: a reload must not wipe a guesser's delay.
    private let throttle = LoginThrottle()

    public init(backend: any ConsoleBackend, dataDirectory: String, logger: Logger) {
        self.backend = backend
        self.dataDirectory = dataDirectory
        self.logger = logger
    }

    /// The running server, if any (for tests and the start-up log).
    public var current: ConsoleServer? { lock.withLock { server } }

    /// Starts, restarts or stops the console to match `new`.
    public func apply(_ new: HubConfig.ConsoleSettings) {
        lock.withLock {
            guard new != settings else { return }
            let first = settings == nil
            if let server {
                server.stop()
                logger.notice(new.enabled ? "console: settings changed; restarting it" : "console: switched off")
            }
            server = nil
            settings = new
            guard new.enabled else { return }
            let interval = Double(new.sampleIntervalSeconds)
            if history?.capacity != ConsoleServer.historyCapacity(sampleInterval: interval) { history = nil }
            let s = ConsoleServer(settings: new, passwordPath: Paths.resolve(new.passwordFile, in: dataDirectory),
                                  backend: backend, logger: logger, sampleInterval: interval, throttle: throttle, history: history,
                                  tlsPaths: (Paths.resolve(new.tlsCertificate, in: dataDirectory), Paths.resolve(new.tlsKey, in: dataDirectory)))
            history = s.history
            do {
                try s.start()
                server = s
            } catch {
                logger.error("console not \(first ? "started" : "restarted") on \(new.listen): \(error)")
            }
        }
    }

    public func stop() {
        lock.withLock {
            server?.stop()
            server = nil
        }
    }
}
