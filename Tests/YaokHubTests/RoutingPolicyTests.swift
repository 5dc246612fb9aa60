import XCTest
import YaokPluginKit
@testable import YaokStore
@testable import YaokHubCore
@testable import YaokRouting

/// The routing policies behind the router's seam.
final class RoutingPolicyTests: XCTestCase {
    func bundle(hopCount: Int) -> StoredBundle {
        StoredBundle(record: BundleRecord(bundleID: [UInt8](repeating: 1, count: 16), destination: [UInt8](repeating: 9, count: 32), kind: 1,
                                          sourceUserID: [UInt8](repeating: 2, count: 32),
                                          hopCount: hopCount, hopLimit: 10, previousHop: nil, createdMs: 0, expiresMs: 1, receivedFrom: nil),
                     bytes: .notRead, state: .queued, attempts: 0, nextAttemptMs: 0, acceptedMs: 0, size: 0)
    }

    func hub(_ n: UInt64, cost: Int = 10, holds: Bool = false, attached: Bool = false, role: PeerRole = .hub) -> NeighbourCandidate {
        NeighbourCandidate(key: LinkKey(transport: "mesh", link: n), role: role, peerID: [UInt8](repeating: UInt8(n), count: 32),
                           cost: cost, holdsBundle: holds, isRecipientAttachment: attached)
    }

    func testEpidemicOffersEveryNeighbourThatLacksItRecipientsHubFirst() {
        let hops = EpidemicPolicy().nextHops(for: bundle(hopCount: 3),
                                             candidates: [hub(1, cost: 5), hub(2, holds: true), hub(3, cost: 50, attached: true), hub(4, cost: 1)],
                                             copiesHandedOut: 0)
        XCTAssertEqual(hops.map(\.link), [3, 4, 1])
    }

    func testSprayAndWaitSpraysOnlyAtTheSourceAndWithinItsBudget() {
        let policy = SprayAndWaitPolicy(copies: 3)
        let candidates = [hub(1, cost: 30), hub(2, cost: 10), hub(3, cost: 20), hub(4, role: .relay)]
        // At the source hub: copies - 1 = 2 cheapest hubs, plus the relay.
        XCTAssertEqual(Set(policy.nextHops(for: bundle(hopCount: 0), candidates: candidates, copiesHandedOut: 0).map(\.link)), [2, 3, 4])
        // One copy already handed out: one more.
        XCTAssertEqual(Set(policy.nextHops(for: bundle(hopCount: 0), candidates: candidates, copiesHandedOut: 1).map(\.link)), [2, 4])
        // Elsewhere (wait phase): only the relay, or the recipient's own hub.
        XCTAssertEqual(policy.nextHops(for: bundle(hopCount: 2), candidates: candidates, copiesHandedOut: 0).map(\.link), [4])
        let withAttachment = candidates + [hub(5, cost: 99, attached: true)]
        XCTAssertEqual(Set(policy.nextHops(for: bundle(hopCount: 2), candidates: withAttachment, copiesHandedOut: 0).map(\.link)), [4, 5])
    }
}
