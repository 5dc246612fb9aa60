// libFuzzer harness: hub certificates (HubCertificate, host frame 0x08): parsing, the encode
// round trip, `check(...)` at fuzzed times and clock skews, and no forgery: a certificate whose
// signature verifies is one the network key issued.
//
// Input: the certificate (145 bytes), then optionally now (8, BE) and clock skew (8, BE).
import YaokCrypto
import YaokPluginKit
import YaokWire

/// The network whose key issued the seeds, the hub it certified, and what it issued.
private enum Network {
    static let key = try! SigningKeyPair(seed: [UInt8](repeating: 0x0E, count: 32))
    static let hub = FuzzKeys.hub.signingKey
    static let t: Int64 = 1_700_000_000_000, day: Int64 = 86_400_000
    static let issued = [
        try! HubCertificate.issue(networkKey: key, hubKey: hub, notBeforeMs: t, notAfterMs: t + 365 * day),
        try! HubCertificate.issue(networkKey: key, hubKey: FuzzKeys.sender.signingKey, notBeforeMs: 0, notAfterMs: 1),
    ]
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHubCert(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let all = input(data, size)
    let bytes = Array(all.prefix(HubCertificate.length))
    func i64(_ at: Int) -> Int64? {
        guard all.count >= at + 8 else { return nil }
        return Int64(bitPattern: all[at..<at + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
    }
    let nowMs = i64(HubCertificate.length) ?? 1_700_000_000_000
    let skewMs = i64(HubCertificate.length + 8) ?? 300_000

    guard let cert = try? HubCertificate(parsing: bytes) else {
        // Refused only for a documented reason: length, version, or the validity window.
        if bytes.count == HubCertificate.length {
            let notBefore = Int64(bitPattern: bytes[65..<73].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
            let notAfter = Int64(bitPattern: bytes[73..<81].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
            check(bytes[0] != HubCertificate.version || notBefore < 0 || notAfter <= notBefore, "a well-formed certificate refused")
        }
        issueAndCheck(all)
        return 0
    }
    check(cert.encoded == bytes, "certificate does not round-trip")
    check(cert.notBeforeMs >= 0 && cert.notAfterMs > cert.notBeforeMs, "validity window not checked")
    check((try? TLVRecord(parsing: cert.frame))?.value == bytes && cert.frame.first == RoutingFrameType.hubCertificate.rawValue, "frame")
    let verifies = cert.signatureVerifies
    if verifies {
        check(cert.networkKey == Network.key.publicKey && Network.issued.contains { $0.signedFields == cert.signedFields },
              "a forged certificate verifies")
    }
    do {
        try cert.check(networkKey: Network.key.publicKey, hubKey: Network.hub, nowMs: nowMs, clockSkewMs: skewMs)
        check(verifies && cert.networkKey == Network.key.publicKey && cert.hubKey == Network.hub, "a certificate passed without being issued")
        // With sane clocks, passing means now is inside the window give or take the skew.
        if (0...Int64(1) << 62).contains(nowMs) && (0...Int64(1) << 40).contains(skewMs) {
            check(nowMs + skewMs >= cert.notBeforeMs && nowMs - skewMs <= cert.notAfterMs, "a certificate passed outside its window")
        }
    } catch {
        check(error is HubCertificateError, "check threw \(error)")
        if (0...Int64(1) << 62).contains(nowMs) && (0...Int64(1) << 40).contains(skewMs), verifies,
           cert.networkKey == Network.key.publicKey, cert.hubKey == Network.hub {
            check(nowMs + skewMs < cert.notBeforeMs || nowMs - skewMs > cert.notAfterMs, "a valid certificate refused: \(error)")
        }
    }
    // Another network's key or another hub never passes.
    check((try? cert.check(networkKey: FuzzKeys.sender.signingKey, hubKey: Network.hub, nowMs: nowMs, clockSkewMs: skewMs)) == nil
          || cert.networkKey == FuzzKeys.sender.signingKey, "passed for another network")
    check((try? cert.check(networkKey: Network.key.publicKey, hubKey: FuzzKeys.sender.signingKey, nowMs: nowMs, clockSkewMs: skewMs)) == nil
          || cert.hubKey == FuzzKeys.sender.signingKey, "passed for another hub")
    return 0
}

/// Issues a certificate for the input's fields (hub key 32, not before 8, not after 8) and checks
/// that it parses back, verifies and passes inside its window.
private func issueAndCheck(_ f: [UInt8]) {
    guard f.count >= 48 else { return }
    func i64(_ at: Int) -> Int64 { Int64(bitPattern: f[at..<at + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }) }
    let hub = Array(f[0..<32]), notBefore = i64(32), notAfter = i64(40)
    guard let cert = try? HubCertificate.issue(networkKey: Network.key, hubKey: hub, notBeforeMs: notBefore, notAfterMs: notAfter) else {
        check(notBefore < 0 || notAfter <= notBefore, "issuing a valid certificate failed")
        return
    }
    check((try? HubCertificate(parsing: cert.encoded)) == cert, "an issued certificate does not parse back")
    check(cert.signatureVerifies, "an issued certificate does not verify")
    check((try? cert.check(networkKey: Network.key.publicKey, hubKey: hub, nowMs: notBefore, clockSkewMs: 0)) != nil, "refused at its start")
    check((try? cert.check(networkKey: Network.key.publicKey, hubKey: hub, nowMs: notAfter, clockSkewMs: 0)) != nil, "refused at its end")
    if notAfter < .max {
        check((try? cert.check(networkKey: Network.key.publicKey, hubKey: hub, nowMs: notAfter + 1, clockSkewMs: 0)) == nil, "passed after its end")
    }
}

@_cdecl("LLVMFuzzerInitialize")
public func initializeHubCert(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        func be(_ v: Int64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: v) >> (56 - 8 * UInt64($0))) } }
        let day = Network.day, t = Network.t
        let cert = Network.issued[0], other = Network.issued[1]
        return [
            ("valid", cert.encoded + be(t + day) + be(300_000)),
            ("expired", cert.encoded + be(t + 400 * day) + be(0)),
            ("not-yet", cert.encoded + be(t - day) + be(60_000)),
            ("other-hub", other.encoded),
            ("issue", Network.hub + be(t) + be(t + day)),
        ]
    }
    return 0
}
