import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import YaokRelayProtocol

/// The relay's WebSocket-over-TLS 1.3 listener: accepts TLS (1.3 only), upgrades
/// `GET <path>` to WebSocket, and hands every binary message to ``onPacket`` with the
/// connection's ID; ``send(_:to:)`` writes packets back as binary messages.
///
/// It only moves bytes: the relay engine (handshake, secure channel, routing) is the same one
/// the UDP socket feeds. Bad input never reaches it: TLS below 1.3, non-WebSocket requests,
/// text frames and frames over one relay packet end the connection (and are counted).
// @unchecked: channels, connections, counters and accept buckets only under `lock`; the rest is `let`.
public final class RelayWebSocketListener: @unchecked Sendable {
    /// Where and how to listen.
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        public var certificatePath: String
        /// PEM private key; must be mode 0600 (owner only).
        public var privateKeyPath: String
        public var path = RelayWebSocketURL.defaultPath
        /// Connections at once; more are closed at accept.
        public var maxConnections = 10_000
        /// New connections accepted per minute from one IP address (each costs the relay a
        /// TLS handshake; token bucket, burst = this); more are closed at accept.
        public var connectionsPerMinutePerIP = 120
        /// IPv6 connections are limited per prefix of this length (IPv4: per address).
        public var ipv6PrefixLength = AddressPrefix.defaultIPv6PrefixLength
        /// A connection must finish TLS and the upgrade within this time.
        public var upgradeTimeout: TimeAmount = .seconds(10)
        /// A connection that sends nothing this long is closed (clients PING every 60 s).
        public var idleTimeout: TimeAmount = .minutes(6)

