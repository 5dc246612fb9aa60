import Foundation
import Logging
import YaokPluginKit
import YaokSupervision

/// `yaok-hub check-config`: the whole config, including every enabled transport's own
/// section as its plugin reads it.
public enum ConfigCheck {
    /// One problem found.
    public struct Problem: Sendable, CustomStringConvertible {
        public var transport: String?
        public var message: String
        public var description: String { transport.map { "transport \($0): \(message)" } ?? message }
    }

    /// Checks plugin sections of an already-parsed config. Plugins are loaded from the
    /// configured (or default) directories; a missing plugin is a problem.
    public static func checkTransports(_ config: HubConfig, logger: Logger) -> [Problem] {
        let dirs = config.pluginDirs.isEmpty ? PluginLoader.defaultDirectories() : config.pluginDirs
        let catalog = PluginLoader.scan(directories: dirs, logger: logger)
        var problems: [Problem] = []
        // Public keys only: validation never signs.
        let crypto = HostCrypto(signingKey: [UInt8](repeating: 0, count: 32), kxKey: [UInt8](repeating: 0, count: 32),
                                sign: { _ in [UInt8](repeating: 0, count: 64) })
        final class NoEvents: TransportEventHandler {
            func sendFailed(_ frame: [UInt8], link: LinkID, result: SendResult, reason: String, on transport: TransportHost) {}
            func linkUp(_ link: LinkInfo, on transport: TransportHost) {}
            func linkDown(_ link: LinkID, reason: String?, on transport: TransportHost) {}
            func frameReceived(_ frame: [UInt8], link: LinkID, on transport: TransportHost) {}
            func statusChanged(on transport: TransportHost) {}
        }
        let handler = NoEvents()
        for section in config.transports where section.enabled {
            guard let plugin = catalog.plugin(for: section) else {
                problems.append(Problem(transport: section.name, message: catalog.whyNoPlugin(kind: section.kind, transport: section.name, searched: dirs)))
                continue
            }
            let host = TransportHost(section: section, plugin: plugin, crypto: crypto, handler: handler, metrics: nil, logger: logger)
            do {
                try host.validate()
            } catch TransportHostError.createFailed(_, let reason) {
                problems.append(Problem(transport: section.name, message: reason))
            } catch {
                problems.append(Problem(transport: section.name, message: "\(error)"))
            }
        }
        return problems
    }
}
