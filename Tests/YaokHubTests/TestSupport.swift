import HubTestSupport
import Foundation
import Synchronization
import YaokPluginKit
import YaokWire
import YaokCrypto
import YaokEndpoint
import YaokStore
import XCTest
import YaokProcess
import YaokTesting

/// Paths and processes for tests that run the real binaries.
enum TestSupport {
    /// The repository root.
    static let repoRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// The build products directory (where the test bundle, yaok-hub and the plugins are).
    static let productsDirectory = BuildProducts.directory(containing: "yaok-hub")

    static func product(_ name: String) throws -> String {
        let path = productsDirectory + "/" + name
        guard FileManager.default.fileExists(atPath: path) else {
            throw XCTSkip("\(name) is not built in \(productsDirectory); run `swift build` first")
        }
        return path
    }

    /// A fresh temporary directory, mode 0700, removed at the end of the test.
    static func temporaryDirectory(_ test: XCTestCase) throws -> String {
        let path = NSTemporaryDirectory() + "yaok-test-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        test.addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
        return path
    }

    /// The store of the hub whose test directory is `dir` (`data/store.db`), opened with that
    /// hub's own key file as a connection of the test's: to change the store behind the hub's back.
    static func openHubStore(_ dir: String) throws -> SQLCipherDatabase {
        let key = try DatabaseKey.load(keyFile: dir + "/data/store.key", environment: [:], createIfMissing: false)
        return try SQLCipherDatabase(path: dir + "/data/store.db", key: key)
    }

    /// Alice and Bob, new endpoints in `dir`/alice and `dir`/bob, each the other's contact;
    /// `bobContact` is Bob as Alice knows him (what she composes to).
    static func aliceAndBob(in dir: String) throws -> (alice: Endpoint, bob: Endpoint, bobContact: Contact) {
        let alice = try Endpoint.initialize(home: dir + "/alice", name: "Alice")
        let bob = try Endpoint.initialize(home: dir + "/bob", name: "Bob")
        let bobContact = try alice.addContact(uri: bob.contactCode())
        try bob.addContact(uri: alice.contactCode())
        return (alice, bob, bobContact)
    }

    /// A loopback port of `type` (SOCK_DGRAM or SOCK_STREAM) that was free a moment ago.
    static func freePort(type: Int32) -> UInt16 { Loopback.freePort(type: type) }

    /// A fresh plugin directory (safe permissions) holding copies of the named built plugins.
    static func pluginDirectory(_ test: XCTestCase, plugins: [String] = ["udp"]) throws -> String {
        let dir = try temporaryDirectory(test)
        for p in plugins {
            try FileManager.default.copyItem(atPath: product("libyaok-plugin-\(p).so"), toPath: dir + "/libyaok-plugin-\(p).so")
        }
        return dir
    }

    /// Compiles the C fixture plugin with the given defines into `dir/name`.
    static func buildCPlugin(into dir: String, name: String, defines: [String]) throws -> String {
        let output = dir + "/" + name
        let source = repoRoot + "/Tests/Fixtures/c_plugin.c"
        let include = repoRoot + "/Sources/PluginAPI/Sources/CYaokPlugin/include"
        let result = try run("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", include] + defines.map { "-D" + $0 } + ["-o", output, source])
        guard result.status == 0 else { throw NSError(domain: "cc", code: Int(result.status), userInfo: [NSLocalizedDescriptionKey: result.output]) }
        chmod(output, 0o755)
        return output
    }

    typealias RunResult = CommandResult

    /// Runs a command to completion (bounded by `timeout`), capturing stdout and stderr.
    static func run(_ executable: String, _ arguments: [String], timeout: TimeInterval = 120, environment: [String: String]? = nil) throws -> RunResult {
        try Command.run(executable, arguments, environment: environment, timeout: timeout)
    }
}

/// A `yaok-relay run` child on a free loopback port, with a fresh key in `dir/relay` and its
/// log in `dir/relay.log` (RelayPathTests, FieldClockTests).
struct RelayChild {
    let process = Process()
    let key: String
    let port: UInt16
    let logPath: String

