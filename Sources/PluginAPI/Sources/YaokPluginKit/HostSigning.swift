/// What the hub signs with its key when a transport plugin asks (`yaok_host_api.sign`):
/// only what a transport may claim, each under its own context (Docs/plugin-protocol.md,
/// "Signing"). Anything else is refused: the plugin gets no signature.
public enum HostSigning {
    /// A link handshake's identity (``SecureLink``): `responderContext` or `initiatorContext`,
    /// the handshake hash (32), then role (1, always `hub`), the hub's Ed25519 and X25519 keys.
    public static let linkIdentityLength = 32 + 1 + 32 + 32
    /// The mesh plugin's discovery beacon starts with these bytes (then version 1, the hub's
    /// two keys, a port and a time); only a transport of kind `mesh` gets it signed.
    public static let meshBeaconMagic: [UInt8] = Array("YKMB".utf8)
    public static let meshBeaconSignedLength = 4 + 1 + 32 + 32 + 2 + 8
}