        public init(host: String, port: Int, certificatePath: String, privateKeyPath: String) {
            self.host = host
            self.port = port
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
        }
    }

    /// Counters (the relay exports them as metrics).
    public struct Counters: Sendable, Equatable {
        public var accepted: UInt64 = 0
        public var upgraded: UInt64 = 0
        /// Closed at accept: too many connections.
        public var refusedFull: UInt64 = 0
        /// Closed at accept: the address opened too many connections this minute.
        public var refusedRate: UInt64 = 0
        /// TLS handshake failures (wrong version, not TLS at all), HTTP/WebSocket protocol errors,
        /// upgrade timeouts, and non-binary or oversized frames.
        public var failed: UInt64 = 0
        /// Plain HTTP requests for another path or without an upgrade (answered 404/426).
        public var notWebSocket: UInt64 = 0
        /// Packets not written because the peer was not reading (its buffer was full).
        public var droppedUnwritable: UInt64 = 0
    }

    /// Called on an event loop for each binary message: connection ID, remote address, bytes.
    public typealias PacketHandler = @Sendable (UInt64, SocketAddress, [UInt8]) -> Void
    /// Called once when an upgraded connection closes.
    public typealias CloseHandler = @Sendable (UInt64, SocketAddress) -> Void

    public let configuration: Configuration
    private let sslContext: NIOSSLContext
    private let group: EventLoopGroup
    private let onPacket: PacketHandler
    private let onClose: CloseHandler
    private let lock = NSLock()
    private var serverChannel: Channel?
    private var connections: [UInt64: Channel] = [:]
    private var open = 0
    private var nextID: UInt64 = 1
    private var counters = Counters()
    /// New connections per address prefix (IPv4 address or IPv6 /64 by default; the relay
    /// engine's bucket map).
    private var acceptBuckets: BucketMap<AddressPrefix>

    /// Loads the certificate and key (the key file must be 0600) and builds the TLS 1.3 context.
    public init(configuration: Configuration, group: EventLoopGroup, onPacket: @escaping PacketHandler, onClose: @escaping CloseHandler) throws {
        self.configuration = configuration
        let perMinute = Double(max(1, configuration.connectionsPerMinutePerIP))
        self.acceptBuckets = BucketMap(capacity: perMinute, perMs: perMinute / 60_000, maxKeys: 65_536)
        self.sslContext = try RelayTLSFiles.serverContext(certificatePath: configuration.certificatePath, privateKeyPath: configuration.privateKeyPath)
        self.group = group
        self.onPacket = onPacket
        self.onClose = onClose
    }

    /// The bound address (useful with port 0).
    public var localAddress: SocketAddress? { lock.withLock { serverChannel?.localAddress } }
    public var counterSnapshot: Counters { lock.withLock { counters } }
    /// Open TCP connections (upgraded or not).
    public var openConnections: Int { lock.withLock { open } }

    /// Binds and starts accepting.
    public func start() throws {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .childChannelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [weak self] channel in
                guard let self else { return channel.close() }
                return self.setUp(channel)
            }
        let ch = try bootstrap.bind(host: configuration.host, port: configuration.port).wait()
        lock.withLock { serverChannel = ch }
    }

    /// Stops accepting and closes every connection.
    public func stop() {
        let (server, all): (Channel?, [Channel]) = lock.withLock {
            defer { serverChannel = nil }
            return (serverChannel, Array(connections.values))
        }
        try? server?.close().wait()
        for c in all { c.close(promise: nil) }
    }

    /// Writes packets as binary messages on a connection. Dropped, like datagrams, if the
    /// connection is gone or its peer does not read (more than NIO's 64 KiB high-water mark
    /// waits), so a client that never reads cannot make the relay buffer without bound.
    public func send(_ packets: [[UInt8]], to connection: UInt64) {
        guard let channel = lock.withLock({ connections[connection] }) else { return }
        channel.eventLoop.execute { [weak self] in
            guard channel.isWritable else {
                self?.count { $0.droppedUnwritable += UInt64(packets.count) }
                return
            }
            for p in packets {
                var buffer = channel.allocator.buffer(capacity: p.count)
                buffer.writeBytes(p)
                channel.write(WebSocketFrame(fin: true, opcode: .binary, data: buffer), promise: nil)
            }
            channel.flush()
        }
    }

    func count(_ body: (inout Counters) -> Void) { lock.withLock { body(&counters) } }

    private func setUp(_ channel: Channel) -> EventLoopFuture<Void> {
        let admitted: Bool = lock.withLock {
            counters.accepted += 1
            guard open < configuration.maxConnections else { counters.refusedFull += 1; return false }
            guard admitRate(channel.remoteAddress) else { counters.refusedRate += 1; return false }
            open += 1
            return true
        }
        guard admitted else { return channel.close() }
        channel.closeFuture.whenComplete { [weak self] _ in self?.lock.withLock { self?.open -= 1 } }
        let id: UInt64 = lock.withLock { defer { nextID += 1 }; return nextID }
        let remote = channel.remoteAddress
        // Close a connection that has not upgraded in time (slowloris, half-open TLS).
        let upgraded = UpgradeFlag()
        let timeout = channel.eventLoop.scheduleTask(in: configuration.upgradeTimeout) { [weak self] in
            guard !upgraded.value else { return }
            self?.count { $0.failed += 1 }
            channel.close(promise: nil)
        }
        channel.closeFuture.whenComplete { _ in timeout.cancel() }
        let path = configuration.path
        let upgrader = NIOWebSocketServerUpgrader(
            maxFrameSize: RelayWebSocketLimits.maxFrameSize,
            automaticErrorHandling: true,
            shouldUpgrade: { ch, head in
                ch.eventLoop.makeSucceededFuture(head.uri == path && head.method == .GET ? HTTPHeaders() : nil)
            },
            upgradePipelineHandler: { [weak self] ch, _ in
                guard let self, let remote else { return ch.close() }
                upgraded.value = true
                timeout.cancel()
                self.count { $0.upgraded += 1 }
                self.lock.withLock { self.connections[id] = ch }
                let handler = ServerFrameHandler(id: id, remote: remote, listener: self)
                return ch.pipeline.removeHandler(name: NotWebSocketResponder.name).flatMap {
                    ch.pipeline.addHandler(handler)
                }
            })
        do {
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(IdleStateHandler(readTimeout: configuration.idleTimeout))
            try sync.addHandler(ConnectionGuard(listener: self))
            try sync.addHandler(NIOSSLServerHandler(context: sslContext))
            try sync.configureHTTPServerPipeline(withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
            try sync.addHandler(NotWebSocketResponder(listener: self), name: NotWebSocketResponder.name)
            return channel.eventLoop.makeSucceededVoidFuture()
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
    }

    /// Takes a token for a connection from `remote`; false when its address is over the
    /// limit. Called with the lock held.
    private func admitRate(_ remote: SocketAddress?) -> Bool {
        let nowMs = Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000)
        guard let remote else { return false }
        return acceptBuckets.take(AddressPrefix(remote, ipv6PrefixLength: configuration.ipv6PrefixLength), nowMs: nowMs) == nil
    }

    fileprivate func frameReceived(id: UInt64, remote: SocketAddress, bytes: [UInt8]) { onPacket(id, remote, bytes) }

    fileprivate func closed(id: UInt64, remote: SocketAddress) {
        let known = lock.withLock { connections.removeValue(forKey: id) != nil }
        if known { onClose(id, remote) }
    }
}