    init(in dir: String) throws {
        let exe = try TestSupport.product("yaok-relay")
        let data = dir + "/relay"
        key = try TestSupport.run(exe, ["key", "--data-dir", data]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(key.count, 64, key)
        port = HubProcessTests.freePort()
        logPath = dir + "/relay.log"
        process.executableURL = URL(fileURLWithPath: exe)
        process.arguments = ["run", "--listen", "127.0.0.1:\(port)", "--data-dir", data]
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: logPath)
        process.standardOutput = FileHandle(forWritingAtPath: logPath)
        try process.run()
    }

    var address: String { "127.0.0.1:\(port)" }
    /// The hub config lines of a relay transport pinned to this relay.
    var transportSection: String { "  relay:\n    enabled: true\n    address: \(address)\n    relay_key: \(key)\n    poll_interval_s: 2\n" }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    func stop() { process.terminateWithin(seconds: 10) }

    /// A hub in `dir/hub` with UDP on a free port for phones and this relay's transport; returns
    /// once it is ready and its relay link is up. The caller stops it.
    func startHub(_ test: XCTestCase, dir: String, extraEnvironment: [String: String] = [:], launcher: [String] = []) throws -> (hub: HubProcess, url: String) {
        let plugins = try TestSupport.pluginDirectory(test, plugins: ["udp", "relay"])
        // A second start (after one that hung) gets a directory of its own.
        let hubDir = FileManager.default.fileExists(atPath: dir + "/hub") ? dir + "/hub-\(UUID().uuidString.prefix(8))" : dir + "/hub"
        try FileManager.default.createDirectory(atPath: hubDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let port = HubProcessTests.freePort()
        let hub = try HubProcess(dir: hubDir, config: HubProcessTests.config(dir: hubDir, pluginDirs: [plugins], udpPort: port, extra: transportSection),
                                 executable: try TestSupport.product("yaok-hub"), extraEnvironment: extraEnvironment, launcher: launcher)
        do {
            try hub.waitReady()
            try Wait.until(timeout: 30, "relay link up at the hub (\(hub.log))") { try hub.transport("relay")?.status.links == 1 }
        } catch {
            hub.stop()
            throw error
        }
        return (hub, "udp://127.0.0.1:\(port)")
    }
}

/// A `yaok` command run on its own thread (a listener while the test sends); ``events(timeout:)``
/// waits for it and returns its JSON events (none if it failed).
final class BackgroundYaok: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: [[String: Any]] = []

    init(_ home: String, _ args: [String]) {
        DispatchQueue(label: "yaok \(args.first ?? "")").async { [self] in
            result = (try? MessagePathTests.yaok(home, args)) ?? []
            done.signal()
        }
    }

    func events(timeout: TimeInterval = 60) -> [[String: Any]]? {
        done.wait(timeout: .now() + timeout) == .success ? result : nil
    }
}

@testable import YaokHubCore
@testable import YaokSupervision

/// A raw link client: the UDP engine with our own identity and role, as an attacker or a
/// hand-driven phone would use it. `host` is the local address it sends from (any of
/// 127.0.0.0/8), so tests can give an attacker its own origin.
final class RawPeer: Sendable {
    let engine: UDPLinkEngine
    private let inbox = Inbox()
    /// Guards ``frames``.
    var lock: NSLock { inbox.lock }
    /// Every frame received, in order (under ``lock``).
    var frames: [TLVRecord] { inbox.frames }

    /// What the engine reports: the link, and every frame received.
    // @unchecked: `link` and `frames` only under `lock`.
    final class Inbox: LinkEvents, @unchecked Sendable {
        let lock = NSLock()
        var link: LinkID?
        /// The hub's signing key, as the link handshake proved it.
        var peerKey: [UInt8] = []
        var frames: [TLVRecord] = []
        let up = DispatchSemaphore(value: 0)

