import Foundation
import Glibc

/// Identifies one accepted connection of an `ATTSeqpacketServer` (unique per server).
public struct ATTConnectionID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public static func < (lhs: ATTConnectionID, rhs: ATTConnectionID) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "conn#\(rawValue)" }
}

/// Serves an attribute table on a UNIX `SOCK_SEQPACKET` socket: one ATT PDU per packet,
/// and every accepted connection gets a FRESH copy of the table with its own `ATTServer`
/// (link security: none, as a UNIX socket is not encrypted).
///
/// Already-connected seqpacket descriptors from elsewhere (e.g. an accepted L2CAP ATT
/// socket, which is also one PDU per packet) can join the same loop with `adopt(fd:security:)`;
/// with `socketPath` nil the server only serves adopted connections.
///
/// One poll thread does all socket I/O and runs every `ATTServer` and every callback, so
/// the engines need no locks. Owner calls from other threads (`notify`, `indicate`,
/// `withServer`) are queued to that thread and waited for (with a timeout); called from
/// inside a callback they run inline.
// @unchecked: connection state lives on the one poll thread; other threads only queue jobs to it.
public final class ATTSeqpacketServer: @unchecked Sendable {
    /// Server options.
    public struct Options: Hashable, Sendable {
        /// Server Rx MTU for every connection (default 512).
        public var serverReceiveMTU: UInt16
        /// Check CCCD writes are exactly 2 octets (default on).
        public var checkCCCDWrites: Bool
        /// Connections beyond this are accepted and closed at once.
        public var maxConnections: Int
        /// Outgoing PDUs queued for a client that does not read; beyond this it is dropped.
        public var maxQueuedPDUs: Int
        /// How long a call from another thread waits for the poll thread.
        public var callTimeout: TimeInterval

        public init(serverReceiveMTU: UInt16 = 512, checkCCCDWrites: Bool = true, maxConnections: Int = 16,
                    maxQueuedPDUs: Int = 256, callTimeout: TimeInterval = 5) {
            self.serverReceiveMTU = serverReceiveMTU
            self.checkCCCDWrites = checkCCCDWrites
            self.maxConnections = maxConnections
            self.maxQueuedPDUs = maxQueuedPDUs
            self.callTimeout = callTimeout
        }

        /// The per-connection engine options these imply.
        public var engineOptions: ATTServer.Options {
            ATTServer.Options(serverReceiveMTU: serverReceiveMTU, checkCCCDWrites: checkCCCDWrites)
        }
    }

    private final class Connection {
        let id: ATTConnectionID
        let fd: Int32
        let server: ATTServer
        var outbox: [[UInt8]] = []
        var closed = false

        init(id: ATTConnectionID, fd: Int32, server: ATTServer) {
            self.id = id
            self.fd = fd
            self.server = server
        }
    }

    private final class ResultBox<T> {
        var value: T?
    }

    /// The UNIX socket path listened on; nil when only adopted connections are served.
    public let socketPath: String?
    /// The table every connection starts from.
    public let table: AttributeTable
    public let options: Options

    /// Runs on the poll thread for each new connection, before its first PDU: the place to
    /// register read providers and write handlers on that connection's `ATTServer`.
    /// Set before `start()`.
    public var onConnect: ((ATTConnectionID, ATTServer) -> Void)?
    /// Runs on the poll thread when a connection ends (peer closed, error, or `stop()`).
    /// Set before `start()`.
    public var onDisconnect: ((ATTConnectionID) -> Void)?

    private let lock = NSLock()
    private var state: RunState = .idle
    private var jobs: [() -> Void] = []
    private var loopThread: pthread_t?
    private var listenFD: Int32 = -1
    private var wakeFDs: (read: Int32, write: Int32) = (-1, -1)
    private let loopFinished = DispatchSemaphore(value: 0)

    // Poll-thread state.
    private var connections: [ATTConnectionID: Connection] = [:]
    private var nextConnectionID: UInt64 = 1
    private var receiveBuffer = [UInt8](repeating: 0, count: 65536)

    private enum RunState { case idle, running, stopping, stopped }

    /// A server for `table`; with a `socketPath` it listens there once started.
    public init(table: AttributeTable, socketPath: String?, options: Options = Options()) {
        self.table = table
        self.socketPath = socketPath
        self.options = options
    }

    deinit {
        stop()
    }

    // MARK: Lifecycle

    /// Binds the socket and starts the poll thread. When this returns, clients can connect.
    public func start() throws {
        lock.lock()
        defer { lock.unlock() }
        guard state == .idle else { throw ATTSocketError.notStartable }
        let fd = try socketPath.map { try UnixSeqpacket.listen(at: $0, backlog: 16) } ?? -1
        var pipeFDs: [Int32] = [-1, -1]
        guard pipe(&pipeFDs) == 0 else {
            let code = errno
            if let socketPath {
                close(fd)
                unlink(socketPath)
            }
            throw ATTSocketError.system(operation: "pipe", errno: code)
        }
        for pipeFD in pipeFDs { UnixSeqpacket.makeNonBlockingCloseOnExec(pipeFD) }
        listenFD = fd
        wakeFDs = (pipeFDs[0], pipeFDs[1])
        state = .running
        let thread = Thread { [self] in self.runLoop() }
        thread.name = "att-seqpacket"
        thread.start()
    }

