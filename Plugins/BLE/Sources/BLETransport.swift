import Foundation
#if canImport(Glibc)
import Glibc
#endif
// sys/socket.h's constants (SHUT_RDWR) come through the Bluetooth headers' module in this
// target: without this import a release (whole-module) build cannot see them.
import CBluetooth
import YaokATT
import YaokPluginKit
import YaokBluetooth

/// The BLE transport: the hub as a GATT peripheral that phones (centrals) connect to.
///
/// Radio layer straight on the kernel (no bluetoothd): the adapter is probed and brought up
/// with HCI ioctls, advertised with raw HCI LE commands, and centrals are accepted on an
/// L2CAP LE socket bound to the ATT fixed channel (CID 4). Each connection is served by the
/// YaokATT engine; frames travel as chunks over RX writes and TX notifications, and a link is
/// reported up once the kit's ``LinkHandshake`` has proved the phone's identity.
// @unchecked: status and handles under `lock`; link sessions only on the ATT poll thread (database set first).
public final class BLETransport: Transport, @unchecked Sendable {
    /// The link cost reported to the router (BLE is slow and short-range).
    public static let linkCost = 20
    /// Largest frame a BLE link carries: a reassembled frame holds one sealed record.
    public static let linkMTU = ChunkReassembler.defaultMaxFrameSize - SecureLink.overhead
    /// A central must complete the link handshake within this many seconds of connecting.
    public static let handshakeTimeoutSeconds: UInt64 = 30
    /// How often stale partial frames and handshake timeouts are checked.
    static let sweepIntervalSeconds = 5

    public let config: BLEConfig
    private let context: TransportContext
    private let lock = NSLock()

    // Guarded by `lock`.
    private var state: TransportState = .stopped
    private var reason = "not started"
    private var lastError: String?
    private var adapter: BLEAdapter?
    private var upLinks: Set<LinkID> = []
    private var connectionCount = 0
    private var peersSeen: Set<[UInt8]> = []
    private var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
    private var att: ATTSeqpacketServer?
    private var listener: L2CAPATTListener?
    private var advertiser: HCIAdvertiser?
    private var sweepTimer: DispatchSourceTimer?
    private let advertisingQueue = DispatchQueue(label: "ble-advertising")

    // Touched only on the ATT poll thread.
    private var sessions: [LinkID: BLELinkSession] = [:]
    private var descriptors: [LinkID: Int32] = [:]
    private var database: YaokGATT.Database?

    public init(context: TransportContext) throws {
        self.context = context
        self.config = try BLEConfig(section: context.config)
    }

    // MARK: Transport

