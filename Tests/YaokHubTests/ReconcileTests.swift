import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokReconcile
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// Set reconciliation (Docs/protocol.md, reconcile 0x0A) with two real hubs over UDP: it finds
/// what each lacks without listing the IDs both hold and again after a kill -9; a stranger's
/// hostile records cost bounded work. Older hubs (version 1 only, or none) and live traffic
/// during an exchange are tested in memory (RouterReconcileTests).
final class ReconcileTests: XCTestCase {
    static let shared = 400, unique = 10

    struct Pair {
        var a: HubProcess, b: HubProcess
        let dirA: String, dirB: String, configA: String, configB: String
        let exe: String
    }

    /// Two hubs that trust each other, each loaded while apart with the same `shared` bundles
    /// and `unique` of its own (sent by a phone, as a real hub gets them), then started together.
    func startPair() throws -> Pair {
        let exe = try TestSupport.product("yaok-hub")
        let hubs = try TrustedHubPair(self, router: "\n  sender_envelopes_per_minute: 100000")
        let (portA, portB, configA, configB) = (hubs.portA, hubs.portB, hubs.configA, hubs.configB)
        let alice = Identity.generate(), bob = Identity.generate()
        let both = try (0..<Self.shared).map { try seal("shared \($0)", from: alice, to: bob) }
        let onlyA = try (0..<Self.unique).map { try seal("only at A \($0)", from: alice, to: bob) }
        let onlyB = try (0..<Self.unique).map { try seal("only at B \($0)", from: alice, to: bob) }
        for (dir, config, port, envelopes) in [(hubs.dirA, hubs.configAApart, portA, both + onlyA), (hubs.dirB, configB, portB, both + onlyB)] {
            let hub = try HubProcess(dir: dir, config: config, executable: exe)
            try hub.waitReady()
            let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
            // In bursts below the link's frame backlog (256), as a phone's window would.
            for start in stride(from: 0, to: envelopes.count, by: 100) {
                let burst = envelopes[start..<min(envelopes.count, start + 100)]
                for e in burst { try phone.send(e) }
                for e in burst { XCTAssertNil(RawPeer.refusal(try phone.answer(for: e.bundleID, timeout: 30))) }
            }
            hub.stop()
        }
        let hubB = try HubProcess(dir: hubs.dirB, config: configB, executable: exe)
        addTeardownBlock { hubB.stop() }
        try hubB.waitReady()
        let hubA = try HubProcess(dir: hubs.dirA, config: configA, executable: exe)
        addTeardownBlock { hubA.stop() }
        try hubA.waitReady()
        return Pair(a: hubA, b: hubB, dirA: hubs.dirA, dirB: hubs.dirB, configA: configA, configB: configB, exe: exe)
    }

    func counters(_ hub: HubProcess) throws -> Router.Counters { try hub.status().router.counters }

