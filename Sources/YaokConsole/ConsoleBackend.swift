import Foundation
import Logging
import YaokHubCore
import YaokSupervision
import YaokPluginKit
import YaokWire

/// What the console reads from and asks of the hub. The hub's adapter is ``HubConsoleBackend``;
/// tests give their own.
public protocol ConsoleBackend: Sendable {
    /// The same report `yaok-hub status --json` prints (``Hub/statusReport()``).
    func status() -> Hub.StatusReport
    /// Plugin directories and every plugin file found there, loaded or refused.
    func plugins() -> (directories: [String], plugins: [DiscoveredPlugin])
    /// The hub's fingerprint and contact code (`yaok://contact?…`; public keys only).
    func identity() -> (fingerprint: String, contact: String?)
    /// Switches a transport on or off in the config file and reloads; throws why not.
    func setTransport(_ name: String, enabled: Bool) throws
}

/// The running hub as the console's backend.
// @unchecked: immutable: the hub (locked itself) and a logger.
public final class HubConsoleBackend: ConsoleBackend, @unchecked Sendable {
    private let hub: Hub
    private let logger: Logger

    public init(hub: Hub, logger: Logger) {
        self.hub = hub
        self.logger = logger
    }

    public func status() -> Hub.StatusReport { hub.statusReport() }

    public func plugins() -> (directories: [String], plugins: [DiscoveredPlugin]) {
        (hub.pluginDirectoriesInUse, hub.discoveredPlugins)
    }

    public func identity() -> (fingerprint: String, contact: String?) {
        let contact = try? ContactCode.make(identity: hub.identity, name: hub.config.hubName).uri
        return (hub.identity.fingerprint, contact)
    }

    /// Edits the file the hub runs on, then reloads exactly as SIGHUP does (``Hub/reload()``).
    public func setTransport(_ name: String, enabled: Bool) throws {
        let source = hub.config.source
        guard source.hasPrefix("/") || FileManager.default.fileExists(atPath: source) else {
            throw ConfigEditor.EditError.cannotEdit("the hub runs on the embedded default config: there is no file to edit (start it with --config FILE)")
        }
        let logger = self.logger
        var quiet = logger
        quiet.logLevel = .critical
        _ = try ConfigEditor.setTransport(name, enabled: enabled, path: source) { config in
            ConfigCheck.checkTransports(config, logger: quiet).map(\.description)
        }
        logger.notice("console: transports.\(name).enabled set to \(enabled) in \(source); reloading")
        hub.reload()
    }
}
