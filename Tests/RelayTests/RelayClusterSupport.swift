import Foundation
import Logging
import XCTest
import YaokCrypto
import YaokRelayServer
import enum YaokPluginKit.Hex
import RelayTestSupport

/// For the cluster and cluster end-to-end tests: a PostgreSQL-backed relay cluster of real
/// `yaok-relay` processes, and `yaok` users who all know each other (the hub with its relay
/// plugin on several nodes is RelayTestSupport's ``HubProcess``).

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
    XCTAssertEqual(try pg.sql("SELECT count(*) FROM relay_schema_version"), "\(RelayPostgresStore.schemaVersion)", "each version applied once", file: file, line: line)
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

