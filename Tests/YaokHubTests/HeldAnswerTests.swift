import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// "No endless re-offers", with two real hubs that trust each other: each holds the same
/// bundle without knowing the other does (as after a kill -9 between storing a copy and
/// recording the hand-over). Without `held`, each would offer it to the other about once a
/// second, forever, and the other would ignore it silently. Each says it holds it, the other
/// records that, and the offers stop, across a kill -9 and restart too.
///
/// Both hubs run as older hubs without set reconciliation (`YAOK_TEST_NO_RECONCILE`), which list
/// offers: that is where `held` matters (with such a neighbour, and on links too small for a
/// reconcile record). Between two hubs that reconcile, ReconcileTests shows nothing is offered;
/// RouterHeldTests has the same rules in memory.
final class HeldAnswerTests: XCTestCase {
    let listing = ["YAOK_TEST_NO_RECONCILE": "1"]

    func testANeighbourThatHoldsABundleSaysSoAndTheOffersStopAcrossAKill9() throws {
        let exe = try TestSupport.product("yaok-hub")
        let hubs = try TrustedHubPair(self)
        let (portA, portB, configA, configB) = (hubs.portA, hubs.portB, hubs.configA, hubs.configB)

        // The same bundle reaches each hub on its own, while they are apart.
        let alice = Identity.generate(), bob = Identity.generate()
        let envelope = try seal("held twice", from: alice, to: bob)
        for (dir, config, port) in [(hubs.dirB, configB, portB), (hubs.dirA, hubs.configAApart, portA)] {
            let hub = try HubProcess(dir: dir, config: config, executable: exe)
            try hub.waitReady()
            let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
            try phone.send(envelope)
            XCTAssertNil(RawPeer.refusal(try phone.answer(for: envelope.bundleID)))
            hub.stop()
        }

        // Together: each offers it, each answers `held`.
        let hubB = try HubProcess(dir: hubs.dirB, config: configB, executable: exe, extraEnvironment: listing)
        addTeardownBlock { hubB.stop() }
        try hubB.waitReady()
        var hubA = try HubProcess(dir: hubs.dirA, config: configA, executable: exe, extraEnvironment: listing)
        addTeardownBlock { hubA.stop() }
        try hubA.waitReady()
        func counters(_ hub: HubProcess) throws -> Router.Counters { try hub.status().router.counters }
        try Wait.until(timeout: 30, "each told the other it holds the bundle") {
            try counters(hubA).heldReceived >= 1 && counters(hubB).heldReceived >= 1
        }
        XCTAssertGreaterThanOrEqual(try counters(hubA).heldSent, 1)
        // Each took the other's `held` as its custody (else, after kill -9s, trusting hubs keep
        // such bundles queued, with nowhere left to send them): both still carry it, handed
        // over, and neither counts it as work.
        for hub in [hubA, hubB] {
            try Wait.until(timeout: 10, "the bundle handed over") { try hub.status().router.queue.handedOver == 1 }
            let queue = try hub.status().router.queue
            XCTAssertEqual(queue.queued + queue.inFlight, 0, "nothing left queued")
        }

        // Offers stop. A re-offer would come at the latest when the custody timeout (5 s) lets
        // the same ID go to the same link again; absence is waited out over 7 s.
        let offersAtB = try counters(hubB).offersReceived, offersAtA = try counters(hubA).offersReceived
        Thread.sleep(forTimeInterval: 7)
        XCTAssertEqual(try counters(hubB).offersReceived, offersAtB, "A offers B nothing more")
        XCTAssertEqual(try counters(hubA).offersReceived, offersAtA, "B offers A nothing more")

        // kill -9 of A: what it learned is in its store, so after the restart it offers B nothing.
        hubA.signal(SIGKILL)
        XCTAssertNotNil(hubA.waitExit(timeout: 10))
        hubA = try HubProcess(dir: hubs.dirA, config: configA, executable: exe, extraEnvironment: listing)
        try hubA.waitReady()
        try Wait.until(timeout: 20, "A and B linked again") {
            try hubA.status().router.links.contains { $0.role == "hub" && $0.trust == "listed" }
        }
        let offersAfterRestart = try counters(hubB).offersReceived
        Thread.sleep(forTimeInterval: 3)
        XCTAssertEqual(try counters(hubB).offersReceived, offersAfterRestart, "after kill -9 and restart, A still knows B holds it")
        XCTAssertEqual(try counters(hubA).heldReceived, 0, "nothing needed saying again")
        XCTAssertEqual(try hubA.status().router.queue.handedOver, 1, "still carried after the kill, and not queued")
    }
}
