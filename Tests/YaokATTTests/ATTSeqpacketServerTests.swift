import Foundation
import Glibc
import XCTest
@testable import YaokATT

/// A test client: one ATT PDU per SOCK_SEQPACKET packet.
final class SeqpacketTestClient {
    enum Received: Equatable {
        case pdu([UInt8])
        case closed
        case timedOut
    }

    let fd: Int32

    init(path: String) throws {
        fd = try UnixSeqpacket.connect(to: path)
    }

    deinit { close(fd) }

    func send(_ pdu: [UInt8]) {
        let sent = pdu.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        XCTAssertEqual(sent, pdu.count)
    }

    /// The next packet, waiting at most `timeout` seconds.
    func receive(timeout: TimeInterval = 5) -> Received {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, Int32(timeout * 1000)) == 1 else { return .timedOut }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count <= 0 { return .closed }
        return .pdu(Array(buffer[0..<count]))
    }

    /// Sends a request and returns the next packet.
    func request(_ pdu: [UInt8]) -> Received {
        send(pdu)
        return receive()
    }
}

final class ATTSeqpacketServerTests: XCTestCase {
    private var path = ""
    private var servers: [ATTSeqpacketServer] = []

    override func setUp() {
        path = "/tmp/yaok-att-test-\(UUID().uuidString.prefix(8)).sock"
    }

    override func tearDown() {
        servers.forEach { $0.stop() }
        servers = []
        unlink(path)
    }

    private func startServer(options: ATTSeqpacketServer.Options = ATTSeqpacketServer.Options(),
                             configure: (ATTSeqpacketServer) -> Void = { _ in }) throws -> ATTSeqpacketServer {
        let server = ATTSeqpacketServer(table: try Fixture.table(), socketPath: path, options: options)
        configure(server)
        try server.start()
        servers.append(server)
        return server
    }

    func testServesPDUsOneAPacketAndCleansUp() throws {
        let server = try startServer()
        var info = stat()
        XCTAssertEqual(lstat(path, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFSOCK)

        let client = try SeqpacketTestClient(path: path)
        XCTAssertEqual(client.request([0x02] + le16(185)), .pdu([0x03] + le16(512)))
        XCTAssertEqual(client.request([0x10] + le16(1) + le16(0xFFFF) + [0x00, 0x28]),
                       .pdu([0x11, 0x06] + le16(1) + le16(3) + [0x00, 0x18]))
        XCTAssertEqual(client.request([0x0A] + le16(10)), .pdu([0x0B] + Fixture.longValue), "MTU 185 allows all 100 octets")
        XCTAssertEqual(client.request([0x0A] + le16(12)), .pdu(errorPDU(0x0A, 12, 0x0F)), "a UNIX socket is not encrypted")
        XCTAssertEqual(client.request([0x12] + le16(6) + [1, 2]), .pdu([0x13]))
        client.send([0x52] + le16(6) + [3])           // no response for a command...
        XCTAssertEqual(client.request([0x0A] + le16(6)), .pdu([0x0B, 3]))  // ...but it was applied
        XCTAssertEqual(client.request([0x99]), .pdu(errorPDU(0x99, 0, 0x06)))

        server.stop()
        XCTAssertEqual(client.receive(), .closed)
        XCTAssertNotEqual(lstat(path, &info), 0, "the socket file is removed on stop")
        XCTAssertFalse(server.isRunning)
        XCTAssertTrue(server.notify(handle: 6).isEmpty, "calls after stop do nothing")
    }

    func testEachConnectionGetsAFreshTable() throws {
        _ = try startServer()
        let first = try SeqpacketTestClient(path: path)
        let second = try SeqpacketTestClient(path: path)
        XCTAssertEqual(first.request([0x02] + le16(100)), .pdu([0x03] + le16(512)))
        XCTAssertEqual(first.request([0x12] + le16(6) + Array("changed".utf8)), .pdu([0x13]))
        XCTAssertEqual(first.request([0x0A] + le16(6)), .pdu([0x0B] + Array("changed".utf8)))
        XCTAssertEqual(second.request([0x0A] + le16(6)), .pdu([0x0B] + Array("hello".utf8)))
        XCTAssertEqual(second.request([0x0A] + le16(10)), .pdu([0x0B] + Array(Fixture.longValue.prefix(22))),
                       "the second connection still has the default MTU")
        let third = try SeqpacketTestClient(path: path)
        XCTAssertEqual(third.request([0x0A] + le16(6)), .pdu([0x0B] + Array("hello".utf8)))
    }

    func testNotificationFanOutFollowsEachConnectionsCCCD() throws {
        let server = try startServer()
        let notifying = try SeqpacketTestClient(path: path)
        let indicating = try SeqpacketTestClient(path: path)
        let silent = try SeqpacketTestClient(path: path)
        let alsoNotifying = try SeqpacketTestClient(path: path)
        XCTAssertEqual(notifying.request([0x12] + le16(7) + [0x01, 0x00]), .pdu([0x13]))
        XCTAssertEqual(indicating.request([0x12] + le16(7) + [0x02, 0x00]), .pdu([0x13]))
        XCTAssertEqual(silent.request([0x0A] + le16(7)), .pdu([0x0B, 0x00, 0x00]))
        XCTAssertEqual(alsoNotifying.request([0x12] + le16(7) + [0x01, 0x00]), .pdu([0x13]))

        let reached = server.notify(handle: 6, value: [0xAA, 0xBB])
        XCTAssertEqual(reached.count, 2)
        XCTAssertEqual(Set(reached).count, 2)
        XCTAssertEqual(notifying.receive(), .pdu([0x1B] + le16(6) + [0xAA, 0xBB]))
        XCTAssertEqual(alsoNotifying.receive(), .pdu([0x1B] + le16(6) + [0xAA, 0xBB]))
        // Anything sent to the others would arrive before the answer to this later request.
        XCTAssertEqual(indicating.request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))
        XCTAssertEqual(silent.request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))

