import XCTest
import Synchronization
@testable import YaokStore
#if canImport(Glibc)
import Glibc
#endif

/// A bundle reported as accepted must survive the process being SIGKILLed right after.
/// The test binary re-runs this same test as a child (marked by an environment variable) that
/// accepts in a loop and reports each ID only after `accept` returned; the parent kills it
/// mid-stream and checks every reported ID.
final class CrashDurabilityTests: XCTestCase {
    static let childDatabaseVariable = "YAOK_STORE_CRASH_CHILD_DB"

    func testAcceptedBundlesSurviveSIGKILL() throws {
        if let childPath = ProcessInfo.processInfo.environment[Self.childDatabaseVariable] {
            try runChildAcceptLoop(path: childPath)
            return
        }
        let dir = try makeTempDirectory(self)
        let path = dir + "/hub.db"
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/proc/self/exe")
        child.arguments = ["YaokStoreTests.CrashDurabilityTests/testAcceptedBundlesSurviveSIGKILL"]
        var env = ProcessInfo.processInfo.environment
        env[Self.childDatabaseVariable] = path
        child.environment = env
        let out = Pipe()
        child.standardOutput = out
        child.standardError = FileHandle.nullDevice

        let reported = LockedLines()
        let enough = DispatchSemaphore(value: 0)
        let reader = out.fileHandleForReading
        try child.run()
        DispatchQueue.global().async {
            var buffer: [UInt8] = []
            while true {
                let data = reader.availableData
                if data.isEmpty { enough.signal(); return }
                buffer.append(contentsOf: data)
                while let nl = buffer.firstIndex(of: 10) {
                    let line = String(decoding: buffer[..<nl], as: UTF8.self)
                    buffer.removeSubrange(...nl)
                    if line.hasPrefix("ACCEPTED "), let n = Int(line.dropFirst(9)) {
                        if reported.append(n) == 300 { enough.signal() }
                    }
                }
            }
        }
        let waited = enough.wait(timeout: .now() + 120)
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        XCTAssertEqual(waited, .success, "child did not report in time")
        XCTAssertEqual(child.terminationReason, .uncaughtSignal, "the child was killed, not finished")
        let ids = reported.snapshot()
        XCTAssertGreaterThanOrEqual(ids.count, 300)

        let db = try SQLCipherDatabase(path: path, key: testKey)
        XCTAssertEqual(try db.scalar("PRAGMA integrity_check")?.textValue, "ok")
        let store = try BundleStore(database: db)
        for n in ids {
            let stored = try store.bundle(bundleID(n))
            XCTAssertEqual(stored?.state, .queued, "bundle \(n) reported accepted but lost")
            XCTAssertEqual(stored?.bytes, .held(makeBundle(n, size: 2_000).bytes))
        }
    }

    /// The child half: accepts until killed, reporting each accepted ID on stdout.
    private func runChildAcceptLoop(path: String) throws {
        let store = try BundleStore(database: try SQLCipherDatabase(path: path, key: testKey))
        for n in 0..<1_000_000 {
            _ = try store.accept(makeBundle(n, size: 2_000), nowMs: 0)
            let line = Array("ACCEPTED \(n)\n".utf8)
            _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        }
    }
}

private final class LockedLines: Sendable {
    private let values = Mutex<[Int]>([])
    /// Appends and returns the new count.
    func append(_ v: Int) -> Int { values.withLock { $0.append(v); return $0.count } }
    func snapshot() -> [Int] { values.withLock { $0 } }
}
