// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it: tests and tools link Plugins/Relay/Sources without it (several plugins in one
// test binary would otherwise define the symbol twice).
import YaokPluginKit
import YaokRelayPlugin

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(RelayTransport.self, kind: "relay", version: "0.1.0",
                       summary: "uplink to a Ya OK internet relay (UDP, pinned key, store-and-forward)")
}
