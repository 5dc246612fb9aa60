#if canImport(Glibc)
import Glibc
#endif
import CBluetooth
import YaokBluetooth

/// Errors from HCI commands.
public enum HCICommandError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The command could not be sent or no reply came (errno, e.g. EPERM or ETIMEDOUT).
    case send(command: String, error: Errno)
    /// The controller answered with a non-zero status (Core Spec Vol 1 Part F error codes).
    case status(command: String, code: UInt8)

    public var description: String {
        switch self {
        case .send(let command, let error):
            if error.code == EPERM || error.code == EACCES {
                return "\(command): permission denied; sending HCI commands needs CAP_NET_RAW"
            }
            return "\(command) failed: \(error)"
        case .status(let command, let code):
            return "\(command): controller returned status 0x\(String(code, radix: 16))"
        }
    }
}

/// Advertising payloads (Core Spec Supplement Part A), built as plain bytes.
public enum AdvertisingPayload {
    /// Flags (LE General Discoverable, BR/EDR not supported) + complete list of 128-bit
    /// service UUIDs holding `serviceUUID` (big-endian bytes; sent little-endian).
    public static func advertisingData(serviceUUID: [UInt8]) -> [UInt8] {
        [0x02, 0x01, 0x06, UInt8(1 + serviceUUID.count), 0x07] + serviceUUID.reversed()
    }

    /// Complete Local Name, cut to 29 bytes on a UTF-8 character boundary.
    public static func scanResponse(name: String) -> [UInt8] {
        var bytes: [UInt8] = []
        for scalar in name.unicodeScalars {
            let encoded = Array(String(scalar).utf8)
            if bytes.count + encoded.count > BLEConfig.maxNameBytes { break }
            bytes += encoded
        }
        return [UInt8(1 + bytes.count), 0x09] + bytes
    }

    /// A 31-byte significant part padded with zeros, prefixed by its length, as the
    /// LE Set Advertising / Scan Response Data commands take it.
    static func commandParameter(_ data: [UInt8]) -> [UInt8] {
        let part = Array(data.prefix(31))
        return [UInt8(part.count)] + part + [UInt8](repeating: 0, count: 31 - part.count)
    }
}

/// Legacy LE advertising on one adapter through a raw HCI socket (no bluetoothd, no mgmt).
// @unchecked: no mutable state; `lock` keeps each HCI command sequence whole.
public final class HCIAdvertiser: @unchecked Sendable {
    private static let ogfLE: UInt16 = 0x08
    private let index: UInt16
    private let lock = NSLockLike()

    public init(adapterIndex: UInt16) {
        self.index = adapterIndex
    }

    /// Sets parameters (connectable undirected, `intervalUnits` × 0.625 ms, all three channels),
    /// advertising data and scan response, then enables advertising.
    public func start(intervalUnits: UInt16, advertisingData: [UInt8], scanResponse: [UInt8]) throws {
        try lock.locked {
            let fd = try open()
            defer { hci_close_dev(fd) }
            // Parameters cannot change while advertising: disable first, ignoring "already off".
            _ = try? command(fd, ocf: 0x000A, name: "LE Set Advertising Enable", [0])
            var params: [UInt8] = []
            params += [UInt8(intervalUnits & 0xFF), UInt8(intervalUnits >> 8)]   // min
            params += [UInt8(intervalUnits & 0xFF), UInt8(intervalUnits >> 8)]   // max
            params += [0x00]                              // ADV_IND: connectable, scannable, undirected
            params += [0x00]                              // own address: public
            params += [0x00] + [UInt8](repeating: 0, count: 6)  // peer address (unused)
            params += [0x07]                              // channels 37, 38, 39
            params += [0x00]                              // no filter
            try command(fd, ocf: 0x0006, name: "LE Set Advertising Parameters", params)
            try command(fd, ocf: 0x0008, name: "LE Set Advertising Data", AdvertisingPayload.commandParameter(advertisingData))
            try command(fd, ocf: 0x0009, name: "LE Set Scan Response Data", AdvertisingPayload.commandParameter(scanResponse))
            try command(fd, ocf: 0x000A, name: "LE Set Advertising Enable", [1])
        }
    }

    /// Enables advertising again (the controller stops it when a central connects).
    /// "Command Disallowed" (already advertising) counts as success.
    public func resume() throws {
        try lock.locked {
            let fd = try open()
            defer { hci_close_dev(fd) }
            do {
                try command(fd, ocf: 0x000A, name: "LE Set Advertising Enable", [1])
            } catch HCICommandError.status(_, 0x0C) {
            }
        }
    }

    /// Disables advertising.
    public func stop() throws {
        try lock.locked {
            let fd = try open()
            defer { hci_close_dev(fd) }
            try command(fd, ocf: 0x000A, name: "LE Set Advertising Enable", [0])
        }
    }

    private func open() throws -> Int32 {
        let fd = hci_open_dev(Int32(index))
        guard fd >= 0 else { throw HCICommandError.send(command: "open hci\(index)", error: Errno(errno)) }
        return fd
    }

    /// Sends one LE command and waits (up to 1 s) for Command Complete; checks its status.
    private func command(_ fd: Int32, ocf: UInt16, name: String, _ parameters: [UInt8]) throws {
        var cparam = parameters
        var status: UInt8 = 0xFF
        let rc = cparam.withUnsafeMutableBytes { cbuf -> Int32 in
            withUnsafeMutablePointer(to: &status) { sp -> Int32 in
                var request = hci_request()
                request.ogf = Self.ogfLE
                request.ocf = ocf
                request.cparam = cbuf.baseAddress
                request.clen = Int32(cbuf.count)
                request.rparam = UnsafeMutableRawPointer(sp)
                request.rlen = 1
                return hci_send_req(fd, &request, 1000)
            }
        }
        guard rc == 0 else { throw HCICommandError.send(command: name, error: Errno(errno)) }
        guard status == 0 else { throw HCICommandError.status(command: name, code: status) }
    }
}

/// A tiny mutex (pthread), so this file needs no Foundation.
// @unchecked: a pthread mutex, the primitive that makes the advertiser thread-safe.
final class NSLockLike: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body()
    }
}
