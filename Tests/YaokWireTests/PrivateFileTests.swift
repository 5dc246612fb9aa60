import Foundation
import Glibc
import XCTest
@testable import YaokCrypto

/// The one way secret files are written and read (identity, network key, database key,
/// console password and TLS key): whole or not at all, owner-only whatever the umask, no
/// symlink followed, nothing left behind on failure.
final class PrivateFileTests: XCTestCase {
    private var dir = ""

    override func setUpWithError() throws {
        var template = Array((NSTemporaryDirectory() + "yaok-private-XXXXXX").utf8CString)
        guard let p = mkdtemp(&template) else { throw XCTSkip("mkdtemp failed") }
        dir = String(cString: p)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    private func mode(_ path: String) -> UInt32? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return UInt32(st.st_mode) & 0o7777
    }

    private func names() -> Set<String> { Set((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []) }

    private func contents(_ path: String) -> [UInt8]? { FileManager.default.contents(atPath: path).map { Array($0) } }

    /// Runs `body` with the process umask set to `mask` (tests run one at a time).
    private func withUmask<T>(_ mask: mode_t, _ body: () throws -> T) rethrows -> T {
        let old = umask(mask)
        defer { umask(old) }
        return try body()
    }

    func testModeIsExactlyWhatWasAskedWhateverTheUmask() throws {
        for mask: mode_t in [0o000, 0o022, 0o777] {
            let written = dir + "/written-\(mask)", created = dir + "/created-\(mask)", open = dir + "/cert-\(mask)"
            try withUmask(mask) {
                try PrivateFile.write([1, 2, 3], to: written)
                try PrivateFile.create([1, 2, 3], at: created)
                try PrivateFile.write([1, 2, 3], to: open, mode: 0o644)
            }
            XCTAssertEqual(mode(written), 0o600, "umask \(String(mask, radix: 8))")
            XCTAssertEqual(mode(created), 0o600, "umask \(String(mask, radix: 8))")
            XCTAssertEqual(mode(open), 0o644, "umask \(String(mask, radix: 8))")
        }
    }

    func testContentIsCompleteAndNothingIsLeftBeside() throws {
        let path = dir + "/big"
        let bytes = Random.bytes(4 << 20)
        try PrivateFile.write(bytes, to: path)
        XCTAssertEqual(contents(path), bytes)
        XCTAssertEqual(try PrivateFile.read(path, maxBytes: bytes.count), bytes)
        let empty = dir + "/empty"
        try PrivateFile.create([], at: empty)
        XCTAssertEqual(try PrivateFile.read(empty, maxBytes: 10), [])
        XCTAssertEqual(names(), ["big", "empty"], "no temporary file left")
    }

    func testWriteReplacesAndCreateNeverDoes() throws {
        let path = dir + "/key"
        try PrivateFile.write([1], to: path)
        try PrivateFile.write([2, 2], to: path)
        XCTAssertEqual(contents(path), [2, 2])
        XCTAssertThrowsError(try PrivateFile.create([3], at: path)) { error in
            XCTAssertEqual(error as? PrivateFileError, .exists(path: path))
            XCTAssertTrue("\(error)".contains(path), "\(error)")
        }
        XCTAssertEqual(contents(path), [2, 2])
        XCTAssertEqual(names(), ["key"])
    }

    func testASymlinkAtTheTargetIsNeverFollowed() throws {
        let victim = dir + "/victim", link = dir + "/link", dangling = dir + "/dangling"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: victim))
        XCTAssertEqual(symlink(victim, link), 0)
        XCTAssertEqual(symlink(dir + "/nowhere", dangling), 0)
        // create: anything at the path, a dangling symlink too, is left alone.
        XCTAssertThrowsError(try PrivateFile.create([1], at: link)) { XCTAssertEqual($0 as? PrivateFileError, .exists(path: link)) }
        XCTAssertThrowsError(try PrivateFile.create([1], at: dangling)) { XCTAssertEqual($0 as? PrivateFileError, .exists(path: dangling)) }
        XCTAssertNil(mode(dir + "/nowhere"), "nothing was created through the dangling symlink")
        // write: the symlink itself is replaced by the new file; what it pointed to is untouched.
        try PrivateFile.write([1], to: link)
        XCTAssertEqual(contents(victim), Array("precious".utf8))
        XCTAssertEqual(mode(link).map { $0 & 0o777 }, 0o600)
        var st = stat()
        XCTAssertEqual(lstat(link, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFREG)
        // read: a symlink is refused unless asked for.
        XCTAssertEqual(symlink(victim, dir + "/link2"), 0)
        XCTAssertEqual(chmod(victim, 0o600), 0)
        XCTAssertThrowsError(try PrivateFile.read(dir + "/link2", maxBytes: 100)) { error in
            guard case .system("open", dir + "/link2", ELOOP)? = error as? PrivateFileError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(try PrivateFile.read(dir + "/link2", maxBytes: 100, followSymlinks: true), Array("precious".utf8))
    }

    func testASymlinkPlantedAtTheTemporaryPathIsNotFollowedNorRemoved() throws {
        let victim = dir + "/victim", target = dir + "/key", tmp = dir + "/key.tmp-planted"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: victim))
        XCTAssertEqual(symlink(victim, tmp), 0)
        for replacing in [true, false] {
            XCTAssertThrowsError(try PrivateFile.place([1, 2, 3], at: target, mode: 0o600, owner: nil, replacing: replacing, temporaryPath: tmp)) { error in
                XCTAssertEqual(error as? PrivateFileError, .system(call: "open", path: tmp, errno: EEXIST))
                XCTAssertTrue("\(error)".contains(tmp), "\(error)")
            }
        }
        XCTAssertEqual(contents(victim), Array("precious".utf8))
        XCTAssertEqual(names(), ["victim", "key.tmp-planted"], "the target was not made and the planted link is not ours to remove")
    }

    func testAFailureLeavesNoTemporaryFile() throws {
        // rename onto a non-empty directory fails after the temporary file was written.
        let target = dir + "/taken"
        XCTAssertEqual(mkdir(target, 0o700), 0)
        XCTAssertTrue(FileManager.default.createFile(atPath: target + "/inside", contents: Data([1])))
        XCTAssertThrowsError(try PrivateFile.write([1, 2, 3], to: target)) { error in
            guard case .system("rename", target, _)? = error as? PrivateFileError else { return XCTFail("\(error)") }
            XCTAssertTrue("\(error)".contains(target), "\(error)")
        }
        XCTAssertThrowsError(try PrivateFile.create([1, 2, 3], at: target))
        XCTAssertEqual(names(), ["taken"])
        // A directory that does not exist: nothing to clean up, and the error names the path.
        let missing = dir + "/no/such/key"
        XCTAssertThrowsError(try PrivateFile.write([1], to: missing)) { error in
            guard case .system("open", let p, ENOENT)? = error as? PrivateFileError else { return XCTFail("\(error)") }
            XCTAssertTrue(p.hasPrefix(missing + ".tmp-"), p)
        }
    }

    func testReadRefusesWhatIsNotPrivate() throws {
        let path = dir + "/key"
        try PrivateFile.write([7, 7], to: path)
        XCTAssertEqual(chmod(path, 0o640), 0)
        XCTAssertThrowsError(try PrivateFile.read(path, maxBytes: 10)) { error in
            XCTAssertEqual(error as? PrivateFileError, .insecurePermissions(path: path, mode: UInt32(S_IFREG) | 0o640))
            XCTAssertTrue("\(error)".contains("640") && "\(error)".contains(path), "\(error)")
        }
        XCTAssertEqual(try PrivateFile.read(path, maxBytes: 10, requirePrivate: false), [7, 7])
        XCTAssertEqual(chmod(path, 0o400), 0)
        XCTAssertEqual(try PrivateFile.read(path, maxBytes: 2), [7, 7])
        XCTAssertThrowsError(try PrivateFile.read(path, maxBytes: 1)) {
            XCTAssertEqual($0 as? PrivateFileError, .tooLarge(path: path, size: 2, limit: 1))
        }
        XCTAssertThrowsError(try PrivateFile.read(dir, maxBytes: 10)) {
            XCTAssertEqual($0 as? PrivateFileError, .notARegularFile(path: dir))
        }
    }

    func testRootGivesTheFileToTheOwnerBeforeItAppears() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to give a file away") }
        let path = dir + "/for-nobody"
        try PrivateFile.write([1], to: path, owner: .init(uid: 65534, gid: 65534))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_uid, 65534)
        XCTAssertEqual(st.st_gid, 65534)
        XCTAssertEqual(st.st_mode & 0o7777, 0o600)
    }
}