    public func start() throws {
        lock.lock()
        let alreadyRunning = state == .running
        lock.unlock()
        if alreadyRunning { return }
        setState(.starting, "probing \(config.adapter)")

        let adapter: BLEAdapter
        switch BLEAdapterProbe.probe(name: config.adapter, index: config.adapterIndex) {
        case .success(let a): adapter = a
        case .failure(let why):
            setState(.unavailable, why.description)
            throw TransportError.unavailable(why.description)
        }

        let identity = [UInt8(PeerRole.hub.rawValue)] + context.identity.signingKey + context.identity.kxKey
        let database: YaokGATT.Database
        do {
            database = try YaokGATT.database(name: config.name, identity: identity)
        } catch {
            setState(.failed, "cannot build the GATT database: \(error)")
            throw TransportError.failed("cannot build the GATT database: \(error)")
        }
        // A whole frame at the smallest MTU must fit in the outgoing queue.
        let worstChunks = (ChunkReassembler.defaultMaxFrameSize + 15) / 16
        let server = ATTSeqpacketServer(table: database.table, socketPath: nil, options: .init(
            serverReceiveMTU: UInt16(config.mtu), maxConnections: config.maxConnections,
            maxQueuedPDUs: 2 * worstChunks, callTimeout: 1))   // stop() must return within 2 s
        self.database = database
        server.onConnect = { [weak self] id, engine in self?.connected(id, engine) }
        server.onDisconnect = { [weak self] id in self?.disconnected(id) }
        let listener = L2CAPATTListener(adapter: adapter)
        let advertiser = HCIAdvertiser(adapterIndex: adapter.index)
        do {
            try server.start()
            try listener.start(backlog: Int32(config.maxConnections)) { [weak self] connection in
                self?.accepted(connection)
            }
            try advertiser.start(intervalUnits: config.advertisingIntervalUnits,
                                 advertisingData: AdvertisingPayload.advertisingData(serviceUUID: YaokGATT.uuidBytes(0x0001)),
                                 scanResponse: AdvertisingPayload.scanResponse(name: config.name))
        } catch {
            listener.stop()
            server.stop()
            var reason = error as? BLEUnavailableReason
            if case .send(let command, let errno)? = error as? HCICommandError, errno.code == EPERM || errno.code == EACCES {
                reason = .missingCapability(operation: "send \(command) to \(adapter.name)", capability: "CAP_NET_RAW")
            }
            if let why = reason {
                setState(.unavailable, why.description)
                throw TransportError.unavailable(why.description)
            }
            setState(.failed, "\(error)")
            throw TransportError.failed("\(error)")
        }
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "ble-sweep"))
        timer.schedule(deadline: .now() + .seconds(Self.sweepIntervalSeconds), repeating: .seconds(Self.sweepIntervalSeconds))
        timer.setEventHandler { [weak self] in self?.sweep() }
        lock.lock()
        self.adapter = adapter
        self.att = server
        self.listener = listener
        self.advertiser = advertiser
        self.sweepTimer = timer
        lock.unlock()
        timer.resume()
        setState(.running, "advertising on \(adapter.name) (\(adapter.address))")
        context.logger.info("BLE: advertising \(config.name) on \(adapter.name) \(adapter.address), ATT MTU \(config.mtu), up to \(config.maxConnections) centrals")
    }

    public func stop() {
        lock.lock()
        let (server, listener, advertiser, timer) = (att, self.listener, self.advertiser, sweepTimer)
        att = nil
        self.listener = nil
        self.advertiser = nil
        sweepTimer = nil
        lock.unlock()
        timer?.cancel()
        // On the advertising queue, so a resume queued before cannot re-enable it afterwards.
        advertisingQueue.sync { try? advertiser?.stop() }
        listener?.stop()
        server?.stop()   // closes every connection; onDisconnect reports link_down
        setState(.stopped, "stopped")
    }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        lock.lock()
        let server = att
        let isUp = upLinks.contains(link)
        lock.unlock()
        guard let server else { throw TransportError.notRunning }
        guard isUp else { throw TransportError.unknownLink(link) }
        let limit = Self.linkMTU
        guard frame.count <= limit else { throw TransportError.frameTooLarge(size: frame.count, mtu: limit) }
        let sent = server.onPollThread { [self] () -> String? in
            guard let session = sessions[link], session.state == .up else { return "link \(link) is not up" }
            do {
                return sendFrame(try session.seal(frame), on: ATTConnectionID(rawValue: link), server: server)
            } catch {
                return "cannot seal: \(error)"
            }
        }
        switch sent {
        case .none: throw TransportError.failed("the BLE I/O thread did not respond")
        case .some(.some(let problem)): throw TransportError.failed(problem)
        case .some(.none):
            lock.lock()
            framesOut += 1
            bytesOut += UInt64(frame.count)
            lock.unlock()
        }
    }

    public var status: TransportStatus {
        lock.lock()
        defer { lock.unlock() }
        var details = ["adapter": config.adapter, "name": config.name, "connections": String(connectionCount),
                       "max_connections": String(config.maxConnections), "mtu": String(config.mtu)]
        if let adapter { details["address"] = adapter.address.description }
        return TransportStatus(state: state, reason: reason, links: upLinks.count, peers: peersSeen.count,
                               framesIn: framesIn, framesOut: framesOut, bytesIn: bytesIn, bytesOut: bytesOut,
                               lastError: lastError, details: details)
    }

    // MARK: Connections

    private func setState(_ s: TransportState, _ why: String) {
        lock.lock()
        state = s
        reason = why
        if s == .failed || s == .unavailable { lastError = why }
        lock.unlock()
        context.events.statusChanged()
    }

    /// On the accept thread: hand the socket to the ATT loop, keep advertising while there is room.
    private func accepted(_ connection: L2CAPConnection) {
        lock.lock()
        let (server, advertiser) = (att, self.advertiser)
        lock.unlock()
        guard let server else { close(connection.fd); return }
        guard let id = server.adopt(fd: connection.fd) else {
            context.logger.warning("BLE: refused a central: \(config.maxConnections) connections already")
            return
        }
        _ = server.onPollThread { [self] in
            sessions[id.rawValue]?.remote = connection.peer.description
            descriptors[id.rawValue] = connection.fd
        }
        context.logger.info("BLE: central connected (\(id))")
        resumeAdvertising(advertiser)
    }

    /// Re-enables advertising while there is room for another central. HCI commands can take
    /// up to a second, so this runs on its own queue, never on the ATT or accept thread.
    private func resumeAdvertising(_ advertiser: HCIAdvertiser?) {
        guard let advertiser else { return }
        advertisingQueue.async { [weak self] in
            guard let self else { return }
            self.lock.lock()
            let room = self.connectionCount < self.config.maxConnections && self.att != nil
            self.lock.unlock()
            guard room else { return }
            do { try advertiser.resume() } catch { self.context.logger.debug("BLE: advertising not resumed: \(error)") }
        }
    }

    /// On the poll thread, before the connection's first PDU.
    private func connected(_ id: ATTConnectionID, _ engine: ATTServer) {
        guard let db = database else { return }
        let clock = context.clock
        let session = BLELinkSession(
            id: id.rawValue, remote: "central", identity: context.identity,
            reassemblyTimeoutNanoseconds: UInt64(config.reassemblyTimeoutSeconds) * 1_000_000_000,
            connectedAt: clock.monotonicNanoseconds())
        sessions[id.rawValue] = session
        lock.lock()
        connectionCount += 1
        lock.unlock()
        engine.setReadProvider(for: db.control) { _ in
            .success([YaokGATT.protocolVersion, session.state == .up ? 1 : 0])
        }
        engine.onWrite = { [weak self, weak engine] handle, value, _ in
            guard let self, let engine else { return nil }
            switch handle {
            case db.txCCCD:
                if let first = value.first, first & 0x01 != 0 { self.apply(session.notificationsEnabled(), session, engine) }
            case db.rx:
                self.apply(session.received(chunk: value, now: clock.monotonicNanoseconds()), session, engine)
            case db.control:
                guard value == [YaokGATT.controlResetReassembly] else { return .valueNotAllowed }
                let dropped = session.resetReassembly()
                if dropped > 0 {
                    self.context.logger.info("BLE: link \(session.id): partial frame of \(dropped) chunks dropped on the central's request")
                }
            default:
                break
            }
            return nil
        }
    }

    /// On the poll thread: carry out what the session asked for.
    private func apply(_ output: BLELinkSession.Output, _ session: BLELinkSession, _ engine: ATTServer) {
        guard let server = currentServer() else { return }
        let connection = ATTConnectionID(rawValue: session.id)
        if output.restarted {
            lock.lock()
            upLinks.remove(session.id)
            lock.unlock()
            context.logger.info("BLE: link \(session.id): new link handshake on the same connection (the phone reconnected)")
            context.events.linkDown(session.id, reason: "the central started a new handshake")
        }
        for frame in output.framesToSend {
            if let problem = sendFrame(frame, on: connection, server: server) {
                context.logger.warning("BLE: link \(session.id): \(problem)")
            }
        }
        if let peer = output.authenticated {
            lock.lock()
            upLinks.insert(session.id)
            peersSeen.insert(peer.signingKey)
            lock.unlock()
            context.events.linkUp(LinkInfo(id: session.id, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey,
                                           peerRole: peer.role, mtu: Self.linkMTU,
                                           cost: Self.linkCost, kind: "ble", remote: session.remote, proof: peer.proof))
            context.events.statusChanged()
        }
        for frame in output.framesReceived {
            lock.lock()
            framesIn += 1
            bytesIn += UInt64(frame.count)
            lock.unlock()
            context.events.frameReceived(frame, on: session.id)
        }
        if let why = output.drop {
            context.logger.warning("BLE: dropping link \(session.id): \(why)")
            session.close()
            // The ATT loop owns the descriptor; shutting it down makes the loop see EOF and
            // end the connection (onDisconnect). On the loop's next turn: after the answer to
            // the write that carried this input, so a refused phone is not left waiting for it
            // (Docs/protocol.md §5, "The handshake's outcome"). Looked up then: a connection
            // that ended meanwhile has no descriptor left to shut.
            server.later { [self] in
                if let fd = descriptors[session.id] { shutdown(fd, Int32(SHUT_RDWR)) }
            }
        }
    }

    /// On the poll thread: chunk `frame` and queue one TX notification per chunk. Returns a problem, or nil.
    private func sendFrame(_ frame: [UInt8], on id: ATTConnectionID, server: ATTSeqpacketServer) -> String? {
        guard let db = database else { return "not running" }
        let result = server.withServer(id) { engine -> String? in
            do {
                for chunk in try BLELinkSession.chunks(of: frame, attMTU: Int(engine.mtu)) {
                    let pdu = try engine.notificationPDU(for: db.tx, value: chunk)
                    guard server.send(pdu, to: id) else { return "connection closed while sending" }
                }
                return nil
            } catch {
                return "cannot notify: \(error)"
            }
        }
        return result ?? "connection \(id) is gone"
    }

    /// Every few seconds: drop stale partial frames and centrals that never authenticate, and
    /// make sure the hub advertises while it has room (a resume after an accept can fail, e.g.
    /// when the controller is busy with several connections at once; nothing else would retry it).
    private func sweep() {
        guard let server = currentServer() else { return }
        resumeAdvertising(lock.withLock { advertiser })
        let clock = context.clock
        _ = server.onPollThread { [self] in
            let now = clock.monotonicNanoseconds()
            for session in sessions.values {
                if session.expire(now: now) {
                    context.logger.info("BLE: link \(session.id): dropped a partly received frame after \(config.reassemblyTimeoutSeconds) s")
                }
                if let why = session.overdue(now: now, handshakeTimeoutNanoseconds: Self.handshakeTimeoutSeconds * 1_000_000_000) {
                    var output = BLELinkSession.Output()
                    output.drop = why
                    if let engine = server.withServer(ATTConnectionID(rawValue: session.id), { $0 }) {
                        apply(output, session, engine)
                    }
                }
            }
        }
    }

    private func currentServer() -> ATTSeqpacketServer? {
        lock.lock()
        defer { lock.unlock() }
        return att
    }

    /// On the poll thread, when a connection ends for any reason.
    private func disconnected(_ id: ATTConnectionID) {
        guard let session = sessions.removeValue(forKey: id.rawValue) else { return }
        descriptors[id.rawValue] = nil
        let wasUp = session.state == .up
        session.close()
        lock.lock()
        connectionCount -= 1
        upLinks.remove(id.rawValue)
        let advertiser = self.advertiser
        lock.unlock()
        if wasUp { context.events.linkDown(id.rawValue, reason: "central disconnected") }
        context.events.statusChanged()
        let partial = session.partialFrameChunks
        context.logger.info("BLE: central disconnected (\(id))" + (partial > 0 ? " mid-frame: \(partial) chunks dropped" : ""))
        resumeAdvertising(advertiser)
    }
}

/// The plugin's C entry point.
@_cdecl("yaok_plugin_entry")
public func yaokPluginEntry() -> UnsafeRawPointer {
    PluginExport.entry(BLETransport.self, kind: "ble", version: "0.1.0",
                       summary: "Bluetooth LE GATT peripheral for phones (raw HCI + L2CAP, no bluetoothd)")
}
