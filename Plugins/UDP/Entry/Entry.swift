// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it: tests and tools link Plugins/UDP/Sources without it (several plugins in one
// test binary would otherwise define the symbol twice).
import YaokPluginKit
import YaokUDPPlugin

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(UDPTransport.self, kind: "udp", version: "0.1.0", summary: "TLV records as UDP datagrams between hubs and endpoints")
}
