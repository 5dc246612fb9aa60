import CSodium

/// The identity of a bundle everywhere IDs are compared: in summaries, requests, custody
/// acknowledgements and refusals, in the hub's and the relay's stores, in the endpoint's
/// inbox.
///
/// `BLAKE2b-128("yaok-bundle-id-v1" ‖ sender user ID(32) ‖ message ID(16))`
/// (`crypto_generichash`, 16-byte output, no key).
///
/// Why: the message ID is chosen by the sender and visible to every neighbour, so deduping on
/// it alone let anyone squat a victim's ID with a bundle of their own. The sender's user ID
/// is bound to the envelope's signature, so only the holder of the sender's key can make a
/// second bundle with the same bundle ID.
public enum BundleID {
    /// 16 bytes: the size of a message ID, so frame layouts are unchanged.
    public static let length = 16
    static let domain = Array("yaok-bundle-id-v1".utf8)

    /// The bundle ID of the message `messageID` sent by `senderUserID`.
    public static func of(senderUserID: [UInt8], messageID: [UInt8]) -> [UInt8] {
        precondition(senderUserID.count == 32 && messageID.count == 16, "bundle ID inputs: 32-byte user ID and 16-byte message ID")
        return Hash.blake2b(domain + senderUserID + messageID, length: length)
    }
}
