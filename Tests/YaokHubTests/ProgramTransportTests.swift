import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// A transport as a standalone program (`command:`): Tests/PythonTransport/yaok_tcp_transport.py,
/// Python's standard library only, carries a real message between two real hubs. The hubs run
/// the link session over its carriers; the program moves records and nothing else.
final class ProgramTransportTests: XCTestCase {
    static let python = "/usr/bin/python3"
    static var program: String { TestSupport.repoRoot + "/Tests/PythonTransport/yaok_tcp_transport.py" }

    func section(listen: UInt16, peers: [UInt16], extra: String = "") -> String {
        """
          pytcp:
            enabled: true
            command: ["\(Self.python)", "\(Self.program)"]
            listen: 127.0.0.1:\(listen)
            peers: [\(peers.map { "\"127.0.0.1:\($0)\"" }.joined(separator: ", "))]
            redial_s: 1
            peer_roles: [hub]
        \(extra)
        """
    }

    struct TwoHubs {
        let a: HubProcess, b: HubProcess
        let udpA: UInt16, udpB: UInt16, tcpB: UInt16
    }

    /// Hub A dials hub B over the Python transport; each has UDP for phones.
    func startHubs() throws -> TwoHubs {
        try RequiredTool.require(Self.python, package: "python3")
        let plugins = try TestSupport.pluginDirectory(self)
        let (udpA, udpB, tcpA, tcpB) = (HubProcessTests.freePort(), HubProcessTests.freePort(),
                                        TestSupport.freePort(type: Int32(SOCK_STREAM.rawValue)), TestSupport.freePort(type: Int32(SOCK_STREAM.rawValue)))
        let dirB = try TestSupport.temporaryDirectory(self)
        let b = try HubProcess(dir: dirB, config: HubProcessTests.config(dir: dirB, pluginDirs: [plugins], udpPort: udpB,
                                                                          extra: section(listen: tcpB, peers: [])),
                               executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { b.stop() }
        try b.waitReady()
        let dirA = try TestSupport.temporaryDirectory(self)
        let a = try HubProcess(dir: dirA, config: HubProcessTests.config(dir: dirA, pluginDirs: [plugins], udpPort: udpA,
                                                                          extra: section(listen: tcpA, peers: [tcpB])),
                               executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { a.stop() }
        try a.waitReady()
        return TwoHubs(a: a, b: b, udpA: udpA, udpB: udpB, tcpB: tcpB)
    }

    func hubLinks(_ hub: HubProcess) throws -> [RouterStatus.LinkView] {
        try hub.status().router.links.filter { $0.role == "hub" && $0.kind == "pytcp" }
    }

    func cmdline(_ pid: Int32) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "").replacingOccurrences(of: "\0", with: " ")
    }

    func testAPythonTransportCarriesAMessageBetweenTwoHubs() throws {
        let hubs = try startHubs()
        try Wait.until(timeout: 20, "the hubs linked over the Python transport (A: \(hubs.a.log.suffix(1500)))") {
            try hubLinks(hubs.a).count == 1 && hubLinks(hubs.b).count == 1
        }
        // The process serving the section is the program itself, sandboxed like any plugin process.
        let status = try XCTUnwrap(hubs.a.transport("pytcp"))
        XCTAssertEqual(status.status.state, .running, status.status.reason)
        XCTAssertEqual(status.pluginVersion, "1.0.0", "the version its hello announced")
        let pid = try XCTUnwrap(status.pid)
        XCTAssertTrue(cmdline(pid).contains("yaok_tcp_transport.py"), cmdline(pid))
        let proc = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        XCTAssertTrue(proc.contains("NoNewPrivs:\t1"), "no-new-privileges survives exec")
        XCTAssertTrue(proc.contains("CapEff:\t0000000000000000"), "no capability was granted")

        let alice = Identity.generate(), bob = Identity.generate()
        let phoneA = try RawPeer(identity: alice, role: .endpoint, hubPort: hubs.udpA)
        let envelope = try seal("across two hubs and a Python program", from: alice, to: bob)
        try phoneA.send(envelope)
        XCTAssertNil(RawPeer.refusal(try phoneA.answer(for: envelope.bundleID)), "hub A took custody")
        // hub_trust is open here: A hands B a copy (custody stays with A until delivery).
        try Wait.until(timeout: 20, "hub B holds a copy") { try hubs.b.status().router.queue.queued >= 1 }
        let phoneB = try RawPeer(identity: bob, role: .endpoint, hubPort: hubs.udpB)
        XCTAssertEqual(try deliveries(of: envelope.bundleID, to: phoneB), 1)
        let opened = try XCTUnwrap(phoneB.receivedEnvelopes.first { $0.bundleID == envelope.bundleID })
        XCTAssertEqual(try opened.open(with: bob), Array("across two hubs and a Python program".utf8))
    }

