import HubTestSupport
import Foundation
import XCTest
import YaokHubCore
import YaokStore
import YaokTesting

/// `yaok-hub store rewrite` and the data directory lock, with real `yaok-hub` and `yaok`
/// processes on real SQLCipher stores.
final class StoreRewriteCommandTests: XCTestCase {
    func rewrite(_ hub: HubProcess, pageSize: Int) throws -> TestSupport.RunResult {
        try TestSupport.run(try TestSupport.product("yaok-hub"),
                            ["store", "rewrite", "--config", hub.configPath, "--page-size", String(pageSize)], timeout: 120)
    }

    func testARunningHubBlocksRewritesAndSecondHubsAndAKilledHubsQueueSurvivesTwoRewrites() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port)
        var hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        try hub.waitReady()
        let (alice, bob) = try MessagePathTests.initPair(try TestSupport.temporaryDirectory(self))
        let url = "udp://127.0.0.1:\(port)"
        _ = try MessagePathTests.yaok(alice, ["send", "Bob", "kept {n}", "--repeat", "30", "--hub", url, "--json", "--timeout", "30"])
        XCTAssertEqual(try hub.status().router.queue.queued, 30)

        // While the hub runs: the rewrite is refused, and so is a second hub on its directory.
        let refused = try rewrite(hub, pageSize: 4096)
        XCTAssertEqual(refused.status, 1, refused.output)
        XCTAssertTrue(refused.output.contains("hub.lock is held by another process"), refused.output)
        let secondDir = try TestSupport.temporaryDirectory(self)
        let second = try HubProcess(dir: secondDir, config: HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: nil)
            .replacingOccurrences(of: "control_socket: \(dir)/control.sock", with: "control_socket: \(secondDir)/control.sock"),
                                    executable: hubExe)
        XCTAssertEqual(second.waitExit(timeout: 30), 1, second.log)
        XCTAssertTrue(second.log.contains("a yaok-hub is already running on this data directory"), second.log)
        XCTAssertEqual(try hub.status().router.queue.queued, 30, "the first hub runs on")

        // A hub that died: its last commits are only in the WAL, which the rewrite must carry
        // over and must not leave beside the new file.
        hub.signal(SIGKILL)
        XCTAssertNotNil(hub.waitExit(timeout: 10))
        let store = dir + "/data/store.db"
        XCTAssertGreaterThan((try? FileManager.default.attributesOfItem(atPath: store + "-wal")[.size] as? Int) ?? 0, 0)
        // Run as root (CI), the rewrite must leave the file to its owner, not to root.
        let owner: uid_t = geteuid() == 0 ? 65534 : geteuid()
        if geteuid() == 0 { XCTAssertEqual(chown(store, owner, owner), 0) }
        let to4K = try rewrite(hub, pageSize: 4096)
        XCTAssertEqual(to4K.status, 0, to4K.output)
        XCTAssertTrue(to4K.output.contains("pages of 2048 -> 4096 bytes"), to4K.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store + "-wal"), "no WAL left beside the new file")
        var st = stat()
        XCTAssertEqual(stat(store, &st), 0)
        XCTAssertEqual(st.st_uid, owner, "the new file keeps the store's owner")
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        let to2K = try rewrite(hub, pageSize: 2048)
        XCTAssertEqual(to2K.status, 0, to2K.output)
        XCTAssertTrue(to2K.output.contains("pages of 4096 -> 2048 bytes"), to2K.output)

        hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()
        XCTAssertTrue(hub.log.contains("store \(store): pages of 2048 bytes"), hub.log)
        XCTAssertEqual(try hub.status().router.queue.queued, 30)
        let got = try MessagePathTests.yaok(bob, ["listen", "--hub", url, "--count", "30", "--json", "--timeout", "30"])
        let texts = Set(got.filter { $0["event"] as? String == "message" }.compactMap { $0["text"] as? String })
        XCTAssertEqual(texts, Set((1...30).map { "kept " + String(format: "%02d", $0) }))
    }

    /// SIGKILL a rewrite as it starts copying and as it starts replacing the file, twice each:
    /// every time one whole store is left (the old one or the new one, never a mix), and the
    /// hub removes a half-built copy at start and runs on the store.
    func testKill9DuringARewriteLeavesOneWholeStore() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let config = HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: nil)
        var hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        try hub.waitReady()
        hub.stop()
        let store = dir + "/data/store.db"
        let key = try DatabaseKey.load(keyFile: dir + "/data/store.key", environment: [:], createIfMissing: false)
        // Enough rows (about 16 MB) that copying takes a while.
        do {
            let db = try SQLCipherDatabase(path: store, key: key)
            try db.execute("CREATE TABLE filler (n INTEGER PRIMARY KEY, b BLOB)")
            try db.transaction {
                for n in 0..<50_000 { try db.execute("INSERT INTO filler VALUES (?, randomblob(300))", [.integer(Int64(n))]) }
            }
            db.close()
        }
        func fingerprint() throws -> [SQLValue] {
            let db = try SQLCipherDatabase(path: store, key: key)
            defer { db.close() }
            XCTAssertEqual(try db.quickCheck(), [])
            return try XCTUnwrap(db.query("SELECT count(*), sum(n), sum(length(b)), (SELECT group_concat(component || version) FROM yaok_schema), (SELECT hex(b) FROM filler WHERE n = 49999) FROM filler").first)
        }
        let before = try fingerprint()
        XCTAssertEqual(before.first, .integer(50_000))

        // A full disk while copying (a file size limit stands in for it: the copy cannot
        // grow past 2 MB): a clear error, the store as it was, no copy left.
        let full = try TestSupport.run("/bin/bash", ["-c", "trap '' XFSZ; ulimit -f 2048; exec \"$0\" store rewrite --config \"$1\" --page-size 4096",
                                                      hubExe, hub.configPath])
        XCTAssertEqual(full.status, 1, full.output)
        XCTAssertTrue(full.output.contains("yaok-hub: store rewrite: database error while copying the store into the new file"), full.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: SQLCipherDatabase.rewriteFile(for: store)), "the partial copy was removed")
        XCTAssertEqual(try fingerprint(), before)
        XCTAssertEqual(try SQLCipherDatabase(path: store, key: key).pageSize, 2048)

        var pageSize = 2048
        var interruptedCopies = 0
        for (round, step) in ["copying", "copied and checked", "copying", "copied and checked"].enumerated() {
            let wanted = pageSize == 2048 ? 4096 : 2048
            let process = Process()
            process.executableURL = URL(fileURLWithPath: hubExe)
            process.arguments = ["store", "rewrite", "--config", hub.configPath, "--page-size", String(wanted)]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            // Bounded: a rewrite that hangs is killed, which ends the read with EOF.
            let watchdog = DispatchWorkItem { kill(process.processIdentifier, SIGKILL) }
            DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
            var output = ""
            while !output.split(separator: "\n").contains(where: { $0.hasPrefix(step) }) {
                let data = pipe.fileHandleForReading.availableData
                if data.isEmpty { break }
                output += String(decoding: data, as: UTF8.self)
            }
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            watchdog.cancel()
            XCTAssertTrue(output.contains(step), "round \(round): the rewrite printed \(output)")
            // Killed while copying, it cannot have finished; once it says "replacing", the
            // rest takes milliseconds and may finish before the kill lands: both must be whole.
            if step == "copying" { XCTAssertEqual(process.terminationReason, .uncaughtSignal, "round \(round): killed, not finished: \(output)") }

            if FileManager.default.fileExists(atPath: SQLCipherDatabase.rewriteFile(for: store)) { interruptedCopies += 1 }
            XCTAssertEqual(try fingerprint(), before, "round \(round) (killed at \"\(step)\"): the store is whole")
            let now = try SQLCipherDatabase(path: store, key: key).pageSize
            XCTAssertTrue(now == pageSize || now == wanted, "round \(round): pages of \(now)")
            if step == "copying" { XCTAssertEqual(now, pageSize, "round \(round): killed while copying, the old file stays") }
            pageSize = now
        }
        XCTAssertGreaterThanOrEqual(interruptedCopies, 2, "the kills while copying left half-built copies")

        // The hub removes what the last kill left and runs on the store.
        XCTAssertTrue(FileManager.default.createFile(atPath: SQLCipherDatabase.rewriteFile(for: store), contents: Data("half".utf8)))
        hub = try HubProcess(dir: dir, config: config, executable: hubExe)
        defer { hub.stop() }
        try hub.waitReady()
        XCTAssertFalse(FileManager.default.fileExists(atPath: SQLCipherDatabase.rewriteFile(for: store)), "the hub removed the leftover")
        XCTAssertTrue(hub.log.contains("pages of \(pageSize) bytes"), hub.log)
        XCTAssertEqual(hub.log.contains("run `yaok-hub store rewrite`"), pageSize != 2048, "the hub suggests the rewrite only for other page sizes")
        hub.stop()
        XCTAssertEqual(try fingerprint(), before)
        let finished = try rewrite(hub, pageSize: 2048)
        XCTAssertEqual(finished.status, 0, finished.output)
        XCTAssertEqual(try fingerprint(), before)
        XCTAssertEqual(try SQLCipherDatabase(path: store, key: key).pageSize, 2048)
    }
}
