import XCTest
import CSQLCipher
@testable import YaokStore
#if canImport(Glibc)
import Glibc
#endif

/// A fresh temporary directory, removed at the end of the test.
func makeTempDirectory(_ test: XCTestCase) throws -> String {
    var template = Array("/tmp/yaok-store-test-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { buf in mkdtemp(buf.baseAddress!) }
    guard let made else { throw StoreError.fileError(path: "/tmp", operation: "mkdtemp", errno: errno) }
    let path = String(cString: made)
    test.addTeardownBlock { removeTree(path) }
    return path
}

func removeTree(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

func fileMode(_ path: String) -> UInt32? {
    var st = stat()
    guard stat(path, &st) == 0 else { return nil }
    return UInt32(st.st_mode & 0o7777)
}

func fileBytes(_ path: String) -> [UInt8]? {
    guard let data = FileManager.default.contents(atPath: path) else { return nil }
    return [UInt8](data)
}

func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
    guard fd >= 0 else { throw StoreError.fileError(path: path, operation: "open", errno: errno) }
    defer { close(fd) }
    _ = fchmod(fd, mode)
    let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard n == bytes.count else { throw StoreError.fileError(path: path, operation: "write", errno: errno) }
}

/// Whether `needle` occurs anywhere in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    let first = needle[0]
    var i = 0
    let last = haystack.count - needle.count
    while i <= last {
        if haystack[i] == first, Array(haystack[i..<(i + needle.count)]) == needle { return true }
        i += 1
    }
    return false
}

/// A store file as made before the current page size: `pageSize` pages, keyed with `testKey`,
/// holding whatever `sql` creates (opened and closed with the raw C API, not the store's).
func makeLegacyFile(_ path: String, pageSize: Int, sql: String) {
    var raw: OpaquePointer?
    XCTAssertEqual(sqlite3_open_v2(path, &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil), SQLITE_OK)
    let keyText = SQLCipherDatabase.rawKeyLiteral(testKey)
    XCTAssertEqual(keyText.withUnsafeBytes { sqlite3_key(raw, $0.baseAddress, Int32($0.count)) }, SQLITE_OK)
    XCTAssertEqual(sqlite3_exec(raw, "PRAGMA cipher_page_size = \(pageSize); " + sql, nil, nil, nil), SQLITE_OK)
    sqlite3_close_v2(raw)
}

let testKey: [UInt8] = (0..<32).map { UInt8($0 &* 7 &+ 3) }
let otherKey: [UInt8] = (0..<32).map { UInt8(255 - $0) }

/// A 16-byte bundle ID made from a number.
func bundleID(_ n: Int) -> [UInt8] {
    var id = [UInt8](repeating: 0xA0, count: 16)
    withUnsafeBytes(of: UInt64(n).bigEndian) { for (i, b) in $0.enumerated() { id[8 + i] = b } }
    return id
}

/// A 32-byte user ID made from a number.
func userID(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 32) }

func makeBundle(_ n: Int, destination: UInt8 = 1, expiresMs: Int64 = 10_000_000, size: Int = 100,
                previousHop: [UInt8]? = nil, marker: String? = nil, sender: UInt8 = 9, origin: String? = nil,
                kind: UInt8 = 1, acknowledging: [UInt8]? = nil) -> NewBundle {
    var bytes = [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: size)
    if let marker {
        bytes = Array(marker.utf8) + bytes + Array(marker.utf8)
    }
    return NewBundle(bundleID: bundleID(n), destination: userID(destination), kind: kind, sourceUserID: userID(sender),
                     hopCount: 1, hopLimit: 8, previousHop: previousHop, createdMs: 1_000, expiresMs: expiresMs,
                     bytes: bytes, receivedFrom: "test:\(n)", origin: origin, acknowledgedBundleID: acknowledging)
}
