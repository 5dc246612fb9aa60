#if canImport(Glibc)
import Glibc
#endif
import CBluetooth
import YaokATT
import YaokPluginKit
import YaokBluetooth

/// Errors of the phone-side client.
public enum BLEClientError: Error, Equatable, Sendable, CustomStringConvertible {
    case unavailable(BLEUnavailableReason)
    case connect(address: String, error: Errno)
    case io(String, Errno)
    case timeout(String)
    case closed
    case attError(request: UInt8, handle: UInt16, code: UInt8)
    case protocolViolation(String)
    case notAYaokHub(String)
    case handshake(String)
    /// The kernel dropped notifications because this process read its ATT socket too slowly.
    case notificationsDropped(Int)

    public var description: String {
        switch self {
        case .unavailable(let why): return why.description
        case .connect(let address, let error): return "cannot connect to \(address) on ATT: \(error)"
        case .io(let what, let error): return "\(what): \(error)"
        case .timeout(let what): return "timed out waiting for \(what)"
        case .closed: return "the hub closed the connection"
        case .attError(let request, let handle, let code):
            return "ATT request 0x\(String(request, radix: 16)) on handle \(handle) failed with error 0x\(String(code, radix: 16))"
        case .protocolViolation(let what): return "unexpected ATT reply: \(what)"
        case .notAYaokHub(let what): return "not a Ya OK hub: \(what)"
        case .handshake(let what): return "link handshake failed: \(what)"
        case .notificationsDropped(let count):
            return "the kernel dropped \(count) notification(s) from the hub because this process read its ATT socket too slowly (receive queue full); the frame in progress is lost, so reconnect"
        }
    }
}

/// The phone side of the BLE transport, for `yaok` on Linux: an LE central that connects to a
/// hub's ATT channel (L2CAP CID 4) directly through the kernel, exchanges the MTU, discovers the
/// Ya OK service, subscribes to TX, and runs the link handshake. Blocking and single-threaded:
/// every call has a timeout.
public final class BLEHubClient {
    /// The hub's handles, as discovered.
    public struct Handles: Sendable, Equatable {
        public var identity: UInt16, rx: UInt16, tx: UInt16, txCCCD: UInt16, control: UInt16
    }

    public let hub: BluetoothAddress
    public private(set) var mtu = 23
    public private(set) var handles = Handles(identity: 0, rx: 0, tx: 0, txCCCD: 0, control: 0)
    /// The identity value the hub published (role, signing key, X25519 key).
    public private(set) var advertisedIdentity: [UInt8] = []
    /// The hub, once the handshake proved it.
    public private(set) var peer: AuthenticatedPeer?
    /// What crossed the ATT channel so far (for benchmarks and diagnostics).
    public private(set) var traffic = ATTTraffic()

    /// ATT PDUs and bytes (ATT layer: opcode, handle and value; the 4-byte L2CAP header and
    /// the link layer's own headers are not included) in each direction.
    public struct ATTTraffic: Sendable, Equatable {
        /// PDUs and bytes sent by this client.
        public var pdusSent = 0, bytesSent = 0
        /// PDUs and bytes received from the hub.
        public var pdusReceived = 0, bytesReceived = 0
        /// Requests that waited for their response (ATT allows one outstanding request, so
        /// each is a full round trip over the air).
        public var roundTrips = 0
        /// TX notifications received (no round trip: the hub streams them).
        public var notifications = 0
        public init() {}
    }

    private let fd: Int32
    private let timeoutMs: Int32
    private var reassembler = ChunkReassembler()
    private var pendingFrames: [[UInt8]] = []
    /// The secure session with the hub; once established, frames are sealed and opened here.
    private var link: SecureLink?
    /// Notifications that were not sealed for this session (dropped).
    public private(set) var refusedFrames = 0
    private var buffer = [UInt8](repeating: 0, count: 1024)
    /// Room for one SO_RXQ_OVFL control message (header plus a 32-bit counter, aligned).
    private var control = [UInt8](repeating: 0, count: 64)
    /// The socket's drop counter as last reported by the kernel.
    private var kernelDrops: UInt32 = 0

