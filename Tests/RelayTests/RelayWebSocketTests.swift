import Foundation
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokRelayServer
import YaokRelayWebSocket
import YaokWire
import YaokTesting
import enum YaokPluginKit.Hex
import RelayTestSupport

extension TLSFixture {
    /// The in-process relay's WebSocket/TLS listener with this certificate and key.
    func listener(maxConnections: Int = 100) -> RelayWebSocketListener.Configuration {
        var c = RelayWebSocketListener.Configuration(host: "127.0.0.1", port: 0, certificatePath: certificate, privateKeyPath: key)
        c.maxConnections = maxConnections
        c.upgradeTimeout = .seconds(3)
        return c
    }
}

/// The relay over WebSocket + TLS 1.3: same engine, same packets, SPKI-pinned client.
final class RelayWebSocketTests: XCTestCase {
    var relay: RelayHarness!
    var tls: TLSFixture!

    override func setUpWithError() throws {
        tls = try TLSFixture.make()
        relay = try RelayHarness(webSocket: tls.listener())
    }

    override func tearDown() {
        relay?.tearDown()
        tls?.remove()
    }

    var pin: [UInt8] { (try? SPKIPin.sha256(certificateFile: tls.certificate)) ?? [] }
    var url: RelayWebSocketURL { RelayWebSocketURL(host: "127.0.0.1", port: UInt16(relay.wssPort)) }

    func wssClient(pin: [UInt8]? = nil, relayKey: [UInt8]? = nil, path: String = RelayWebSocketURL.defaultPath) -> RelayClient {
        var u = url
        u.path = path
        let p = pin ?? self.pin
        return relay.client(pin: relayKey) { $0.makeLink = RelayWebSocketLink.factory(url: u, spkiSHA256: p) }
    }

    /// Connects; on failure the error names the client's last error and the listener's counters.
    func connect(_ c: RelayClient, file: StaticString = #filePath, line: UInt = #line) throws {
        do { try c.connect(timeout: 10) } catch {
            XCTFail("connect: \(error); client: \(c.lastError ?? "-"); listener: \(String(describing: relay.server.webSocketCounters))", file: file, line: line)
            throw error
        }
    }

    func testPinMatchesOpenSSLsSPKIHash() throws {
        // The pin is SHA-256 over the DER SubjectPublicKeyInfo, as openssl computes it.
        let pubkey = try runTool("/usr/bin/openssl", ["x509", "-in", tls.certificate, "-pubkey", "-noout"])
        XCTAssertEqual(pubkey.0, 0)
        let der = try runTool("/usr/bin/openssl", ["pkey", "-pubin", "-outform", "der", "-out", tls.dir + "/spki.der"], stdin: Data(pubkey.1.utf8))
        XCTAssertEqual(der.0, 0, der.1)
        let spki = try [UInt8](Data(contentsOf: URL(fileURLWithPath: tls.dir + "/spki.der")))
        XCTAssertEqual(pin, Hash.sha256(spki))
        XCTAssertEqual(try SPKIPin.parse(Hex.encode(pin)), pin)
        XCTAssertThrowsError(try SPKIPin.parse("abc"))
    }

    func testURLParsing() throws {
        let u = try RelayWebSocketURL(parsing: "wss://relay.example.org:7443/x")
        XCTAssertEqual([u.host, String(u.port), u.path], ["relay.example.org", "7443", "/x"])
        let v6 = try RelayWebSocketURL(parsing: "wss://[::1]:9")
        XCTAssertEqual([v6.host, String(v6.port), v6.path], ["::1", "9", "/yaok-relay"])
        XCTAssertEqual(try RelayWebSocketURL(parsing: "wss://h").port, 443)
        for bad in ["ws://h:1", "wss://:1", "wss://h:x", "wss://h:0", "wss://[::1", "https://h"] {
            XCTAssertThrowsError(try RelayWebSocketURL(parsing: bad), bad)
        }
    }

