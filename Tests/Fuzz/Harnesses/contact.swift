// libFuzzer harness: contact code URIs, payloads and names.
import YaokCrypto
import YaokWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzContact(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    let text = String(decoding: bytes, as: UTF8.self)
    if let code = try? ContactCode(parsing: text) {
        check((try? ContactCode(parsing: code.uri)) == code, "URI does not round-trip")
        check(code.userID == Hash.sha256(code.signingKey), "user ID not checked")
    }
    if let code = try? ContactCode(payload: bytes) {
        check(code.payload == bytes, "payload does not round-trip")
    }
    if let made = try? ContactCode.make(identity: FuzzKeys.sender, name: text) {
        let parsed = try? ContactCode(parsing: made.uri)
        check(parsed == made, "a made contact code does not parse back")
        check(made.name.unicodeScalars.count >= 2 && made.name.unicodeScalars.count <= 50, "name length not enforced")
    }
    return 0
}