    /// The program is a process like any other: SIGKILLed, it is restarted with backoff and the
    /// hubs link again; the other hub, its UDP and custody are untouched.
    func testAKilledProgramIsRestartedAndTheLinkComesBack() throws {
        let hubs = try startHubs()
        try Wait.until(timeout: 20, "linked") { try hubLinks(hubs.a).count == 1 }
        let pid = try XCTUnwrap(hubs.a.transport("pytcp")?.pid)
        kill(pid, SIGKILL)
        try Wait.until(timeout: 10, "the end noticed") { try hubs.a.transport("pytcp")?.lastExit == "SIGKILL" }
        try Wait.until(timeout: 20, "a new program linked again") {
            let s = try hubs.a.transport("pytcp")
            let (linksA, linksB) = (try hubLinks(hubs.a).count, try hubLinks(hubs.b).count)
            return s?.pid != nil && s?.pid != pid && linksA == 1 && linksB == 1
        }
        XCTAssertEqual(try hubs.a.transport("pytcp")?.restarts, 1)
        XCTAssertEqual(try hubs.a.transport("udp")?.status.state, .running)
    }

    /// Attacks on the carriers, from the internet side of the program: junk, a record that is not
    /// a handshake, and a swarm of silent connections meant to exhaust handshake slots. Each ends
    /// only its own carrier; the honest hub still links, and the hub never trusts the program's bytes.
    func testHostileCarriersEndOnlyThemselves() throws {
        let hubs = try startHubs()
        try Wait.until(timeout: 20, "linked") { try hubLinks(hubs.b).count == 1 }
        func connect() throws -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var to = IPEndpoint(host: "127.0.0.1", port: hubs.tcpB).sockaddr
            let rc = withUnsafePointer(to: &to) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            XCTAssertEqual(rc, 0)
            var timeout = timeval(tv_sec: 15, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            return fd
        }
        /// Whether the far end closed the connection (read returns 0 or reset), bounded by SO_RCVTIMEO.
        func closedByHub(_ fd: Int32) -> Bool {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(fd, &buffer, buffer.count)
                if n > 0 { continue }
                return n == 0 || errno == ECONNRESET
            }
        }
        // A sealed record before any handshake.
        let forged = try connect()
        defer { close(forged) }
        let sealed = TLVRecord(.sealed, value: [UInt8](repeating: 7, count: 40)).encoded
        XCTAssertEqual(write(forged, sealed, sealed.count), sealed.count)
        XCTAssertTrue(closedByHub(forged), "an unsealed record ends its carrier")
        // A hello of the wrong version.
        let old = try connect()
        defer { close(old) }
        let hello = TLVRecord(.linkHello, value: [1] + [UInt8](repeating: 0, count: 60)).encoded
        XCTAssertEqual(write(old, hello, hello.count), hello.count)
        XCTAssertTrue(closedByHub(old), "a refused handshake ends its carrier")
        // 40 connections that never speak: the oldest unfinished handshakes give way.
        let silent = try (0..<40).map { _ in try connect() }
        defer { silent.forEach { close($0) } }
        XCTAssertTrue(closedByHub(silent[0]), "the oldest silent carrier was evicted")
        // The honest link was never disturbed, and a message still crosses.
        XCTAssertEqual(try hubLinks(hubs.b).count, 1)
        let alice = Identity.generate(), bob = Identity.generate()
        let phoneA = try RawPeer(identity: alice, role: .endpoint, hubPort: hubs.udpA)
        let envelope = try seal("still crossing", from: alice, to: bob)
        try phoneA.send(envelope)
        XCTAssertNil(RawPeer.refusal(try phoneA.answer(for: envelope.bundleID)))
        let phoneB = try RawPeer(identity: bob, role: .endpoint, hubPort: hubs.udpB)
        XCTAssertEqual(try deliveries(of: envelope.bundleID, to: phoneB), 1)
        XCTAssertEqual(try hubs.b.transport("pytcp")?.restarts, 0, "nothing the network sent crashed the program")
    }

    /// A program's config error names the key and line, as a plugin's does; `check-config` says so.
    /// Attack 9 of the third security review: a `command:` transport got the hub's signature on
    /// a relay owner registration, an attachment announcement and a free string, then logged in
    /// to the real relay as the hub. Now the hub signs for a program only its own link
    /// identities (role hub, its own keys); everything else is refused, counted and logged.
    func testAProgramGetsOnlyItsLinkHandshakesSigned() throws {
        try RequiredTool.require(Self.python, package: "python3")
        let dir = try TestSupport.temporaryDirectory(self)
        let out = dir + "/oracle.txt"
        let oracle = TestSupport.repoRoot + "/Tests/Fixtures/signing_oracle.py"
        let section = """
          oracle:
            enabled: true
            plugin: relay
            command: ["\(Self.python)", "\(oracle)"]
            out: "\(out)"

        """
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: HubProcessTests.freePort(),
                                            extra: section).replacingOccurrences(of: "log_level: debug", with: "log_level: info")
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        try Wait.until(timeout: 20, "the program's results at \(out) (log: \(hub.log.suffix(2000)))") { FileManager.default.fileExists(atPath: out) }
        let results = Dictionary(uniqueKeysWithValues: try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map {
            let parts = $0.split(separator: " ")
            return (String(parts[0]), String(parts[1]))
        })
        XCTAssertEqual(results, [
            "free-string": "refused", "relay-owner-registration": "refused", "attachment-announcement": "refused",
            "hub-certificate": "refused", "mesh-beacon": "refused", "link-identity-as-relay": "refused",
            "link-identity-other-key": "refused", "link-identity": "signed",
        ], "a program named kind relay still gets no relay registration signed")
        XCTAssertTrue(hub.log.contains("transport oracle: refused to sign 28 bytes under no context a transport may sign (1 refused so far)"),
                      hub.log.suffix(3000).description)
    }

    /// Attack 10 of the third security review: a process reported a link with a victim phone's
    /// key and the router pushed the victim's mail to it, taking its custody ack as delivery. Now
    /// a link-up a plugin reports is believed only with its handshake's proof, which chains from
    /// a hash the hub itself signed (Docs/plugin-protocol.md, "Proving a link-up"): without one,
    /// or with one around a hash the hub signed but a signature the program made up, the link
    /// is refused and counted; a malformed one makes the message malformed, which is ignored
    /// and logged. Bob's mail waits for Bob.
    func testAProgramCannotReportALinkNoHandshakeProved() throws {
        try RequiredTool.require(Self.python, package: "python3")
        let dir = try TestSupport.temporaryDirectory(self)
        let out = dir + "/reported.txt"
        let (alice, bob) = (Identity.generate(), Identity.generate())
        let section = """
          rogue:
            enabled: true
            plugin: rogue
            command: ["\(Self.python)", "\(TestSupport.repoRoot)/Tests/Fixtures/false_link_up.py"]
            peer_roles: [endpoint]
            victim: "\(Hex.encode(bob.signingKey))"
            victim_kx: "\(Hex.encode(bob.kxKey))"
            out: "\(out)"

        """
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port, extra: section)
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        try Wait.until(timeout: 20, "the program reported its links (log: \(hub.log.suffix(2000)))") { FileManager.default.fileExists(atPath: out) }
        var metrics = ""
        func refused() throws -> Bool {
            metrics = try JSONDecoder().decode([String: String].self, from: try hub.client.request("metrics"))["text"] ?? ""
            return metrics.contains(#"yaok_transport_links_refused_total{transport="rogue"} 2"#)
        }
        try Wait.until(timeout: 10, "two link-ups refused (metrics: \(metrics.split(separator: "\n").filter { $0.contains("rogue") }), log: \(hub.log.suffix(3000)))") { try refused() }
        XCTAssertTrue(hub.log.contains("transport rogue: refused a link-up claiming the endpoint role: it came without the handshake's proof (1 refused so far)"),
                      hub.log.suffix(3000).description)
        XCTAssertTrue(hub.log.contains("the plugin process sent a malformed message"), hub.log.suffix(3000).description)

        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        let victim = try seal("for bob, wherever he is", from: alice, to: bob)
        try phone.send(victim)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: victim.bundleID)))
        let status = try hub.status().router
        XCTAssertFalse(status.links.contains { $0.kind == "rogue" }, "no link of the program at the router: \(status.links)")
        XCTAssertEqual(status.links.filter { $0.role == "endpoint" }.count, 1, "only Alice is attached")
        // Bob, attached for real over UDP (his handshake's proof passes), gets it exactly once.
        let bobPeer = try RawPeer(identity: bob, role: .endpoint, hubPort: port)
        XCTAssertEqual(try deliveries(of: victim.bundleID, to: bobPeer), 1)
        XCTAssertTrue(try refused(), "an honest link-up is not refused")
    }


    func testAProgramConfigErrorNamesKeyAndLine() throws {
        try RequiredTool.require(Self.python, package: "python3")
        let dir = try TestSupport.temporaryDirectory(self)
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: nil,
                                            extra: section(listen: 7000, peers: [], extra: "    colour: blue\n"))
        try config.write(toFile: dir + "/hub.yaml", atomically: true, encoding: .utf8)
        let line = config.components(separatedBy: "\n").firstIndex { $0.contains("colour:") }! + 1
        let result = try TestSupport.run(try TestSupport.product("yaok-hub"), ["check-config", dir + "/hub.yaml"])
        XCTAssertNotEqual(result.status, 0)
        XCTAssertTrue(result.output.contains("transports.pytcp.colour (line \(line)): unknown key"), result.output)
        // A relative program path is refused by the hub before anything runs.
        let relative = config.replacingOccurrences(of: "\"\(Self.python)\"", with: "python3")
        XCTAssertThrowsError(try HubConfig.parse(yaml: relative, source: "t.yaml")) { error in
            XCTAssertTrue("\(error)".contains("transports.pytcp.command"), "\(error)")
            XCTAssertTrue("\(error)".contains("absolute path"), "\(error)")
        }
    }
}
