import CSodium

/// One-time libsodium initialisation.
///
/// Swift initialises `static let` globals lazily and exactly once (thread-safe),
/// so every entry point calls ``Sodium/ensureInitialized()`` before using libsodium.
enum Sodium {
    private static let initResult: Int32 = sodium_init()

    /// Initialises libsodium if needed. `sodium_init` returns 0 on the first call and 1 after;
    /// -1 means libsodium cannot run (no entropy source), which nothing here can work around.
    static func ensureInitialized() {
        // A failed init is fatal by design: continuing would mean predictable keys.
        if initResult < 0 { fatalError("libsodium failed to initialise (sodium_init returned \(initResult))") }
    }
}

/// Constant-time equality for byte arrays of equal length (`sodium_memcmp`).
public func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in sodium_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 } }
}
