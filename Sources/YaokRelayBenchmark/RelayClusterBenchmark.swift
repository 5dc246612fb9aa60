import Foundation
import Logging
import YaokCrypto
import YaokRelayServer

/// Measures a two-node relay cluster on loopback: two `yaok-relay run --store postgres://…`
/// processes on one PostgreSQL database, signing with one key, and the clients of
/// ``RelayBenchmark`` with their sessions alternating between the nodes (so about half of all
/// messages cross nodes). Used by `yaok-relay bench --cluster postgres://…`; prints figures,
/// asserts none.
///
/// Needs a scratch database with nothing queued (it refuses otherwise); it leaves no queued
/// messages behind (used nonces and hourly counters expire by themselves).
public enum RelayClusterBenchmark {
    /// Runs the phases of ``RelayBenchmark`` on two nodes.
    ///
    /// - Parameters:
    ///   - relay: the `yaok-relay` executable the nodes run as.
    ///   - store: the `postgres://` URL (no password in it).
    ///   - passwordFile: a 0600 file with the database password, handed to the nodes as
    ///     `--store-password-file` (never on their command line); nil for none, or for the
    ///     systemd credential both this process and the nodes read.
    public static func run(relay: String, store: String, passwordFile: String? = nil, clients: Int = 200, sessions: Int? = nil,
                           messagesPerClient: Int = 10, offlineMessages: Int = 2_000, latencySamples: Int = 200) throws -> RelayBenchmark.Report {
        var logger = Logger(label: "yaok-relay-bench")
        logger.logLevel = .error
        let observer = try RelayPostgresStore(configuration: RelayPostgresConfiguration(url: store, passwordFile: passwordFile), logger: logger)
        defer { observer.close() }
        let already = try observer.countsByRecipient().values.reduce(0, +)
        guard already == 0 else {
            throw RelayBenchmark.Failure.incomplete("the database holds \(already) queued messages: run the benchmark on a scratch database")
        }
        let dir = try RelayBenchmark.temporaryDirectory("yaok-relay-cluster-bench-")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // The one relay key, given to both nodes (a cluster node never makes its own).
        for k in 0..<2 {
            try FileManager.default.createDirectory(atPath: dir + "/node\(k)", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        _ = try IdentityFile.loadOrCreate(path: dir + "/node0/relay.identity")
        try FileManager.default.copyItem(atPath: dir + "/node0/relay.identity", toPath: dir + "/node1/relay.identity")
        guard chmod(dir + "/node1/relay.identity", 0o600) == 0 else { throw RelayBenchmark.Failure.incomplete("chmod of the copied relay key failed") }

        var arguments = RelayBenchmark.unthrottledNodeArguments(users: clients) + ["--store", store]
        if let passwordFile { arguments += ["--store-password-file", passwordFile] }
        var nodes: [RelayNodeProcess] = []
        defer { for n in nodes { n.stop() } }
        // One after the other: Foundation's Process can miss the exit of a child started concurrently.
        for k in 0..<2 {
            nodes.append(try RelayNodeProcess(executable: relay, dataDir: dir + "/node\(k)", arguments: arguments))
        }
        var report = try RelayBenchmark.drive(nodes, clients: clients, sessions: sessions, messagesPerClient: messagesPerClient,
                                              offlineMessages: offlineMessages, latencySamples: latencySamples)
        report.store = "postgres"
        return report
    }
}
