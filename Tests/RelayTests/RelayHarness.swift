import Foundation
import Logging
import NIOCore
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokRelayWebSocket
import YaokWire
import enum YaokPluginKit.Hex
import YaokTesting
import struct YaokPluginKit.IPEndpoint
import RelayTestSupport

/// A relay server running in this process on a real loopback UDP socket, with its data
/// directory (identity, SQLCipher database, key) in a temporary directory.
final class RelayHarness {
    let dir: String
    var limits: RelayLimits
    private(set) var server: RelayServer!
    private(set) var store: RelayQueueStore!
    private(set) var identity: Identity!
    private(set) var port: Int = 0
    /// The WebSocket/TLS listener's port (when started with one).
    private(set) var wssPort: Int = 0
    private var clients: [RelayClient] = []
    let webSocket: RelayWebSocketListener.Configuration?

    init(limits: RelayLimits = RelayLimits(), dir: String? = nil, webSocket: RelayWebSocketListener.Configuration? = nil) throws {
        self.dir = dir ?? NSTemporaryDirectory() + "yaok-relay-test-" + Hex.encode(Random.bytes(6))
        self.limits = limits
        self.webSocket = webSocket
        try start(port: 0)
    }

    func start(port: Int) throws {
        let (identity, store) = try RelayServer.openDataDirectory(dir)
        var logger = Logger(label: "relay-test")
        logger.logLevel = .warning
        let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger,
                                     now: { Int64(Date().timeIntervalSince1970 * 1000) })
        let server = RelayServer(engine: engine, configuration: .init(host: "127.0.0.1", port: port, metricsHost: "127.0.0.1", webSocket: webSocket), logger: logger)
        do { try server.start() } catch {
            server.stop()
            store.database.close()
            throw error
        }
        self.identity = identity
        self.store = store
        self.server = server
        self.port = server.localAddress?.port ?? 0
        self.wssPort = server.webSocketAddress?.port ?? 0
    }

    /// Stops the server and closes the database (the data directory stays).
    func stopServer() {
        server?.stop()
        store?.database.close()
    }

    /// Stops and starts again on the same port and data directory.
    func restart() throws {
        let p = port
        stopServer()
        try start(port: p)
    }

    var address: IPEndpoint { IPEndpoint(host: "127.0.0.1", port: UInt16(port)) }

    func client(pin: [UInt8]? = nil, configure: (inout RelayClient.Configuration) -> Void = { _ in }) -> RelayClient {
        var cfg = RelayClient.Configuration(relay: address, relaySigningKey: pin ?? identity.signingKey)
        cfg.handshakeRetryMs = 200
        cfg.maxHandshakeRetryMs = 1_000
        cfg.requestRetryMs = 1_000
        configure(&cfg)
        let c = RelayClient(configuration: cfg)
        clients.append(c)
        return c
    }

    /// A connected client with `user` registered.
    func registeredClient(_ user: Identity, file: StaticString = #filePath, line: UInt = #line) throws -> RelayClient {
        let c = client()
        try c.connect(timeout: 10)
        let results = try c.registerAndWait([registration(user, on: c)])
        XCTAssertEqual(results.map(\.status), [.accepted], file: file, line: line)
        return c
    }

    /// An owner registration of `user` bound to `client`'s current session.
    func registration(_ user: Identity, on client: RelayClient, timestampMs: Int64? = nil) throws -> Registration {
        let channel = try XCTUnwrap(client.channelBinding, "the client has no session yet")
        return try Registration.owner(user, relaySigningKey: identity.signingKey, channel: channel, timestampMs: timestampMs ?? nowMs())
    }

    /// A registration `user` (a phone) gives the hub `collector` to carry.
    func carried(_ user: Identity, collector: Identity, timestampMs: Int64? = nil, untilMs: Int64? = nil) throws -> Registration {
        let t = timestampMs ?? nowMs()
        return try Registration.carried(by: user, relaySigningKey: identity.signingKey, collector: collector.signingKey,
                                        timestampMs: t, untilMs: untilMs ?? t + 3_600_000)
    }

    func tearDown() {
        for c in clients { c.stop() }
        stopServer()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// A plain UDP socket for sending hand-made datagrams.
final class RawUDP {
    let fd: Int32
    init() {
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var tv = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }
    deinit { close(fd) }

    func send(_ bytes: [UInt8], port: Int) {
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr)
        _ = withUnsafePointer(to: &sa) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { a in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, a, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
    }

    /// One datagram, or nil after the 200 ms receive timeout (used only to observe that
    /// nothing, or a specific reply, comes back).
    func receive() -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: 65_536)
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? Array(buf[0..<n]) : nil
    }
}

/// A plain HTTP/1.0 GET to 127.0.0.1: the whole response, or nil.
func httpGet(port: Int, path: String) -> String? { RelayNodeProcess.httpGet(port: port, path: path) }

/// A TCP socket connected to 127.0.0.1:`port` with a receive timeout; nil if the connect fails.
func connectLoopbackTCP(port: Int, receiveTimeoutSeconds: Int = 10) -> Int32? {
    RelayNodeProcess.connectLoopbackTCP(port: port, receiveTimeoutSeconds: receiveTimeoutSeconds)
}