        // Without a value each connection's own stored value goes out.
        XCTAssertEqual(alsoNotifying.request([0x12] + le16(6) + [0x42]), .pdu([0x13]))
        XCTAssertEqual(server.notify(handle: 6).count, 2)
        XCTAssertEqual(notifying.receive(), .pdu([0x1B] + le16(6) + Array("hello".utf8)))
        XCTAssertEqual(alsoNotifying.receive(), .pdu([0x1B] + le16(6) + [0x42]))

        // Turning the CCCD off stops them.
        XCTAssertEqual(notifying.request([0x12] + le16(7) + [0x00, 0x00]), .pdu([0x13]))
        XCTAssertEqual(server.notify(handle: 6, value: [1]).count, 1)
        XCTAssertEqual(alsoNotifying.receive(), .pdu([0x1B] + le16(6) + [1]))
        XCTAssertEqual(notifying.request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))
        XCTAssertTrue(server.notify(handle: 10).isEmpty, "a handle without CCCD reaches nobody")
    }

    func testIndicationNeedsConfirmationBeforeTheNext() throws {
        let confirmations = DispatchSemaphore(value: 0)
        let server = try startServer { server in
            server.onConnect = { _, engine in engine.onConfirmation = { _ in confirmations.signal() } }
        }
        let client = try SeqpacketTestClient(path: path)
        XCTAssertEqual(client.request([0x12] + le16(7) + [0x02, 0x00]), .pdu([0x13]))
        XCTAssertEqual(server.indicate(handle: 6, value: [1]).count, 1)
        XCTAssertEqual(server.indicate(handle: 6, value: [2]).count, 0, "one outstanding indication at a time")
        XCTAssertTrue(server.notify(handle: 6).isEmpty, "notifications are not enabled")
        XCTAssertEqual(client.receive(), .pdu([0x1D] + le16(6) + [1]))
        client.send([0x1E])
        XCTAssertEqual(confirmations.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(server.indicate(handle: 6, value: [3]).count, 1)
        XCTAssertEqual(client.receive(), .pdu([0x1D] + le16(6) + [3]))
    }

    func testOwnerHooksRunOnThePollThread() throws {
        let connected = DispatchSemaphore(value: 0)
        let disconnected = DispatchSemaphore(value: 0)
        var writes: [UInt16] = []
        let server = try startServer { server in
            server.onConnect = { [weak server] _, engine in
                engine.setReadProvider(for: 3) { _ in .success(Array("dynamic".utf8)) }
                engine.onWrite = { handle, value, _ in
                    writes.append(handle)
                    // Fan-out from inside a callback runs inline (no deadlock).
                    if handle == 18 { server?.notify(handle: 6, value: value) }
                    return nil
                }
                connected.signal()
            }
            server.onDisconnect = { _ in disconnected.signal() }
        }
        var client: SeqpacketTestClient? = try SeqpacketTestClient(path: path)
        XCTAssertEqual(connected.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(client?.request([0x0A] + le16(3)), .pdu([0x0B] + Array("dynamic".utf8)))
        XCTAssertEqual(client?.request([0x12] + le16(7) + [0x01, 0x00]), .pdu([0x13]))
        XCTAssertEqual(client?.request([0x12] + le16(18) + [5, 6]), .pdu([0x1B] + le16(6) + [5, 6]),
                       "the notification queued by the handler goes out before the write response")
        XCTAssertEqual(client?.receive(), .pdu([0x13]))

        // The owner can raise the link security of one connection.
        let id = try XCTUnwrap(server.connectionIDs.first)
        XCTAssertEqual(server.withServer(id) { engine -> Bool in
            engine.security = ATTLinkSecurity(encrypted: true)
            return true
        }, true)
        XCTAssertEqual(client?.request([0x0A] + le16(12)), .pdu([0x0B] + Array("secret".utf8)))
        XCTAssertEqual(server.withServer(id) { $0.mtu }, 23)
        XCTAssertNil(server.withServer(ATTConnectionID(rawValue: 999)) { $0.mtu })
        XCTAssertEqual(server.onPollThread { writes }, [7, 18])

        client = nil
        XCTAssertEqual(disconnected.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(server.connectionIDs, [])
    }

    func testConnectionLimit() throws {
        _ = try startServer(options: ATTSeqpacketServer.Options(maxConnections: 2))
        let first = try SeqpacketTestClient(path: path)
        let second = try SeqpacketTestClient(path: path)
        XCTAssertEqual(first.request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))
        XCTAssertEqual(second.request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))
        let third = try SeqpacketTestClient(path: path)
        XCTAssertEqual(third.receive(), .closed, "over the limit: closed at once")
        XCTAssertEqual(first.request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))
    }

    func testSocketPathChecks() throws {
        _ = try startServer()
        let rival = ATTSeqpacketServer(table: try Fixture.table(), socketPath: path)
        XCTAssertThrowsError(try rival.start()) {
            XCTAssertEqual($0 as? ATTSocketError, .addressInUse(path: path))
        }
        servers.forEach { $0.stop() }

        // A stale socket file (nobody listening) is replaced.
        let staleFD = try UnixSeqpacket.listen(at: path, backlog: 1)
        close(staleFD)
        let replacement = try startServer()
        XCTAssertTrue(replacement.isRunning)
        XCTAssertEqual(try SeqpacketTestClient(path: path).request([0x0A] + le16(3)), .pdu([0x0B] + Array("YaOK".utf8)))
        replacement.stop()
        XCTAssertThrowsError(try replacement.start()) { XCTAssertEqual($0 as? ATTSocketError, .notStartable) }

        // A regular file is never deleted.
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("keep".utf8)))
        let blocked = ATTSeqpacketServer(table: try Fixture.table(), socketPath: path)
        XCTAssertThrowsError(try blocked.start()) { XCTAssertEqual($0 as? ATTSocketError, .pathOccupied(path: path)) }
        XCTAssertEqual(FileManager.default.contents(atPath: path), Data("keep".utf8))

        let long = "/tmp/" + String(repeating: "x", count: 120)
        XCTAssertThrowsError(try ATTSeqpacketServer(table: try Fixture.table(), socketPath: long).start()) {
            XCTAssertEqual($0 as? ATTSocketError, .pathTooLong(path: long, maxBytes: 107))
        }
    }

    func testOversizedAndEmptyPackets() throws {
        _ = try startServer(options: ATTSeqpacketServer.Options(serverReceiveMTU: 64))
        let client = try SeqpacketTestClient(path: path)
        XCTAssertEqual(client.request([0x12] + le16(6) + [UInt8](repeating: 1, count: 100)), .pdu(errorPDU(0x12, 0, 0x04)))
        XCTAssertEqual(client.request([0x0A] + le16(6)), .pdu([0x0B] + Array("hello".utf8)))
    }
}