    /// A link closed while another thread's send starts its connect: the connect must not
    /// be handed to the shut-down event loop (NIO drops its promise; debug builds crash).
    /// Against a refused port and against the real relay: a connection that completes after
    /// close() is closed, so the relay ends with no connection open.
    func testCloseRacingTheFirstSendNeitherCrashesNorLeavesAConnection() throws {
        let refused = RelayWebSocketURL(host: "127.0.0.1", port: 9)   // discard: nothing listens here
        var links: [RelayWebSocketLink] = []   // kept: a link's last release would close its connect itself
        defer { withExtendedLifetime(links) {} }
        for (target, pin) in [(refused, [UInt8](repeating: 7, count: 32)), (url, self.pin)] {
            for round in 0..<200 {
                let link = try RelayWebSocketLink(url: target, spkiSHA256: pin)
                links.append(link)
                if round % 2 == 0 {
                    DispatchQueue.concurrentPerform(iterations: 2) { i in
                        if i == 0 { _ = link.send([1, 2, 3]) } else { link.close() }
                    }
                } else {
                    _ = link.send([1, 2, 3])   // a connect surely in flight
                    link.close()
                }
                XCTAssertFalse(link.isOpen)
                XCTAssertNotNil(link.send([4]), "a closed link must refuse to send")
            }
        }
        XCTAssertTrue(Wait.poll(timeout: 10) { (self.relay.server.webSocketCounters?.accepted ?? 0) >= 50 },
                      "the relay saw too few of the connects: \(String(describing: relay.server.webSocketCounters))")
        XCTAssertTrue(Wait.poll(timeout: 10) { self.relay.server.metricsText().contains("yaok_relay_websocket_connections 0") },
                      "connections completed after close() stayed open")
    }

    /// Two users over wss and one over UDP on the same relay: pushed MSG, QUEUED, ACK.
    func testWebSocketAndUDPClientsShareOneEngine() throws {
        let alice = Identity.generate(), bob = Identity.generate(), carol = Identity.generate()
        let a = wssClient()
        try connect(a)
        XCTAssertEqual(try a.registerAndWait([relay.registration(alice, on: a)]).map(\.status), [.accepted])
        let b = wssClient()
        try connect(b)
        XCTAssertEqual(try b.registerAndWait([relay.registration(bob, on: b)]).map(\.status), [.accepted])
        let c = try relay.registeredClient(carol)   // UDP

        // wss → wss, pushed at once.
        let markB = b.currentSeq()
        let toBob = try messageBundle(from: alice, to: bob, size: 3_000)   // fragmented: several messages
        XCTAssertEqual(try a.sendAndWait(bundle: toBob).status, .pushed)
        let got = try b.nextMessage(after: markB, timeout: 10)
        XCTAssertEqual(got.bundle, toBob)
        try b.ack([got.bundleID])
        XCTAssertTrue(Wait.poll { self.relay.server.withEngine { $0.queuedCount(for: bob.userID) } == 0 })

        // wss → UDP and UDP → wss.
        let markC = c.currentSeq()
        let toCarol = try messageBundle(from: alice, to: carol)
        XCTAssertEqual(try a.sendAndWait(bundle: toCarol).status, .pushed)
        XCTAssertEqual(try c.nextMessage(after: markC, timeout: 10).bundle, toCarol)
        let markA = a.currentSeq()
        let toAlice = try messageBundle(from: carol, to: alice)
        XCTAssertEqual(try c.sendAndWait(bundle: toAlice).status, .pushed)
        XCTAssertEqual(try a.nextMessage(after: markA, timeout: 10).bundle, toAlice)

        let counters = try XCTUnwrap(relay.server.webSocketCounters)
        XCTAssertEqual(counters.upgraded, 2)
        XCTAssertEqual(counters.failed, 0)
        XCTAssertTrue(relay.server.metricsText().contains("yaok_relay_websocket_connections 2"))
    }

