#if canImport(Glibc)
import Glibc
#endif
import YaokBluetooth

/// Finds out whether something else already listens on the ATT fixed channel of an adapter.
///
/// Linux does not refuse a second bind of a fixed L2CAP channel (CID 4): it accepts it, and
/// the older listener keeps getting the connections. So the transport looks before binding:
/// the kernel's L2CAP channel list in debugfs (`/sys/kernel/debug/bluetooth/l2cap`, one line
/// per channel: `src (type) dst (type) state psm scid dcid …`, state 4 = BT_LISTEN), and, when
/// debugfs is not mounted, for a running `bluetoothd` process.
enum ATTChannelOwner {
    static let listenState = "4"

    /// True when another listener holds CID 4 on `address` (or on any address), or bluetoothd runs.
    static func isTaken(address: BluetoothAddress,
                        debugfsList: String = "/sys/kernel/debug/bluetooth/l2cap",
                        procRoot: String = "/proc") -> Bool {
        if let text = readFile(debugfsList) {
            return listenerPresent(in: text, address: address)
        }
        return processRunning(named: "bluetoothd", procRoot: procRoot)
    }

    /// Parses the debugfs channel list. Lines look like
    /// `00:AA:01:00:00:00 (1) 00:00:00:00:00:00 (0) 4 0 0x0004 0x0000 672 0 1 0`.
    static func listenerPresent(in list: String, address: BluetoothAddress) -> Bool {
        for line in list.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 7 else { continue }
            let source = String(fields[0]).uppercased()
            let state = String(fields[4])
            let scid = String(fields[6]).lowercased()
            guard state == listenState, scid == "0x0004" else { continue }
            if source == address.description || source == "00:00:00:00:00:00" { return true }
        }
        return false
    }

    static func processRunning(named name: String, procRoot: String) -> Bool {
        guard let dir = opendir(procRoot) else { return false }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let pid = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard !pid.isEmpty, pid.allSatisfy({ $0.isASCII && $0.isNumber }) else { continue }
            if BluetoothKernel.readSmallFile("\(procRoot)/\(pid)/comm") == name { return true }
        }
        return false
    }

    /// Reads a whole (small, bounded to 1 MiB) file; nil when unreadable.
    static func readFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while out.count < 1 << 20 {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            out += buffer[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }
}
