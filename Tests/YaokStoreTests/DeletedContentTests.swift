import XCTest
@testable import YaokStore
import enum YaokPluginKit.Hex
import YaokTesting

/// The attack: a hub is taken, and its store key with it (the key file sits on the same box).
/// Whoever holds both can decrypt every page of the store, free space included, without going
/// through SQLite. A delivered bundle's envelope (sender key, recipient, times, ciphertext) must
/// not be readable there once the store has checkpointed: `secure_delete` makes SQLite zero the
/// space a change frees, instead of leaving the old cell behind in the page, and the tombstone
/// left in its place is blanked (no sender, no previous hop).
final class DeletedContentTests: XCTestCase {
    static let python = "/usr/bin/python3"

    struct ReadError: Error, CustomStringConvertible {
        var output: String
        var description: String { "reading the store's pages failed: \(output)" }
    }

    /// Decrypts every page of the file at `path` with `key`, as SQLCipher lays a page out (the
    /// IV and HMAC in the reserved space at its end: 48 bytes with SQLCipher 3, 80 with 4; page
    /// 1 starts with the file's 16-byte salt), and counts the pages that hold `needle`. The
    /// HMACs are not checked: an attacker reads pages, he does not trust them.
    private func pagesHolding(_ needle: [UInt8], in path: String, key: [UInt8], pageSize: Int) throws -> Int {
        let script = """
        import sys
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        path, key, needle, page = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3]), int(sys.argv[4])
        data = open(path, "rb").read()
        def decrypt(n, raw, reserve):
            iv = raw[page - reserve:page - reserve + 16]
            d = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
            return d.update(raw[16 if n == 1 else 0:page - reserve]) + d.finalize()
        for reserve in (48, 80):
            body = decrypt(1, data[:page], reserve)   # the header from its offset 16 on
            if int.from_bytes(body[0:2], "big") == page and body[4] == reserve:
                break
        else:
            sys.exit("page 1 does not decrypt with this key")
        print(sum(needle in decrypt(n + 1, data[n * page:(n + 1) * page], reserve) for n in range(len(data) // page)))
        """
        let result = try Command.run(Self.python, ["-c", script, path, Hex.encode(key), Hex.encode(needle), String(pageSize)])
        if result.output.contains("No module named 'cryptography'") {
            if RequiredTool.inCI { throw ReadError(output: "python3-cryptography is missing in CI (Tests/run.sh installs it)") }
            throw XCTSkip("python3-cryptography is not installed")
        }
        let count = Int(result.output.trimmingCharacters(in: .whitespacesAndNewlines))
        guard result.status == 0, let count else { throw ReadError(output: result.output) }
        return count
    }

    func testADeliveredBundlesEnvelopeIsNotLeftInTheFile() throws {
        try RequiredTool.require(Self.python, package: "python3")
        let marker = "yaok-envelope-of-a-delivered-bundle"
        // The control run with secure_delete off shows that the same attack finds the envelope
        // when nothing zeroes it, so a pass with it on is not a blind reader.
        for secureDelete in [true, false] {
            let dir = try makeTempDirectory(self)
            let path = dir + "/hub.db"
            let db = try SQLCipherDatabase(path: path, key: testKey)
            XCTAssertEqual(try db.pragma("secure_delete")?.int64Value, 1, "the store sets secure_delete itself")
            if !secureDelete { try db.execute("PRAGMA secure_delete = OFF") }
            let store = try BundleStore(database: db)
            for n in 1...20 {
                // Bundle 7's sender and previous hop appear nowhere else in the store.
                XCTAssertEqual(try store.accept(makeBundle(n, size: 300, previousHop: n == 7 ? userID(43) : nil,
                                                           marker: n == 7 ? marker : nil, sender: n == 7 ? 42 : 9), nowMs: 0), .stored)
            }
            func checkpointedPagesHolding(_ needle: [UInt8]) throws -> Int {
                _ = try db.query("PRAGMA wal_checkpoint(TRUNCATE)")
                return try pagesHolding(needle, in: path, key: testKey, pageSize: db.pageSize)
            }
            let needles = [("envelope", Array(marker.utf8)), ("sender", userID(42)), ("previous hop", userID(43))]
            for (what, needle) in needles {
                XCTAssertGreaterThan(try checkpointedPagesHolding(needle), 0, "a held bundle's \(what) is in the file: the reader works")
            }
            try store.markDelivered(bundleID(7), nowMs: 1)
            XCTAssertEqual(try store.bundle(bundleID(7))?.bytes, .dropped)
            for (what, needle) in needles {
                let left = try checkpointedPagesHolding(needle)
                if secureDelete {
                    XCTAssertEqual(left, 0, "the delivered bundle's \(what) is still in the file (free space or its tombstone)")
                } else {
                    XCTAssertGreaterThan(left, 0, "control: without secure_delete the freed cell keeps the \(what)")
                }
            }
            db.close()
        }
    }
}
