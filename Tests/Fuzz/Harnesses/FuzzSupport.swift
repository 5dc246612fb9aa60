// Shared by every harness (compiled into each harness's main module).
import YaokCrypto

/// Crashes (so libFuzzer records the input) when an invariant does not hold.
@inline(__always)
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
           file: StaticString = #fileID, line: UInt = #line) {
    if !condition() { fatalError("invariant violated: \(message())", file: file, line: line) }
}

/// The fixed identities of the test vectors (Docs/protocol.md, section 8).
enum FuzzKeys {
    static let sender = try! Identity(ed25519Seed: [UInt8](repeating: 0x01, count: 32), x25519Secret: [UInt8](repeating: 0x02, count: 32))
    static let recipient = try! Identity(ed25519Seed: [UInt8](repeating: 0x03, count: 32), x25519Secret: [UInt8](repeating: 0x04, count: 32))
    static let hub = try! Identity(ed25519Seed: [UInt8](repeating: 0x05, count: 32), x25519Secret: [UInt8](repeating: 0x06, count: 32))
}

@inline(__always)
func input(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}
