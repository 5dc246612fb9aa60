import Synchronization
import YaokPluginKit

/// A minimal out-of-tree transport: it has no links; it validates its config and
/// reports a running status with a greeting from its config. It shows the whole
/// shape of a plugin in one file.
public final class EchoTransport: Transport, Sendable {
    private let context: TransportContext
    private let greeting: String
    /// Mutable state lives in a Mutex, so the compiler checks that the class is Sendable.
    private let running = Mutex(false)

    public init(context: TransportContext) throws {
        self.context = context
        try context.config.rejectUnknownKeys(allowed: ["greeting"])
        greeting = try context.config.string("greeting", default: "hello")
    }

    public func start() throws {
        running.withLock { $0 = true }
        context.logger.info("echo transport started")
    }

    public func stop() { running.withLock { $0 = false } }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        throw TransportError.unknownLink(link)
    }

    public var status: TransportStatus {
        TransportStatus(state: running.withLock { $0 } ? .running : .stopped, reason: "echo says \(greeting)")
    }
}

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(EchoTransport.self, kind: "echo", version: "0.0.1", summary: "out-of-tree example")
}