/// Set once a connection has upgraded (read and written on its event loop only).
// @unchecked: `value` is read and written only on its connection's event loop.
private final class UpgradeFlag: @unchecked Sendable { var value = false }

/// First in the pipeline: closes idle connections and counts errors (TLS failures arrive here
/// as errors thrown by the handlers after it) instead of letting them surface.
// @unchecked: a NIO handler, used only on its channel's event loop; `listener` is set in init.
private final class ConnectionGuard: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny
    weak var listener: RelayWebSocketListener?

    init(listener: RelayWebSocketListener) { self.listener = listener }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// The last handler before the upgrade: answers HTTP requests that are not a WebSocket
/// upgrade of the relay's path (404 / 426) and closes. Removed when the upgrade succeeds.
// @unchecked: a NIO handler, used only on its channel's event loop (`answered` included).
private final class NotWebSocketResponder: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    static let name = "yaok.not-websocket"
    weak var listener: RelayWebSocketListener?
    private var answered = false

    init(listener: RelayWebSocketListener) { self.listener = listener }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data), !answered else { return }
        answered = true
        listener?.count { $0.notWebSocket += 1 }
        let status: HTTPResponseStatus = head.uri == listener?.configuration.path ? .upgradeRequired : .notFound
        let body = status == .upgradeRequired ? "this is a Ya OK relay: connect with WebSocket\n" : "not found\n"
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain")
        headers.add(name: "Content-Length", value: String(body.utf8.count))
        headers.add(name: "Connection", value: "close")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        var buffer = context.channel.allocator.buffer(capacity: body.utf8.count)
        buffer.writeString(body)
        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // An upgrade of another path: the request itself follows and is answered 404.
        if let e = error as? NIOWebSocketUpgradeError, e == .unsupportedWebSocketTarget { return }
        // Not TLS 1.3, not HTTP, bad WebSocket handshake: count and close; never crash.
        listener?.count { $0.failed += 1 }
        context.close(promise: nil)
    }
}

/// After the upgrade: binary messages → the relay; ping → pong; close → close; anything else
/// (text, fragments, over-long frames) ends the connection.
// @unchecked: a NIO handler, used only on its channel's event loop (`closing` included).
private final class ServerFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    let id: UInt64
    let remote: SocketAddress
    weak var listener: RelayWebSocketListener?
    private var closing = false

    init(id: UInt64, remote: SocketAddress, listener: RelayWebSocketListener) {
        self.id = id
        self.remote = remote
        self.listener = listener
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .binary where frame.fin:
            var data = frame.unmaskedData
            let bytes = data.readBytes(length: data.readableBytes) ?? []
            listener?.frameReceived(id: id, remote: remote, bytes: bytes)
        case .ping:
            var data = frame.unmaskedData
            let pong = WebSocketFrame(fin: true, opcode: .pong, data: data.readSlice(length: min(data.readableBytes, 125)) ?? context.channel.allocator.buffer(capacity: 0))
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .pong:
            break
        case .connectionClose:
            close(context, code: .normalClosure)
        default:
            listener?.count { $0.failed += 1 }
            close(context, code: .unacceptableData)
        }
    }

    private func close(_ context: ChannelHandlerContext, code: WebSocketErrorCode) {
        guard !closing else { return }
        closing = true
        var buffer = context.channel.allocator.buffer(capacity: 2)
        buffer.write(webSocketErrorCode: code)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        listener?.closed(id: id, remote: remote)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        listener?.count { $0.failed += 1 }
        context.close(promise: nil)
    }
}
