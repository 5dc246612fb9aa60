import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
@testable import YaokHubCore
@testable import YaokRouting
import YaokPluginKit
import YaokTesting
import YaokWire

/// At the default level the hub logs neither a user-ID prefix nor the IP address of a phone
/// that attaches: a seized hub's journal would otherwise map people to times and places.
/// Docs/operations.md, "What the log holds".
final class LogPrivacyTests: XCTestCase {
    func testADefaultLogHoldsNoPhonesIDAndNoPhonesAddress() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "log_level: debug", with: "log_level: info")
        XCTAssertTrue(config.contains("log_level: info"))
        let hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        addTeardownBlock { hub.stop() }
        try hub.waitReady()

        let alice = Identity.generate(), bob = Identity.generate()
        let aliceAddress = "127.0.0.41", bobAddress = "127.0.0.42"
        let bobPhone = try RawPeer(identity: bob, role: .endpoint, hubPort: port, host: bobAddress)
        let alicePhone = try RawPeer(identity: alice, role: .endpoint, hubPort: port, host: aliceAddress)
        let envelope = try seal("private", from: alice, to: bob)
        try alicePhone.send(envelope)
        XCTAssertNil(RawPeer.refusal(try alicePhone.answer(for: envelope.bundleID)))
        try Wait.until(timeout: 20, "the message at Bob") { bobPhone.receivedEnvelopes.contains { $0.bundleID == envelope.bundleID } }
        // A registration that names another hub is refused: its log line too.
        try alicePhone.send(TLVRecord(.registration, value: Random.bytes(161)))
        try Wait.until(timeout: 10, "the registration refused") { try hub.status().router.counters.registrationsRefused == 1 }
        // The phones leave: link-down lines are logged as well.
        alicePhone.engine.stop()
        bobPhone.engine.stop()
        try Wait.until(timeout: 30, "both phones' links down") { try hub.transport("udp")?.status.links == 0 }
        hub.stop()

        let log = hub.log
        XCTAssertTrue(log.contains("link up udp/"), "the attaches are logged: \(log.suffix(2000))")
        for (who, identity) in [("alice", alice), ("bob", bob)] {
            for prefix in [Router.shortID(identity.userID), Hex.encode(identity.userID.prefix(8)), Router.shortID(identity.signingKey)] {
                XCTAssertFalse(log.contains(prefix), "\(who)'s ID prefix \(prefix) is in the default log")
            }
        }
        for address in [aliceAddress, bobAddress] {
            XCTAssertFalse(log.contains(address), "a phone's address \(address) is in the default log:\n\(log.components(separatedBy: "\n").filter { $0.contains(address) }.joined(separator: "\n"))")
        }
    }
}