    func testWrongTLSPinIsRefusedWithAClearError() throws {
        var wrong = pin
        wrong[0] ^= 0xFF
        let c = wssClient(pin: wrong)
        XCTAssertThrowsError(try c.connect(timeout: 10)) { error in
            guard case RelayProtocolError.tlsPinMismatch(let expected, let got) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(expected, wrong)
            XCTAssertEqual(got, self.pin)
            XCTAssertTrue("\(error)".contains("relay TLS certificate pin mismatch: expected SPKI SHA-256 \(Hex.encode(wrong.prefix(4)))…, got \(Hex.encode(self.pin.prefix(4)))…"), "\(error)")
        }
        XCTAssertFalse(c.isConnected)
        XCTAssertEqual(relay.server.metricsSnapshot().handshakes, 0, "no relay packet went to an unpinned server")
    }

    func testRightTLSPinButWrongRelayKeyIsStillRefused() throws {
        let c = wssClient(relayKey: Identity.generate().signingKey)
        XCTAssertThrowsError(try c.connect(timeout: 10)) { error in
            guard case RelayProtocolError.relayKeyMismatch = error else { return XCTFail("\(error)") }
        }
    }

    /// TLS 1.2, plain garbage, plain HTTP and a wrong path: each ends its connection, is
    /// counted, and the listener keeps serving.
    func testOldTLSGarbageAndNonWebSocketRequestsAreHandled() throws {
        let port = String(relay.wssPort)
        // TLS 1.2 only: the handshake fails.
        let tls12 = try runTool("/usr/bin/openssl", ["s_client", "-connect", "127.0.0.1:" + port, "-tls1_2", "-brief"], stdin: Data())
        XCTAssertNotEqual(tls12.0, 0, tls12.1)
        // TLS 1.3 works (and the certificate is the pinned one).
        let tls13 = try runTool("/usr/bin/openssl", ["s_client", "-connect", "127.0.0.1:" + port, "-tls1_3", "-brief"], stdin: Data())
        XCTAssertTrue(tls13.1.contains("TLSv1.3"), tls13.1)

        // Not TLS at all: the connection is closed.
        XCTAssertTrue(tcpSendAndWaitForClose(port: relay.wssPort, bytes: Array("YAOK\u{1}\u{1}garbage garbage garbage\r\n\r\n".utf8)))

        // TLS 1.3 but a plain GET of another path: 404, then closed.
        let http = try runTool("/usr/bin/openssl", ["s_client", "-connect", "127.0.0.1:" + port, "-tls1_3", "-quiet", "-ign_eof"],
                               stdin: Data("GET /other HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        XCTAssertTrue(http.1.contains("404"), http.1)

        // A WebSocket client asking for the wrong path gets a clear error.
        let wrongPath = wssClient(path: "/nope")
        XCTAssertThrowsError(try wrongPath.connect(timeout: 10)) { error in
            XCTAssertTrue("\(error)".contains("did not accept the WebSocket upgrade of /nope"), "\(error)")
        }

        // The listener still serves.
        let ok = wssClient()
        try connect(ok)
        let counters = try XCTUnwrap(relay.server.webSocketCounters)
        XCTAssertGreaterThanOrEqual(counters.failed, 2, "\(counters)")
        XCTAssertGreaterThanOrEqual(counters.notWebSocket, 2, "\(counters)")
        XCTAssertEqual(relay.server.metricsSnapshot().handshakes, 1)
    }

    /// A connection that never finishes TLS and the upgrade is closed (3 s in this harness);
    /// connections beyond the maximum are closed at accept, and serving resumes after.
    func testSilentConnectionsTimeOutAndTheConnectionLimitHolds() throws {
        XCTAssertTrue(tcpSendAndWaitForClose(port: relay.wssPort, bytes: []), "a silent connection stays open")
        relay.tearDown()
        relay = try RelayHarness(webSocket: tls.listener(maxConnections: 1))
        let holder = try XCTUnwrap(connectLoopbackTCP(port: relay.wssPort))
        XCTAssertTrue(Wait.poll { self.relay.server.webSocketCounters?.accepted == 1 })
        let refused = wssClient()
        XCTAssertThrowsError(try refused.connect(timeout: 1))
        XCTAssertGreaterThanOrEqual(relay.server.webSocketCounters?.refusedFull ?? 0, 1)
        close(holder)
        try connect(refused)
    }

    /// Each connection costs a TLS handshake: one address may open only so many a minute.
    func testConnectionsPerMinuteFromOneAddressAreLimited() throws {
        relay.tearDown()
        var config = tls.listener()
        config.connectionsPerMinutePerIP = 2
        relay = try RelayHarness(webSocket: config)
        for _ in 0..<2 { try connect(wssClient()) }
        let refused = wssClient()
        XCTAssertThrowsError(try refused.connect(timeout: 2))
        XCTAssertEqual(relay.server.webSocketCounters?.refusedRate, 1)
        XCTAssertEqual(relay.server.webSocketCounters?.upgraded, 2)
        XCTAssertTrue(relay.server.metricsText().contains("yaok_relay_websocket_rate_refused_total 1"))
    }

    func testClosingTheConnectionForgetsItsSession() throws {
        let c = wssClient()
        try connect(c)
        XCTAssertEqual(try c.registerAndWait([relay.registration(Identity.generate(), on: c)]).map(\.status), [.accepted])
        XCTAssertEqual(relay.server.metricsSnapshot().sessions, 1)
        c.stop()
        XCTAssertTrue(Wait.poll { self.relay.server.metricsSnapshot().sessions == 0 })
        XCTAssertTrue(Wait.poll { self.relay.server.metricsSnapshot().registeredUsers == 0 })
    }

    /// The `yaok-relay` process: `tls-pin` prints the pin clients need; `run` refuses a key
    /// file others can read, and a listener without certificate, with clear errors.
    func testRelayCommandsPrintThePinAndRefuseLooseKeys() throws {
        let binary = RelayProcess.binary
        guard FileManager.default.fileExists(atPath: binary) else { throw XCTSkip("yaok-relay is not built next to the tests") }
        let printed = try runTool(binary, ["tls-pin", "--cert", tls.certificate, "--base64"])
        XCTAssertEqual(printed.0, 0, printed.1)
        let lines = printed.1.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, Hex.encode(pin))
        XCTAssertEqual(lines.dropFirst().first, "sha256//" + Data(pin).base64EncodedString())

        let dataDir = tls.dir + "/data"
        let noCert = try runTool(binary, ["run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--wss-listen", "127.0.0.1:0"])
        XCTAssertNotEqual(noCert.0, 0)
        XCTAssertTrue(noCert.1.contains("--wss-listen needs --tls-cert and --tls-key"), noCert.1)
        XCTAssertEqual(chmod(tls.key, 0o640), 0)
        let loose = try runTool(binary, ["run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--wss-listen", "127.0.0.1:0",
                                         "--tls-cert", tls.certificate, "--tls-key", tls.key])
        XCTAssertNotEqual(loose.0, 0)
        XCTAssertTrue(loose.1.contains("has mode 640; it must be readable by its owner only (chmod 600"), loose.1)
    }

    func testKeyFileReadableByOthersIsRefused() throws {
        XCTAssertEqual(chmod(tls.key, 0o644), 0)
        XCTAssertThrowsError(try RelayHarness(webSocket: tls.listener())) { error in
            guard case RelayTLSError.keyFilePermissions(_, let mode) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(mode, 0o644)
            XCTAssertTrue("\(error)".contains("chmod 600"), "\(error)")
        }
    }
}

/// Connects over TCP, sends `bytes`, and reports whether the server closed within 10 s.
func tcpSendAndWaitForClose(port: Int, bytes: [UInt8]) -> Bool {
    guard let fd = connectLoopbackTCP(port: port) else { return false }
    defer { close(fd) }
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n == 0 { return true }                       // orderly close
        if n < 0 { return errno == ECONNRESET }          // reset counts as closed; timeout does not
    }
}
