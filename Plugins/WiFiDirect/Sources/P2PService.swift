import YaokPluginKit

/// The `_yaok._tcp` service the group owner advertises through P2P service discovery, in the
/// `P2P_SERVICE_ADD bonjour <query hex> <RDATA hex>` form wpa_supplicant takes (DNS wire
/// format; `c00c` is the compressed `_tcp.local.` and `c027` the compressed `_yaok._tcp.local.`
/// as in wpa_supplicant's README-P2P examples).
public enum P2PService {
    static func label(_ s: String) -> [UInt8] {
        let bytes = Array(s.utf8.prefix(63))
        return [UInt8(bytes.count)] + bytes
    }

    /// PTR `_yaok._tcp.local.` → `<instance>._yaok._tcp.local.`
    public static func ptrCommand(instance: String) -> String {
        let query = label("_yaok") + [0xc0, 0x0c, 0x00, 0x0c, 0x01]
        let rdata = label(instance) + [0xc0, 0x27]
        return "P2P_SERVICE_ADD bonjour \(Hex.encode(query)) \(Hex.encode(rdata))"
    }

    /// TXT `<instance>._yaok._tcp.local.` → `port=<port>` (the phone connects to the group owner's address on it).
    public static func txtCommand(instance: String, port: UInt16) -> String {
        let query = label(instance) + label("_yaok") + [0xc0, 0x0c, 0x00, 0x10, 0x01]
        let rdata = label("port=\(port)")
        return "P2P_SERVICE_ADD bonjour \(Hex.encode(query)) \(Hex.encode(rdata))"
    }
}
