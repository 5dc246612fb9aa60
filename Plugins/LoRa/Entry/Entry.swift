// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it (see Plugins/UDP/Entry).
import YaokLoRaPlugin
import YaokPluginKit

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(LoRaTransport.self, kind: "lora", version: "0.1.0", summary: "hub to hub over LoRa through an RNode on a serial port")
}
