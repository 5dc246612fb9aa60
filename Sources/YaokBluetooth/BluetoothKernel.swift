#if canImport(Glibc)
import Glibc
#endif
import CBluetooth

/// Numbers from the Linux Bluetooth socket API (include/net/bluetooth/*.h, BlueZ's
/// lib/hci.h), spelled out because Swift does not import function-like macros.
package enum BluetoothKernel {
    package static let addressFamily: Int32 = 31          // AF_BLUETOOTH
    package static let protoL2CAP: Int32 = 0              // BTPROTO_L2CAP
    package static let protoHCI: Int32 = 1                // BTPROTO_HCI
    package static let attFixedChannel: UInt16 = 4        // L2CAP CID of ATT on LE links
    package static let addressTypeLEPublic: UInt8 = 1     // BDADDR_LE_PUBLIC
    package static let addressTypeLERandom: UInt8 = 2     // BDADDR_LE_RANDOM
    package static let errnoRFKill: Int32 = 132           // ERFKILL
    package static let flagUp: UInt32 = 1 << 0            // HCI_UP bit in hci_dev_info.flags

    // _IOW('H', 201, int), _IOW('H', 202, int), _IOR('H', 211, int)
    package static let ioctlDeviceUp: UInt = 0x4004_48C9
    package static let ioctlDeviceDown: UInt = 0x4004_48CA
    package static let ioctlDeviceInfo: UInt = 0x8004_48D3

    /// A Bluetooth socket of `type` and `proto`, close-on-exec; errno on failure.
    package static func socket(type: Int32, proto: Int32) -> Result<Int32, Errno> {
        let fd = Glibc.socket(addressFamily, type | Int32(SOCK_CLOEXEC.rawValue), proto)
        return fd >= 0 ? .success(fd) : .failure(Errno(errno))
    }

    /// Reads `struct hci_dev_info` for adapter `index` over `fd` (any HCI socket).
    package static func deviceInfo(fd: Int32, index: UInt16) -> Result<hci_dev_info, Errno> {
        var info = hci_dev_info()
        info.dev_id = index
        let rc = withUnsafeMutablePointer(to: &info) { ioctl(fd, ioctlDeviceInfo, UnsafeMutableRawPointer($0)) }
        return rc == 0 ? .success(info) : .failure(Errno(errno))
    }

    /// The N of an adapter name "hciN" (ASCII digits, 0...65535); nil for anything else.
    package static func adapterIndex(_ name: String) -> UInt16? {
        guard name.hasPrefix("hci") else { return nil }
        let digits = name.dropFirst(3)
        guard !digits.isEmpty, digits.count <= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
              let value = UInt16(digits) else { return nil }
        return value
    }

    /// The adapters the kernel has (names from /sys/class/bluetooth), sorted.
    package static func presentAdapters(sysfs: String = "/sys/class/bluetooth") -> [String] {
        guard let dir = opendir(sysfs) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if adapterIndex(name) != nil { names.append(name) }
        }
        return names.sorted()
    }

    /// Whether rfkill blocks the adapter: (soft, hard), from /sys/class/bluetooth/hciN/rfkill*/.
    package static func rfkillState(adapter: String, sysfs: String = "/sys/class/bluetooth") -> (soft: Bool, hard: Bool) {
        let base = "\(sysfs)/\(adapter)"
        guard let dir = opendir(base) else { return (false, false) }
        defer { closedir(dir) }
        var soft = false, hard = false
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard name.hasPrefix("rfkill") else { continue }
            soft = soft || readSmallFile("\(base)/\(name)/soft") == "1"
            hard = hard || readSmallFile("\(base)/\(name)/hard") == "1"
        }
        return (soft, hard)
    }

    /// The first line of a small text file, trimmed; nil when unreadable.
    package static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = read(fd, &buffer, buffer.count)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
            .split(separator: "\n").first.map { $0.trimmedOfBlanks() }
    }

    /// A `struct sockaddr_l2` for an LE address and fixed channel.
    package static func l2capAddress(_ address: BluetoothAddress, cid: UInt16, type: UInt8) -> sockaddr_l2 {
        var sa = sockaddr_l2()
        sa.l2_family = sa_family_t(addressFamily)
        sa.l2_psm = 0
        sa.l2_bdaddr = address.kernelValue
        sa.l2_cid = cid.littleEndian
        sa.l2_bdaddr_type = type
        return sa
    }
}

extension Substring {
    fileprivate func trimmedOfBlanks() -> String {
        var s = self
        while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" { s.removeLast() }
        return String(s)
    }
}

/// An errno value with its message.
public struct Errno: Error, Equatable, Sendable, CustomStringConvertible {
    public let code: Int32
    public init(_ code: Int32) { self.code = code }
    public var description: String { "\(String(cString: strerror(code))) (errno \(code))" }
}

/// A 48-bit Bluetooth device address. `bytes` are in display order (most significant first).
public struct BluetoothAddress: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// From six bytes in display order; nil for another count.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 6 else { return nil }
        self.bytes = bytes
    }

    /// Parses "00:AA:01:00:00:23" (case-insensitive).
    public init?(string: String) {
        let parts = string.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6 else { return nil }
        var out: [UInt8] = []
        for p in parts {
            guard p.count == 2, let b = UInt8(p, radix: 16) else { return nil }
            out.append(b)
        }
        bytes = out
    }

    package init(kernel value: bdaddr_t) {
        let b = value.b
        bytes = [b.5, b.4, b.3, b.2, b.1, b.0]   // the kernel stores it little-endian
    }

    package var kernelValue: bdaddr_t {
        bdaddr_t(b: (bytes[5], bytes[4], bytes[3], bytes[2], bytes[1], bytes[0]))
    }

    public var isZero: Bool { bytes.allSatisfy { $0 == 0 } }

    public var description: String {
        bytes.map { b in
            let s = String(b, radix: 16, uppercase: true)
            return s.count == 1 ? "0" + s : s
        }.joined(separator: ":")
    }
}