        func linkUp(_ info: LinkInfo) {
            lock.withLock { (link, peerKey) = (info.id, info.peerSigningKey) }
            up.signal()
        }
        func linkDown(_ id: LinkID, reason: String?) {}
        func frameReceived(_ bytes: [UInt8], on link: LinkID) {
            guard let r = try? TLVRecord(parsing: bytes) else { return }
            lock.withLock { frames.append(r) }
        }
        func statusChanged() {}
    }

    init(identity: Identity, role: PeerRole, hubPort: UInt16, host: String = "127.0.0.1") throws {
        engine = UDPLinkEngine(identity: identity, role: role, listen: IPEndpoint(host: host, port: 0),
                               staticPeers: [IPEndpoint(host: "127.0.0.1", port: hubPort)], clock: { WallClock.nowMilliseconds() },
                               events: inbox)
        try engine.start()
        XCTAssertEqual(inbox.up.wait(timeout: .now() + 10), .success, "link to the hub came up")
    }

    func send(_ record: TLVRecord) throws {
        try engine.send(record.encoded, to: XCTUnwrap(lock.withLock { inbox.link }))
    }

    /// Sends a bundle (hop header + envelope).
    func send(_ envelope: Envelope, hop: HopHeader? = nil) throws {
        let bundle = hop.map { YaokWire.Bundle(hop: $0, envelope: envelope) } ?? YaokWire.Bundle(envelope: envelope)
        try send(TLVRecord(.bundle, value: bundle.encoded))
    }

    /// Waits for a custody answer (ack or refusal) about bundle `id`.
    func answer(for id: [UInt8], timeout: TimeInterval = 10) throws -> TLVRecord {
        var found: TLVRecord?
        try Wait.until(timeout: timeout, "custody answer for \(Hex.encode(id))") {
            found = lock.withLock { frames.first { ($0.type == RoutingFrameType.custodyAck.rawValue || $0.type == RoutingFrameType.custodyRefused.rawValue) && Array($0.value.prefix(16)) == id } }
            return found != nil
        }
        return try XCTUnwrap(found)
    }

    /// The refusal reason in a custody answer, nil for an acknowledgement.
    static func refusal(_ r: TLVRecord) -> CustodyRefusal.Reason? {
        r.type == RoutingFrameType.custodyRefused.rawValue ? (try? CustodyRefusal(parsing: r.value))?.reason : nil
    }

    /// Envelopes received in bundle frames so far, in order.
    var receivedEnvelopes: [Envelope] { lock.withLock { frames }.envelopes }

    /// Frames of one type received so far.
    /// The hub's signing key, proven in the link handshake.
    var hubKey: [UInt8] { lock.withLock { inbox.peerKey } }
    func frames(_ type: FrameType) -> [TLVRecord] { lock.withLock { frames.filter { $0.type == type.rawValue } } }
    func frames(_ type: RoutingFrameType) -> [TLVRecord] { lock.withLock { frames.filter { $0.type == type.rawValue } } }

    /// Every bundle ID the hub has acknowledged so far, by single acks and by lists.
    var acknowledged: Set<[UInt8]> { lock.withLock { frames }.acknowledgedBundleIDs }

    /// Sends every envelope, then re-sends those not yet acknowledged every 2 s (UDP may drop
    /// either way, as a phone's session would), until all are acknowledged; none may be refused.
    func sendUntilAcknowledged(_ envelopes: [Envelope]) throws {
        var lastSend = Date.distantPast
        try Wait.until(timeout: 60, "\(envelopes.count) custody acks") {
            let have = acknowledged
            if Date().timeIntervalSince(lastSend) > 2 {
                for e in envelopes where !have.contains(e.bundleID) { try send(e) }
                lastSend = Date()
            }
            return have.isSuperset(of: envelopes.map(\.bundleID))
        }
        XCTAssertTrue(frames(.custodyRefused).isEmpty)
    }

    deinit { engine.stop() }
}

/// A hub process with its UDP transport on a free loopback port, and two users.
struct UDPHubSetup {
    let hub: HubProcess
    let port: UInt16
    let alice = Identity.generate(), bob = Identity.generate()
}

