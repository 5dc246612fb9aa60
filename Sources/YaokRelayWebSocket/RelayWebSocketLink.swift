import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import YaokCrypto
import YaokRelayProtocol
import enum YaokPluginKit.Hex
import struct YaokPluginKit.IPEndpoint

/// The client side: a ``RelayLink`` that carries relay packets as binary WebSocket messages
/// over TLS 1.3 to `wss://host:port/path`, accepting the server only if its certificate's
/// SubjectPublicKeyInfo SHA-256 equals the pinned value (no CA, no host name check: the pin
/// is the trust). A mismatch fails with ``RelayProtocolError/tlsPinMismatch(expected:got:)``.
///
/// Behaves like a lossy datagram pipe, so ``RelayClient`` needs no changes: the first
/// ``send(_:)`` connects (a few packets wait for the upgrade), a lost connection is reported
/// once by ``receive(timeoutMs:)`` and the next send connects again.
// @unchecked: state, generation, outbox, inbox and failures only under `condition`.
public final class RelayWebSocketLink: RelayLink, @unchecked Sendable {
    public let url: RelayWebSocketURL
    public let spkiSHA256: [UInt8]
    /// Packets kept while connecting, at most (the client retransmits anything lost).
    static let maxOutbox = 32
    /// Received packets not yet taken by ``receive(timeoutMs:)``, at most.
    static let maxInbox = 4_096

    enum State {
        case idle
        case connecting(generation: Int)
        case open(Channel, generation: Int)
        case closed
    }

    /// NIO's process-wide group, never shut down: a link's own group shut down at close()
    /// raced the connect in flight (the resolver's late answer, or a connect handed to the
    /// dead loop, drops NIO's promises: a crash in debug builds). A connection that completes
    /// after close() is closed when it does.
    private let group = MultiThreadedEventLoopGroup.singleton
    private let sslContext: NIOSSLContext
    private let condition = NSCondition()
    private var state: State = .idle
    private var generation = 0
    private var outbox: [[UInt8]] = []
    private var inbox: [[UInt8]] = []
    private var failure: RelayProtocolError?
    /// Why TLS verification failed in the current attempt (set by the verification callback).
    private var trustFailure: RelayProtocolError?

    /// - Parameters:
    ///   - url: the relay's WebSocket address.
    ///   - spkiSHA256: the pinned SHA-256 of the relay certificate's SPKI (from `yaok-relay tls-pin`).
    public init(url: RelayWebSocketURL, spkiSHA256: [UInt8]) throws {
        guard spkiSHA256.count == 32 else { throw RelayTLSError.badPin(Hex.encode(spkiSHA256)) }
        self.url = url
        self.spkiSHA256 = spkiSHA256
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv13
        // The custom callback below replaces chain and name checks with the SPKI pin.
        tls.certificateVerification = .noHostnameVerification
        tls.trustRoots = .certificates([])
        do { sslContext = try NIOSSLContext(configuration: tls) } catch {
            throw RelayProtocolError.tlsFailed("TLS client context: \(error)")
        }
    }

    /// A ``RelayClient/Configuration/makeLink`` that opens this link.
    public static func factory(url: RelayWebSocketURL, spkiSHA256: [UInt8]) -> @Sendable (IPEndpoint) throws -> RelayLink {
        { _ in try RelayWebSocketLink(url: url, spkiSHA256: spkiSHA256) }
    }

    // MARK: RelayLink

