/// Who is on the other end of a link.
public enum PeerRole: UInt32, Sendable, Codable, CustomStringConvertible {
    /// A phone or a `yaok` endpoint: a final recipient.
    case endpoint = 1
    /// Another Ya OK hub: a store-and-forward next hop.
    case hub = 2
    /// The internet relay: a store-and-forward next hop.
    case relay = 3

    public var description: String {
        switch self {
        case .endpoint: return "endpoint"
        case .hub: return "hub"
        case .relay: return "relay"
        }
    }
}