    func testTwoHubsFindTheirDifferenceWithoutListingAndCarryOnlyIt() throws {
        var pair = try startPair()
        do {
            try Wait.until(timeout: 60, "each hub took the other's \(Self.unique) bundles") {
                try counters(pair.a).accepted == Self.unique && counters(pair.b).accepted == Self.unique
            }
        } catch {
            print("A's log:\n\(pair.a.log.suffix(4000))\nB's log:\n\(pair.b.log.suffix(4000))")
            throw error
        }
        let a = try counters(pair.a), b = try counters(pair.b)
        assertReconciledOnlyTheDifference(a, b, unique: Self.unique)
        print("reconciliation, \(Self.shared) shared + \(Self.unique) each: \(a.reconcileBytesOut + b.reconcileBytesOut) bytes of reconcile records (listing both ways: \((Self.shared + Self.unique) * 16 * 2))")

        // kill -9 of A and a restart: they reconcile again and nothing is offered either way.
        let offeredByB = b.idsOffered, acceptedAtB = b.accepted
        pair.a.signal(SIGKILL)
        XCTAssertNotNil(pair.a.waitExit(timeout: 10))
        pair.a = try HubProcess(dir: pair.dirA, config: pair.configA, executable: pair.exe)
        let restarted = pair.a
        addTeardownBlock { restarted.stop() }
        try pair.a.waitReady()
        do {
            try Wait.until(timeout: 30, "A and B reconciled again") {
                try counters(pair.a).reconciled >= 1 && counters(pair.b).reconciled >= 2
            }
        } catch {
            print("A: \(try counters(pair.a))\nB: \(try counters(pair.b))\nB's log:\n\(pair.b.log.suffix(3000))")
            throw error
        }
        // Any offer would follow the exchange at once; give it a moment to show.
        Thread.sleep(forTimeInterval: 1.5)
        let a2 = try counters(pair.a), b2 = try counters(pair.b)
        XCTAssertEqual(a2.idsOffered, 0, "A offers B nothing after the restart")
        XCTAssertEqual(b2.idsOffered, offeredByB, "B offers A nothing new")
        XCTAssertEqual(a2.accepted, 0)
        XCTAssertEqual(b2.accepted, acceptedAtB)
        XCTAssertEqual(a2.reconcileDifferences + b2.reconcileDifferences - b.reconcileDifferences, 0, "the sets are equal now")
    }

    /// A stranger posing as a hub (open trust, so it may exchange) sends hostile `reconcile`
    /// records: random bytes, truncations of a real estimate, parts of tables nobody asked
    /// for, then a real estimate (answered with a table) and at once another (answered busy).
    /// The hub never crashes, answers within its bounds, and still serves a phone.
    func testHostileReconcileRecordsCostBoundedWorkAndCrashNothing() throws {
        let setup = try startUDPHub(router: "\n  hub_trust: open")
        let stranger = try RawPeer(identity: Identity.generate(), role: .hub, hubPort: setup.port)
        var rng = SystemRandomNumberGenerator()
        let ids = (0..<500).map { _ in (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) } }
        let estimate = ReconcileInitiator(ids: ids).firstMessage.encoded
        for _ in 0..<200 {
            let n = Int.random(in: 0...200, using: &rng)
            var junk = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if n >= 2, Bool.random(using: &rng) { junk[0] = 1; junk[1] = UInt8.random(in: 0...6, using: &rng) }
            try stranger.send(TLVRecord(.reconcile, value: junk))
        }
        for cut in stride(from: 0, to: estimate.count, by: 997) {
            try stranger.send(TLVRecord(.reconcile, value: Array(estimate.prefix(cut))))
        }
        try setup.hub.waitReady()
        // A real estimate is answered with table parts (after the 1 s spacing since any
        // truncated estimate that was answered); a second one right after is answered busy.
        Thread.sleep(forTimeInterval: 1.2)
        let before = stranger.frames(.reconcile).count
        try stranger.send(TLVRecord(.reconcile, value: estimate))
        try Wait.until(timeout: 10, "a table answers the estimate") {
            stranger.frames(.reconcile).dropFirst(before).contains { (try? ReconcileMessage(parsing: $0.value)).map { if case .table = $0 { return true }; return false } ?? false }
        }
        let second = ReconcileInitiator(ids: ids).firstMessage.encoded
        try stranger.send(TLVRecord(.reconcile, value: second))
        try Wait.until(timeout: 10, "the second estimate is answered busy") {
            stranger.frames(.reconcile).contains { (try? ReconcileMessage(parsing: $0.value)).map { if case .abort(let a) = $0 { return a.reason == .busy }; return false } ?? false }
        }
        let c = try counters(setup.hub)
        XCTAssertGreaterThanOrEqual(c.reconcileRefused, 1)
        XCTAssertEqual(c.reconciled, 0, "nothing a stranger sent completed an exchange")
        // Still serving: a phone's message is taken.
        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: setup.port)
        let envelope = try seal("still here", from: alice, to: bob)
        try phone.send(envelope)
        XCTAssertNil(RawPeer.refusal(try phone.answer(for: envelope.bundleID)))
    }
}
