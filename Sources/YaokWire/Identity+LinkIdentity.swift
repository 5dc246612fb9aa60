import YaokCrypto
import YaokPluginKit

/// A full identity can run the link handshake directly (endpoints, tests).
extension Identity: LinkIdentity {
    // `sign(_:)` is Identity's own (non-throwing) method.
    public func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
        SigningKeyPair.verify(signature: signature, message: message, publicKey: publicKey)
    }

    public func randomBytes(_ count: Int) -> [UInt8] { Random.bytes(count) }
}
