import CSodium

/// Secret key material in its own heap buffer, wiped with `sodium_memzero` when released.
///
/// Immutable after creation. Its `description` never shows the bytes, so a stray
/// `print` or log interpolation cannot leak a key.
// @unchecked: the buffer is written once, in init, and only read after (deinit wipes it).
public final class SecretBytes: @unchecked Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    // Allocated with at least one byte so `baseAddress` is never nil.
    private let storage: UnsafeMutableRawBufferPointer
    /// Number of secret bytes.
    public let count: Int

    /// Creates a zeroed buffer of `count` bytes and lets `initializer` fill it.
    init(count: Int, _ initializer: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        Sodium.ensureInitialized()
        self.count = count
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: Swift.max(count, 1), alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        do {
            try initializer(UnsafeMutableRawBufferPointer(rebasing: storage[0..<count]))
        } catch {
            sodium_memzero(storage.baseAddress, storage.count)
            storage.deallocate()
            throw error
        }
    }

    /// Copies `bytes` into a new secret buffer. The caller should wipe its own copy.
    public convenience init(copying bytes: [UInt8]) {
        self.init(count: bytes.count) { dst in
            bytes.withUnsafeBytes { src in dst.copyMemory(from: src) }
        }
    }

    /// `count` random bytes from libsodium's CSPRNG.
    public convenience init(randomCount count: Int) {
        self.init(count: count) { dst in
            if let base = dst.baseAddress { randombytes_buf(base, dst.count) }
        }
    }

    deinit {
        sodium_memzero(storage.baseAddress, storage.count)
        storage.deallocate()
    }

    /// Read access to the secret bytes; do not let the pointer escape.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(rebasing: storage[0..<count]))
    }

    /// A copy as an array (for the identity file). Wipe it with ``wipe(_:)`` after use.
    func copyBytes() -> [UInt8] { withUnsafeBytes { Array($0) } }

    public var description: String { "<secret>" }
    public var debugDescription: String { "<secret>" }
}

/// Overwrites an array's bytes with zeros (`sodium_memzero`), e.g. a temporary copy of a key.
public func wipe(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { if let base = $0.baseAddress { sodium_memzero(base, $0.count) } }
}
