import Dispatch
import Foundation
import Logging
import NIOCore
import NIOPosix
import YaokCrypto
import YaokRelayProtocol
import YaokRelayWebSocket
import YaokStore
import enum YaokPluginKit.Hex

/// The relay server: a SwiftNIO UDP socket and, optionally, a WebSocket-over-TLS 1.3
/// listener feeding one ``RelayEngine`` on one serial queue, a 1-second timer, and an optional
/// Prometheus `/metrics` responder (HTTP/1.0, meant for localhost).
///
/// Both listeners carry the same packets; answers go back the way the request came
/// (``RelayPeer``), and a session may move between them (it is keyed by its secure channel).
///
/// The event loop only moves datagrams; the engine (crypto, SQLCipher commits) runs on its
/// own queue, so a slow fsync never stops reads. At most `maxPendingDatagrams` wait for the
/// engine; more are dropped and counted.
// @unchecked: channels, inbox and counts under `lock`; the engine only on `queue`; start/stop by the owner.
public final class RelayServer: @unchecked Sendable {
    /// Where to listen.
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        /// `host:port` for `/metrics`, or nil for none.
        public var metricsHost: String?
        public var metricsPort: Int = 0
        /// The WebSocket-over-TLS listener, or nil for UDP only.
        public var webSocket: RelayWebSocketListener.Configuration?

