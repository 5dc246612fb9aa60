import Foundation
import XCTest
import YaokCrypto
import enum YaokPluginKit.Hex

/// A self-signed certificate and its 0600 key, made by `openssl req` (the documented way).
public struct TLSFixture {
    public let dir: String
    public var certificate: String { dir + "/relay-tls.crt" }
    public var key: String { dir + "/relay-tls.key" }

    public static func make() throws -> TLSFixture {
        let dir = NSTemporaryDirectory() + "yaok-relay-tls-" + Hex.encode(Random.bytes(6))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let f = TLSFixture(dir: dir)
        let (status, output) = try runTool("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                                                "-days", "30", "-subj", "/CN=yaok-relay-test", "-keyout", f.key, "-out", f.certificate])
        guard status == 0 else { throw XCTSkip("openssl req failed: \(output)") }
        guard chmod(f.key, 0o600) == 0 else { throw XCTSkip("chmod failed") }
        return f
    }

    public func remove() { try? FileManager.default.removeItem(atPath: dir) }
}
