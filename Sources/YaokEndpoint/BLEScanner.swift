#if canImport(Glibc)
import Glibc
#endif
import CBluetooth
import YaokBluetooth

/// A Ya OK hub heard in an LE scan.
public struct DiscoveredHub: Sendable, Equatable {
    public var address: BluetoothAddress
    /// True for a random address (connect with `randomAddress: true`).
    public var randomAddress: Bool
    /// The Complete (or Shortened) Local Name, when the scan response carried it.
    public var name: String?
    /// The strongest signal heard, in dBm; nil when the controller did not measure it (127).
    public var rssi: Int8?
}

/// Finds Ya OK hubs nearby with an active LE scan over a raw HCI socket (no bluetoothd).
public enum BLEScanner {
    /// Scans on `adapter` for `seconds` and returns the hubs that advertise the Ya OK service.
    public static func scan(adapter: String, seconds: Int) throws -> [DiscoveredHub] {
        guard let index = BluetoothKernel.adapterIndex(adapter) else {
            throw BLEClientError.unavailable(.noAdapter(adapter: adapter, present: BluetoothKernel.presentAdapters()))
        }
        if case .failure(let why) = BLEAdapterProbe.probe(name: adapter, index: index) {
            throw BLEClientError.unavailable(why)
        }
        let dd = hci_open_dev(Int32(index))
        guard dd >= 0 else { throw BLEClientError.io("open \(adapter)", Errno(errno)) }
        defer { hci_close_dev(dd) }

        var filter = hci_filter()
        hci_filter_clear(&filter)
        hci_filter_set_ptype(Int32(HCI_EVENT_PKT), &filter)
        hci_filter_set_event(Int32(EVT_LE_META_EVENT), &filter)
        guard setsockopt(dd, 0 /* SOL_HCI */, 2 /* HCI_FILTER */, &filter, socklen_t(MemoryLayout<hci_filter>.size)) == 0 else {
            throw BLEClientError.io("set the HCI event filter", Errno(errno))
        }
        _ = hci_le_set_scan_enable(dd, 0, 0, 1000)   // a scan left running would make the next calls fail
        // Active scan (asks for scan responses, where hubs put their name), 10 ms interval and window.
        guard hci_le_set_scan_parameters(dd, 0x01, UInt16(0x0010).littleEndian, UInt16(0x0010).littleEndian, 0x00, 0x00, 1000) >= 0 else {
            throw scanError("LE Set Scan Parameters")
        }
        guard hci_le_set_scan_enable(dd, 1, 0, 1000) >= 0 else { throw scanError("LE Set Scan Enable") }
        defer { _ = hci_le_set_scan_enable(dd, 0, 0, 1000) }

        var reports = AdvertisingReportCollector()
        var buffer = [UInt8](repeating: 0, count: 260)
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let deadline = Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000 + Int64(seconds) * 1000
        while true {
            clock_gettime(CLOCK_MONOTONIC, &ts)
            let left = deadline - (Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
            if left <= 0 { break }
            var p = pollfd(fd: dd, events: Int16(POLLIN), revents: 0)
            let rc = poll(&p, 1, Int32(min(left, 1000)))
            if rc < 0 && errno != EINTR { throw BLEClientError.io("poll", Errno(errno)) }
            guard rc > 0 else { continue }
            let n = read(dd, &buffer, buffer.count)
            guard n > 0 else { continue }
            reports.add(hciEvent: Array(buffer[0..<n]))
        }
        return reports.hubs
    }

    private static func scanError(_ command: String) -> BLEClientError {
        let e = Errno(errno)
        if e.code == EPERM || e.code == EACCES {
            return .unavailable(.missingCapability(operation: "send \(command)", capability: "CAP_NET_RAW"))
        }
        return .io(command, e)
    }
}

/// Parses HCI LE Advertising Report events (Core Spec Vol 4 Part E 7.7.65.2) and keeps the
/// devices that advertise the Ya OK service, merging their scan responses. Never trusts lengths.
public struct AdvertisingReportCollector: Sendable {
    private var yaok: Set<BluetoothAddress> = []
    private var found: [BluetoothAddress: DiscoveredHub] = [:]
    private var order: [BluetoothAddress] = []

    public init() {}

    /// Hubs in the order first heard.
    public var hubs: [DiscoveredHub] { order.filter { yaok.contains($0) }.compactMap { found[$0] } }

    /// Feeds one HCI event packet: type 0x04, event 0x3E, length, subevent 0x02, reports.
    public mutating func add(hciEvent packet: [UInt8]) {
        guard packet.count >= 5, packet[0] == 0x04, packet[1] == 0x3E, packet[3] == 0x02 else { return }
        let count = Int(packet[4])
        var i = 5
        for _ in 0..<count {
            guard i + 9 <= packet.count else { return }
            let addressType = packet[i + 1]
            guard let address = BluetoothAddress(bytes: Array(packet[(i + 2)..<(i + 8)].reversed())) else { return }
            let length = Int(packet[i + 8])
            guard i + 9 + length + 1 <= packet.count else { return }
            let data = Array(packet[(i + 9)..<(i + 9 + length)])
            let rssi = Int8(bitPattern: packet[i + 9 + length])
            add(address: address, random: addressType == 0x01 || addressType == 0x03, data: data, rssi: rssi)
            i += 9 + length + 1
        }
    }

    mutating func add(address: BluetoothAddress, random: Bool, data: [UInt8], rssi reported: Int8) {
        let rssi: Int8? = reported == 127 ? nil : reported
        var hub = found[address] ?? DiscoveredHub(address: address, randomAddress: random, name: nil, rssi: rssi)
        if found[address] == nil { order.append(address) }
        if let rssi { hub.rssi = max(hub.rssi ?? rssi, rssi) }
        let service = YaokGATT.uuidBytes(0x0001).reversed() as [UInt8]
        var j = 0
        while j < data.count {
            let length = Int(data[j])
            guard length > 0, j + 1 + length <= data.count else { break }
            let type = data[j + 1]
            let value = Array(data[(j + 2)..<(j + 1 + length)])
            switch type {
            case 0x06, 0x07:   // incomplete / complete list of 128-bit service UUIDs
                var k = 0
                while k + 16 <= value.count {
                    if Array(value[k..<(k + 16)]) == service { yaok.insert(address) }
                    k += 16
                }
            case 0x08, 0x09:   // shortened / complete local name
                hub.name = String(decoding: value, as: UTF8.self)
            default:
                break
            }
            j += 1 + length
        }
        found[address] = hub
    }
}