        public init(host: String, port: Int, metricsHost: String? = nil, metricsPort: Int = 0,
                    webSocket: RelayWebSocketListener.Configuration? = nil) {
            self.host = host
            self.port = port
            self.metricsHost = metricsHost
            self.metricsPort = metricsPort
            self.webSocket = webSocket
        }
    }

    public let engine: RelayEngine
    public let configuration: Configuration
    private let logger: Logger
    private let queue = DispatchQueue(label: "yaok.relay.engine")
    private let group: MultiThreadedEventLoopGroup
    private let lock = NSLock()
    private let exporter = RelayPrometheusExporter()
    private var channel: Channel?
    private var metricsChannel: Channel?
    private var webSocket: RelayWebSocketListener?
    private var timer: DispatchSourceTimer?
    private var pending = 0
    private var inbox: [(bytes: [UInt8], peer: RelayPeer)] = []
    private var drainScheduled = false
    /// Datagrams handled in one transaction at most.
    static let maxBatch = 256

    public init(engine: RelayEngine, configuration: Configuration, logger: Logger) {
        self.engine = engine
        self.configuration = configuration
        self.logger = logger
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    }

    /// The bound UDP address (useful with port 0).
    public var localAddress: SocketAddress? { lock.withLock { channel?.localAddress } }
    /// The bound WebSocket (TLS) address, if any.
    public var webSocketAddress: SocketAddress? { lock.withLock { webSocket?.localAddress } }
    /// The WebSocket listener's counters, if it runs.
    public var webSocketCounters: RelayWebSocketListener.Counters? { lock.withLock { webSocket?.counterSnapshot } }
    /// The bound metrics address, if any.
    public var metricsAddress: SocketAddress? { lock.withLock { metricsChannel?.localAddress } }

    /// `ip:port` of a socket address (NIO's description adds the family and host name).
    public static func hostPort(_ a: SocketAddress?) -> String {
        guard let a, let ip = a.ipAddress, let port = a.port else { return "?" }
        return ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }

    /// Binds the sockets and starts the timer. Throws a ``RelayTLSError`` for a bad
    /// certificate or key file (e.g. a key not 0600) before binding anything.
    public func start() throws {
        var listener: RelayWebSocketListener?
        if let ws = configuration.webSocket {
            listener = try RelayWebSocketListener(
                configuration: ws, group: group,
                onPacket: { [weak self] connection, remote, bytes in
                    self?.received(bytes, from: .webSocket(connection: connection, remote: remote))
                },
                onClose: { [weak self] connection, remote in
                    guard let self else { return }
                    self.queue.async { self.engine.peerClosed(.webSocket(connection: connection, remote: remote)) }
                })
        }
        let bootstrap = DatagramBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            // Room for bursts (many clients at once) so the kernel does not drop datagrams.
            .channelOption(ChannelOptions.socketOption(.so_rcvbuf), value: 4 << 20)
            .channelOption(ChannelOptions.socketOption(.so_sndbuf), value: 4 << 20)
            .channelOption(ChannelOptions.maxMessagesPerRead, value: 16)
            // Large enough that an oversized datagram arrives whole and is counted as oversized.
            .channelOption(ChannelOptions.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 65_536))
            .channelInitializer { [weak self] channel in
                guard let self else { return channel.eventLoop.makeSucceededVoidFuture() }
                return channel.pipeline.addHandler(DatagramHandler(server: self))
            }
        let ch = try bootstrap.bind(host: configuration.host, port: configuration.port).wait()
        lock.withLock { channel = ch }
        if let listener {
            try listener.start()
            lock.withLock { webSocket = listener }
            logger.notice("relay WebSocket/TLS 1.3 listening on \(Self.hostPort(listener.localAddress))\(listener.configuration.path)")
        }
        if let mh = configuration.metricsHost {
            let http = ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { [weak self] channel in
                    guard let self else { return channel.eventLoop.makeSucceededVoidFuture() }
                    return channel.pipeline.addHandler(MetricsHTTPHandler(render: { self.metricsText() }))
                }
            let mc = try http.bind(host: mh, port: configuration.metricsPort).wait()
            lock.withLock { metricsChannel = mc }
        }
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1)
        t.setEventHandler { [weak self] in
            guard let self else { return }
            self.engine.tick()
            let out = self.engine.takePendingOutputs()
            if !out.isEmpty { self.send(out) }
        }
        t.resume()
        timer = t
        if let pg = engine.store as? RelayPostgresStore {
            // Wake-ups from the other nodes of the cluster (LISTEN/NOTIFY).
            pg.startListening(onKeys: { [weak self] keys in self?.notified(keys) },
                              onReconnect: { [weak self] in self?.notified([], gap: true) })
            logger.notice("relay store: PostgreSQL \(pg.configuration.location), node \(pg.nodeTag)")
        }
        logger.notice("relay listening on \(Self.hostPort(ch.localAddress)), key \(Hex.encode(engine.identity.signingKey))")
    }

    /// Closes the sockets, stops the timer and the cluster's LISTEN, and waits for the engine
    /// queue to drain.
    public func stop() {
        let (ch, mc, ws): (Channel?, Channel?, RelayWebSocketListener?) = lock.withLock {
            defer { channel = nil; metricsChannel = nil; webSocket = nil }
            return (channel, metricsChannel, webSocket)
        }
        ws?.stop()
        try? ch?.close().wait()
        try? mc?.close().wait()
        timer?.cancel()
        timer = nil
        // No other node's wake-up may queue engine work once the queue has drained.
        (engine.store as? RelayPostgresStore)?.stopListening()
        queue.sync {}
        try? group.syncShutdownGracefully()
    }

    /// Prometheus text of the current metrics.
    public func metricsText() -> String {
        var samples = queue.sync { engine.metricsSnapshot().samples }
        if let c = webSocketCounters {
            let open = lock.withLock { webSocket?.openConnections ?? 0 }
            for (name, help, value) in [("websocket_accepted_total", "TCP connections accepted by the WebSocket/TLS listener.", c.accepted),
                                        ("websocket_upgraded_total", "Connections upgraded to WebSocket.", c.upgraded),
                                        ("websocket_refused_total", "Connections closed at accept (too many).", c.refusedFull),
                                        ("websocket_rate_refused_total", "Connections closed at accept (too many from one address this minute).", c.refusedRate),
                                        ("websocket_failed_total", "TLS, HTTP or WebSocket failures, upgrade timeouts, bad frames.", c.failed),
                                        ("websocket_not_websocket_total", "HTTP requests that were not a relay WebSocket upgrade.", c.notWebSocket),
                                        ("websocket_dropped_unwritable_total", "Packets dropped because the connection's peer was not reading.", c.droppedUnwritable)] {
                samples.append(RelayMetricSample(name: name, help: help, kind: .counter, value: Int64(clamping: value)))
            }
            samples.append(RelayMetricSample(name: "websocket_connections", help: "Open WebSocket/TLS connections.", kind: .gauge, value: Int64(open)))
        }
        return exporter.render(samples)
    }

    /// Metrics snapshot (tests).
    public func metricsSnapshot() -> RelayMetrics { queue.sync { engine.metricsSnapshot() } }

    /// Runs `body` on the engine queue (tests, maintenance).
    public func withEngine<T>(_ body: (RelayEngine) throws -> T) rethrows -> T { try queue.sync { try body(engine) } }

    /// Notify keys from other nodes waiting for the engine (at most ``maxNotifiedKeys``; past
    /// that, one full re-check replaces them, so a flood costs bounded memory).
    private var notifiedKeys: Set<String> = []
    private var notificationGap = false
    private var notifyScheduled = false
    static let maxNotifiedKeys = 65_536

    /// Hands wake-ups from other nodes to the engine queue, coalesced.
    func notified(_ keys: [String], gap: Bool = false) {
        let schedule: Bool = lock.withLock {
            if gap || notifiedKeys.count + keys.count > Self.maxNotifiedKeys {
                notificationGap = true
                notifiedKeys = []
            } else if !notificationGap {
                notifiedKeys.formUnion(keys)
            }
            if notifyScheduled { return false }
            notifyScheduled = true
            return true
        }
        guard schedule else { return }
        queue.async {
            let (keys, gap): (Set<String>, Bool) = self.lock.withLock {
                defer { self.notifiedKeys = []; self.notificationGap = false; self.notifyScheduled = false }
                return (self.notifiedKeys, self.notificationGap)
            }
            let out = gap ? self.engine.handleNotificationGap() : self.engine.handleNotified(keys)
            if !out.isEmpty { self.send(out) }
        }
    }

    fileprivate func received(_ bytes: [UInt8], from peer: RelayPeer) {
        if bytes.count > RelayPacket.maxDatagramLength {
            queue.async { self.engine.countDropped(oversized: true) }
            return
        }
        let accepted: Bool = lock.withLock {
            guard pending < engine.limits.maxPendingDatagrams else { return false }
            pending += 1
            return true
        }
        guard accepted else {
            queue.async { self.engine.countDropped(oversized: false) }
            return
        }
        // Datagrams wait in an inbox; one drain on the engine queue handles everything that
        // arrived meanwhile in one transaction (group commit: one fsync for many SENDs).
        let schedule: Bool = lock.withLock {
            inbox.append((bytes, peer))
            if drainScheduled { return false }
            drainScheduled = true
            return true
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Runs on the engine queue.
    private func drain() {
        while true {
            let batch: [(bytes: [UInt8], peer: RelayPeer)] = lock.withLock {
                let n = min(inbox.count, Self.maxBatch)
                let b = Array(inbox.prefix(n))
                inbox.removeFirst(n)
                pending -= n
                if b.isEmpty { drainScheduled = false }
                return b
            }
            guard !batch.isEmpty else { return }
            let outputs = engine.handleBatch(batch)
            guard !outputs.isEmpty else { continue }
            send(outputs)
        }
    }

    /// Sends each output the way its peer came: UDP datagrams, or WebSocket messages on the peer's connection.
    private func send(_ outputs: [RelayEngine.Output]) {
        let (udp, ws) = lock.withLock { (channel, webSocket) }
        var datagrams: [(SocketAddress, [UInt8])] = []
        var streams: [UInt64: [[UInt8]]] = [:]
        for o in outputs {
            switch o.peer {
            case .udp(let a): datagrams.append((a, o.bytes))
            case .webSocket(let c, _): streams[c, default: []].append(o.bytes)
            }
        }
        if let ws { for (c, packets) in streams { ws.send(packets, to: c) } }
        guard let channel = udp, !datagrams.isEmpty else { return }
        let outgoing = datagrams
        channel.eventLoop.execute {
            for (address, bytes) in outgoing {
                var buffer = channel.allocator.buffer(capacity: bytes.count)
                buffer.writeBytes(bytes)
                channel.write(AddressedEnvelope(remoteAddress: address, data: buffer), promise: nil)
            }
            channel.flush()
        }
    }

    // MARK: Opening a data directory

    /// What `yaok-relay run` opens in its data directory: `relay.identity` (the long-term key,
    /// 0600, created on first run), `relay.db` (SQLCipher) and its key `relay.db.key` (0600,
    /// or the systemd credential `yaok-relay-db-key`). Migrating an older queue logs to `logger`.
    public static func openDataDirectory(_ dir: String, logger: Logger = Logger(label: "yaok-relay.store")) throws -> (identity: Identity, store: RelayQueueStore) {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let identity = try IdentityFile.loadOrCreate(path: dir + "/relay.identity")
        let key = try DatabaseKey.load(credentialName: "yaok-relay-db-key", keyFile: dir + "/relay.db.key")
        let db = try SQLCipherDatabase(path: dir + "/relay.db", key: key)
        return (identity, try RelayQueueStore(database: db, logger: logger))
    }
}

extension RelayServer {
    /// The systemd credential holding a cluster node's copy of the relay identity.
    public static let identityCredential = "yaok-relay-identity"

    /// A cluster node's identity: every node signs with the same relay key, so clients keep
    /// one pin. Read from `$CREDENTIALS_DIRECTORY/yaok-relay-identity` if present, else
    /// `<dataDir>/relay.identity` (0600). Never created here: a node that made its own key
    /// would not be the relay its clients pinned (`yaok-relay key` makes the first one).
    public static func loadClusterIdentity(dataDir: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Identity {
        var path = dataDir + "/relay.identity"
        if let dir = environment["CREDENTIALS_DIRECTORY"], !dir.isEmpty {
            let credential = (dir.hasSuffix("/") ? dir : dir + "/") + identityCredential
            if FileManager.default.fileExists(atPath: credential) { path = credential }
        }
        guard let identity = try IdentityFile.load(path: path) else { throw RelayClusterError.noIdentity(path: path) }
        return identity
    }
}

/// A cluster node's start-up problems.
public enum RelayClusterError: Error, CustomStringConvertible {
    case noIdentity(path: String)

    public var description: String {
        switch self {
        case .noIdentity(let path):
            return "no relay identity at \(path): a cluster node uses the cluster's shared key; copy relay.identity (0600) from the first node, or pass it as the systemd credential \(RelayServer.identityCredential)"
        }
    }
}

/// Hands each datagram to the server.
// @unchecked: a NIO handler, used only on its channel's event loop; `server` is a `let`.
private final class DatagramHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let server: RelayServer

    init(server: RelayServer) { self.server = server }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        var buffer = envelope.data
        let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
        server.received(bytes, from: .udp(envelope.remoteAddress))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // ICMP errors on an unconnected UDP socket are not fatal: keep serving.
    }
}

/// A minimal HTTP/1.0 responder: `GET /metrics` → Prometheus text, anything else → 404.
/// Reads at most 8 KiB of request head, then answers and closes.
// @unchecked: a NIO handler, used only on its channel's event loop (`head`, `answered` included).
private final class MetricsHTTPHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let render: @Sendable () -> String
    private var head: [UInt8] = []
    private var answered = false

    init(render: @escaping @Sendable () -> String) { self.render = render }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        var buffer = unwrapInboundIn(data)
        head += buffer.readBytes(length: min(buffer.readableBytes, 8192 - head.count)) ?? []
        let text = String(decoding: head, as: UTF8.self)
        guard text.contains("\r\n\r\n") || text.contains("\n\n") || head.count >= 8192 else { return }
        answered = true
        let requestLine = text.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? ""
        let parts = requestLine.split(separator: " ")
        let response: String
        if parts.count >= 2, parts[0] == "GET", parts[1] == "/metrics" {
            let body = render()
            response = "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        } else {
            let body = "not found\n"
            response = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        }
        var out = context.channel.allocator.buffer(capacity: response.utf8.count)
        out.writeString(response)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(out)).whenComplete { _ in channel.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) { context.close(promise: nil) }
}