    /// Stops accepting, closes every connection (calling `onDisconnect`), removes the socket
    /// file, and waits (up to `callTimeout`) for the poll thread to finish. Idempotent.
    /// The poll thread keeps the server alive, so a started server must be stopped.
    public func stop() {
        lock.lock()
        guard state == .running else {
            lock.unlock()
            return
        }
        state = .stopping
        let onLoopThread = isOnLoopThreadLocked()
        wakeLocked()
        lock.unlock()
        // From inside a callback the loop ends once the callback returns; don't wait for it.
        if !onLoopThread { _ = loopFinished.wait(timeout: .now() + options.callTimeout) }
    }

    /// Whether the server is accepting connections.
    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return state == .running
    }

    // MARK: Owner calls

    /// Runs `body` on the poll thread and returns its result; nil when the server is not
    /// running or the poll thread did not get to it within `callTimeout`.
    public func onPollThread<T>(_ body: @escaping () -> T) -> T? {
        lock.lock()
        if isOnLoopThreadLocked() {
            lock.unlock()
            return body()
        }
        guard state == .running else {
            lock.unlock()
            return nil
        }
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        jobs.append {
            box.value = body()
            done.signal()
        }
        wakeLocked()
        lock.unlock()
        guard done.wait(timeout: .now() + options.callTimeout) == .success else { return nil }
        return box.value
    }

    /// Queues `body` for the poll thread's next turn and returns at once. From inside a
    /// callback it runs after the response to the request being handled was queued and written
    /// (a link dropped on a write is dropped after the write's answer).
    public func later(_ body: @escaping () -> Void) {
        lock.lock()
        defer { lock.unlock() }
        guard state == .running else { return }
        jobs.append(body)
        wakeLocked()
    }

    /// Serves an already-connected `SOCK_SEQPACKET` descriptor (one ATT PDU per packet) with
    /// a fresh table copy and the given link security. The server takes ownership of `fd`
    /// in every case: it is closed when the connection ends, or at once when the server is
    /// not running or at `maxConnections` (then the result is nil).
    public func adopt(fd: Int32, security: ATTLinkSecurity = .none) -> ATTConnectionID? {
        UnixSeqpacket.makeNonBlockingCloseOnExec(fd)
        // Exactly one side owns fd: the poll thread if it got there first, else this caller
        // (when the server is not running, or the call timed out before the job ran).
        // @unchecked: both flags are read and written only under `lock`.
        final class Handover: @unchecked Sendable {
            let lock = NSLock()
            var taken = false
            var abandoned = false
        }
        let handover = Handover()
        let id = onPollThread { () -> ATTConnectionID? in
            handover.lock.lock()
            defer { handover.lock.unlock() }
            guard !handover.abandoned else { return nil }
            handover.taken = true
            return self.addConnection(fd: fd, security: security)
        } ?? nil
        handover.lock.lock()
        if !handover.taken {
            handover.abandoned = true
            close(fd)
        }
        handover.lock.unlock()
        return id
    }

    /// The connections now open, in accept order.
    public var connectionIDs: [ATTConnectionID] {
        onPollThread { self.connections.keys.sorted() } ?? []
    }

    /// Runs `body` with the `ATTServer` of connection `id` on the poll thread.
    public func withServer<T>(_ id: ATTConnectionID, _ body: @escaping (ATTServer) -> T) -> T? {
        onPollThread { () -> T? in
            guard let connection = self.connections[id] else { return nil }
            return body(connection.server)
        } ?? nil
    }

    /// Sends a Handle Value Notification for `handle` to every connection whose CCCD enables
    /// notifications; returns those connections. `value` defaults to each connection's stored value.
    @discardableResult
    public func notify(handle: UInt16, value: [UInt8]? = nil) -> [ATTConnectionID] {
        fanOut { try $0.notificationPDU(for: handle, value: value) }
    }

    /// Sends a Handle Value Indication for `handle` to every connection whose CCCD enables
    /// indications and that has no unconfirmed indication; returns those connections.
    /// Confirmations reach each connection's `ATTServer.onConfirmation`.
    @discardableResult
    public func indicate(handle: UInt16, value: [UInt8]? = nil) -> [ATTConnectionID] {
        fanOut { try $0.indicationPDU(for: handle, value: value) }
    }

    /// Sends `pdu` from the server to one connection as is (e.g. a notification the owner built).
    @discardableResult
    public func send(_ pdu: [UInt8], to id: ATTConnectionID) -> Bool {
        onPollThread { () -> Bool in
            guard let connection = self.connections[id], !connection.closed else { return false }
            self.enqueue(pdu, on: connection)
            return !connection.closed
        } ?? false
    }

    private func fanOut(_ makePDU: @escaping (ATTServer) throws -> [UInt8]) -> [ATTConnectionID] {
        onPollThread { () -> [ATTConnectionID] in
            var reached: [ATTConnectionID] = []
            for id in self.connections.keys.sorted() {
                guard let connection = self.connections[id], !connection.closed,
                      let pdu = try? makePDU(connection.server) else { continue }
                self.enqueue(pdu, on: connection)
                if !connection.closed { reached.append(id) }
            }
            return reached
        } ?? []
    }

    // MARK: Poll thread

    private func isOnLoopThreadLocked() -> Bool {
        guard let loop = loopThread else { return false }
        return pthread_equal(loop, pthread_self()) != 0
    }

    /// Wakes the poll thread. Called with `lock` held, so the pipe cannot be closed (and its
    /// descriptor number reused) in between.
    private func wakeLocked() {
        guard wakeFDs.write >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(wakeFDs.write, &byte, 1)  // a full pipe already means "wake up"
    }

    private func runLoop() {
        lock.lock()
        loopThread = pthread_self()
        lock.unlock()

        while true {
            lock.lock()
            if state != .running {
                lock.unlock()
                break  // shutDown() runs the jobs still queued
            }
            let pending = jobs
            jobs = []
            lock.unlock()
            for job in pending { job() }
            reapClosed()

            let ordered = connections.values.sorted { $0.id < $1.id }
            // A negative descriptor (no listener) is skipped by poll().
            var fds = [pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)]
            for connection in ordered {
                var events = Int16(POLLIN)
                if !connection.outbox.isEmpty { events |= Int16(POLLOUT) }
                fds.append(pollfd(fd: connection.fd, events: events, revents: 0))
            }
            let ready = poll(&fds, nfds_t(fds.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if fds[0].revents != 0 { drainWakePipe() }
            if fds[1].revents & Int16(POLLIN) != 0 { acceptPending() }
            for (offset, connection) in ordered.enumerated() {
                let revents = fds[offset + 2].revents
                guard revents != 0, !connection.closed else { continue }
                if revents & Int16(POLLIN) != 0 { receive(on: connection) }
                if !connection.closed, revents & Int16(POLLOUT) != 0 { flush(connection) }
                if !connection.closed, revents & Int16(POLLIN) == 0,
                   revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 {
                    connection.closed = true
                }
            }
            reapClosed()
        }
        shutDown()
    }

    private func shutDown() {
        lock.lock()
        let leftover = jobs
        jobs = []
        lock.unlock()
        for job in leftover { job() }  // let waiting callers return (they see the closing state)
        for connection in connections.values { connection.closed = true }
        reapClosed()
        if let socketPath {
            close(listenFD)
            unlink(socketPath)
        }
        listenFD = -1
        lock.lock()
        close(wakeFDs.read)
        close(wakeFDs.write)
        wakeFDs = (-1, -1)
        state = .stopped
        loopThread = nil
        lock.unlock()
        loopFinished.signal()
    }

    private func drainWakePipe() {
        var scratch = [UInt8](repeating: 0, count: 64)
        while read(wakeFDs.read, &scratch, scratch.count) > 0 {}
    }

    private func acceptPending() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 { return }  // EAGAIN (done) or a transient error: poll again
            UnixSeqpacket.makeNonBlockingCloseOnExec(fd)
            _ = addConnection(fd: fd, security: .none)
        }
    }

    /// Registers a connected descriptor; over the bound it is closed at once (refused).
    private func addConnection(fd: Int32, security: ATTLinkSecurity) -> ATTConnectionID? {
        guard connections.count < options.maxConnections else {
            close(fd)
            return nil
        }
        let id = ATTConnectionID(rawValue: nextConnectionID)
        nextConnectionID += 1
        let engine = ATTServer(table: table, options: options.engineOptions, security: security)
        let connection = Connection(id: id, fd: fd, server: engine)
        connections[id] = connection
        onConnect?(id, engine)
        return id
    }

    private func receive(on connection: Connection) {
        // A bounded number of packets per wake-up keeps one chatty client from starving others.
        for _ in 0..<32 {
            let count = receiveBuffer.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return }
                connection.closed = true
                return
            }
            if count == 0 {
                connection.closed = true  // orderly shutdown by the peer
                return
            }
            let pdu = Array(receiveBuffer[0..<count])
            if let response = connection.server.handle(pdu: pdu) { enqueue(response, on: connection) }
            if connection.closed { return }
        }
    }

    private func enqueue(_ pdu: [UInt8], on connection: Connection) {
        guard !connection.closed else { return }
        guard connection.outbox.count < options.maxQueuedPDUs else {
            connection.closed = true  // the client stopped reading; drop it rather than grow
            return
        }
        connection.outbox.append(pdu)
        flush(connection)
    }

    private func flush(_ connection: Connection) {
        while let next = connection.outbox.first, !connection.closed {
            let sent = next.withUnsafeBytes { Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            if sent < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return }
                connection.closed = true
                return
            }
            connection.outbox.removeFirst()
        }
    }

    private func reapClosed() {
        for (id, connection) in connections where connection.closed {
            connections[id] = nil
            close(connection.fd)
            onDisconnect?(id)
        }
    }
}
