#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import YaokCrypto
import YaokStore

/// Measurements of the bundle store on this machine's disk, for the lead's benchmarks
/// (never asserted in unit tests).
public enum BundleStoreBenchmark {
    /// Accepts `count` bundles of `bundleSize` bytes, one durable transaction each, into a
    /// fresh encrypted database in `directory` (default: a new directory under /tmp, removed
    /// afterwards) and returns accepts per second.
    public static func acceptRate(count: Int, bundleSize: Int = 1_024, directory: String? = nil) throws -> Double {
        try withScratchStore(named: "bench", in: directory) { store in
            try acceptRate(count: count, bundleSize: bundleSize, store: store)
        }
    }

    private static func acceptRate(count: Int, bundleSize: Int, store: BundleStore) throws -> Double {
        var payload = Random.bytes(max(0, bundleSize))
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
        return seconds > 0 ? Double(count) / seconds : 0
    }

    /// What one message costs the hub's store on the single-hub path, with the router's calls
    /// in the router's order: the message is accepted from a phone, read for sending, and
    /// delivered by its recipient's custody answer; its delivery receipt the same way (the receipt's
    /// acknowledged message read once more). `messagesPerCommit` messages share one group
    /// commit, as the router's group commit does under load. Returns the wall time per message
    /// in microseconds; under `valgrind --tool=callgrind --toggle-collect='*hubLifecycle*'` it
    /// counts instructions per message repeatably.
    public static func hubLifecycle(messages: Int, messagesPerCommit: Int = 16, directory: String? = nil) throws -> Double {
        try withScratchStore(named: "lifecycle", in: directory) { store in
            try hubLifecycle(messages: messages, messagesPerCommit: messagesPerCommit, store: store)
        }
    }

    private static func hubLifecycle(messages: Int, messagesPerCommit: Int, store: BundleStore) throws -> Double {
        let alice = [UInt8](repeating: 0xA1, count: 32), bob = [UInt8](repeating: 0xB0, count: 32)
        var payload = Random.bytes(330)
        let receiptBytes = Random.bytes(180)
        let start = monotonicNs()
        for first in stride(from: 0, to: max(0, messages), by: max(1, messagesPerCommit)) {
            try store.database.beginGroup()
            for i in first..<min(messages, first + max(1, messagesPerCommit)) {
                let messageID = Random.bytes(16), receiptID = Random.bytes(16)
                payload[0] = UInt8(truncatingIfNeeded: i)
                let message = NewBundle(bundleID: messageID, destination: bob, kind: 1, sourceUserID: alice, hopCount: 0, hopLimit: 8,
                                        createdMs: Int64(i), expiresMs: Int64.max, bytes: payload, receivedFrom: "udp/1", origin: "udp")
                let receipt = NewBundle(bundleID: receiptID, destination: alice, kind: 2, sourceUserID: bob, hopCount: 0, hopLimit: 8,
                                        createdMs: Int64(i), expiresMs: Int64.max, bytes: receiptBytes, receivedFrom: "udp/2", origin: "udp",
                                        acknowledgedBundleID: messageID)
                for (bundle, isReceipt) in [(message, false), (receipt, true)] {
                    let now = Int64(i)
                    _ = try store.accept(bundle, nowMs: now)
                    if isReceipt { _ = try store.bundle(messageID) }
                    _ = try store.bundle(bundle.bundleID)
                    _ = try store.custodyTaken(bundle.bundleID, by: bundle.destination, peerIsEndpoint: true, nowMs: now)
                }
            }
            _ = try store.pending(destination: bob, limit: 64, withBytes: false)
            try store.database.commitGroup()
        }
        return Double(monotonicNs() - start) / 1e3 / Double(max(1, messages))
    }

    /// Runs `body` on a fresh encrypted store in `directory` (default: a new directory under
    /// /tmp), then closes it and removes its files (and the directory it made).
    private static func withScratchStore<T>(named name: String, in directory: String?, _ body: (BundleStore) throws -> T) throws -> T {
        let dir = try directory ?? makeTemporaryDirectory()
        let path = dir + "/\(name)-\(getpid())-\(monotonicNs()).db"
        defer {
            for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
            if directory == nil { rmdir(dir) }
        }
        let store = try BundleStore(database: try SQLCipherDatabase(path: path, key: Random.bytes(32)))
        defer { store.database.close() }
        return try body(store)
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
