// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it: tests and tools link Plugins/Mesh/Sources without it (several plugins in one
// test binary would otherwise define the symbol twice).
import YaokPluginKit
import YaokMeshPlugin

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(MeshTransport.self, kind: "mesh", version: "0.1.0",
                       summary: "hub-to-hub mesh over IP: multicast discovery, authenticated TCP sessions")
}
