#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Measurements of the bundle store on this machine's disk, for the lead's benchmarks
/// (never asserted in unit tests).
public enum BundleStoreBenchmark {
    /// Accepts `count` bundles of `bundleSize` bytes, one durable transaction each, into a
    /// fresh encrypted database in `directory` (default: a new directory under /tmp, removed
    /// afterwards) and returns accepts per second.
    public static func acceptRate(count: Int, bundleSize: Int = 1_024, directory: String? = nil) throws -> Double {
        let dir = try directory ?? makeTemporaryDirectory()
        let path = dir + "/bench-\(getpid())-\(monotonicNs()).db"
        defer {
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            if directory == nil { rmdir(dir) }
        }
        let key = try DatabaseKey.randomBytes(32)
        let store = try BundleStore(database: try SQLCipherDatabase(path: path, key: key))
        var payload = try DatabaseKey.randomBytes(max(0, bundleSize))
        let source = [UInt8](repeating: 0x51, count: 32)
        let start = monotonicNs()
        for i in 0..<max(0, count) {
            var id = [UInt8](repeating: 0, count: 16)
            withUnsafeBytes(of: UInt64(i).bigEndian) { for (j, b) in $0.enumerated() { id[8 + j] = b } }
            if !payload.isEmpty { payload[0] = UInt8(truncatingIfNeeded: i) }
            let bundle = NewBundle(bundleID: id, destination: [UInt8](repeating: UInt8(truncatingIfNeeded: i % 50), count: 32),
                                   kind: 1, sourceUserID: source, hopCount: 0, hopLimit: 8, createdMs: 0,
                                   expiresMs: Int64.max, bytes: payload, receivedFrom: "bench")
            _ = try store.accept(bundle, nowMs: Int64(i))
        }
        let seconds = Double(monotonicNs() - start) / 1e9
        store.database.close()
        return seconds > 0 ? Double(count) / seconds : 0
    }

    private static func makeTemporaryDirectory() throws -> String {
        var template = Array("/tmp/yaok-store-bench-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buf in mkdtemp(buf.baseAddress!) }
        guard let made else { throw StoreError.fileError(path: "/tmp", operation: "mkdtemp", errno: errno) }
        return String(cString: made)
    }

    private static func monotonicNs() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
