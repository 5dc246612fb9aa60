import Foundation
import Logging
import XCTest
import YaokCrypto
import YaokRelayServer
import enum YaokPluginKit.Hex

/// Shared by the cluster, failover and cluster end-to-end tests: a PostgreSQL-backed relay
/// cluster of real `yaok-relay` processes, a real `yaok-hub` with a relay plugin on several
/// nodes, and `yaok` users who all know each other.

/// PostgreSQL, one relay identity, and `count` nodes (`yaok-relay run --store postgres://…`);
/// two stores migrate the empty database at the same moment first (the advisory lock must make
/// that safe). Stopping the nodes and the server is appended to `cleanup`.
func startRelayCluster(_ count: Int = 2, extra: [String] = [], cleanup: inout [() -> Void],
                       file: StaticString = #filePath, line: UInt = #line) throws -> (pg: PostgresTestServer, nodes: [RelayProcess]) {
    let pg = try PostgresTestServer()
    cleanup.append { pg.tearDown() }
    let root = try makeTemporaryDirectory("yaok-relay-cluster-", cleanup: &cleanup)
    let first = root + "/node0"
    let made = try runTool(RelayProcess.binary, ["key", "--data-dir", first])
    XCTAssertEqual(made.0, 0, made.1, file: file, line: line)
    for i in 1..<count {
        let d = root + "/node\(i)"
        try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.copyItem(atPath: first + "/relay.identity", toPath: d + "/relay.identity")
        XCTAssertEqual(chmod(d + "/relay.identity", 0o600), 0, file: file, line: line)
    }
    // Two stores migrating at the same moment (threads, not processes: Foundation's Process
    // notices a child's exit through a socket that a child spawned concurrently can inherit).
    let lock = NSLock()
    nonisolated(unsafe) var migrated: [Result<Int, Error>] = []
    let pgConfig = try RelayPostgresConfiguration(url: pg.url, environment: [:])
    DispatchQueue.concurrentPerform(iterations: 2) { _ in
        let r = Result { () throws -> Int in
            let store = try RelayPostgresStore(configuration: pgConfig, logger: Logger(label: "test"))
            defer { store.close() }
            return try store.appliedSchemaVersion()
        }
        lock.withLock { migrated.append(r) }
    }
    for r in migrated { XCTAssertEqual(try r.get(), RelayPostgresStore.schemaVersion, file: file, line: line) }
    var nodes: [RelayProcess] = []
    // One after the other: Foundation's Process can miss the exit of a child started concurrently.
    for i in 0..<count {
        let n = try RelayProcess(dataDir: root + "/node\(i)", extra: ["--store", pg.url] + extra)
        cleanup.append { n.stop() }
        nodes.append(n)
    }
    for n in nodes.dropFirst() { XCTAssertEqual(n.key, nodes[0].key, "the nodes must sign as one relay", file: file, line: line) }
    XCTAssertEqual(try pg.sql("SELECT max(version) FROM relay_schema_version"), "\(RelayPostgresStore.schemaVersion)", file: file, line: line)
    XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_schema_version"), "1", "each version applied once", file: file, line: line)
    return (pg, nodes)
}

/// `yaok init` for each name under `dir`, everyone a contact of everyone; their homes, in order.
func initUsers(_ yaok: String, _ names: [String], in dir: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String] {
    let homes = names.map { dir + "/" + $0.lowercased() }
    var codes: [String] = []
    for (name, home) in zip(names, homes) {
        XCTAssertEqual(try runTool(yaok, ["init", "--home", home, "--name", name]).0, 0, file: file, line: line)
        codes.append(try runTool(yaok, ["qr", "--home", home]).1.trimmingCharacters(in: .whitespacesAndNewlines))
    }
    for (i, home) in homes.enumerated() {
        for (j, code) in codes.enumerated() where j != i {
            XCTAssertEqual(try runTool(yaok, ["contacts", "add", "--home", home, code]).0, 0, file: file, line: line)
        }
    }
    return homes
}

/// A real `yaok-hub run` with the UDP transport on a free loopback port and the relay plugin,
/// output to `dir/hub.log`. Its relay section is `relay` (the YAML lines that name the relay:
/// `address:` with its pins, or an `addresses:` list); `relayAddresses:` makes the list.
final class HubProcess {
    static var binary: String { RelayProcess.productsDirectory + "/yaok-hub" }
    let dir: String
    let udpPort: UInt16
    private let process = Process()

    /// A hub on the nodes of one relay (`addresses:`), moving to another after `failoverAfterS`.
    convenience init(dir: String, relayAddresses: [String], relayKey: [UInt8], custodyTimeoutS: Int = 5, failoverAfterS: Int = 3) throws {
        try self.init(dir: dir, relay: "addresses:\n" + relayAddresses.map { "  - " + $0 }.joined(separator: "\n")
                        + "\nfailover_after_s: \(failoverAfterS)",
                      relayKey: relayKey, custodyTimeoutS: custodyTimeoutS)
    }

    /// - Parameter relay: lines of the relay transport's section naming the relay, without
    ///   indentation (e.g. `address: wss://…` and `tls_spki_sha256: …`).
    init(dir: String, relay: String, relayKey: [UInt8], custodyTimeoutS: Int = 5, name: String = "relay-test") throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else { throw XCTSkip("\(Self.binary) is not built") }
        self.dir = dir
        let plugins = dir + "/plugins"
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
        for lib in ["libyaok-plugin-udp.so", "libyaok-plugin-relay.so"] {
            let built = RelayProcess.productsDirectory + "/" + lib
            guard FileManager.default.fileExists(atPath: built) else { throw XCTSkip("\(lib) is not built") }
            try FileManager.default.copyItem(atPath: built, toPath: plugins + "/" + lib)
        }
        let udp = try UDPSink()   // a free port: taken, then given to the hub
        udpPort = udp.port
        udp.close()
        let config = """
        hub:
          name: \(name)
          data_dir: \(dir)/data
          control_socket: \(dir)/control.sock
          plugin_dirs: ["\(plugins)"]
          log_level: info
        router:
          custody_timeout_s: \(custodyTimeoutS)
        transports:
          udp:
            enabled: true
            listen: 127.0.0.1:\(udpPort)
          relay:
            enabled: true
        \(relay.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            relay_key: \(Hex.encode(relayKey))
            poll_interval_s: 1

        """
        try config.write(toFile: dir + "/hub.yaml", atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["run", "--config", dir + "/hub.yaml"]
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "NOTIFY_SOCKET")
        process.environment = env
        _ = FileManager.default.createFile(atPath: dir + "/hub.log", contents: nil)
        let logFile = try XCTUnwrap(FileHandle(forWritingAtPath: dir + "/hub.log"))
        process.standardOutput = logFile
        process.standardError = logFile
        try process.run()
    }

    /// `udp://` address for `yaok --hub`.
    var url: String { "udp://127.0.0.1:\(udpPort)" }

    func log() -> String { (try? String(contentsOfFile: dir + "/hub.log", encoding: .utf8)) ?? "" }

    /// `yaok-hub status` through the control socket: exit status and output.
    func status() throws -> (Int32, String) { try runTool(Self.binary, ["status", "--socket", dir + "/control.sock"]) }

    /// SIGTERM and wait (bounded: SIGKILL after 10 s).
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
    }
}
