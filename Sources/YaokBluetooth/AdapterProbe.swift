#if canImport(Glibc)
import Glibc
#endif
import CBluetooth

/// Why the BLE transport cannot run on this machine. Each case names the cause and the fix.
public enum BLEUnavailableReason: Error, Equatable, Sendable, CustomStringConvertible {
    /// socket(AF_BLUETOOTH) fails with EAFNOSUPPORT: the kernel has no Bluetooth support loaded.
    case noKernelSupport
    /// The configured adapter does not exist; `present` lists those that do.
    case noAdapter(adapter: String, present: [String])
    /// rfkill blocks the adapter.
    case rfkillBlocked(adapter: String, hard: Bool)
    /// The adapter is down and bringing it up failed.
    case adapterDown(adapter: String, error: Errno)
    /// The process lacks a capability for `operation`.
    case missingCapability(operation: String, capability: String)
    /// Something else already bound the ATT fixed channel (CID 4) on the adapter.
    case attChannelInUse(adapter: String)
    /// Another system call failed.
    case systemCall(operation: String, error: Errno)

    public var description: String {
        switch self {
        case .noKernelSupport:
            return "the kernel has no Bluetooth support (socket(AF_BLUETOOTH) fails with EAFNOSUPPORT; load the bluetooth module or run on a kernel with CONFIG_BT)"
        case .noAdapter(let adapter, let present):
            let list = present.isEmpty ? "none present" : "present: " + present.joined(separator: ", ")
            return "no Bluetooth adapter \(adapter) (\(list))"
        case .rfkillBlocked(let adapter, let hard):
            return hard ? "\(adapter) is blocked by a hardware rfkill switch"
                        : "\(adapter) is soft-blocked by rfkill (rfkill unblock bluetooth)"
        case .adapterDown(let adapter, let error):
            return "\(adapter) is down and cannot be brought up: \(error)"
        case .missingCapability(let operation, let capability):
            return "permission denied to \(operation): the hub needs \(capability) (run as root or grant AmbientCapabilities=\(capability))"
        case .attChannelInUse(let adapter):
            return "the ATT channel (L2CAP CID 4) on \(adapter) is already bound: bluetoothd is running on \(adapter); stop it (systemctl stop bluetooth) or give the hub its own adapter"
        case .systemCall(let operation, let error):
            return "cannot \(operation): \(error)"
        }
    }
}

/// An adapter that is present, unblocked and up.
public struct BLEAdapter: Sendable, Equatable {
    public let name: String
    public let index: UInt16
    public let address: BluetoothAddress
}

/// Checks the adapter the way the transport will use it, and brings it up if it is down.
public enum BLEAdapterProbe {
    /// Probes adapter `index` (`name` is hciN): kernel support, presence, rfkill, up.
    /// `bringUp` false only reports a down adapter instead of raising it.
    public static func probe(name: String, index: UInt16, bringUp: Bool = true) -> Result<BLEAdapter, BLEUnavailableReason> {
        let fd: Int32
        switch BluetoothKernel.socket(type: Int32(SOCK_RAW.rawValue), proto: BluetoothKernel.protoHCI) {
        case .success(let s): fd = s
        case .failure(let e): return .failure(classifySocketError(e, operation: "open a raw HCI socket", capability: "CAP_NET_RAW"))
        }
        defer { close(fd) }

        var info: hci_dev_info
        switch BluetoothKernel.deviceInfo(fd: fd, index: index) {
        case .success(let i): info = i
        case .failure(let e) where e.code == ENODEV:
            return .failure(.noAdapter(adapter: name, present: BluetoothKernel.presentAdapters()))
        case .failure(let e):
            return .failure(classifySocketError(e, operation: "read \(name)'s info", capability: "CAP_NET_RAW"))
        }

        let rfkill = BluetoothKernel.rfkillState(adapter: name)
        if rfkill.hard || rfkill.soft { return .failure(.rfkillBlocked(adapter: name, hard: rfkill.hard)) }

        if info.flags & BluetoothKernel.flagUp == 0 {
            guard bringUp else { return .failure(.adapterDown(adapter: name, error: Errno(ENETDOWN))) }
            if ioctl(fd, BluetoothKernel.ioctlDeviceUp, CInt(index)) != 0 {
                let e = Errno(errno)
                switch e.code {
                case EALREADY: break
                case EPERM, EACCES: return .failure(.missingCapability(operation: "bring \(name) up", capability: "CAP_NET_ADMIN"))
                case BluetoothKernel.errnoRFKill: return .failure(.rfkillBlocked(adapter: name, hard: BluetoothKernel.rfkillState(adapter: name).hard))
                default: return .failure(.adapterDown(adapter: name, error: e))
                }
            }
            if case .success(let i) = BluetoothKernel.deviceInfo(fd: fd, index: index) { info = i }
        }
        return .success(BLEAdapter(name: name, index: index, address: BluetoothAddress(kernel: info.bdaddr)))
    }

    /// Maps an errno from socket()/ioctl()/bind() to a reason, or `.adapterDown` style fallthrough.
    package static func classifySocketError(_ e: Errno, operation: String, capability: String) -> BLEUnavailableReason {
        switch e.code {
        case EAFNOSUPPORT, EPROTONOSUPPORT, ESOCKTNOSUPPORT: return .noKernelSupport
        case EPERM, EACCES: return .missingCapability(operation: operation, capability: capability)
        default: return .systemCall(operation: operation, error: e)
        }
    }
}
