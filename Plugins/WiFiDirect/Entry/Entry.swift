// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it. Until the transport conforms to Transport, no entry is exported.
import YaokPluginKit
import YaokTransportWiFiDirect
