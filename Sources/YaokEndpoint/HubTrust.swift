import YaokWire
import enum YaokPluginKit.Hex

/// Which hubs this phone trusts with custody of its messages and with collecting its
/// internet mail (Docs/protocol.md §5, "Which hubs a phone trusts"). Any other hub is an
/// untrusted carrier: its custody acknowledgements are not final and it gets no relay
/// registration.
public struct HubTrust: Sendable, Equatable {
    /// Hub signing keys the owner pinned.
    public var pinnedHubs: Set<[UInt8]>
    /// Network keys whose hub certificates the owner accepts.
    public var networks: Set<[UInt8]>
    /// Every hub is trusted (a lab, or one's own hub).
    public var anyHub: Bool

    /// Trusts no hub: every hub is a carrier.
    public static let none = HubTrust()

    /// How far the phone's clock may be outside a certificate's validity: certificates last
    /// months, and a phone's clock is rarely a day off.
    public static let certificateClockToleranceMs: Int64 = 24 * 3_600_000

    public init(pinnedHubs: Set<[UInt8]> = [], networks: Set<[UInt8]> = [], anyHub: Bool = false) {
        self.pinnedHubs = pinnedHubs
        self.networks = networks
        self.anyHub = anyHub
    }

    /// Why a trust setting is not usable.
    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case badKey(option: String, value: String)

        public var description: String {
            switch self {
            case .badKey(let option, let value):
                "\(option) takes a 64-hex-digit Ed25519 key\(option == "--trust-hub" ? " or `any`" : ""), not \"\(value)\""
            }
        }
    }

    /// From the command line: `--trust-hub` values (keys or `any`) and `--hub-network` keys.
    public init(trustHub: [String], hubNetwork: [String]) throws {
        self.init()
        for value in trustHub {
            if value == "any" { anyHub = true; continue }
            guard let key = Hex.decode(value), key.count == 32 else { throw ParseError.badKey(option: "--trust-hub", value: value) }
            pinnedHubs.insert(key)
        }
        for value in hubNetwork {
            guard let key = Hex.decode(value), key.count == 32 else { throw ParseError.badKey(option: "--hub-network", value: value) }
            networks.insert(key)
        }
    }

    /// Whether the hub with this proven key is trusted without a certificate.
    public func trusts(hubKey: [UInt8]) -> Bool { anyHub || pinnedHubs.contains(hubKey) }

    /// Whether `certificate` (a hubCertificate frame's value) admits the hub with this proven
    /// key to one of the configured networks at `nowMs`.
    public func trusts(certificate: [UInt8], hubKey: [UInt8], nowMs: Int64) -> Bool {
        guard !networks.isEmpty, let cert = try? HubCertificate(parsing: certificate) else { return false }
        return networks.contains { network in
            (try? cert.check(networkKey: network, hubKey: hubKey, nowMs: nowMs, clockSkewMs: Self.certificateClockToleranceMs)) != nil
        }
    }
}
