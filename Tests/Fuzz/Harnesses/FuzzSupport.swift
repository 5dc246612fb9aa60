// Shared by every harness (compiled into each harness's main module).
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
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

/// A fuzz input read as a stream of small fields; past the end every read is nil.
struct FuzzStream {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { offset >= bytes.count }

    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// Two bytes, big-endian.
    mutating func u16() -> Int? {
        guard offset + 2 <= bytes.count else { return nil }
        defer { offset += 2 }
        return Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
    }

    /// A chunk: its length (2 bytes, big-endian), then that many bytes (fewer at the end of the input).
    mutating func chunk() -> [UInt8]? {
        guard let n = u16() else { return nil }
        let end = min(offset + n, bytes.count)
        defer { offset = end }
        return Array(bytes[offset..<end])
    }
}

/// The chunk form ``FuzzStream/chunk()`` reads, for seeds.
func chunk(_ bytes: [UInt8]) -> [UInt8] { [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xff)] + bytes }

/// `FUZZ_MAKE_SEEDS=<dir> fuzz-<harness>` writes the harness's seeds (made by the real encoders)
/// into <dir> and exits; call it from the harness's `LLVMFuzzerInitialize`.
func writeSeedsIfAsked(_ make: () throws -> [(String, [UInt8])]) {
    guard let dir = getenv("FUZZ_MAKE_SEEDS").map({ String(cString: $0) }) else { return }
    do {
        for (name, bytes) in try make() {
            precondition(bytes.count < 2048, "seed \(name) is \(bytes.count) bytes")
            guard let f = fopen(dir + "/" + name, "wb") else { fatalError("cannot write \(dir)/\(name)") }
            _ = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, f) }
            fclose(f)
            print("seed \(name): \(bytes.count) bytes")
        }
    } catch {
        fatalError("making seeds failed: \(error)")
    }
    exit(0)
}
