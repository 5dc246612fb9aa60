/// The hub's identity as plugin processes see it: its public keys, and signing with its secret
/// key, which never leaves the hub (verification and randomness need no secret and are answered
/// inside each plugin process). In a file of its own, so the fuzz harness of the plugin-process
/// protocol builds it with CarrierLinks.swift alone (Tests/Fuzz).
public struct HostCrypto: Sendable {
    public var signingKey: [UInt8]
    public var kxKey: [UInt8]
    public var sign: @Sendable ([UInt8]) -> [UInt8]

    public init(signingKey: [UInt8], kxKey: [UInt8], sign: @escaping @Sendable ([UInt8]) -> [UInt8]) {
        self.signingKey = signingKey
        self.kxKey = kxKey
        self.sign = sign
    }
}
