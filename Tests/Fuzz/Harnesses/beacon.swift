// libFuzzer harness: the mesh plugin's discovery beacon (Plugins/Mesh/Sources/Beacon.swift), as a
// hub parses one from UDP multicast: layout, clock window at a fuzzed now, the signature (real
// Ed25519: no forged beacon verifies), and the encode round trip.
//
// Input: the beacon (143 bytes), then optionally now (8, BE; default: the seeds' time).
import YaokCrypto
import YaokMeshBeacon

private let defaultNowMs: Int64 = 1_700_000_000_000

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBeacon(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let all = input(data, size)
    let bytes = Array(all.prefix(Beacon.length))
    var nowMs = defaultNowMs
    if all.count >= Beacon.length + 8 {
        nowMs = Int64(bitPattern: all[Beacon.length..<Beacon.length + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
    }

    // Layout and clock first, with a verifier that accepts anything (and checks what it is given).
    var asked = false
    let unchecked = try? Beacon.parse(bytes, nowMs: nowMs) { sig, msg, key in
        asked = true
        check(sig == Array(bytes[Beacon.signedLength...]) && msg == Array(bytes[..<Beacon.signedLength]) && key == Array(bytes[5..<37]),
              "the verifier was given other bytes")
        return true
    }
    if let b = unchecked {
        check(asked, "parsed without asking for the signature")
        check(b.signedBytes == Array(bytes[..<Beacon.signedLength]), "signed bytes do not round-trip")
        check(b.tcpPort != 0, "port 0 accepted")
        let skew = b.timestampMs.subtractingReportingOverflow(nowMs)
        check(!skew.overflow && skew.partialValue.magnitude <= UInt64(Beacon.maxClockSkewMs), "a stale beacon accepted")
    }

    // Then with the real signature check: only beacons the key's holder signed.
    do {
        let b = try Beacon.parse(bytes, nowMs: nowMs) { sig, msg, key in SigningKeyPair.verify(signature: sig, message: msg, publicKey: key) }
        check(unchecked == b, "the signature check changed the fields")
        check(b.signingKey == FuzzKeys.hub.signingKey, "a forged beacon verified")
        check((try? b.encoded(sign: FuzzKeys.hub.sign)) == bytes, "a beacon does not re-encode to its bytes")
    } catch {
        check(error is BeaconError, "parse threw \(error)")
        if unchecked != nil { check(error as? BeaconError == .badSignature, "refused for another reason than the signature: \(error)") }
    }

    // Building: keys of any length give a beacon of the fixed size; a signer's wrong answer is refused.
    let b = Beacon(signingKey: Array(all.prefix(Int(all.first ?? 0) % 40)), kxKey: Array(all.suffix(Int(all.last ?? 0) % 40)),
                   tcpPort: UInt16(truncatingIfNeeded: all.count), timestampMs: nowMs)
    check(b.signedBytes.count == Beacon.signedLength, "signed bytes of another length")
    check((try? b.encoded { _ in Array(all.prefix(63)) }) == nil, "a short signature accepted")
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func initializeBeacon(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        func be(_ v: Int64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: v) >> (56 - 8 * UInt64($0))) } }
        let hub = FuzzKeys.hub
        let beacon = try Beacon(signingKey: hub.signingKey, kxKey: hub.kxKey, tcpPort: 7410, timestampMs: defaultNowMs).encoded(sign: hub.sign)
        let old = try Beacon(signingKey: hub.signingKey, kxKey: hub.kxKey, tcpPort: 7410, timestampMs: 0).encoded(sign: hub.sign)
        let forged = try Beacon(signingKey: hub.signingKey, kxKey: hub.kxKey, tcpPort: 7411, timestampMs: defaultNowMs).encoded(sign: FuzzKeys.sender.sign)
        return [
            ("valid", beacon),
            ("valid-later", beacon + be(defaultNowMs + 6 * 86_400_000)),
            ("stale", old),
            ("stale-overflow", old + be(.min)),
            ("wrong-signer", forged),
        ]
    }
    return 0
}
