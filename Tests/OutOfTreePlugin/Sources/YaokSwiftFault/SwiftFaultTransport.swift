import Foundation
import YaokPluginKit

/// For the supervision tests only (not part of the example): a Swift plugin that calls
/// `fatalError` when a datagram reaches it on UDP 127.0.0.1:`port`, so a remote peer triggers
/// a Swift trap in a plugin thread. The hub must survive it and restart the plugin's process.
public final class SwiftFaultTransport: Transport, Sendable {
    private let context: TransportContext
    private let port: Int

    public init(context: TransportContext) throws {
        self.context = context
        try context.config.rejectUnknownKeys(allowed: ["port"])
        port = try context.config.int("port", default: 0)
    }

    public func start() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw TransportError.failed("cannot bind 127.0.0.1:\(port)") }
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 2048)
            if recv(fd, &buffer, buffer.count, 0) >= 0 { fatalError("swiftfault: a frame this plugin cannot handle") }
        }
    }

    public func stop() {}

    public func send(_ frame: [UInt8], to link: LinkID) throws { throw TransportError.unknownLink(link) }

    public var status: TransportStatus { TransportStatus(state: .running, reason: "waiting for the fatal datagram") }
}

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(SwiftFaultTransport.self, kind: "swiftfault", version: "0.0.1", summary: "traps on a received datagram (tests)")
}
