// The plugin's C entry point, in a target of its own so that only the plugin library
// exports it: tests and tools link Plugins/BLE/Sources without it.
// Until the BLE transport conforms to Transport, this library exports no entry and the
// hub refuses it with "missing entry symbol".
import YaokPluginKit
import YaokBLEPlugin