    /// Connects from adapter `adapter` (e.g. "hci0") to the hub at `hub` (public LE address by
    /// default; `randomAddress` for a static random one), then exchanges MTU and discovers handles.
    /// `receiveQueueBytes` sizes the socket's receive queue (see ``prepareReceiveQueue``).
    public init(adapter: String, hub: BluetoothAddress, randomAddress: Bool = false,
                mtu requestedMTU: Int = 517, timeoutSeconds: Int = 10,
                receiveQueueBytes: Int = BLEHubClient.defaultReceiveQueueBytes) throws {
        guard let index = BluetoothKernel.adapterIndex(adapter) else {
            throw BLEClientError.unavailable(.noAdapter(adapter: adapter, present: BluetoothKernel.presentAdapters()))
        }
        let local: BLEAdapter
        switch BLEAdapterProbe.probe(name: adapter, index: index) {
        case .success(let a): local = a
        case .failure(let why): throw BLEClientError.unavailable(why)
        }
        self.hub = hub
        self.timeoutMs = Int32(timeoutSeconds * 1000)
        let s: Int32
        switch BluetoothKernel.socket(type: Int32(SOCK_SEQPACKET.rawValue), proto: BluetoothKernel.protoL2CAP) {
        case .success(let v): s = v
        case .failure(let e): throw BLEClientError.unavailable(BLEAdapterProbe.classifySocketError(e, operation: "open an L2CAP socket", capability: "CAP_NET_RAW"))
        }
        fd = s
        Self.prepareReceiveQueue(fd, bytes: Int32(clamping: receiveQueueBytes))
        var source = BluetoothKernel.l2capAddress(local.address, cid: BluetoothKernel.attFixedChannel, type: BluetoothKernel.addressTypeLEPublic)
        var target = BluetoothKernel.l2capAddress(hub, cid: BluetoothKernel.attFixedChannel,
                                                  type: randomAddress ? BluetoothKernel.addressTypeLERandom : BluetoothKernel.addressTypeLEPublic)
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))   // bounds connect()
        let size = socklen_t(MemoryLayout<sockaddr_l2>.size)
        let bound = withUnsafePointer(to: &source) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) } }
        guard bound == 0 else { let e = Errno(errno); close(fd); throw BLEClientError.io("bind to \(adapter)", e) }
        let connected = withUnsafePointer(to: &target) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, size) } }
        guard connected == 0 else { let e = Errno(errno); close(fd); throw BLEClientError.connect(address: hub.description, error: e) }
        do {
            try exchangeMTU(UInt16(clamping: requestedMTU))
            try discover()
            advertisedIdentity = try readLong(handles.identity)
        } catch {
            close(fd)
            throw error
        }
    }

    deinit { close(fd) }

    /// Subscribes to TX and, once the subscription is acknowledged, runs the kit's secure link
    /// handshake as `role` with `identity` (the phone initiates); returns the proved hub.
    public func handshake(identity: LinkIdentity, role: PeerRole = .endpoint) throws -> AuthenticatedPeer {
        let hs = SecureLink(identity: identity, role: role, isInitiator: true, channel: .stream)
        link = nil
        // A predecessor on this LE link (ATT is a fixed channel: a phone reconnecting within the
        // controller's disconnect timeout gets the same link) may have died mid-frame: drop its
        // partial frame at the hub before our first chunk.
        try request([ATTOpcode.writeRequest] + le16(handles.control) + [YaokGATT.controlResetReassembly], expect: ATTOpcode.writeResponse)
        try request([ATTOpcode.writeRequest] + le16(handles.txCCCD) + [0x01, 0x00], expect: ATTOpcode.writeResponse)
        try sendRaw(hs.hello())
        while !hs.isEstablished {
            let frame = try receive()
            let record: TLVRecord
            do { record = try TLVRecord(parsing: frame) } catch { throw BLEClientError.handshake("\(error)") }
            do {
                let outputs = try hs.receive(record)
                // The hub's answer to our identity (sealed) is notified before the write that
                // carries the identity is acknowledged: read it with this session from now on.
                if hs.isEstablished { link = hs }
                for case .send(let reply) in outputs { try sendRaw(reply) }
            } catch let e as BLEClientError {
                throw e
            } catch {
                throw BLEClientError.handshake("\(error)")
            }
        }
        guard let hub = hs.peer else { throw BLEClientError.handshake("no identity from the hub") }
        guard hub.role == .hub, Array(advertisedIdentity.dropFirst().prefix(32)) == hub.signingKey else {
            throw BLEClientError.handshake("the proved key differs from the hub's Identity characteristic")
        }
        peer = hub
        return hub
    }

    /// Seals one frame and sends it as chunked RX Write Requests (each acknowledged: flow control).
    public func send(_ frame: [UInt8]) throws {
        guard let link else { throw BLEClientError.handshake("no secure session yet") }
        try sendRaw(link.seal(frame))
    }

    private func sendRaw(_ frame: [UInt8]) throws {
        for chunk in try BLELinkSession.chunks(of: frame, attMTU: mtu) {
            try request([ATTOpcode.writeRequest] + le16(handles.rx) + chunk, expect: ATTOpcode.writeResponse)
        }
    }

    /// The next whole frame from TX notifications (waits up to the timeout).
    public func receive() throws -> [UInt8] {
        while pendingFrames.isEmpty {
            let pdu = try readPDU(waitingFor: "a TX notification")
            try handleUnsolicited(pdu)
        }
        return pendingFrames.removeFirst()
    }

    /// The next whole frame, or nil when none completed within `timeoutMs` milliseconds or
    /// when `wake` (a descriptor another thread writes to, e.g. a pipe) became readable first.
    /// The caller drains `wake`. Lets one thread both send and receive: ATT allows a single
    /// outstanding request, so this client is driven from one thread.
    public func receive(timeoutMs: Int32, wake: Int32 = -1) throws -> [UInt8]? {
        if !pendingFrames.isEmpty { return pendingFrames.removeFirst() }
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
        let rc = poll(&fds, wake >= 0 ? 2 : 1, timeoutMs)
        if rc < 0 && errno != EINTR { throw BLEClientError.io("poll", Errno(errno)) }
        if rc == 0, let dropped = newKernelDrops() { throw BLEClientError.notificationsDropped(dropped) }
        guard rc > 0, fds[0].revents != 0 else { return nil }
        // Readable (or hung up: recv reports it). Take whatever PDUs are already queued.
        let pdu = try readPDU(waitingFor: "a TX notification")
        try handleUnsolicited(pdu)
        return pendingFrames.isEmpty ? nil : pendingFrames.removeFirst()
    }

    /// Ends the connection from any thread: a blocked call returns with an error.
    public func shutdownConnection() { shutdown(fd, Int32(SHUT_RDWR)) }

    // MARK: ATT client

    private func exchangeMTU(_ ours: UInt16) throws {
        let reply = try request([ATTOpcode.exchangeMTURequest] + le16(ours), expect: ATTOpcode.exchangeMTUResponse)
        guard reply.count >= 3 else { throw BLEClientError.protocolViolation("short Exchange MTU response") }
        mtu = max(23, min(Int(ours), Int(reply[1]) | Int(reply[2]) << 8))
    }

    private func discover() throws {
        // Primary services: find the Ya OK one.
        var start: UInt16 = 1
        var range: (UInt16, UInt16)?
        let wanted = YaokGATT.serviceUUID.littleEndianBytes128
        while range == nil, start != 0 {
            guard let reply = try requestOrEnd([ATTOpcode.readByGroupTypeRequest] + le16(start) + le16(0xFFFF) + le16(0x2800),
                                               expect: ATTOpcode.readByGroupTypeResponse) else { break }
            let length = Int(reply[1])
            guard length >= 6 else { throw BLEClientError.protocolViolation("group element of \(length) bytes") }
            var i = 2
            var lastEnd: UInt16 = 0
            while i + length <= reply.count {
                let s = u16(reply, i), e = u16(reply, i + 2)
                if Array(reply[(i + 4)..<(i + length)]) == wanted { range = (s, e) }
                lastEnd = e
                i += length
            }
            start = lastEnd == 0xFFFF ? 0 : lastEnd &+ 1
        }
        guard let (first, last) = range else { throw BLEClientError.notAYaokHub("no service \(YaokGATT.serviceUUID)") }
        // Characteristic declarations inside it.
        var found: [[UInt8]: UInt16] = [:]
        start = first
        while start <= last {
            guard let reply = try requestOrEnd([ATTOpcode.readByTypeRequest] + le16(start) + le16(last) + le16(0x2803),
                                               expect: ATTOpcode.readByTypeResponse) else { break }
            let length = Int(reply[1])
            guard length >= 7 else { throw BLEClientError.protocolViolation("characteristic element of \(length) bytes") }
            var i = 2
            var lastHandle = start
            while i + length <= reply.count {
                lastHandle = u16(reply, i)
                let valueHandle = u16(reply, i + 3)
                found[Array(reply[(i + 5)..<(i + length)])] = valueHandle
                i += length
            }
            if lastHandle >= last { break }
            start = lastHandle + 1
        }
        func handle(_ uuid: ATTUUIDBytes) throws -> UInt16 {
            guard let h = found[uuid.bytes] else { throw BLEClientError.notAYaokHub("characteristic \(uuid.name) missing") }
            return h
        }
        let tx = try handle(.init(0x0004, "Message TX"))
        // The TX CCCD: Find Information after the TX value.
        guard let info = try requestOrEnd([ATTOpcode.findInformationRequest] + le16(tx + 1) + le16(last),
                                          expect: ATTOpcode.findInformationResponse), info[1] == 1 else {
            throw BLEClientError.notAYaokHub("Message TX has no client configuration descriptor")
        }
        var cccd: UInt16?
        var i = 2
        while i + 4 <= info.count {
            if u16(info, i + 2) == 0x2902 { cccd = u16(info, i); break }
            i += 4
        }
        guard let txCCCD = cccd else { throw BLEClientError.notAYaokHub("Message TX has no client configuration descriptor") }
        handles = Handles(identity: try handle(.init(0x0002, "Identity")), rx: try handle(.init(0x0003, "Message RX")),
                          tx: tx, txCCCD: txCCCD, control: try handle(.init(0x0005, "Control")))
    }

    private struct ATTUUIDBytes {
        let bytes: [UInt8]
        let name: String
        init(_ short: UInt16, _ name: String) {
            bytes = YaokGATT.uuid(short).littleEndianBytes128
            self.name = name
        }
    }

    /// Read + Read Blob until a short part.
    private func readLong(_ handle: UInt16) throws -> [UInt8] {
        var value = Array(try request([ATTOpcode.readRequest] + le16(handle), expect: ATTOpcode.readResponse).dropFirst())
        while value.count >= mtu - 1 && value.count < ATTLimits.maxValueLength {
            let part = try request([ATTOpcode.readBlobRequest] + le16(handle) + le16(UInt16(value.count)),
                                   expect: ATTOpcode.readBlobResponse).dropFirst()
            if part.isEmpty { break }
            value += part
            if part.count < mtu - 1 { break }
        }
        return value
    }

    /// Sends a request and returns its response; ATT errors throw.
    @discardableResult
    private func request(_ pdu: [UInt8], expect: UInt8) throws -> [UInt8] {
        guard let reply = try requestOrEnd(pdu, expect: expect, endIsError: true) else { throw BLEClientError.closed }
        return reply
    }

    /// Like `request`, but "Attribute Not Found" (the end of a discovery) gives nil.
    private func requestOrEnd(_ pdu: [UInt8], expect: UInt8, endIsError: Bool = false) throws -> [UInt8]? {
        try write(pdu)
        traffic.roundTrips += 1
        while true {
            let reply = try readPDU(waitingFor: "the reply to ATT request 0x\(String(pdu[0], radix: 16))")
            if reply[0] == expect { return reply }
            if reply[0] == ATTOpcode.errorResponse, reply.count >= 5, reply[1] == pdu[0] {
                if reply[4] == ATTErrorCode.attributeNotFound.rawValue && !endIsError { return nil }
                throw BLEClientError.attError(request: pdu[0], handle: u16(reply, 2), code: reply[4])
            }
            try handleUnsolicited(reply)
        }
    }

    /// Notifications and indications that arrive between requests and responses.
    private func handleUnsolicited(_ pdu: [UInt8]) throws {
        switch pdu[0] {
        case ATTOpcode.handleValueNotification, ATTOpcode.handleValueIndication:
            guard pdu.count >= 3 else { throw BLEClientError.protocolViolation("short notification") }
            if pdu[0] == ATTOpcode.handleValueIndication { try write([ATTOpcode.handleValueConfirmation]) }
            guard u16(pdu, 1) == handles.tx else { return }
            traffic.notifications += 1
            do {
                if let frame = try reassembler.add(Array(pdu[3...]), now: monotonicNanoseconds()) {
                    if let link {
                        // Only frames sealed for this session reach the caller.
                        if let record = try? TLVRecord(parsing: frame), let outputs = try? link.receive(record) {
                            for output in outputs {
                                switch output {
                                case .frame(let inner): pendingFrames.append(inner)
                                case .refused(let why): throw BLEClientError.handshake(why)
                                case .send, .established: break
                                }
                            }
                        } else {
                            refusedFrames += 1
                        }
                    } else {
                        pendingFrames.append(frame)
                    }
                }
            } catch let e as BLEClientError {
                throw e
            } catch {
                throw BLEClientError.protocolViolation("bad TX chunk: \(error)")
            }
        default:
            return   // stray responses are ignored
        }
    }

    private func write(_ pdu: [UInt8]) throws {
        let n = pdu.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n == pdu.count else { throw BLEClientError.io("send", Errno(errno)) }
        traffic.pdusSent += 1
        traffic.bytesSent += n
    }

    /// Notifications are not flow controlled: a hub streams a frame's chunks back to back, and
    /// when this socket's receive queue is full the kernel drops the rest (basic-mode L2CAP has
    /// no way to hold them back). A 10 KB frame at ATT MTU 23 is ~660 notifications, each
    /// costing about 1 KB of queue, so the default 208 KB queue overflows whenever this process
    /// falls ~200 notifications behind (a loaded machine, a slow VM). Make room for several whole
    /// frames (SO_RCVBUFFORCE needs CAP_NET_ADMIN; SO_RCVBUF is capped by net.core.rmem_max),
    /// and ask the kernel to report drops, so a lost chunk is an immediate, named error rather
    /// than a frame that never completes.
    public static let defaultReceiveQueueBytes = 4 << 20

    private static func prepareReceiveQueue(_ fd: Int32, bytes: Int32) {
        var value = bytes
        let size = socklen_t(MemoryLayout<Int32>.size)
        if setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &value, size) != 0 {
            PosixSocket.setOption(fd, SOL_SOCKET, SO_RCVBUF, bytes)
        }
        PosixSocket.setOption(fd, SOL_SOCKET, SO_RXQ_OVFL, 1)
    }

    /// How often a wait for a PDU looks at the socket's drop counter: a notification the
    /// kernel dropped is lost, so waiting out the whole timeout for it would only hide why.
    private static let dropCheckMs: Int32 = 250

    private func readPDU(waitingFor what: String) throws -> [UInt8] {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        var waited: Int32 = 0
        while true {
            let slice = min(Self.dropCheckMs, timeoutMs - waited)
            let rc = poll(&p, 1, slice)
            if rc < 0 && errno == EINTR { continue }
            if rc > 0 { break }
            if let dropped = newKernelDrops() { throw BLEClientError.notificationsDropped(dropped) }
            waited += slice
            guard waited < timeoutMs else { throw BLEClientError.timeout(what) }
        }
        let (n, dropped) = receiveWithDropCount()
        if dropped > 0 { throw BLEClientError.notificationsDropped(dropped) }
        if n == 0 { throw BLEClientError.closed }
        guard n > 0 else { throw BLEClientError.io("recv", Errno(errno)) }
        traffic.pdusReceived += 1
        traffic.bytesReceived += n
        return Array(buffer[0..<n])
    }

    /// PDUs the kernel dropped on this socket since we last looked (SO_MEMINFO), or nil for none.
    /// SO_RXQ_OVFL (below) reports drops only on a PDU queued after them; this finds them
    /// when nothing more comes, e.g. the rest of a frame streamed while this process was busy.
    private func newKernelDrops() -> Int? {
        var info = [UInt32](repeating: 0, count: 16)
        var size = socklen_t(info.count * 4)
        guard getsockopt(fd, SOL_SOCKET, SO_MEMINFO, &info, &size) == 0, size >= 9 * 4 else { return nil }
        return noteKernelDrops(info[8])   // SK_MEMINFO_DROPS
    }

    /// Records the socket's drop counter; returns how many are new, or nil for none.
    private func noteKernelDrops(_ total: UInt32) -> Int? {
        guard total != kernelDrops else { return nil }
        let lost = Int(total &- kernelDrops)
        kernelDrops = total
        return lost
    }

    /// recvmsg into `buffer`; reads the SO_RXQ_OVFL counter the kernel attaches (the socket's
    /// total drops so far). Returns recvmsg's result and how many PDUs were dropped since the last call.
    private func receiveWithDropCount() -> (Int, Int) {
        let bufferCount = buffer.count, controlCount = control.count
        var reported: UInt32?
        let n = buffer.withUnsafeMutableBytes { data -> Int in
            control.withUnsafeMutableBytes { cmsgs -> Int in
                var iov = iovec(iov_base: data.baseAddress, iov_len: bufferCount)
                return withUnsafeMutablePointer(to: &iov) { iovp -> Int in
                    var msg = msghdr()
                    msg.msg_iov = iovp
                    msg.msg_iovlen = 1
                    msg.msg_control = cmsgs.baseAddress
                    msg.msg_controllen = controlCount
                    let n = recvmsg(fd, &msg, 0)
                    guard n >= 0 else { return n }
                    // Walk the control messages (CMSG_* are macros Swift cannot import).
                    let headerSize = MemoryLayout<cmsghdr>.size
                    var offset = 0
                    while offset + headerSize <= Int(msg.msg_controllen) {
                        let header = cmsgs.load(fromByteOffset: offset, as: cmsghdr.self)
                        let length = Int(header.cmsg_len)
                        guard length >= headerSize, offset + length <= Int(msg.msg_controllen) else { break }
                        if header.cmsg_level == SOL_SOCKET, header.cmsg_type == SO_RXQ_OVFL, length >= headerSize + 4 {
                            reported = cmsgs.loadUnaligned(fromByteOffset: offset + headerSize, as: UInt32.self)
                        }
                        offset += (length + 7) & ~7
                    }
                    return n
                }
            }
        }
        return (n, reported.flatMap(noteKernelDrops) ?? 0)
    }

    private func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
    private func u16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
    private func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
