// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it: tests link Plugins/WiFiDirect/Sources without it.
import YaokPluginKit
import YaokWiFiDirectPlugin

@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(WiFiDirectTransport.self, kind: "wifidirect", version: "0.1.0",
                       summary: "phones over Wi-Fi Direct: P2P group owner via wpa_supplicant, TCP links on the group")
}
