/// `router.hub_trust`, `router.trusted_hubs`, `router.network_key`, `router.hub_certificate`.
public struct HubTrustSettings: Sendable, Equatable {
    /// What a hub peer that is not trusted gets.
    public enum Mode: String, Sendable, Equatable, Codable {
        /// Untrusted hubs exchange bundles, but handing one over never ends our custody.
        case open
        /// Only hubs in `trusted_hubs` (or with a valid certificate) get anything.
        case list
        /// Only hubs with a certificate signed by `network_key` (or listed) get anything.
        case network
    }
    public var mode: Mode = .open
    /// Ed25519 public keys (32 bytes each) of hubs trusted by name.
    public var trustedHubs: [[UInt8]] = []
    /// The operator's network Ed25519 public key; hubs presenting its certificate are trusted.
    public var networkKey: [UInt8]?
    /// This hub's own certificate file (relative paths are inside the data directory).
    public var certificateFile: String?

    public init(mode: Mode = .open, trustedHubs: [[UInt8]] = [], networkKey: [UInt8]? = nil, certificateFile: String? = nil) {
        self.mode = mode
        self.trustedHubs = trustedHubs
        self.networkKey = networkKey
        self.certificateFile = certificateFile
    }
}
