import XCTest
@testable import YaokStore
#if canImport(Glibc)
import Glibc
#endif

final class DatabaseKeyTests: XCTestCase {
    func testKeyFileIsCreatedOwnerOnlyAndReused() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/db.key"
        let old = umask(0o000)
        defer { umask(old) }
        let key = try DatabaseKey.load(keyFile: path, environment: [:])
        XCTAssertEqual(key.count, 32)
        XCTAssertEqual(fileMode(path), 0o600)
        XCTAssertEqual(fileBytes(path), key)
        XCTAssertNotEqual(key, [UInt8](repeating: 0, count: 32))
        XCTAssertEqual(try DatabaseKey.load(keyFile: path, environment: [:]), key)
        // A second fresh file gets a different key.
        XCTAssertNotEqual(try DatabaseKey.load(keyFile: dir + "/other.key", environment: [:]), key)
    }

    func testGroupReadableKeyFileIsRefused() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/db.key"
        try writeFile(path, testKey, mode: 0o644)
        XCTAssertThrowsError(try DatabaseKey.load(keyFile: path, environment: [:])) { error in
            XCTAssertEqual(error as? StoreError, .insecureKeyFile(path: path, mode: 0o100644))
            XCTAssertTrue("\(error)".contains(path))
            XCTAssertTrue("\(error)".contains("644"), "\(error)")
        }
    }

    func testHexKeyFileWithNewlineIsAccepted() throws {
        let dir = try makeTempDirectory(self)
        let path = dir + "/db.key"
        let hex = testKey.map { String(format: "%02X", $0) }.joined() + "\n"
        try writeFile(path, Array(hex.utf8), mode: 0o600)
        XCTAssertEqual(try DatabaseKey.load(keyFile: path, environment: [:]), testKey)
    }

    func testMalformedKeyFilesAreRefused() throws {
        let dir = try makeTempDirectory(self)
        let cases: [[UInt8]] = [
            Array(repeating: 1, count: 31),
            Array(repeating: 1, count: 33),
            Array(String(repeating: "zz", count: 32).utf8),
            Array(repeating: 0x41, count: 4096),
            [],
        ]
        for (i, content) in cases.enumerated() {
            let path = dir + "/bad\(i).key"
            try writeFile(path, content, mode: 0o600)
            XCTAssertThrowsError(try DatabaseKey.load(keyFile: path, environment: [:]), "case \(i)") { error in
                guard case StoreError.malformedKeyFile(let p, _) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(p, path)
            }
        }
    }

    func testCredentialsDirectoryIsPreferred() throws {
        let dir = try makeTempDirectory(self)
        let credentials = dir + "/creds"
        XCTAssertEqual(mkdir(credentials, 0o700), 0)
        try writeFile(credentials + "/yaok-db-key", otherKey, mode: 0o400)
        let keyFile = dir + "/db.key"
        try writeFile(keyFile, testKey, mode: 0o600)
        XCTAssertEqual(try DatabaseKey.load(keyFile: keyFile, environment: ["CREDENTIALS_DIRECTORY": credentials]), otherKey)
        // A different credential name that is absent falls back to the key file.
        XCTAssertEqual(try DatabaseKey.load(credentialName: "absent", keyFile: keyFile,
                                            environment: ["CREDENTIALS_DIRECTORY": credentials]), testKey)
    }

    func testLoadedKeyOpensTheDatabase() throws {
        let dir = try makeTempDirectory(self)
        let key = try DatabaseKey.load(keyFile: dir + "/db.key", environment: [:])
        do {
            let db = try SQLCipherDatabase(path: dir + "/a.db", key: key)
            try db.execute("CREATE TABLE t (x)")
        }
        let again = try DatabaseKey.load(keyFile: dir + "/db.key", environment: [:])
        XCTAssertNoThrow(try SQLCipherDatabase(path: dir + "/a.db", key: again))
    }
}

final class DatabaseKeyRotationTests: XCTestCase {
    func testRotateRekeysAndReplacesTheKeyFile() throws {
        let dir = try makeTempDirectory(self)
        let keyFile = dir + "/db.key"
        let oldKey = try DatabaseKey.load(keyFile: keyFile, environment: [:])
        do {
            let db = try SQLCipherDatabase(path: dir + "/a.db", key: oldKey)
            try db.execute("CREATE TABLE t (x)")
            try db.execute("INSERT INTO t VALUES ('kept')")
            let newKey = try DatabaseKey.rotate(database: db, keyFile: keyFile)
            XCTAssertNotEqual(newKey, oldKey)
            XCTAssertEqual(fileBytes(keyFile), newKey)
            XCTAssertEqual(fileMode(keyFile), 0o600)
            XCTAssertNil(fileMode(keyFile + ".new"))
        }
        XCTAssertThrowsError(try SQLCipherDatabase(path: dir + "/a.db", key: oldKey))
        let db = try SQLCipherDatabase(path: dir + "/a.db", key: try DatabaseKey.load(keyFile: keyFile, environment: [:]))
        XCTAssertEqual(try db.scalar("SELECT x FROM t"), .text("kept"))
    }
}