final class ATTSeqpacketAdoptTests: XCTestCase {
    private func socketPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, UnixSeqpacket.seqpacket, 0, &fds) == 0 else {
            throw ATTSocketError.system(operation: "socketpair", errno: errno)
        }
        return (fds[0], fds[1])
    }

    /// Wraps a raw descriptor in the test client's send/receive helpers.
    private final class RawClient {
        let fd: Int32
        init(fd: Int32) { self.fd = fd }
        deinit { close(fd) }
        func request(_ pdu: [UInt8]) -> SeqpacketTestClient.Received {
            _ = pdu.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            return next()
        }
        /// The next packet (or the close), waiting at most 5 s.
        func next() -> SeqpacketTestClient.Received {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 5000) == 1 else { return .timedOut }
            var buffer = [UInt8](repeating: 0, count: 1024)
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            return count <= 0 ? .closed : .pdu(Array(buffer[0..<count]))
        }
    }

    func testAdoptedSocketpairWithEncryptedLink() throws {
        let server = ATTSeqpacketServer(table: try Fixture.table(), socketPath: nil,
                                        options: ATTSeqpacketServer.Options(maxConnections: 1))
        let disconnected = DispatchSemaphore(value: 0)
        server.onDisconnect = { _ in disconnected.signal() }
        try server.start()
        defer { server.stop() }

        let (plainServerSide, plainClientSide) = try socketPair()
        var plain: RawClient? = RawClient(fd: plainClientSide)
        let plainID = try XCTUnwrap(server.adopt(fd: plainServerSide))
        XCTAssertEqual(plain?.request([0x0A] + le16(12)), .pdu(errorPDU(0x0A, 12, 0x0F)), "plain link: not encrypted")

        // At the connection limit an adopted descriptor is closed at once.
        let (refusedServerSide, refusedClientSide) = try socketPair()
        let refused = RawClient(fd: refusedClientSide)
        XCTAssertNil(server.adopt(fd: refusedServerSide))
        XCTAssertEqual(refused.request([0x0A] + le16(3)), .closed)

        // Once the first one leaves, an encrypted link can join and read the protected value.
        plain = nil
        XCTAssertEqual(disconnected.wait(timeout: .now() + 5), .success)
        XCTAssertFalse(server.connectionIDs.contains(plainID))
        let (secureServerSide, secureClientSide) = try socketPair()
        let secure = RawClient(fd: secureClientSide)
        XCTAssertNotNil(server.adopt(fd: secureServerSide, security: ATTLinkSecurity(encrypted: true)))
        XCTAssertEqual(secure.request([0x0A] + le16(12)), .pdu([0x0B] + Array("secret".utf8)))
    }

    /// A link dropped on a write is dropped after the write's answer (`later`): a BLE phone
    /// whose identity the hub refuses gets the Write Response (and the refusal before it), not
    /// a connection that vanishes under its pending request (Docs/protocol.md §5, "The
    /// handshake's outcome"). Shut down inside the handler, the answer never leaves.
    func testALinkDroppedOnAWriteIsDroppedAfterTheWritesAnswer() throws {
        let server = ATTSeqpacketServer(table: try Fixture.table(), socketPath: nil)
        try server.start()
        defer { server.stop() }
        for deferred in [true, false] {
            let (serverSide, clientSide) = try socketPair()
            let client = RawClient(fd: clientSide)
            server.onConnect = { _, engine in
                engine.onWrite = { _, _, _ in
                    if deferred { server.later { shutdown(serverSide, Int32(SHUT_RDWR)) } } else { shutdown(serverSide, Int32(SHUT_RDWR)) }
                    return nil
                }
            }
            XCTAssertNotNil(server.adopt(fd: serverSide))
            let answer = client.request([0x12] + le16(6) + Array("bye".utf8))
            if deferred {
                XCTAssertEqual(answer, .pdu([0x13]), "the Write Response comes first")
                XCTAssertEqual(client.next(), .closed, "then the link is gone")
            } else {
                XCTAssertEqual(answer, .closed, "shut down inside the handler, the answer is lost")
            }
        }
    }

    func testAdoptOnAStoppedServerClosesTheDescriptor() throws {
        let server = ATTSeqpacketServer(table: try Fixture.table(), socketPath: nil)
        let (serverSide, clientSide) = try socketPair()
        let client = RawClient(fd: clientSide)
        XCTAssertNil(server.adopt(fd: serverSide))
        XCTAssertEqual(client.request([0x0A] + le16(3)), .closed)
    }
}
