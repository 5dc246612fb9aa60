import CSodium

/// The receipt proofs a message commits to, so that a delivery receipt can be checked
/// with two hashes instead of an Ed25519 verification (Docs/protocol.md, "Receipt proofs").
///
/// From the message key (which only the sender and the recipient can compute):
///
///     read secret   r = BLAKE2b-128(key = message key, "yaok-receipt-read-v1")
///     delivery proof d = BLAKE2b-128("yaok-receipt-delivery-v1" ‖ r)
///     commitment     c = BLAKE2b-128("yaok-receipt-commit-v1" ‖ d)
///
/// (`crypto_generichash`, 16-byte outputs; keyed BLAKE2b is its PRF use.) The sender puts
/// `c` into the signed envelope; the recipient, after decrypting, reveals `d` as its
/// delivery receipt's message ID. Anyone holding the message can check
/// `commitment(of: d) == c`; nobody without the message key can find `d` (a 128-bit
/// preimage). `r` stays with the recipient: a later version may reveal it for a read
/// receipt, which then also proves delivery, while a delivery proof never yields it.
public enum ReceiptChain {
    /// Every value in the chain is 16 bytes, the size of a message ID.
    public static let length = 16
    static let readLabel = Array("yaok-receipt-read-v1".utf8)
    static let deliveryLabel = Array("yaok-receipt-delivery-v1".utf8)
    static let commitLabel = Array("yaok-receipt-commit-v1".utf8)

    /// The read secret `r` of a message key (held in a wiped buffer by the caller).
    static func readSecret(messageKey: SecretBytes) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: length)
        messageKey.withUnsafeBytes { k in
            readLabel.withUnsafeBufferPointer { m in
                _ = crypto_generichash(&out, length, m.baseAddress, UInt64(m.count),
                                       k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
            }
        }
        return out
    }

    /// `d` from `r`.
    public static func deliveryProof(readSecret r: [UInt8]) -> [UInt8] { hash(deliveryLabel, r) }

    /// `c` from `d`: what a hub compares with the message's commitment.
    public static func commitment(deliveryProof d: some Collection<UInt8>) -> [UInt8] { hash(commitLabel, d) }

    private static func hash(_ label: [UInt8], _ value: some Collection<UInt8>) -> [UInt8] {
        Hash.blake2b(label + Array(value), length: length)
    }
}
