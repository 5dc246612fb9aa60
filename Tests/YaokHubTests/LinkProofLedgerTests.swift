import Foundation
import XCTest
import CYaokPlugin
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokSupervision

/// The hub believes a link-up a plugin reports only with its handshake's proof
/// (``LinkProofLedger``, Docs/plugin-protocol.md "Proving a link-up"). Real handshakes in memory:
/// the hub's side signs through the ledger as the host does for a plugin process.
final class LinkProofLedgerTests: XCTestCase {
    /// The hub's identity as a plugin has it: every statement it signs is noted in the ledger.
    final class HostSigner: LinkIdentity, @unchecked Sendable {
        let identity = Identity.generate()
        private let lock = NSLock()
        private var ledger = LinkProofLedger()
        var nowNs: UInt64 = 1_000_000_000

        var signingKey: [UInt8] { identity.signingKey }
        var kxKey: [UInt8] { identity.kxKey }
        func sign(_ message: [UInt8]) throws -> [UInt8] {
            lock.withLock { ledger.noteSigned(message, nowNs: nowNs) }
            return identity.sign(message)
        }
        func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
            identity.verify(signature: signature, of: message, by: publicKey)
        }
        func randomBytes(_ count: Int) -> [UInt8] { identity.randomBytes(count) }
        func refusal(of link: LinkInfo) -> String? { lock.withLock { ledger.refusal(of: link, nowNs: nowNs) } }
    }

    /// Runs a whole handshake; returns the peer each side proved.
    func handshake(_ initiator: SecureLink, _ responder: SecureLink) throws -> (atInitiator: AuthenticatedPeer, atResponder: AuthenticatedPeer) {
        guard case .send(let reply)? = try responder.receive(TLVRecord(parsing: try initiator.hello())).first else { throw XCTSkip("no reply") }
        let out = try initiator.receive(TLVRecord(parsing: reply))
        guard case .send(let identity) = out[0], case .established(let responderPeer) = out[1],
              case .established(let initiatorPeer)? = try responder.receive(TLVRecord(parsing: identity)).first else {
            throw XCTSkip("handshake did not establish")
        }
        return (responderPeer, initiatorPeer)
    }

    func info(_ peer: AuthenticatedPeer, key: [UInt8]? = nil, role: PeerRole? = nil, proof: LinkProof?? = .none) -> LinkInfo {
        LinkInfo(id: 1, peerSigningKey: key ?? peer.signingKey, peerKXKey: peer.kxKey, peerRole: role ?? peer.role,
                 mtu: 1200, cost: 1, kind: "test", proof: proof ?? peer.proof)
    }

    func testAPhonesHandshakeProvesItsLinkOnce() throws {
        let hub = HostSigner(), phone = Identity.generate()
        let (_, proved) = try handshake(SecureLink(identity: phone, role: .endpoint, isInitiator: true, channel: .stream),
                                        SecureLink(identity: hub, role: .hub, isInitiator: false, channel: .stream))
        XCTAssertEqual(proved.signingKey, phone.signingKey)
        XCTAssertNotNil(proved.proof)
        XCTAssertNil(hub.refusal(of: info(proved)))
        let again = try XCTUnwrap(hub.refusal(of: info(proved)), "a proof serves one link-up")
        XCTAssertTrue(again.contains("names no handshake this hub signed"), again)
    }

    func testAHubThisHubDialledIsProvenToo() throws {
        let hub = HostSigner(), other = Identity.generate()
        let (proved, _) = try handshake(SecureLink(identity: hub, role: .hub, isInitiator: true, channel: .datagram),
                                        SecureLink(identity: other, role: .hub, isInitiator: false, channel: .datagram))
        XCTAssertEqual(proved.signingKey, other.signingKey)
        XCTAssertNil(hub.refusal(of: info(proved)))
    }

    func testAClaimOfAnotherKeyOrRoleIsRefused() throws {
        let hub = HostSigner(), attacker = Identity.generate(), victim = Identity.generate()
        let (_, proved) = try handshake(SecureLink(identity: attacker, role: .endpoint, isInitiator: true, channel: .stream),
                                        SecureLink(identity: hub, role: .hub, isInitiator: false, channel: .stream))
        for (what, claim) in [("the victim's key", info(proved, key: victim.signingKey)), ("the hub role", info(proved, role: .hub))] {
            let why = try XCTUnwrap(hub.refusal(of: claim), what)
            XCTAssertTrue(why.contains("does not prove that key and role"), "\(what): \(why)")
        }
        XCTAssertNil(hub.refusal(of: info(proved)), "the refused claims did not use up the honest one")
    }

    func testNoProofAForeignHandshakeOrAStaleOneIsRefused() throws {
        let hub = HostSigner(), elsewhere = HostSigner(), phone = Identity.generate()
        let (_, proved) = try handshake(SecureLink(identity: phone, role: .endpoint, isInitiator: true, channel: .stream),
                                        SecureLink(identity: hub, role: .hub, isInitiator: false, channel: .stream))
        XCTAssertEqual(hub.refusal(of: info(proved, proof: .some(nil))), "it came without the handshake's proof")
        // The phone's proof from a handshake with another hub names nothing this hub signed.
        let (_, provedElsewhere) = try handshake(SecureLink(identity: phone, role: .endpoint, isInitiator: true, channel: .stream),
                                                 SecureLink(identity: elsewhere, role: .hub, isInitiator: false, channel: .stream))
        XCTAssertTrue(try XCTUnwrap(hub.refusal(of: info(provedElsewhere))).contains("names no handshake this hub signed"))
        hub.nowNs += LinkProofLedger.windowNs + 1
        XCTAssertTrue(try XCTUnwrap(hub.refusal(of: info(proved)), "stale").contains("names no handshake this hub signed"))
    }

    func testTheRelayRoleIsLeftToTheRouter() {
        let hub = HostSigner(), relay = Identity.generate()
        let link = LinkInfo(id: 1, peerSigningKey: relay.signingKey, peerKXKey: relay.kxKey, peerRole: .relay, mtu: 1200, cost: 1, kind: "relay")
        XCTAssertNil(hub.refusal(of: link), "the relay has no link handshake; the router checks the pinned key")
    }

    func testAProofSurvivesThePluginProcessProtocolAndTheCABI() throws {
        let hub = HostSigner(), phone = Identity.generate()
        let (_, proved) = try handshake(SecureLink(identity: phone, role: .endpoint, isInitiator: true, channel: .stream),
                                        SecureLink(identity: hub, role: .hub, isInitiator: false, channel: .stream))
        let message = PluginMessage.linkUp(info(proved))
        XCTAssertEqual(try PluginMessage(parsing: message.encoded), message)
        let proof = try XCTUnwrap(proved.proof)
        XCTAssertEqual(try LinkProof(parsing: proof.encoded), proof)
        XCTAssertEqual(proof.encoded.count, Int(YAOK_LINK_PROOF_LENGTH))
    }
}
