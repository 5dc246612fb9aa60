import Foundation
import XCTest
import YaokCrypto
import YaokRelayProtocol
import YaokTesting
import RelayTestSupport
import struct YaokPluginKit.IPEndpoint
import enum YaokPluginKit.Hex

/// `yaok-relay run`'s per-address registration and HELLO limits and its registration ceiling
/// (the options a loopback benchmark of many users from one address needs), and `yaok-relay
/// key`, on real processes.
final class RelayRunOptionsTests: XCTestCase {
    private var cleanup: [() -> Void] = []
    override func tearDown() { for c in cleanup.reversed() { c() } }

    private func relay(_ options: [String]) throws -> RelayProcess {
        let dir = try makeTemporaryDirectory("yaok-relay-options-", cleanup: &cleanup)
        let relay = try RelayProcess(dataDir: dir + "/relay", extra: options)
        cleanup.append { relay.stop() }
        return relay
    }

    private func connectedClient(_ relay: RelayProcess) throws -> RelayClient {
        var cfg = RelayClient.Configuration(relay: IPEndpoint(host: "127.0.0.1", port: UInt16(relay.port)), relaySigningKey: relay.key)
        cfg.handshakeRetryMs = 200
        cfg.maxHandshakeRetryMs = 500
        let c = RelayClient(configuration: cfg)
        cleanup.append { c.stop() }
        try c.connect(timeout: 10)
        return c
    }

    private func register(_ count: Int, on c: RelayClient, key: [UInt8]) throws -> [RegistrationStatus] {
        let channel = try XCTUnwrap(c.channelBinding)
        let regs = try (0..<count).map { _ in try Registration.owner(Identity.generate(), relaySigningKey: key, channel: channel, timestampMs: nowMs()) }
        return try c.registerAndWait(regs).map(\.status)
    }

    func testPerAddressRegistrationAndHelloLimitsAreHonoured() throws {
        let relay = try relay(["--registrations-per-minute-per-ip", "1", "--hellos-per-second-per-ip", "1"])
        // 1 a minute: a burst of 5, then refused (the default, 120, would take all 6).
        let c = try connectedClient(relay)
        XCTAssertEqual(try register(6, on: c, key: relay.key), Array(repeating: .accepted, count: 5) + [.tooManyRegistrations])
        // 1 a second: a burst of 2, one spent by the client above; of 5 more HELLOs at once at
        // least 3 are dropped (the default, 20, takes a burst of 40).
        let raw = RawUDP()
        for _ in 0..<5 {
            raw.send(try RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: EphemeralKX.generate().publicKey).encoded).encoded(),
                     port: relay.port)
        }
        XCTAssertTrue(Wait.poll { relay.metric(#"yaok_relay_dropped_total{reason="rate_limited"}"#) ?? 0 >= 3 },
                      relay.metrics().split(separator: "\n").filter { $0.contains("dropped") || $0.contains("handshakes") }.joined(separator: "\n"))
    }

    func testMaxRegistrationsIsHonoured() throws {
        let relay = try relay(["--max-registrations", "2"])
        let c = try connectedClient(relay)
        XCTAssertEqual(try register(3, on: c, key: relay.key), [.accepted, .accepted, .tooManyRegistrations])
    }

    func testABadLimitIsRefusedNamingTheOption() throws {
        let dir = try makeTemporaryDirectory("yaok-relay-options-", cleanup: &cleanup)
        let limits = ["--hellos-per-second-per-ip", "--registrations-per-minute-per-ip", "--max-registrations",
                      "--messages-per-hour", "--packets-per-second-per-ip", "--sends-per-hour-per-ip", "--max-sessions",
                      "--sessions-per-prefix", "--queue-share-per-sender", "--queue-share-per-prefix", "--reassembly-share-per-prefix"]
        for option in limits {
            // Each is refused, not clamped to its least value (which once turned 0 into 1).
            for value in option == "--hellos-per-second-per-ip" ? ["0", "-3", "many"] : ["0"] {
                let (rc, out) = try runTool(RelayProcess.binary, ["run", "--data-dir", dir + "/relay", "--listen", "127.0.0.1:0", option, value], timeout: 30)
                XCTAssertNotEqual(rc, 0, "\(option) \(value): \(out)")
                XCTAssertTrue(out.contains(option), "\(option) \(value): \(out)")
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/relay/relay.db"), "refused before opening the store")
    }

    /// `yaok-relay key` makes the identity (0600) and prints the pin that `run` then uses; the
    /// store `run` makes is a 0600 SQLCipher file.
    func testKeyCommandPrintsThePinThatRunUses() throws {
        let dir = try makeTemporaryDirectory("yaok-relay-key-", cleanup: &cleanup) + "/relay"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: RelayProcess.binary)
        p.arguments = ["key", "--data-dir", dir]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(printed.count, 64)
        let attributes = try FileManager.default.attributesOfItem(atPath: dir + "/relay.identity")
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let relay = try RelayProcess(dataDir: dir)
        defer { relay.stop() }
        XCTAssertEqual(Hex.encode(relay.key), printed)
        let dbMode = try FileManager.default.attributesOfItem(atPath: dir + "/relay.db")[.posixPermissions] as? NSNumber
        XCTAssertEqual(dbMode?.intValue, 0o600)
        // The database is SQLCipher: no plaintext SQLite header.
        let head = try XCTUnwrap(FileHandle(forReadingAtPath: dir + "/relay.db")).readData(ofLength: 16)
        XCTAssertNotEqual(String(decoding: head, as: UTF8.self), "SQLite format 3\u{0}")
    }
}
