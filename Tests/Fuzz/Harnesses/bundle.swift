// libFuzzer harness: Bundle (hop header + envelope) parsing, re-encoding and forwarding;
// also seals fuzzed plaintexts and checks they open again.
import YaokCrypto
import YaokWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBundle(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    if let bundle = try? Bundle(parsing: bytes) {
        check(bundle.encoded == bytes, "encoded differs from the parsed bytes")
        check(bundle.hop.hopCount <= bundle.hop.hopLimit, "hop count above limit after parsing")
        // Whatever the times and the age claim, and whatever a node believes true time is, what
        // a node keeps is positive and never more than the maximum lifetime (Docs/protocol.md §2.2).
        for t in [nil, bundle.envelope.createdMs, bundle.envelope.expiresMs &- 1, Int64.max / 2] as [Int64?] {
            if let j = try? EnvelopeLifetime().judge(bundle.envelope, claimedAgeMs: bundle.hop.ageMs, trueTimeMs: t) {
                check(j.remainingMs > 0 && j.remainingMs <= EnvelopeLifetime.protocolMaxTTLMs, "remaining life out of bounds")
            }
        }
        do {
            let next = try bundle.forwarded(by: FuzzKeys.hub.userID, ageMs: bundle.hop.ageMs)
            check(next.hop.hopCount == bundle.hop.hopCount + 1, "forwarding did not count the hop")
            check(next.envelope == bundle.envelope, "forwarding changed the envelope")
            check((try? Bundle(parsing: next.encoded)) == next, "forwarded bundle does not round-trip")
        } catch WireError.hopLimitReached {
            check(bundle.hop.hopCount == bundle.hop.hopLimit, "hop limit refused below the limit")
        } catch {
            check(false, "forwarding threw \(error)")
        }
    }
    // Seal the input as a plaintext (up to the limit) and check the round trip.
    let plaintext = Array(bytes.prefix(Envelope.maxPlaintextLength))
    if let sealed = try? Envelope.sealMessage(plaintext: plaintext, from: FuzzKeys.sender, toUserID: FuzzKeys.recipient.userID,
                                              recipientKXKey: FuzzKeys.recipient.kxKey, createdMs: 1) {
        check((try? sealed.open(with: FuzzKeys.recipient)) == plaintext, "sealed plaintext does not open")
    } else {
        check(false, "sealing a valid plaintext failed")
    }
    return 0
}
