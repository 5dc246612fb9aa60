// libFuzzer harness: Envelope parsing, signature checking, and decryption of re-signed inputs.
import YaokCrypto
import YaokWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    guard let envelope = try? Envelope(parsing: bytes) else { return 0 }
    check(envelope.encoded == bytes, "encoded differs from the parsed bytes")
    check(bytes.count <= Envelope.maxEncodedLength, "parsed an oversized envelope")
    _ = envelope.verifySignature()

    // Re-sign the same structure with a known sender key so decryption runs on fuzzed
    // headers and ciphertexts: it must fail cleanly (or, vanishingly rarely, succeed).
    var resigned = Array(bytes[0..<18]) + FuzzKeys.sender.signingKey + Array(bytes[50..<(bytes.count - 64)])
    resigned += FuzzKeys.sender.sign(resigned)
    guard let signed = try? Envelope(parsing: resigned) else {
        check(false, "re-signed envelope no longer parses")
        return 0
    }
    check(signed.verifySignature(), "a fresh signature does not verify")
    do {
        let plaintext = try signed.open(with: FuzzKeys.recipient)
        check(plaintext.count + 16 == signed.ciphertext.count, "plaintext length")
    } catch {
        check(error is WireError, "open threw a non-wire error: \(error)")
    }
    return 0
}
