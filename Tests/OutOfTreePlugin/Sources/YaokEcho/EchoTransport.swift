import YaokPluginKit

/// A minimal out-of-tree transport: it has no links; it validates its config and
/// reports a running status with a greeting from its config. It shows the whole
/// shape of a plugin in one file.
public final class EchoTransport: Transport, @unchecked Sendable {
    private let context: TransportContext
    private let greeting: String
    private var running = false

    public init(context: TransportContext) throws {
        self.context = context
        try context.config.rejectUnknownKeys(allowed: ["greeting"])
        greeting = try context.config.string("greeting", default: "hello")
    }

    public func start() throws {
        running = true
        context.logger.info("echo transport started")
    }

    public func stop() { running = false }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        throw TransportError.unknownLink(link)
    }

    public var status: TransportStatus {
        TransportStatus(state: running ? .running : .stopped, reason: "echo says \(greeting)")
    }
}

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(EchoTransport.self, kind: "echo", version: "0.0.1", summary: "out-of-tree example")
}
