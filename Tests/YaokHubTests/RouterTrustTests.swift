import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokRouting

/// "Roles are authorised, not claimed", on an in-memory router: which hubs are trusted
/// (`router.hub_trust`), what an untrusted one gets, hub certificates, what an endpoint may ask
/// for, and `peer_roles` per transport. Attackers are links with throwaway keys. HubRolesTests
/// checks the same rules end to end where processes matter (config, two real hubs, the CLI).
final class RouterTrustTests: XCTestCase {
    let alice = Identity.generate(), bob = Identity.generate()

    func trust(of peer: Identity, in h: RouterHarness) -> String? {
        h.router.statusSnapshot().links.first { $0.peer == Hex.encode(peer.signingKey.prefix(4)) && $0.role == "hub" }?.trust
    }

    /// Alice attaches and hands the hub a message for Bob, who is away.
    func victim(in h: RouterHarness) throws -> Envelope {
        let a = h.attach(alice, as: .endpoint)
        let message = try seal("for bob only", from: alice, to: bob)
        h.receive(message, on: a)
        XCTAssertEqual(h.acknowledged(on: a), [message.bundleID])
        return message
    }

    // MARK: list

    func testAnUntrustedHubInListModeGetsNothingAndIsNotHeard() throws {
        let trustyKey = Identity.generate(), malloryKey = Identity.generate()
        let h = try RouterHarness(self, settings: .init(trust: HubTrustSettings(mode: .list, trustedHubs: [trustyKey.signingKey])))
        let victim = try victim(in: h)

        let mallory = h.attach(malloryKey, as: .hub)
        XCTAssertEqual(trust(of: malloryKey, in: h), "untrusted")
        // It tries every way in: an announcement pulling Bob's mail to it, an offer, a request
        // for the victim's bundle, and a bundle of its own.
        let pull = try AttachmentAnnouncement.signed(by: malloryKey, timestampMs: WallClock.nowMilliseconds(), userIDs: [bob.userID])
        h.receive(TLVRecord(.attachment, value: pull.encoded), on: mallory)
        h.receive(TLVRecord(.offer, value: try BundleIDList(bundleIDs: [Random.bytes(16)]).encoded), on: mallory)
        h.receive(TLVRecord(.request, value: try BundleIDList(bundleIDs: [victim.bundleID]).encoded), on: mallory)
        let junk = try seal("junk", from: Identity.generate(), to: bob)
        h.receive(junk, on: mallory)
        var counters = h.router.statusSnapshot().counters
        XCTAssertEqual(counters.attachmentsRefused, 1)
        XCTAssertEqual(counters.untrustedHubFramesRefused, 3)

        let trusty = h.attach(trustyKey, as: .hub)
        h.tick()
        XCTAssertEqual(trust(of: trustyKey, in: h), "listed")
        XCTAssertEqual(h.offered(on: trusty), [victim.bundleID], "a listed hub is offered the victim")
        XCTAssertFalse(h.frames(.attachment, on: trusty).isEmpty, "a listed hub hears who is attached here")
        h.run(seconds: 5)
        XCTAssertTrue(h.frames(.offer, on: mallory).isEmpty, "no offers to an untrusted hub")
        XCTAssertTrue(h.frames(.attachment, on: mallory).isEmpty, "no attachment announcements to an untrusted hub")
        XCTAssertTrue(h.envelopes(on: mallory).isEmpty, "no bundles to an untrusted hub")
        XCTAssertTrue(h.frames(.request, on: mallory).isEmpty, "its offer was not looked at")
        XCTAssertFalse(h.acknowledged(on: mallory).contains(junk.bundleID), "its bundle was not taken")
        XCTAssertNil(try h.stored(junk.bundleID))
        let status = h.router.statusSnapshot()
        XCTAssertEqual(status.queue.queued, 1, "only the victim is held")

        let b = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [victim.bundleID], "Bob still gets his mail here")
        counters = h.router.statusSnapshot().counters
        XCTAssertEqual(counters.untrustedHubFramesRefused, 3)
    }

    // MARK: network

    func testNetworkTrustAcceptsOnlyAValidCertificateForTheLinksKey() throws {
        let network = SigningKeyPair.generate(), otherNetwork = SigningKeyPair.generate()
        let day: Int64 = 86_400_000
        let now = WallClock.nowMilliseconds()
        let hubIdentity = Identity.generate()
        let own = try HubCertificate.issue(networkKey: network, hubKey: hubIdentity.signingKey, notBeforeMs: now - day, notAfterMs: now + day)
        let h = try RouterHarness(self, settings: .init(trust: HubTrustSettings(mode: .network, networkKey: network.publicKey),
                                                        ownCertificate: own.encoded), hub: hubIdentity)
        let victim = try victim(in: h)

        func certificate(_ c: HubCertificate) -> TLVRecord { TLVRecord(type: RoutingFrameType.hubCertificate.rawValue, value: c.encoded) }
        func hub(presenting make: (Identity) throws -> HubCertificate) throws -> (Identity, LinkID) {
            let key = Identity.generate()
            let link = h.attach(key, as: .hub)
            h.receive(certificate(try make(key)), on: link)
            return (key, link)
        }
        let refused = [
            // Expired a day ago (beyond the 10-minute skew).
            ("expired", try hub { try HubCertificate.issue(networkKey: network, hubKey: $0.signingKey, notBeforeMs: now - 3 * day, notAfterMs: now - day) }),
            // Signed by another network.
            ("foreign", try hub { try HubCertificate.issue(networkKey: otherNetwork, hubKey: $0.signingKey, notBeforeMs: now - day, notAfterMs: now + day) }),
            // A genuine certificate, but another hub's (replayed from the air).
            ("thief", try hub { _ in try HubCertificate.issue(networkKey: network, hubKey: Identity.generate().signingKey, notBeforeMs: now - day, notAfterMs: now + day) }),
        ]
        XCTAssertEqual(h.router.statusSnapshot().counters.certificatesRefused, 3)

        let (memberKey, member) = try hub { try HubCertificate.issue(networkKey: network, hubKey: $0.signingKey, notBeforeMs: now - day, notAfterMs: now + day) }
        h.tick()
        XCTAssertEqual(trust(of: memberKey, in: h), "certified")
        XCTAssertEqual(h.offered(on: member), [victim.bundleID], "the certified hub is offered the victim")
        let counters = h.router.statusSnapshot().counters
        XCTAssertEqual(counters.certificatesAccepted, 1)
        XCTAssertEqual(counters.certificatesRefused, 3)
        h.run(seconds: 5)
        for (name, (key, link)) in refused {
            XCTAssertTrue(h.offered(on: link).isEmpty, "\(name) was offered bundles")
            XCTAssertTrue(h.envelopes(on: link).isEmpty, "\(name) got bundles")
            XCTAssertEqual(trust(of: key, in: h), "untrusted", name)
        }
        // The hub sends its own certificate first thing on each hub link, and it checks out.
        let first = try XCTUnwrap(h.transport.frames(on: member).first, "nothing sent to the member")
        XCTAssertEqual(first.type, RoutingFrameType.hubCertificate.rawValue, "the certificate comes before anything else")
        XCTAssertNoThrow(try HubCertificate(parsing: first.value).check(networkKey: network.publicKey, hubKey: hubIdentity.signingKey,
                                                                       nowMs: WallClock.nowMilliseconds(), clockSkewMs: 0))
    }

    // MARK: endpoint

    func testAnEndpointCannotRequestOrOfferItsWayToOthersMail() throws {
        let h = try RouterHarness(self)
        let victim = try victim(in: h)
        let mallory = h.attach(Identity.generate(), as: .endpoint)
        // Asks for Bob's bundle by ID; offers it (claiming to hold it) plus an unknown one.
        h.receive(TLVRecord(.request, value: try BundleIDList(bundleIDs: [victim.bundleID]).encoded), on: mallory)
        let offer = [victim.bundleID, Random.bytes(16)].sorted { $0.lexicographicallyPrecedes($1) }
        h.receive(TLVRecord(.offer, value: try BundleIDList(bundleIDs: offer).encoded), on: mallory)
        h.run(seconds: 5)
        let counters = h.router.statusSnapshot().counters
        XCTAssertEqual(counters.framesRefusedForRole, 2)
        XCTAssertEqual(counters.endpointMisroutesPrevented, 0)
        XCTAssertTrue(h.envelopes(on: mallory).isEmpty, "an endpoint got someone else's bundle")
        XCTAssertTrue(h.frames(.request, on: mallory).isEmpty, "the hub asked a phone for bundles off its offer")
        let b = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [victim.bundleID])
    }

    // MARK: peer_roles

    func testAHubRoleOnAnEndpointOnlyTransportIsRefused() throws {
        let h = try RouterHarness(self, transport: MemoryTransport(peerRoles: [.endpoint]))
        let posingKey = Identity.generate()
        let posing = h.attach(posingKey, as: .hub)
        XCTAssertEqual(h.router.statusSnapshot().counters.rolesRefused, 1)
        let victim = try victim(in: h)
        let b = h.attach(bob, as: .endpoint)
        XCTAssertEqual(h.envelopes(on: b).map(\.bundleID), [victim.bundleID])
        h.run(seconds: 5)
        XCTAssertFalse(h.router.statusSnapshot().links.contains { $0.role == "hub" })
        XCTAssertTrue(h.transport.frames(on: posing).isEmpty, "the posing hub was sent something")
        let log = h.log.text
        XCTAssertTrue(log.contains("claims the hub role"), log)
        XCTAssertFalse(log.contains(Hex.encode(posingKey.userID)) || log.contains(Hex.encode(posingKey.signingKey)), "a full key in the log")
    }
}
