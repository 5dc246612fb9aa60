import YaokPluginKit

/// The frame types of routing (the TLV `type` byte): custody, hub sync, trust, time and the
/// relay. They share one byte space with the link frames of ``YaokPluginKit/FrameType``, which
/// a transport knows; these it carries without knowing them. Tabled in Docs/protocol.md.
public enum RoutingFrameType: UInt8, Sendable, CaseIterable {
    /// Custody acknowledgement: the receiver has durably stored the bundle (its 16-byte ``BundleID``).
    case custodyAck = 0x02
    /// An offer: the bundle IDs the sender holds. Between hubs, bundles cross a link only
    /// after the receiver asks for them with ``request``.
    case offer = 0x03
    /// A hub's signed announcement of the endpoints attached to it.
    case attachment = 0x04
    /// Custody refusal: the receiver will not take the bundle (ID + reason code).
    case custodyRefused = 0x05
    /// Request: the bundle IDs (same layout as ``offer``) the sender wants from an offer.
    case request = 0x06
    /// A phone's signed relay registration, carried by its hub to the relay.
    case registration = 0x07
    /// A hub's certificate signed by its network's key, sent on a hub link right after link up.
    case hubCertificate = 0x08
    /// The offered bundle IDs (same layout as ``offer``) the sender already holds.
    case held = 0x09
    /// Set reconciliation between hubs: one message of an exchange (Docs/protocol.md, reconcile).
    case reconcile = 0x0A
    /// Many custody acks in one frame (same layout as ``offer``); empty, it announces that
    /// the sender reads them. Sent only to a peer that announced.
    case custodyAcks = 0x0B
    /// The sender's time and where it comes from; sent first at link up by nodes that read
    /// hop header version 2 (Docs/protocol.md, clock).
    case clock = 0x0C
    /// A hub's answer to a phone's relay registration (Docs/protocol.md, registrationAnswer).
    case registrationAnswer = 0x0D
    /// A hub tells a phone about its internet relay (Docs/protocol.md, relay).
    case relay = 0x0E
}

extension TLVRecord {
    /// A routing frame of `type` carrying `value`.
    public init(_ type: RoutingFrameType, value: [UInt8]) {
        self.init(type: type.rawValue, value: value)
    }
}

/// A frame's type byte as the host reads it: a link frame, a routing frame, or a byte no
/// version of the protocol named. A `switch` over it names every frame type there is.
public enum HostFrameType: Sendable, Equatable {
    case link(FrameType)
    case routing(RoutingFrameType)
    case unknown(UInt8)

    public init(_ byte: UInt8) {
        if let type = FrameType(rawValue: byte) {
            self = .link(type)
        } else if let type = RoutingFrameType(rawValue: byte) {
            self = .routing(type)
        } else {
            self = .unknown(byte)
        }
    }
}
