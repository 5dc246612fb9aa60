import HubTestSupport
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting
import YaokTesting

/// Group commit in a real hub (Docs/performance.md, "Group commit"): every custody ack comes
/// only after the commit covering its bundle, so a SIGKILL right after the acks loses none.
/// RouterGroupCommitTests has the rest in memory (bursts share commits, an idle hub commits
/// nothing, the bundle moves on before its commit).
final class GroupCommitTests: XCTestCase {
    func counters(_ hub: HubProcess) throws -> Router.Counters { try hub.status().router.counters }

    func testEveryAckedBundleSurvivesASIGKILLRightAfterTheAcksAndBurstsShareCommits() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [try TestSupport.pluginDirectory(self)], udpPort: port)
            .replacingOccurrences(of: "custody_timeout_s: 5", with: "custody_timeout_s: 5\n  sender_envelopes_per_minute: 100000")
        // Every commit held 200 ms: an ack sent before its commit would be out long before it.
        var hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"),
                                 extraEnvironment: ["YAOK_TEST_COMMIT_DELAY_MS": "200"])
        addTeardownBlock { hub.stop() }
        try hub.waitReady()

        let alice = Identity.generate(), bob = Identity.generate()
        let phone = try RawPeer(identity: alice, role: .endpoint, hubPort: port)
        let n = 300
        let envelopes = try (0..<n).map { try seal("burst \($0)", from: alice, to: bob) }
        try phone.sendUntilAcknowledged(envelopes)
        // The moment the last ack is in: no clean shutdown, no chance to flush anything.
        hub.signal(SIGKILL)
        XCTAssertNotNil(hub.waitExit(timeout: 10))

        hub = try HubProcess(dir: dir, config: config, executable: try TestSupport.product("yaok-hub"))
        try hub.waitReady()
        let queue = try hub.status().router.queue
        XCTAssertEqual(queue.queued + queue.inFlight, n, "every bundle the hub acknowledged was durable before its ack left")
        XCTAssertEqual(Set(phone.frames(.custodyAck).map { Array($0.value.prefix(16)) }), Set(envelopes.map(\.bundleID)))
    }
}
