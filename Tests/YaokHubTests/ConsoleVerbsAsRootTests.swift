import Foundation
import XCTest
@testable import YaokHubCore

/// The packaged hub owns its own `hub.yaml` (so the console's switch works): a compromised
/// hub could then name any file as `console.password_file` or `tls_key`. Root running the
/// console verbs on such a config writes only directly into the data directory, and only
/// when that directory belongs to the config's owner.
final class ConsoleVerbsAsRootTests: XCTestCase {
    static let nobody: uid_t = 65534

    struct Setup {
        let dir, config, data, victim: String
    }

    /// A config owned by `nobody` (as the packaged hub.yaml is owned by the service user), its
    /// data directory owned by `nobody`, and a root-owned file an attacker would like replaced.
    func setup(console: String) throws -> Setup {
        guard geteuid() == 0 else { throw XCTSkip("needs root: the attack is on what root writes") }
        let dir = try TestSupport.temporaryDirectory(self)
        XCTAssertEqual(chmod(dir, 0o755), 0)
        let data = dir + "/data", victims = dir + "/root-only"
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        XCTAssertEqual(chown(data, Self.nobody, Self.nobody), 0)
        try FileManager.default.createDirectory(atPath: victims, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let victim = victims + "/precious"
        try "precious\n".write(toFile: victim, atomically: true, encoding: .utf8)
        let config = dir + "/hub.yaml"
        try "hub:\n  data_dir: \(data)\nconsole:\n\(console)".write(toFile: config, atomically: true, encoding: .utf8)
        XCTAssertEqual(chown(config, Self.nobody, Self.nobody), 0)
        return Setup(dir: dir, config: config, data: data, victim: victim)
    }

    func hubVerb(_ s: Setup, _ verb: String) throws -> TestSupport.RunResult {
        let hub = try TestSupport.product("yaok-hub")
        return try TestSupport.run("/bin/sh", ["-c", "printf 'a long field password\\n' | '\(hub)' \(verb) --config '\(s.config)' --stdin 2>&1"])
    }

    func testAPlantedPasswordFileOutsideTheDataDirectoryIsRefused() throws {
        let s = try setup(console: "  password_file: PLACEHOLDER\n")
        try String(contentsOfFile: s.config, encoding: .utf8).replacingOccurrences(of: "PLACEHOLDER", with: s.victim)
            .write(toFile: s.config, atomically: false, encoding: .utf8)
        let r = try hubVerb(s, "console-password")
        XCTAssertNotEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.contains("refusing to write \(s.victim) as root"), r.output)
        XCTAssertEqual(try String(contentsOfFile: s.victim, encoding: .utf8), "precious\n", "root replaced the planted file")
    }

    func testAPlantedTLSKeyPathIsRefused() throws {
        let s = try setup(console: "  tls_key: PLACEHOLDER\n")
        try String(contentsOfFile: s.config, encoding: .utf8).replacingOccurrences(of: "PLACEHOLDER", with: s.victim)
            .write(toFile: s.config, atomically: false, encoding: .utf8)
        let hub = try TestSupport.product("yaok-hub")
        let r = try TestSupport.run(hub, ["console-certificate", "--config", s.config])
        XCTAssertNotEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.contains("console.tls_key"), r.output)
        XCTAssertEqual(try String(contentsOfFile: s.victim, encoding: .utf8), "precious\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s.data + "/console-tls.crt"), "nothing is written when one path is refused")
    }

    func testTheDocumentedPathStillWorksAndTheFileGoesToTheServiceUser() throws {
        let s = try setup(console: "  password_file: console.pass\n")
        let r = try hubVerb(s, "console-password")
        XCTAssertEqual(r.status, 0, r.output)
        let attributes = try FileManager.default.attributesOfItem(atPath: s.data + "/console.pass")
        XCTAssertEqual((attributes[.ownerAccountID] as? NSNumber)?.uint32Value, Self.nobody)
        XCTAssertEqual(attributes[.posixPermissions] as? Int, 0o600)
    }
}
