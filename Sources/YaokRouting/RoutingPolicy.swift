import YaokPluginKit
import YaokStore

/// A neighbour (hub or relay link) as the routing policy sees it for one bundle.
public struct NeighbourCandidate: Sendable, Equatable {
    public var key: LinkKey
    public var role: PeerRole
    public var peerID: [UInt8]
    public var cost: Int
    /// The neighbour already holds the bundle (it offered it, took custody, or sent it to us).
    public var holdsBundle: Bool
    /// The bundle's recipient was last announced as attached to this neighbour.
    public var isRecipientAttachment: Bool
}

/// The router's seam for choosing next hops when the recipient is not attached here.
///
/// Direct delivery to an attached recipient always comes first and is not the
/// policy's business; the policy decides which hubs and relays get a copy.
public protocol RoutingPolicy: Sendable {
    /// A short name for status.
    var name: String { get }
    /// The neighbours to offer `bundle` to now. `copiesHandedOut` is how many next hops
    /// already took custody of it from this hub.
    func nextHops(for bundle: StoredBundle, candidates: [NeighbourCandidate], copiesHandedOut: Int) -> [LinkKey]
    /// True when the policy bounds how many copies leave this hub: then a neighbour's request
    /// is served only if the policy would hand it a copy now (an offer made earlier may have
    /// been overtaken by copies sent elsewhere, and a hub may ask for IDs it was never offered).
    var boundsCopies: Bool { get }
}

extension RoutingPolicy {
    public var boundsCopies: Bool { false }
}

/// Epidemic routing: every neighbour that lacks the bundle gets a copy; hop limit and
/// expiry bound the spread. If the recipient's hub is a neighbour, it is offered first.
public struct EpidemicPolicy: RoutingPolicy {
    public init() {}
    public var name: String { "epidemic" }

    public func nextHops(for bundle: StoredBundle, candidates: [NeighbourCandidate], copiesHandedOut: Int) -> [LinkKey] {
        candidates.filter { !$0.holdsBundle }
            .sorted { ($0.isRecipientAttachment ? 0 : 1, $0.cost) < ($1.isRecipientAttachment ? 0 : 1, $1.cost) }
            .map(\.key)
    }
}

/// Source spray-and-wait: the hub that first took the bundle from its sender hands out at
/// most `copies - 1` copies to hub neighbours; every other hub waits until the recipient's
/// own hub (by attachment announcement) is a neighbour. The relay, a well-connected
/// store-and-forward node, is always offered a copy.
public struct SprayAndWaitPolicy: RoutingPolicy {
    public let copies: Int
    public init(copies: Int) { self.copies = max(1, copies) }
    public var name: String { "spray-and-wait(\(copies))" }
    public var boundsCopies: Bool { true }

    public func nextHops(for bundle: StoredBundle, candidates: [NeighbourCandidate], copiesHandedOut: Int) -> [LinkKey] {
        let open = candidates.filter { !$0.holdsBundle }
        var chosen = open.filter { $0.isRecipientAttachment || $0.role == .relay }.map(\.key)
        if bundle.hopCount == 0 {
            let budget = max(0, copies - 1 - copiesHandedOut)
            chosen += open.filter { !$0.isRecipientAttachment && $0.role == .hub }
                .sorted { $0.cost < $1.cost }
                .prefix(budget)
                .map(\.key)
        }
        return chosen
    }
}

/// A link, named by its transport instance and the transport's link ID.
public struct LinkKey: Hashable, Sendable, CustomStringConvertible {
    public var transport: String
    public var link: LinkID
    public init(transport: String, link: LinkID) {
        self.transport = transport
        self.link = link
    }
    public var description: String { "\(transport)/\(link)" }
}
