import Foundation
#if canImport(Glibc)
import Glibc
#endif
import CBluetooth
import YaokBluetooth

/// An accepted LE connection on the ATT fixed channel.
public struct L2CAPConnection: Sendable {
    /// Connected SOCK_SEQPACKET descriptor: one ATT PDU per packet. The receiver owns it.
    public let fd: Int32
    /// The central's address.
    public let peer: BluetoothAddress
    /// The central's address type (1 public, 2 random).
    public let peerAddressType: UInt8
}

/// Listens on L2CAP CID 4 (ATT) of one adapter and hands every accepted connection to
/// `onAccept` from its own thread. Stopping wakes the thread through a pipe.
// @unchecked: fds and `running` only in start/stop (the owner serialises them); the accept thread gets copies.
public final class L2CAPATTListener: @unchecked Sendable {
    private let adapter: BLEAdapter
    private var listenFD: Int32 = -1
    private var wake: (read: Int32, write: Int32) = (-1, -1)
    private let finished = DispatchSemaphore(value: 0)
    private var running = false

    public init(adapter: BLEAdapter) {
        self.adapter = adapter
    }

    /// Binds and listens. Errors are reasons: EADDRINUSE means bluetoothd (or another hub) owns CID 4.
    public func start(backlog: Int32, onAccept: @escaping @Sendable (L2CAPConnection) -> Void) throws {
        // The kernel lets a second listener bind CID 4 without complaint; look first.
        if ATTChannelOwner.isTaken(address: adapter.address) {
            throw BLEUnavailableReason.attChannelInUse(adapter: adapter.name)
        }
        let fd: Int32
        switch BluetoothKernel.socket(type: Int32(SOCK_SEQPACKET.rawValue), proto: BluetoothKernel.protoL2CAP) {
        case .success(let s): fd = s
        case .failure(let e):
            throw BLEAdapterProbe.classifySocketError(e, operation: "open an L2CAP socket", capability: "CAP_NET_RAW")
        }
        var address = BluetoothKernel.l2capAddress(adapter.address, cid: BluetoothKernel.attFixedChannel,
                                                   type: BluetoothKernel.addressTypeLEPublic)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
        }
        if bound != 0 {
            let e = Errno(errno)
            close(fd)
            switch e.code {
            case EADDRINUSE: throw BLEUnavailableReason.attChannelInUse(adapter: adapter.name)
            default: throw BLEAdapterProbe.classifySocketError(e, operation: "bind L2CAP CID 4 on \(adapter.name)", capability: "CAP_NET_BIND_SERVICE")
            }
        }
        guard listen(fd, backlog) == 0 else {
            let e = Errno(errno)
            close(fd)
            throw BLEUnavailableReason.systemCall(operation: "listen on L2CAP CID 4", error: e)
        }
        var pipeFDs: [Int32] = [-1, -1]
        guard pipe(&pipeFDs) == 0 else {
            let e = Errno(errno)
            close(fd)
            throw BLEUnavailableReason.systemCall(operation: "create a pipe", error: e)
        }
        for p in pipeFDs {
            _ = fcntl(p, F_SETFD, FD_CLOEXEC)
            _ = fcntl(p, F_SETFL, fcntl(p, F_GETFL) | O_NONBLOCK)
        }
        listenFD = fd
        wake = (pipeFDs[0], pipeFDs[1])
        running = true
        let thread = Thread { [listenFD = fd, wakeFD = pipeFDs[0], finished] in
            Self.acceptLoop(listenFD: listenFD, wakeFD: wakeFD, onAccept: onAccept)
            finished.signal()
        }
        thread.name = "ble-l2cap-accept"
        thread.start()
    }

    /// Stops accepting and closes the listening socket (waits up to 1 s for the thread).
    public func stop() {
        guard running else { return }
        running = false
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
        _ = finished.wait(timeout: .now() + 1)
        close(listenFD)
        close(wake.read)
        close(wake.write)
        listenFD = -1
    }

    private static func acceptLoop(listenFD: Int32, wakeFD: Int32, onAccept: (L2CAPConnection) -> Void) {
        while true {
            var fds = [pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 2, -1)
            if n < 0 {
                if errno == EINTR { continue }
                return
            }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else {
                if fds[0].revents != 0 { return }   // error or hang-up on the listening socket
                continue
            }
            var peer = sockaddr_l2()
            var length = socklen_t(MemoryLayout<sockaddr_l2>.size)
            let fd = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(listenFD, $0, &length) }
            }
            guard fd >= 0 else { continue }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            onAccept(L2CAPConnection(fd: fd, peer: BluetoothAddress(kernel: peer.l2_bdaddr), peerAddressType: peer.l2_bdaddr_type))
        }
    }
}
