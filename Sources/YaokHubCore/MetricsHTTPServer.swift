import Foundation
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Why the metrics endpoint could not start.
public enum MetricsHTTPError: Error, CustomStringConvertible, Equatable {
    /// `metrics.listen` is not `host:port` (IPv6 as `[addr]:port`).
    case badListenAddress(String)
    /// Binding the listening socket failed (address in use, not local, ...).
    case bindFailed(address: String, reason: String)
    /// `start()` was called twice, or after `stop()`.
    case alreadyStarted

    public var description: String {
        switch self {
        case .badListenAddress(let s):
            return "metrics.listen \"\(s)\" is not host:port (IPv6 as [addr]:port, port 0-65535)"
        case .bindFailed(let address, let reason):
            return "cannot listen for /metrics on \(address): \(reason)"
        case .alreadyStarted:
            return "the metrics HTTP server was already started"
        }
    }
}

/// A minimal HTTP/1.1 responder for Prometheus: `GET /metrics` returns `render()` as
/// `text/plain; version=0.0.4`; every other request gets a short error status.
///
/// One request per connection (the response carries `Connection: close`), request heads
/// are capped at `maxRequestHeadBytes`, and idle connections are closed after
/// `idleTimeout`, so a slow or hostile client cannot hold memory or sockets for long.
/// It serves only what `render` returns; keep `metrics.listen` on localhost.
// @unchecked: the channel and bound port only under `lock`.
public final class MetricsHTTPServer: @unchecked Sendable {
    /// The largest request head (request line plus headers) accepted.
    public static let maxRequestHeadBytes = 8192
    /// Connections served at once; more are closed on accept.
    public static let maxConnections = 32

    public let host: String
    public let requestedPort: Int
    private let render: @Sendable () -> String
    private let logger: Logger
    private let idleTimeout: TimeAmount
    private let lock = NSLock()
    private var group: MultiThreadedEventLoopGroup?
    private var channel: Channel?
    private var started = false
    private let connections = ConnectionCounter()

    /// Parses `listen` (`127.0.0.1:9478`, `[::1]:9478`, `localhost:0`); does not bind yet.
    /// - Parameters:
    ///   - listen: the config's `metrics.listen`.
    ///   - idleTimeoutSeconds: how long a connection may take to send its request.
    ///   - render: produces the exposition text; called on the server's event loop thread
    ///     for every `GET /metrics`, so it must be thread-safe and quick.
    public init(listen: String, logger: Logger, idleTimeoutSeconds: Int64 = 10,
                render: @escaping @Sendable () -> String) throws {
        let (host, port) = try Self.parse(listen: listen)
        self.host = host
        self.requestedPort = port
        self.logger = logger
        self.idleTimeout = .seconds(idleTimeoutSeconds)
        self.render = render
    }

    /// Splits `host:port`; IPv6 hosts in brackets.
    static func parse(listen: String) throws -> (String, Int) {
        let bad = MetricsHTTPError.badListenAddress(listen)
        let host: Substring
        let portText: Substring
        if listen.hasPrefix("[") {
            guard let close = listen.firstIndex(of: "]") else { throw bad }
            host = listen[listen.index(after: listen.startIndex)..<close]
            let rest = listen[listen.index(after: close)...]
            guard rest.hasPrefix(":") else { throw bad }
            portText = rest.dropFirst()
        } else {
            guard let colon = listen.lastIndex(of: ":") else { throw bad }
            host = listen[..<colon]
            portText = listen[listen.index(after: colon)...]
            if host.contains(":") { throw bad }
        }
        guard !host.isEmpty, portText.count <= 5, portText.allSatisfy(\.isASCII),
              let port = Int(portText), (0...65535).contains(port) else { throw bad }
        return (String(host), port)
    }