/// Starting a hub, sealing messages and counting deliveries, for the attack tests
/// (DeliveryIntegrityTests, LinkSecurityTests).
extension TestSupport {
    /// A link proof (Docs/plugin-protocol.md, "Proving a link-up") made as `peer`, initiator of
    /// a handshake with a hub: the hub must sign its responder half over `responderHash`
    /// (a test transport asks it to) before the link-up that carries this proof.
    static func linkProof(as peer: Identity, role: PeerRole = .endpoint) throws -> LinkProof {
        let hash = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let payload = (0..<LinkProof.replyPayloadLength).map { _ in UInt8.random(in: 0...255) }
        var proof = LinkProof(responderHash: hash, replyPayload: payload, peerSignature: [])
        proof.peerSignature = peer.sign(SecureLink.initiatorContext + proof.finalHash + [UInt8(role.rawValue)] + peer.signingKey + peer.kxKey)
        return proof
    }
}

extension XCTestCase {
    func startUDPHub(router: String = "", extra: String = "") throws -> UDPHubSetup {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port, extra: extra)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5" + router)
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        try hub.waitReady()
        return UDPHubSetup(hub: hub, port: port)
    }

    /// Attaches `bob` and waits until the bundle `id` has arrived; then acknowledges every
    /// bundle as a phone would, waits a little longer and returns how often `id` came.
    func deliveries(of id: [UInt8], to bob: RawPeer, settle: TimeInterval = 1.5) throws -> Int {
        try Wait.until(timeout: 20, "bundle \(Hex.encode(id.prefix(4))) delivered") {
            bob.receivedEnvelopes.contains { $0.bundleID == id }
        }
        for e in bob.receivedEnvelopes { try bob.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded)) }
        // A second copy would come within the custody timeout's resend; none may.
        let deadline = Date().addingTimeInterval(settle)
        while Date() < deadline { usleep(100_000) }
        return bob.receivedEnvelopes.filter { $0.bundleID == id }.count
    }

}

/// Two hubs that trust each other by key (`hub_trust: list`) over loopback UDP, A dialling B:
/// their directories (with `data/identity.key` made), ports and configs. `router` is added to
/// both configs' router section.
struct TrustedHubPair {
    let dirA: String, dirB: String
    let portA: UInt16, portB: UInt16
    let configA: String, configB: String
    /// A's config without B as a peer: A apart.
    var configAApart: String { configA.replacingOccurrences(of: "peers: [\"127.0.0.1:\(portB)\"]", with: "peers: []") }

    init(_ test: XCTestCase, router: String = "") throws {
        let plugins = try TestSupport.pluginDirectory(test)
        func home() throws -> (dir: String, identity: Identity) {
            let dir = try TestSupport.temporaryDirectory(test)
            try FileManager.default.createDirectory(atPath: dir + "/data", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            return (dir, try IdentityFile.loadOrCreate(path: dir + "/data/identity.key"))
        }
        let a = try home(), b = try home()
        let (portA, portB) = (HubProcessTests.freePort(), HubProcessTests.freePort())
        func config(_ me: String, port: UInt16, peers: [UInt16], trusting other: Identity) -> String {
            HubProcessTests.config(dir: me, pluginDirs: [plugins], udpPort: port, peers: peers)
                .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5\(router)\n  hub_trust: list\n  trusted_hubs: [\"\(Hex.encode(other.signingKey))\"]")
        }
        (dirA, dirB, self.portA, self.portB) = (a.dir, b.dir, portA, portB)
        configA = config(a.dir, port: portA, peers: [portB], trusting: b.identity)
        configB = config(b.dir, port: portB, peers: [], trusting: a.identity)
    }
}

extension IPEndpoint {
    /// An IPv4 endpoint as a kernel `sockaddr_in`, for the tests' raw IPv4 UDP and TCP sockets.
    var sockaddr: sockaddr_in {
        precondition(!isIPv6, "sockaddr_in is IPv4")
        var sa = sockaddr_in()
        withSockaddr { p, _ in p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sa = $0.pointee } }
        return sa
    }
}
