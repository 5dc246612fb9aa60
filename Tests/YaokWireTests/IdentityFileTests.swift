import XCTest
import Glibc
import YaokCrypto

final class IdentityFileTests: XCTestCase {
    private var dir = ""

    override func setUpWithError() throws {
        var template = Array("/tmp/yaok-idtest-XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        dir = String(cString: p)
    }

    override func tearDown() {
        if let d = opendir(dir) {
            while let e = readdir(d) {
                let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                if name != "." && name != ".." { unlink(dir + "/" + name) }
            }
            closedir(d)
        }
        rmdir(dir)
    }

    private func mode(_ path: String) -> UInt32 {
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        return UInt32(st.st_mode) & 0o7777
    }

    private func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
        XCTAssertGreaterThanOrEqual(fd, 0)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fchmod(fd, mode)
        close(fd)
    }

    func testCreateThenLoadSameIdentity() throws {
        let path = dir + "/identity"
        let a = try IdentityFile.loadOrCreate(path: path)
        XCTAssertEqual(mode(path), 0o600)
        var st = stat()
        stat(path, &st)
        XCTAssertEqual(Int(st.st_size), 72)
        let b = try IdentityFile.loadOrCreate(path: path)
        XCTAssertEqual(a.signingKey, b.signingKey)
        XCTAssertEqual(a.kxKey, b.kxKey)
        XCTAssertEqual(a.userID, b.userID)
        // The loaded key signs verifiably for the created public key.
        XCTAssertTrue(SigningKeyPair.verify(signature: b.sign([1]), message: [1], publicKey: a.signingKey))
        // No temporary files left behind.
        var names: [String] = []
        if let d = opendir(dir) {
            while let e = readdir(d) {
                names.append(withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) })
            }
            closedir(d)
        }
        XCTAssertEqual(Set(names), [".", "..", "identity"])
    }

    func testFileFormatMatchesDocs() throws {
        let path = dir + "/identity"
        let seed = [UInt8](repeating: 0x01, count: 32), kx = [UInt8](repeating: 0x02, count: 32)
        writeFile(path, Array("YAOKID1\n".utf8) + seed + kx, mode: 0o600)
        let loaded = try IdentityFile.loadOrCreate(path: path)
        let expected = try Identity(ed25519Seed: seed, x25519Secret: kx)
        XCTAssertEqual(loaded.signingKey, expected.signingKey)
        XCTAssertEqual(loaded.kxKey, expected.kxKey)
    }

    func testGroupOrWorldAccessibleFileRefused() throws {
        let path = dir + "/identity"
        _ = try IdentityFile.loadOrCreate(path: path)
        for bad: mode_t in [0o644, 0o640, 0o604, 0o620, 0o602] {
            chmod(path, bad)
            XCTAssertThrowsError(try IdentityFile.loadOrCreate(path: path)) { error in
                XCTAssertEqual(error as? IdentityFileError, .insecurePermissions(path: path, mode: UInt32(bad)))
                XCTAssertTrue("\(error)".contains(path))
                XCTAssertTrue("\(error)".contains(String(bad, radix: 8)))
            }
        }
        chmod(path, 0o400)
        XCTAssertNoThrow(try IdentityFile.loadOrCreate(path: path))
    }

    func testWrongSizeAndMagic() {
        let path = dir + "/identity"
        writeFile(path, Array("YAOKID1\n".utf8) + [UInt8](repeating: 1, count: 63), mode: 0o600)
        XCTAssertThrowsError(try IdentityFile.loadOrCreate(path: path)) {
            XCTAssertEqual($0 as? IdentityFileError, .wrongSize(path: path, size: 71, expected: 72))
        }
        writeFile(path, Array("YAOKID2\n".utf8) + [UInt8](repeating: 1, count: 64), mode: 0o600)
        XCTAssertThrowsError(try IdentityFile.loadOrCreate(path: path)) {
            XCTAssertEqual($0 as? IdentityFileError, .badMagic(path: path))
        }
        writeFile(path, [], mode: 0o600)
        XCTAssertThrowsError(try IdentityFile.loadOrCreate(path: path)) {
            XCTAssertEqual($0 as? IdentityFileError, .wrongSize(path: path, size: 0, expected: 72))
        }
    }

    func testMissingDirectoryIsATypedError() {
        let path = dir + "/no/such/identity"
        XCTAssertThrowsError(try IdentityFile.loadOrCreate(path: path)) { error in
            guard case .system(let call, _, let err)? = error as? IdentityFileError else { return XCTFail("\(error)") }
            XCTAssertEqual(call, "open")
            XCTAssertEqual(err, ENOENT)
        }
    }
}
