import XCTest
import YaokCrypto
import YaokPluginKit
import YaokWire

/// The hub certificate format (Docs/protocol.md §4, hubCertificate): a fixed vector, and
/// each reason a certificate does not make a hub trusted.
final class HubCertificateTests: XCTestCase {
    /// Network Ed25519 seed 32 × `0a`; the hub is the protocol vectors' hub (seed 32 × `05`).
    static let networkSeed = [UInt8](repeating: 0x0a, count: 32)
    static let hubKey = YaokPluginKit.Hex.decode("6e7a1cdd29b0b78fd13af4c5598feff4ef2a97166e3ca6f2e4fbfccd80505bf1")!
    static let notBefore: Int64 = 1_767_225_600_000  // 2026-01-01T00:00:00Z
    static let notAfter: Int64 = 1_798_761_600_000   // 2027-01-01T00:00:00Z
    static let expectedNetworkKey = "43a72e714401762df66b68c26dfbdf2682aaec9f2474eca4613e424a0fbafd3c"
    static let expected = "0143a72e714401762df66b68c26dfbdf2682aaec9f2474eca4613e424a0fbafd3c6e7a1cdd29b0b78fd13af4c5598feff4ef2a97166e3ca6f2e4fbfccd80505bf10000019b76daa800000001a2ce8bd400a59b1e6d9884102c447ba94689d5d0ce894dc52c1fb359118b8793dc2e95efa6f0839fc4a88de874b4567b56a39055ca8589952f197c7220819f424b48369a08"

    func testVectorMatchesTheDocument() throws {
        let network = try SigningKeyPair(seed: Self.networkSeed)
        let cert = try HubCertificate.issue(networkKey: network, hubKey: Self.hubKey, notBeforeMs: Self.notBefore, notAfterMs: Self.notAfter)
        print("network key \(Hex.encode(network.publicKey))\ncertificate \(Hex.encode(cert.encoded))")
        XCTAssertEqual(Hex.encode(network.publicKey), Self.expectedNetworkKey)
        XCTAssertEqual(Hex.encode(cert.encoded), Self.expected)
        XCTAssertEqual(cert.encoded.count, 145)
        XCTAssertEqual(try HubCertificate(parsing: cert.encoded), cert)
        // The signature covers the context string, then bytes 0..<81.
        XCTAssertTrue(SigningKeyPair.verify(signature: Array(cert.encoded[81...]), message: Array("yaok-hub-cert-v1".utf8) + Array(cert.encoded[..<81]),
                                            publicKey: network.publicKey))
        let doc = try String(contentsOfFile: TestSupport.repoRoot + "/Docs/protocol.md", encoding: .utf8).replacingOccurrences(of: "\n", with: "")
        XCTAssertTrue(doc.contains(Self.expected), "Docs/protocol.md shows the certificate vector")
        XCTAssertTrue(doc.contains(Self.expectedNetworkKey), "Docs/protocol.md shows the network key")
    }

    func testEachReasonToRefuse() throws {
        let network = try SigningKeyPair(seed: Self.networkSeed)
        let cert = try HubCertificate.issue(networkKey: network, hubKey: Self.hubKey, notBeforeMs: Self.notBefore, notAfterMs: Self.notAfter)
        let skew: Int64 = 600_000
        func check(_ c: HubCertificate, network n: [UInt8] = network.publicKey, hub: [UInt8] = Self.hubKey, at now: Int64) -> HubCertificateError? {
            do { try c.check(networkKey: n, hubKey: hub, nowMs: now, clockSkewMs: skew); return nil } catch { return error as? HubCertificateError }
        }
        XCTAssertNil(check(cert, at: Self.notBefore + 1))
        XCTAssertNil(check(cert, at: Self.notBefore - skew), "early within the clock skew")
        XCTAssertEqual(check(cert, at: Self.notBefore - skew - 1), .notYetValid(notBeforeMs: Self.notBefore))
        XCTAssertNil(check(cert, at: Self.notAfter + skew), "late within the clock skew")
        XCTAssertEqual(check(cert, at: Self.notAfter + skew + 1), .expired(notAfterMs: Self.notAfter))
        XCTAssertEqual(check(cert, network: SigningKeyPair.generate().publicKey, at: Self.notBefore + 1), .wrongNetwork)
        XCTAssertEqual(check(cert, hub: Identity.generate().signingKey, at: Self.notBefore + 1), .wrongHub)
        var forged = cert
        forged.notAfterMs += 1  // extending one's own certificate
        XCTAssertEqual(check(forged, at: Self.notBefore + 1), .badSignature)
        var bytes = cert.encoded
        bytes[0] = 2
        XCTAssertThrowsError(try HubCertificate(parsing: bytes))
        XCTAssertThrowsError(try HubCertificate(parsing: Array(cert.encoded.dropLast())))
    }
}
