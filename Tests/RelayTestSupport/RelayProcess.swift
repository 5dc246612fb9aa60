import Foundation
import XCTest
import YaokCrypto
import YaokRelayServer
import YaokTesting

/// `yaok-relay run` as a real process (``RelayNodeProcess``): skipped when the binary is not
/// built next to the tests, and a relay that ignores SIGTERM fails the test.
public final class RelayProcess {
    public let node: RelayNodeProcess
    public var process: Process { node.process }
    public var dataDir: String { node.dataDir }
    public var port: Int { node.port }
    public var metricsPort: Int { node.metricsPort }
    public var key: [UInt8] { node.key }
    /// The WebSocket/TLS port and the certificate's SPKI pin, when started with `--wss-listen`.
    public var wssPort: Int { node.wssPort }
    public var tlsPin: [UInt8] { node.tlsPin }

    /// The build products directory (test bundle, yaok-relay, plugin libraries).
    public static let productsDirectory = BuildProducts.directory(containing: "yaok-relay")
    public static var binary: String { productsDirectory + "/yaok-relay" }

    public init(dataDir: String, listen: String = "127.0.0.1:0", extra: [String] = []) throws {
        guard FileManager.default.fileExists(atPath: Self.binary) else { throw XCTSkip("yaok-relay is not built next to the tests") }
        node = try RelayNodeProcess(executable: Self.binary, dataDir: dataDir, listen: listen, arguments: extra, startTimeout: 20)
    }

    /// SIGTERM and wait (bounded: SIGKILL after 10 s, so a stuck relay fails the test
    /// instead of hanging the suite).
    public func stop() {
        if !node.stop() { XCTFail("yaok-relay did not stop within 10 s of SIGTERM") }
    }

    /// SIGKILL, as a crashed machine would leave it (no goodbye, no flush).
    public func kill9() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// `GET /metrics`: the Prometheus text.
    public func metrics() -> String { node.metricsText() }

    /// The value of one metric line (exact name with labels), or nil.
    public func metric(_ name: String) -> Double? { node.metric(name) }

    /// Two nodes of one relay and a third relay with another key (hostile), for failover:
    /// node 2's data directory gets node 1's `relay.identity`, but each node has its own
    /// SQLCipher store, so what node 1 queued is not visible on node 2 (any re-send of it there
    /// is countable). Stopping them and removing their directory are appended to `cleanup`.
    public static func failoverNodes(extra: [String] = [], cleanup: inout [() -> Void]) throws
        -> (node1: RelayProcess, node2: RelayProcess, hostile: RelayProcess) {
        let dir = try makeTemporaryDirectory("yaok-relay-failover-", cleanup: &cleanup)
        let node1 = try RelayProcess(dataDir: dir + "/node1", extra: extra)
        cleanup.append { node1.stop() }
        try FileManager.default.createDirectory(atPath: dir + "/node2", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.copyItem(atPath: dir + "/node1/relay.identity", toPath: dir + "/node2/relay.identity")
        let node2 = try RelayProcess(dataDir: dir + "/node2", extra: extra)
        cleanup.append { node2.stop() }
        let hostile = try RelayProcess(dataDir: dir + "/hostile")
        cleanup.append { hostile.stop() }
        XCTAssertEqual(node2.key, node1.key, "node 2 runs with node 1's key")
        XCTAssertNotEqual(hostile.key, node1.key)
        return (node1, node2, hostile)
    }
}
