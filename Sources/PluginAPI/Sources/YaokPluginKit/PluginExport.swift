import CYaokPlugin
import Foundation

/// Builds the C descriptor for a Swift ``Transport``, so a Swift plugin exports its entry in one line:
///
/// ```swift
/// @_cdecl("yaok_plugin_entry")
/// public func yaokPluginEntry() -> UnsafeRawPointer {
///     PluginExport.entry(UDPTransport.self, kind: "udp", version: "0.1.0", summary: "UDP datagrams between hubs")
/// }
/// ```
///
/// Each plugin library links its own copy of this kit, so the state below is per plugin
/// (link plugins with `-Bsymbolic` so that stays true even if the host exports the same symbols).
public enum PluginExport {
    // nonisolated(unsafe): both are written once, under `lock`, and read only after that.
    nonisolated(unsafe) private static var factory: ((TransportContext) throws -> any Transport)?
    nonisolated(unsafe) private static var descriptor: UnsafeMutablePointer<yaok_plugin_descriptor>?
    private static let lock = NSLock()

    /// Returns the plugin's descriptor (created once, never freed).
    public static func entry<T: Transport>(_ type: T.Type, kind: String, version: String, summary: String) -> UnsafeRawPointer {
        lock.lock()
        defer { lock.unlock() }
        if let descriptor { return UnsafeRawPointer(descriptor) }
        factory = { try T(context: $0) }
        let d = UnsafeMutablePointer<yaok_plugin_descriptor>.allocate(capacity: 1)
        d.initialize(to: yaok_plugin_descriptor(
            abi_version: YAOK_PLUGIN_ABI_VERSION,
            struct_size: UInt32(MemoryLayout<yaok_plugin_descriptor>.size),
            kind: UnsafePointer(strdup(kind)),
            version: UnsafePointer(strdup(version)),
            description: UnsafePointer(strdup(summary)),
            create: createThunk,
            start: startThunk,
            stop: stopThunk,
            send: sendThunk,
            status_json: statusThunk,
            free_string: freeStringThunk,
            destroy: destroyThunk))
        descriptor = d
        return UnsafeRawPointer(d)
    }

    /// The instance the host holds: the Swift transport plus what it needs.
    final class Instance {
        let transport: any Transport
        init(transport: any Transport) { self.transport = transport }
    }

    static func instance(_ p: OpaquePointer?) -> Instance? {
        guard let p else { return nil }
        return Unmanaged<Instance>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
    }

    static func writeError(_ message: String, _ buffer: UnsafeMutablePointer<CChar>?, _ length: Int) {
        guard let buffer, length > 0 else { return }
        let bytes = Array(message.utf8.prefix(length - 1))
        for (i, b) in bytes.enumerated() { buffer[i] = CChar(bitPattern: b) }
        buffer[bytes.count] = 0
    }

    static let createThunk: @convention(c) (UnsafePointer<yaok_host_api>?, UnsafeMutablePointer<CChar>?, Int) -> OpaquePointer? = { api, err, len in
        guard let api else { writeError("no host API table", err, len); return nil }
        guard api.pointee.abi_version == YAOK_PLUGIN_ABI_VERSION else {
            writeError("host ABI version \(api.pointee.abi_version) does not match the plugin's \(YAOK_PLUGIN_ABI_VERSION)", err, len)
            return nil
        }
        guard Int(api.pointee.struct_size) >= MemoryLayout<yaok_host_api>.size else {
            writeError("host API table is \(api.pointee.struct_size) bytes, the plugin needs \(MemoryLayout<yaok_host_api>.size)", err, len)
            return nil
        }
        let host = HostAPI(api: api)
        do {
            let config = try ConfigSection(json: host.configJSON)
            guard let factory else { writeError("plugin entry was not initialised", err, len); return nil }
            let transport = try factory(TransportContext(host: host, config: config))
            return OpaquePointer(Unmanaged.passRetained(Instance(transport: transport)).toOpaque())
        } catch {
            writeError(String(describing: error), err, len)
            return nil
        }
    }

    static let startThunk: @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, Int) -> Int32 = { p, err, len in
        guard let instance = instance(p) else { writeError("no instance", err, len); return 1 }
        do {
            try instance.transport.start()
            return 0
        } catch {
            writeError(String(describing: error), err, len)
            return 1
        }
    }

    static let stopThunk: @convention(c) (OpaquePointer?) -> Void = { p in
        instance(p)?.transport.stop()
    }

    static let sendThunk: @convention(c) (OpaquePointer?, UInt64, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<CChar>?, Int) -> Int32 = { p, link, bytes, count, err, len in
        guard let instance = instance(p) else { writeError("no instance", err, len); return 1 }
        let frame = bytes.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? []
        do {
            try instance.transport.send(frame, to: link)
            return 0
        } catch {
            writeError(String(describing: error), err, len)
            return (error as? TransportError)?.sendResult.rawValue ?? SendResult.failed.rawValue
        }
    }

    static let statusThunk: @convention(c) (OpaquePointer?) -> UnsafeMutablePointer<CChar>? = { p in
        guard let instance = instance(p) else { return nil }
        let status = instance.transport.status
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let data = try? encoder.encode(status) else { return nil }
        return strdup(String(decoding: data, as: UTF8.self))
    }

    static let freeStringThunk: @convention(c) (UnsafeMutablePointer<CChar>?) -> Void = { s in
        free(s)
    }

    static let destroyThunk: @convention(c) (OpaquePointer?) -> Void = { p in
        guard let p else { return }
        Unmanaged<Instance>.fromOpaque(UnsafeRawPointer(p)).release()
    }
}
