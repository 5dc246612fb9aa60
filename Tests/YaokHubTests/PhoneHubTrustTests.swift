import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
@testable import YaokHubCore
import YaokPluginKit
import YaokProcess
import YaokTesting
import YaokWire

/// A phone trusts a hub only for a reason it can check (a pinned key, or a certificate of a
/// network it knows); any other hub is a carrier whose custody is not final and which gets no
/// relay registration (Docs/protocol.md §5, "Which hubs a phone trusts"). Real `yaok` and
/// `yaok-hub` processes; the rogue hub is written for the test.
final class PhoneHubTrustTests: XCTestCase {
    /// A stranger's hub: the link protocol as a hub, with a fresh key; it acknowledges custody
    /// of every bundle and drops it, and keeps every frame it was sent.
    final class RogueHub: LinkEvents, @unchecked Sendable {
        let identity = Identity.generate()
        private(set) var engine: UDPLinkEngine!
        private let lock = NSLock()
        private var received: [TLVRecord] = []

        init() throws {
            engine = UDPLinkEngine(identity: identity, role: .hub, listen: IPEndpoint(host: "127.0.0.1", port: 0), staticPeers: [],
                                   clock: { WallClock.nowMilliseconds() }, events: self)
            try engine.start()
        }

        var url: String { "udp://127.0.0.1:\(engine.boundAddress?.port ?? 0)" }
        func frames(_ type: FrameType) -> [TLVRecord] { lock.withLock { received.filter { $0.type == type.rawValue } } }
        func frames(_ type: RoutingFrameType) -> [TLVRecord] { lock.withLock { received.filter { $0.type == type.rawValue } } }

