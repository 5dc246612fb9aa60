import Foundation
import XCTest
import YaokCrypto
import enum YaokPluginKit.Hex
import RelayTestSupport

/// A throw-away PostgreSQL server for the relay cluster tests: `initdb` in a temporary
/// directory, `pg_ctl start` listening on a UNIX socket only (no TCP), database `yaok_relay`,
/// trust authentication for the local user `yaok`. Run as the `postgres` system user when the
/// tests run as root (initdb refuses root). Every wait is bounded (`pg_ctl -w -t 30`).
///
/// PostgreSQL missing: the test is skipped on a developer machine, but fails when `YAOK_CI`
/// or `CI` is set (.ci/run installs postgresql-15 and sets YAOK_CI=1).
final class PostgresTestServer {
    let dir: String
    var dataDir: String { dir + "/data" }
    let bin: String
    private let asPostgres: Bool
    private(set) var running = false

    /// `postgres://` URL of the test database (UNIX socket in `dir`).
    var url: String { "postgres://yaok@/yaok_relay?host=\(dir)" }

    /// The first `/usr/lib/postgresql/<version>/bin` holding initdb, newest first.
    static func findBinaries() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
        return versions.map { "\(root)/\($0)/bin" }.first { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") }
    }

    /// Whether a missing PostgreSQL must fail rather than skip.
    static var required: Bool {
        let env = ProcessInfo.processInfo.environment
        return !(env["YAOK_CI"] ?? "").isEmpty || !(env["CI"] ?? "").isEmpty
    }

    init(file: StaticString = #filePath, line: UInt = #line) throws {
        guard let bin = Self.findBinaries() else {
            if Self.required {
                XCTFail("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb); .ci/run installs postgresql-15", file: file, line: line)
                throw NSError(domain: "PostgresTestServer", code: 1, userInfo: [NSLocalizedDescriptionKey: "PostgreSQL missing"])
            }
            throw XCTSkip("PostgreSQL is not installed (apt-get install postgresql-15); set YAOK_CI=1 to make this a failure")
        }
        self.bin = bin
        asPostgres = geteuid() == 0
        // Short path: a UNIX socket path must fit in 107 bytes.
        dir = "/tmp/yaok-pg-" + Hex.encode(Random.bytes(5))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        if asPostgres {
            let (rc, out) = try runTool("/bin/chown", ["postgres:postgres", dir], timeout: 10)
            guard rc == 0 else { throw failure("chown \(dir) to postgres failed: \(out)") }
        }
        try pg("initdb", ["-D", dataDir, "-U", "yaok", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"], timeout: 60)
        // Sockets only; fsync off (the tests kill relays, not the database; it keeps them fast).
        let conf = """

            listen_addresses = ''
            unix_socket_directories = '\(dir)'
            fsync = off
            full_page_writes = off
            max_connections = 50
            """
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: dataDir + "/postgresql.conf"))
        h.seekToEndOfFile()
        h.write(Data(conf.utf8))
        try h.close()
        try start()
        try pg("createdb", ["-h", dir, "-U", "yaok", "yaok_relay"], timeout: 30)
    }

    private func failure(_ text: String) -> NSError {
        NSError(domain: "PostgresTestServer", code: 2, userInfo: [NSLocalizedDescriptionKey: text])
    }

    /// Runs a PostgreSQL program (as `postgres` when we are root); throws with its output on failure.
    @discardableResult
    func pg(_ program: String, _ args: [String], timeout: TimeInterval = 40) throws -> String {
        let exe = bin + "/" + program
        let command = asPostgres ? ["/usr/sbin/runuser", "-u", "postgres", "--", exe] + args : [exe] + args
        // Through a shell that closes every descriptor above 2 first: the server pg_ctl leaves
        // running must not inherit this process's descriptors (Foundation's Process then
        // never reports pg_ctl's exit). It also starts from `/`: as `postgres`, the checkout
        // may be a directory it cannot enter (a `mktemp -d` clone is mode 0700), and PostgreSQL
        // programs refuse to run from a working directory they cannot open.
        let script = #"cd / || exit 1; for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 2 ] 2>/dev/null && eval "exec $n>&-"; done; exec "$@""#
        let (rc, out) = try runTool("/bin/bash", ["-c", script, "bash"] + command, timeout: timeout)
        guard rc == 0 else { throw failure("\(program) \(args.joined(separator: " ")) exited \(rc): \(out)") }
        return out
    }

    func start() throws {
        try pg("pg_ctl", ["-D", dataDir, "-l", dir + "/server.log", "-w", "-t", "30", "start"])
        running = true
    }

    func stop() throws {
        guard running else { return }
        try pg("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "-t", "30", "stop"])
        running = false
    }

    /// Stops and removes the directory.
    func tearDown() {
        if running {
            if (try? stop()) == nil {
                // A stuck server: immediate mode, still bounded.
                _ = try? pg("pg_ctl", ["-D", dataDir, "-m", "immediate", "-w", "-t", "30", "stop"])
            }
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// One SQL statement through psql; its unaligned, tuples-only output.
    func sql(_ statement: String) throws -> String {
        try pg("psql", ["-h", dir, "-U", "yaok", "-d", "yaok_relay", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", statement])
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
