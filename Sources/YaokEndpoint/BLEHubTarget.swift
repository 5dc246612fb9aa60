import YaokBluetooth

/// A hub reached over Bluetooth LE: `ble://[ADAPTER/]ADDRESS[?type=public|random][&mtu=N]`.
///
/// - `ADAPTER`: the local controller to connect from (`hci0` when left out).
/// - `ADDRESS`: the hub adapter's LE address, `AA:BB:CC:DD:EE:FF` (what `yaok-hub status`
///   shows as the BLE transport's `address`, or a scan lists).
/// - `type`: the address type. `public` (the default) is the controller's public address,
///   which the hub advertises with; `random` is for a hub adapter using a static random address.
/// - `mtu`: the ATT MTU to ask for, 23…517 (default 517; the hub may grant less).
public struct BLEHubTarget: Sendable, Equatable, CustomStringConvertible {
    public var adapter: String
    public var address: BluetoothAddress
    public var randomAddress: Bool
    public var mtu: Int

    public init(adapter: String = "hci0", address: BluetoothAddress, randomAddress: Bool = false, mtu: Int = 517) {
        self.adapter = adapter
        self.address = address
        self.randomAddress = randomAddress
        self.mtu = mtu
    }

    public var description: String {
        var text = "ble://\(adapter)/\(address)"
        var query: [String] = []
        if randomAddress { query.append("type=random") }
        if mtu != 517 { query.append("mtu=\(mtu)") }
        if !query.isEmpty { text += "?" + query.joined(separator: "&") }
        return text
    }

    /// Parses the text after `ble://`.
    public static func parse(_ text: String) throws -> BLEHubTarget {
        let full = "ble://" + text
        var path = Substring(text), query: Substring = ""
        if let q = text.firstIndex(of: "?") {
            path = text[..<q]
            query = text[text.index(after: q)...]
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count) else { throw BLEHubAddressError.shape(full) }
        let adapter = parts.count == 2 ? String(parts[0]) : "hci0"
        guard adapter.hasPrefix("hci"), let n = Int(adapter.dropFirst(3)), (0...0xFFFE).contains(n) else {
            throw BLEHubAddressError.adapter(full, String(adapter))
        }
        guard let address = BluetoothAddress(string: String(parts[parts.count - 1])) else {
            throw BLEHubAddressError.address(full, String(parts[parts.count - 1]))
        }
        var target = BLEHubTarget(adapter: adapter, address: address)
        for item in query.split(separator: "&") {
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            switch (kv.first ?? "", kv.count == 2 ? kv[1] : "") {
            case ("type", "public"): target.randomAddress = false
            case ("type", "random"): target.randomAddress = true
            case ("mtu", let v):
                guard let m = Int(v), (23...517).contains(m) else { throw BLEHubAddressError.option(full, String(item)) }
                target.mtu = m
            default: throw BLEHubAddressError.option(full, String(item))
            }
        }
        return target
    }
}

/// Why a `ble://` hub address was refused.
public enum BLEHubAddressError: Error, Sendable, Equatable, CustomStringConvertible {
    case shape(String)
    case adapter(String, String)
    case address(String, String)
    case option(String, String)

    public var description: String {
        switch self {
        case .shape(let a): return "hub address \"\(a)\" is not of the form ble://[hciN/]AA:BB:CC:DD:EE:FF[?type=random][&mtu=N]"
        case .adapter(let a, let x): return "hub address \"\(a)\": \"\(x)\" is not an adapter name like hci0"
        case .address(let a, let x): return "hub address \"\(a)\": \"\(x)\" is not a Bluetooth address like AA:BB:CC:DD:EE:FF"
        case .option(let a, let x): return "hub address \"\(a)\": unknown or bad option \"\(x)\" (type=public|random, mtu=23…517)"
        }
    }
}