        func linkUp(_ info: LinkInfo) {}
        func linkDown(_ id: LinkID, reason: String?) {}
        func statusChanged() {}
        func frameReceived(_ bytes: [UInt8], on link: LinkID) {
            guard let record = try? TLVRecord(parsing: bytes) else { return }
            lock.withLock { received.append(record) }
            if record.type == FrameType.bundle.rawValue, let bundle = try? YaokWire.Bundle(parsing: record.value) {
                try? engine.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: bundle.envelope.bundleID).encoded).encoded, to: link)
            }
        }
        deinit { engine?.stop() }
    }

    /// A hub with UDP for phones; `router` lines go into its router section; `prepare` runs
    /// on its directory before it starts.
    private func startHub(_ dir: String, router: String = "", prepare: (String) throws -> Void = { _ in }) throws -> (hub: HubProcess, url: String) {
        let hubDir = dir + "/hub"
        try FileManager.default.createDirectory(atPath: hubDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try prepare(hubDir)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: hubDir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5" + router)
        let hub = try HubProcess(dir: hubDir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()
        return (hub, "udp://127.0.0.1:\(port)")
    }

    private static func events(_ events: [[String: Any]], _ name: String) -> [[String: Any]] {
        events.filter { $0["event"] as? String == name }
    }

    /// The attacks: a rogue hub takes custody of Alice's message and drops it (marked handed
    /// over for good, the message would be lost), and collects her relay registration (it could
    /// then receive and delete her internet mail). It gets no registration; her message stays
    /// hers to resend, and once the resend time passes it leaves through a hub she trusts
    /// and reaches Bob, once.
    func testARogueHubGetsNoRegistrationAndWhatItSwallowsIsSentAgain() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try MessagePathTests.initPair(dir)
        let rogue = try RogueHub()
        let relayKey = Hex.encode(Identity.generate().signingKey)

        let sent = try MessagePathTests.yaok(alice, ["send", "Bob", "swallowed once", "--hub", rogue.url, "--relay-key", relayKey,
                                                     "--untrusted-resend-s", "2", "--json", "--timeout", "10"])
        let id = try XCTUnwrap(Self.events(sent, "queued").first?["id"] as? String, "\(sent)")
        let taken = Self.events(sent, "handed_over")
        XCTAssertEqual(taken.count, 1, "\(sent)")
        XCTAssertEqual(taken.first?["hub_trusted"] as? Bool, false, "an untrusted hub's custody is not final")
        XCTAssertEqual(rogue.frames(.bundle).count, 1, "the rogue carried (and dropped) the message")
        XCTAssertTrue(rogue.frames(.registration).isEmpty, "no relay registration for a hub Alice does not trust")

        // Alice pins her own network's hub. Before the resend time her item is not sent again.
        let (hub, hubURL) = try startHub(dir)
        let hubKey = try hub.signingKeyHex()
        let bobListen = BackgroundYaok(bob, ["listen", "--hub", hubURL, "--count", "1", "--json", "--timeout", "60"])
        Thread.sleep(forTimeInterval: 2.2)   // the resend time (2 s) is the condition here: wall time must pass
        var aliceEvents: [[String: Any]] = []
        try Wait.until(timeout: 60, "Alice's message delivered through the trusted hub (hub log: \(hub.log))") {
            let events = try MessagePathTests.yaok(alice, ["listen", "--hub", hubURL, "--trust-hub", hubKey, "--relay-key", relayKey,
                                                           "--json", "--timeout", "4"])
            aliceEvents += events
            return aliceEvents.contains { $0["event"] as? String == "delivered" && $0["id"] as? String == id }
        }
        let again = Self.events(aliceEvents, "handed_over").filter { $0["id"] as? String == id }
        XCTAssertEqual(again.first?["hub_trusted"] as? Bool, true, "\(aliceEvents)")
        let bobGot = try XCTUnwrap(bobListen.events(), "Bob's listen returned")
        XCTAssertEqual(bobGot.filter { $0["event"] as? String == "message" && $0["text"] as? String == "swallowed once" }.count, 1, "\(bobGot)")
        XCTAssertEqual(rogue.frames(.bundle).count, 1)
    }

    /// A hub is trusted for a certificate of a network the phone knows (it sends the
    /// certificate on phone links first); a certificate of another network, or none, leaves
    /// it a carrier.
    func testAHubIsTrustedForACertificateOfTheNetworkThePhoneKnows() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, _) = try MessagePathTests.initPair(dir)
        let network = SigningKeyPair.generate(), other = SigningKeyPair.generate()
        let day: Int64 = 86_400_000, now = WallClock.nowMilliseconds()
        let (_, hubURL) = try startHub(dir, router: "\n  network_key: \(Hex.encode(network.publicKey))\n  hub_certificate: hub.cert") { hubDir in
            let data = hubDir + "/data"
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let identity = try IdentityFile.loadOrCreate(path: data + "/identity.key")
            let cert = try HubCertificate.issue(networkKey: network, hubKey: identity.signingKey, notBeforeMs: now - day, notAfterMs: now + day)
            try Data(cert.encoded).write(to: URL(fileURLWithPath: data + "/hub.cert"))
        }
        func send(_ text: String, _ trust: [String]) throws -> Bool? {
            let events = try MessagePathTests.yaok(alice, ["send", "Bob", text, "--hub", hubURL, "--json", "--timeout", "10"] + trust)
            return Self.events(events, "handed_over").first?["hub_trusted"] as? Bool
        }
        XCTAssertEqual(try send("with the network key", ["--hub-network", Hex.encode(network.publicKey)]), true)
        XCTAssertEqual(try send("with another network's key", ["--hub-network", Hex.encode(other.publicKey)]), false)
        XCTAssertEqual(try send("with no trust", []), false)
        XCTAssertEqual(try send("trusting any hub", ["--trust-hub", "any"]), true)
        // A bad key is named with its option.
        let bad = try TestSupport.run(try TestSupport.product("yaok"), ["send", "--home", alice, "Bob", "x", "--hub", hubURL, "--trust-hub", "abc"])
        XCTAssertNotEqual(bad.status, 0)
        XCTAssertTrue(bad.output.contains("--trust-hub takes a 64-hex-digit Ed25519 key or `any`"), bad.output)
    }
}