    /// Binds and starts serving on one event loop thread. Returns the bound port (useful
    /// when the config asked for port 0).
    @discardableResult
    public func start() throws -> Int {
        try lock.withLock {
            guard !started else { throw MetricsHTTPError.alreadyStarted }
            started = true
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let render = self.render
        let idle = idleTimeout
        let counter = connections
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 16)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                guard counter.tryAcquire(limit: Self.maxConnections) else {
                    return channel.close()
                }
                channel.closeFuture.whenComplete { _ in counter.release() }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(MetricsRequestHandler(render: render, idleTimeout: idle))
                }
            }
            .childChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
        do {
            let channel = try bootstrap.bind(host: host, port: requestedPort).wait()
            lock.withLock {
                self.group = group
                self.channel = channel
            }
            let port = channel.localAddress?.port ?? requestedPort
            logger.info("metrics: serving /metrics on \(host):\(port)")
            return port
        } catch {
            try? group.syncShutdownGracefully()
            throw MetricsHTTPError.bindFailed(address: "\(host):\(requestedPort)", reason: "\(error)")
        }
    }

    /// The port actually bound, once started.
    public var boundPort: Int? { lock.withLock { channel?.localAddress?.port } }

    /// Closes the listening socket and every connection, and stops the event loop thread.
    /// Safe to call more than once, and without `start()`.
    public func stop() {
        let (channel, group) = lock.withLock { () -> (Channel?, MultiThreadedEventLoopGroup?) in
            defer { self.channel = nil; self.group = nil }
            return (self.channel, self.group)
        }
        try? channel?.close().wait()
        try? group?.syncShutdownGracefully()
    }

    deinit { stop() }
}

/// Counts open connections so a flood cannot exhaust file descriptors.
final class ConnectionCounter: Sendable {
    private let open = Mutex(0)

    func tryAcquire(limit: Int) -> Bool {
        open.withLock { open in
            guard open < limit else { return false }
            open += 1
            return true
        }
    }

    func release() { open.withLock { $0 -= 1 } }
}

/// Reads one request head, answers it, closes the connection.
// @unchecked: a NIO handler, used only on its channel's event loop.
final class MetricsRequestHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let render: @Sendable () -> String
    private let idleTimeout: TimeAmount
    private var head: [UInt8] = []
    private var answered = false
    private var timer: Scheduled<Void>?

    init(render: @escaping @Sendable () -> String, idleTimeout: TimeAmount) {
        self.render = render
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        timer = context.eventLoop.scheduleTask(in: idleTimeout) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        var buffer = unwrapInboundIn(data)
        let room = MetricsHTTPServer.maxRequestHeadBytes - head.count
        let take = min(room, buffer.readableBytes)
        if let bytes = buffer.readBytes(length: take) { head.append(contentsOf: bytes) }
        if let end = Self.headEnd(head) {
            respond(context: context, to: Array(head[..<end]))
        } else if head.count >= MetricsHTTPServer.maxRequestHeadBytes {
            send(context: context, status: "431 Request Header Fields Too Large", body: "request head too large\n", includeBody: true)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }

    /// The index where the blank line ending the head starts (CRLFCRLF, or LFLF from lax clients).
    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 2 else { return nil }
        for i in 0..<(bytes.count - 1) {
            if bytes[i] == 10 && bytes[i + 1] == 10 { return i }
            if i + 3 < bytes.count, bytes[i] == 13, bytes[i + 1] == 10, bytes[i + 2] == 13, bytes[i + 3] == 10 { return i }
        }
        return nil
    }

    private func respond(context: ChannelHandlerContext, to head: [UInt8]) {
        let firstLine = head.split(separator: 10, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        let parts = String(decoding: firstLine, as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
            .split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            send(context: context, status: "400 Bad Request", body: "bad request line\n", includeBody: true)
            return
        }
        let method = parts[0]
        // Prometheus may add a query string; only the path matters.
        let path = parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard method == "GET" || method == "HEAD" else {
            send(context: context, status: "405 Method Not Allowed", body: "only GET and HEAD\n", includeBody: true,
                 extraHeaders: "Allow: GET, HEAD\r\n")
            return
        }
        guard path == "/metrics" else {
            send(context: context, status: "404 Not Found", body: "try /metrics\n", includeBody: method == "GET")
            return
        }
        send(context: context, status: "200 OK", body: render(), includeBody: method == "GET",
             contentType: "text/plain; version=0.0.4; charset=utf-8")
    }

    private func send(context: ChannelHandlerContext, status: String, body: String, includeBody: Bool,
                      contentType: String = "text/plain; charset=utf-8", extraHeaders: String = "") {
        answered = true
        timer?.cancel()
        let bodyBytes = Array(body.utf8)
        let headText = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(bodyBytes.count)\r\n"
            + extraHeaders + "Connection: close\r\n\r\n"
        var out = context.channel.allocator.buffer(capacity: headText.utf8.count + bodyBytes.count)
        out.writeString(headText)
        if includeBody { out.writeBytes(bodyBytes) }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(out)).whenComplete { _ in channel.close(promise: nil) }
    }
}
