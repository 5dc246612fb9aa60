import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
import YaokTesting
@testable import YaokHubCore
@testable import YaokRouting

/// The ABI's send result codes (`yaok_send_result`) cross the plugin process boundary and reach
/// the router: Tests/Fixtures/refusing_transport.py reports Bob's phone on a link and refuses
/// every send with the code its section names, while Alice hands the hub a message for Bob over
/// UDP. What the router does with each code is tested in memory (RouterSendRefusalTests).
final class SendResultTests: XCTestCase {
    static var program: String { TestSupport.repoRoot + "/Tests/Fixtures/refusing_transport.py" }

    struct Setup {
        let hub: HubProcess
        let bundleID: [UInt8]
        func link() throws -> RouterStatus.LinkView? { try hub.status().router.links.first { $0.kind == "refuse" } }
        func asked() throws -> Int {
            Int(try hub.transport("refuse")?.status.details["sends_asked"] ?? "0") ?? 0
        }
    }

    func refusing(code: Int32) throws -> Setup {
        try RequiredTool.require(ProgramTransportTests.python, package: "python3")
        let bob = Identity.generate(), alice = Identity.generate()
        let extra = """
          refuse:
            enabled: true
            command: ["\(ProgramTransportTests.python)", "\(Self.program)"]
            peer_roles: [endpoint]
            peer_key: "\(Hex.encode(bob.signingKey))"
            peer_kx: "\(Hex.encode(bob.kxKey))"
            proof: "\(Hex.encode(try TestSupport.linkProof(as: bob).encoded))"
            send_code: \(code)

        """
        let s = try startUDPHub(extra: extra)
        try Wait.until(timeout: 20, "Bob's link on the refusing transport") { try s.hub.status().router.links.contains { $0.kind == "refuse" } }
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: s.port)
        let envelope = try seal("for Bob", from: alice, to: bob)
        try phone.send(envelope)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: envelope.bundleID)), "the hub takes custody first")
        let setup = Setup(hub: s.hub, bundleID: envelope.bundleID)
        try Wait.until(timeout: 10, "the refusing transport to be asked to send") { try setup.asked() >= 1 }
        return setup
    }

    func testNoLinkDropsTheLinkAtOnce() throws {
        let s = try refusing(code: SendResult.noLink.rawValue)
        defer { s.hub.stop() }
        try Wait.until(timeout: 10, "the refusal counted") { try s.hub.status().router.counters.sendsRefusedNoLink >= 1 }
        // The transport never said link down; the router routes around the link anyway.
        try Wait.until(timeout: 10, "the link gone from the router") { try s.link() == nil }
        XCTAssertTrue(s.hub.log.contains("the link is gone, routing around it"))
    }

    func testOtherAndUnknownCodesAreFailures() throws {
        for code: Int32 in [1, 99] {
            let s = try refusing(code: code)
            try Wait.until(timeout: 10, "code \(code) counted as a failure") { try s.hub.status().router.counters.sendsFailed >= 1 }
            XCTAssertEqual(try s.hub.status().router.counters.sendsRefusedQueueFull, 0)
            XCTAssertNotNil(try s.link(), "a failed send does not end the link")
            s.hub.stop()
        }
    }
}
