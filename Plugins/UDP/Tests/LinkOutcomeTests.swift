import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokTesting
import YaokUDPPlugin

/// The handshake's outcome over real UDP sockets (Docs/protocol.md §5): the hub's engine
/// answers a phone's identity, and a phone whose identity the hub refuses learns why at
/// once instead of believing a link that the hub never made.
final class LinkOutcomeTests: XCTestCase {
    /// Signs with one key, presents another: its identity opens under the session's key and
    /// fails the signature check.
    struct Liar: LinkIdentity {
        let presented = TestLinkIdentity(seed: 0x51)
        let signer = TestLinkIdentity(seed: 0x52)
        var signingKey: [UInt8] { presented.signingKey }
        var kxKey: [UInt8] { presented.kxKey }
        func sign(_ message: [UInt8]) throws -> [UInt8] { try signer.sign(message) }
        func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
            presented.verify(signature: signature, of: message, by: publicKey)
        }
        func randomBytes(_ count: Int) -> [UInt8] { presented.randomBytes(count) }
    }

    func engine(_ identity: LinkIdentity, role: PeerRole, peers: [IPEndpoint] = [], events: LinkEventRecorder) throws -> UDPLinkEngine {
        let e = UDPLinkEngine(identity: identity, role: role, listen: IPEndpoint(host: "127.0.0.1", port: 0), staticPeers: peers,
                              clock: { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }, events: events, keepaliveMs: 1_000)
        try e.start()
        addTeardownBlock { e.stop() }
        return e
    }

    func testAPhoneTheHubTakesIsToldSoAndOneItRefusesLearnsWhyAtOnce() throws {
        let hubEvents = LinkEventRecorder()
        let hub = try engine(TestLinkIdentity(seed: 0x50), role: .hub, events: hubEvents)
        let hubAddress = try XCTUnwrap(hub.boundAddress)

        // An honest phone: up on both sides, and the hub said it took it (the phone's link stays up).
        let phoneEvents = LinkEventRecorder()
        _ = try engine(TestLinkIdentity(seed: 0x53), role: .endpoint, peers: [hubAddress], events: phoneEvents)
        phoneEvents.wait("the honest phone's link up") { !$0.ups.isEmpty }
        hubEvents.wait("the hub's link with the honest phone up") { $0.ups.count == 1 }

        // A phone whose identity does not verify: its engine believed the hub's reply, but the
        // hub's sealed refusal takes its link down within the second, with the reason.
        let liarEvents = LinkEventRecorder()
        let started = Date()
        _ = try engine(Liar(), role: .endpoint, peers: [hubAddress], events: liarEvents)
        liarEvents.wait("the refused phone's link down with the hub's reason", timeout: 5) { !$0.downs.isEmpty }
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "no timeout: the answer came with the handshake")
        let reason = try XCTUnwrap(liarEvents.downs.first?.1)
        XCTAssertTrue(reason.hasPrefix("the peer refused the link (identity refused): your identity does not verify"), reason)
        XCTAssertEqual(hubEvents.ups.count, 1, "the hub made no link for the refused phone")
        XCTAssertGreaterThanOrEqual(hub.counterSnapshot.handshakeFailures, 1)
        XCTAssertTrue(phoneEvents.downs.isEmpty, "the honest phone's link stayed up: \(phoneEvents.downs)")
    }
}
