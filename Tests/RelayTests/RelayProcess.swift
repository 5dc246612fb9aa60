import Foundation
import XCTest
import YaokCrypto
import YaokRelayServer
import YaokTesting

/// `yaok-relay run` as a real process (``RelayNodeProcess``): skipped when the binary is not
/// built next to the tests, and a relay that ignores SIGTERM fails the test.
final class RelayProcess {
    let node: RelayNodeProcess
    var process: Process { node.process }
    var dataDir: String { node.dataDir }
    var port: Int { node.port }
    var metricsPort: Int { node.metricsPort }
    var key: [UInt8] { node.key }
    /// The WebSocket/TLS port and the certificate's SPKI pin, when started with `--wss-listen`.
    var wssPort: Int { node.wssPort }
    var tlsPin: [UInt8] { node.tlsPin }

    /// The build products directory (test bundle, yaok-relay, plugin libraries).
    static let productsDirectory = BuildProducts.directory(containing: "yaok-relay")
    static var binary: String { productsDirectory + "/yaok-relay" }

    init(dataDir: String, listen: String = "127.0.0.1:0", extra: [String] = []) throws {
        guard FileManager.default.fileExists(atPath: Self.binary) else { throw XCTSkip("yaok-relay is not built next to the tests") }
        node = try RelayNodeProcess(executable: Self.binary, dataDir: dataDir, listen: listen, arguments: extra, startTimeout: 20)
    }

    /// SIGTERM and wait (bounded: SIGKILL after 10 s, so a stuck relay fails the test
    /// instead of hanging the suite).
    func stop() {
        if !node.stop() { XCTFail("yaok-relay did not stop within 10 s of SIGTERM") }
    }

    /// `GET /metrics`: the Prometheus text.
    func metrics() -> String { node.metricsText() }

    /// The value of one metric line (exact name with labels), or nil.
    func metric(_ name: String) -> Double? { node.metric(name) }
}
