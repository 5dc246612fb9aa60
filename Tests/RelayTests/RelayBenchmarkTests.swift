import Foundation
import XCTest
import YaokRelayBenchmark
import YaokRelayServer
import RelayTestSupport

/// Relay throughput figures. Skipped unless `YAOK_BENCH=1`; prints, never asserts speed.
/// `YAOK_BENCH_CLIENTS` (default 200) and `YAOK_BENCH_MESSAGES` (per client, default 10).
/// For release-build figures: `swift build -c release --product yaok-relay && yaok-relay bench`.
/// The relay node is the built `yaok-relay` next to the tests.
final class RelayBenchmarkTests: XCTestCase {
    func testForwardingAndQueueRates() throws {
        let env = ProcessInfo.processInfo.environment
        guard env["YAOK_BENCH"] == "1" else { throw XCTSkip("set YAOK_BENCH=1 to run the relay benchmark") }
        let report = try RelayBenchmark.run(relay: RelayProcess.binary, clients: Int(env["YAOK_BENCH_CLIENTS"] ?? "") ?? 200,
                                            messagesPerClient: Int(env["YAOK_BENCH_MESSAGES"] ?? "") ?? 10)
        print(report)
        XCTAssertEqual(report.drained, report.queued, "every queued message was delivered and acknowledged")
    }
}