    public func send(_ packet: [UInt8]) -> String? {
        condition.lock()
        switch state {
        case .open(let channel, _):
            condition.unlock()
            var buffer = channel.allocator.buffer(capacity: packet.count)
            buffer.writeBytes(packet)
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: buffer), promise: nil)
            return nil
        case .connecting:
            if outbox.count < Self.maxOutbox { outbox.append(packet) }
            condition.unlock()
            return nil
        case .idle:
            generation += 1
            let g = generation
            state = .connecting(generation: g)
            outbox = [packet]
            trustFailure = nil
            condition.unlock()
            connect(generation: g)
            return nil
        case .closed:
            condition.unlock()
            return "the WebSocket link to \(url) is closed"
        }
    }

    public func receive(timeoutMs: Int32) -> RelayLinkEvent {
        let deadline = Date().addingTimeInterval(Double(timeoutMs) / 1000)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if !inbox.isEmpty { return .packet(inbox.removeFirst()) }
            if let f = failure {
                failure = nil
                return .failed(f)
            }
            if case .closed = state { return .nothing }
            if !condition.wait(until: deadline) { return .nothing }
        }
    }

    public func close() {
        let channel: Channel? = condition.withLock {
            defer { state = .closed; condition.broadcast() }
            if case .open(let c, _) = state { return c }
            return nil
        }
        channel?.close(promise: nil)
    }

    /// Whether a WebSocket connection is up (tests, status).
    public var isOpen: Bool { condition.withLock { if case .open = state { return true }; return false } }

    // MARK: Connection

    private func connect(generation g: Int) {
        let url = self.url
        let pin = spkiSHA256
        let sniHost: String? = (try? SocketAddress(ipAddress: url.host, port: 0)) == nil ? url.host : nil
        let context = sslContext
        let bootstrap = ClientBootstrap(group: group)
            .connectTimeout(.seconds(10))
            .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { [weak self] channel in
                guard let self else { return channel.close() }
                let verify: NIOSSLCustomVerificationCallback = { [weak self] certificates, promise in
                    guard let leaf = certificates.first, let got = try? SPKIPin.sha256(of: leaf) else {
                        self?.trust(.tlsFailed("the relay presented no usable certificate"), generation: g)
                        promise.succeed(.failed)
                        return
                    }
                    if constantTimeEqual(got, pin) {
                        promise.succeed(.certificateVerified)
                    } else {
                        self?.trust(.tlsPinMismatch(expected: pin, got: got), generation: g)
                        promise.succeed(.failed)
                    }
                }
                let upgrader = NIOWebSocketClientUpgrader(maxFrameSize: RelayWebSocketLimits.maxFrameSize, automaticErrorHandling: true) { [weak self] ch, _ in
                    guard let self else { return ch.close() }
                    return ch.pipeline.removeHandler(name: UpgradeRequester.name).flatMap {
                        ch.pipeline.addHandler(ClientFrameHandler(link: self))
                    }.map { self.opened(ch, generation: g) }
                }
                do {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: context, serverHostname: sniHost, customVerificationCallback: verify))
                    try sync.addHTTPClientHandlers(withClientUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
                    try sync.addHandler(UpgradeRequester(url: url, link: self, generation: g), name: UpgradeRequester.name)
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        bootstrap.connect(host: url.host, port: Int(url.port)).whenComplete { [weak self] result in
            switch result {
            case .success(let channel):
                // Its own weak capture: the outer closure's `self` is a var.
                channel.closeFuture.whenComplete { [weak self] _ in self?.closed(generation: g) }
                if self?.isClosed ?? true { channel.close(promise: nil) }   // close() came first
            case .failure(let error):
                self?.fail(.unreachable("cannot connect to relay \(url): \(error)"), generation: g)
            }
        }
    }

    fileprivate func trust(_ error: RelayProtocolError, generation g: Int) {
        condition.withLock { if generation == g { trustFailure = error } }
    }

    private var isClosed: Bool { condition.withLock { if case .closed = state { return true }; return false } }

    private func opened(_ channel: Channel, generation g: Int) {
        let queued: [[UInt8]]? = condition.withLock {
            guard case .connecting(let cg) = state, cg == g else { return nil }
            state = .open(channel, generation: g)
            defer { outbox.removeAll() }
            return outbox
        }
        guard let queued else { channel.close(promise: nil); return }   // closed or superseded meanwhile
        for p in queued { _ = send(p) }
    }

    /// Reports a failed attempt or a lost connection once, and lets the next send reconnect.
    fileprivate func fail(_ error: RelayProtocolError, generation g: Int) {
        condition.withLock {
            guard generation == g else { return }
            switch state {
            case .connecting, .open:
                state = .idle
                outbox.removeAll()
                failure = trustFailure ?? error
                condition.broadcast()
            case .idle, .closed:
                break
            }
        }
    }

    private func closed(generation g: Int) {
        let wasOpen: Bool = condition.withLock { if case .open = state { return true }; return false }
        fail(.unreachable(wasOpen ? "the WebSocket connection to relay \(url) closed"
                                  : "the connection to relay \(url) closed during the TLS/WebSocket set-up"), generation: g)
    }

    fileprivate func deliver(_ bytes: [UInt8]) {
        condition.withLock {
            guard inbox.count < Self.maxInbox else { return }
            inbox.append(bytes)
            condition.broadcast()
        }
    }

    fileprivate func describe(_ error: Error) -> RelayProtocolError {
        if let e = error as? NIOSSLError { return .tlsFailed("TLS: \(e)") }
        if let e = error as? BoringSSLError { return .tlsFailed("TLS: \(e)") }
        if let e = error as? NIOHTTPClientUpgradeError { return .tlsFailed("the server did not accept the WebSocket upgrade of \(url.path) (\(e))") }
        return .tlsFailed(String(describing: error))
    }
}

/// Sends the upgrade request once the channel is active, and reports set-up errors (TLS,
/// refused upgrade) to the link before the connection closes. Removed by the upgrade.
// @unchecked: a NIO handler, used only on its channel's event loop; its fields are set in init.
private final class UpgradeRequester: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart
    static let name = "yaok.upgrade-requester"
    let url: RelayWebSocketURL
    weak var link: RelayWebSocketLink?
    let generation: Int

    init(url: RelayWebSocketURL, link: RelayWebSocketLink, generation: Int) {
        self.url = url
        self.link = link
        self.generation = generation
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { request(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        request(context)
        context.fireChannelActive()
    }

    private func request(_ context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: url.host.contains(":") ? "[\(url.host)]:\(url.port)" : "\(url.host):\(url.port)")
        headers.add(name: "Content-Length", value: "0")
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: url.path, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// A response that reaches this handler was not a successful upgrade (e.g. 404 for a wrong path).
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data) else { return }
        link?.fail(.tlsFailed("the server did not accept the WebSocket upgrade of \(url.path) (HTTP \(head.status.code))"), generation: generation)
        context.close(promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if let link { link.fail(link.describe(error), generation: generation) }
        context.close(promise: nil)
    }
}

/// After the upgrade: binary messages → the link; ping → pong; close → close.
// @unchecked: a NIO handler, used only on its channel's event loop; `link` is set in init.
private final class ClientFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    weak var link: RelayWebSocketLink?

    init(link: RelayWebSocketLink) { self.link = link }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .binary where frame.fin:
            var data = frame.unmaskedData
            link?.deliver(data.readBytes(length: data.readableBytes) ?? [])
        case .ping:
            var data = frame.unmaskedData
            let payload = data.readSlice(length: min(data.readableBytes, 125)) ?? context.channel.allocator.buffer(capacity: 0)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: payload)), promise: nil)
        case .pong:
            break
        default:
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) { context.close(promise: nil) }
}
