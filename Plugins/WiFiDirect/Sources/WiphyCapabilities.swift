/// nl80211 numbers this plugin reads (values from linux/nl80211.h, a stable kernel ABI).
/// Kept here so the parser and its tests need no C headers.
public enum NL80211 {
    public static let attrWiphy: UInt16 = 1            // NL80211_ATTR_WIPHY (u32)
    public static let attrWiphyName: UInt16 = 2        // NL80211_ATTR_WIPHY_NAME (string)
    public static let attrSupportedIftypes: UInt16 = 32 // NL80211_ATTR_SUPPORTED_IFTYPES (nested flags)
    public static let attrWiphyBands: UInt16 = 22      // NL80211_ATTR_WIPHY_BANDS (nested)
    public static let bandAttrFreqs: UInt16 = 1        // NL80211_BAND_ATTR_FREQS (nested)
    public static let frequencyAttrFreq: UInt16 = 1    // NL80211_FREQUENCY_ATTR_FREQ (u32, MHz)
    public static let frequencyAttrDisabled: UInt16 = 2 // NL80211_FREQUENCY_ATTR_DISABLED (flag)
    public static let frequencyAttrNoIR: UInt16 = 3    // NL80211_FREQUENCY_ATTR_NO_IR (flag)
}

/// Interface types a wiphy can create (enum nl80211_iftype).
public enum WiphyInterfaceType: UInt16, Sendable, CaseIterable, CustomStringConvertible {
    case adhoc = 1, station = 2, ap = 3, apVLAN = 4, wds = 5, monitor = 6, meshPoint = 7
    case p2pClient = 8, p2pGO = 9, p2pDevice = 10, ocb = 11, nan = 12

    public var description: String {
        switch self {
        case .adhoc: return "adhoc"
        case .station: return "station"
        case .ap: return "ap"
        case .apVLAN: return "ap-vlan"
        case .wds: return "wds"
        case .monitor: return "monitor"
        case .meshPoint: return "mesh-point"
        case .p2pClient: return "p2p-client"
        case .p2pGO: return "p2p-go"
        case .p2pDevice: return "p2p-device"
        case .ocb: return "ocb"
        case .nan: return "nan"
        }
    }
}

/// One radio (wiphy) as nl80211 describes it: the facts the plugin needs.
public struct Wiphy: Sendable, Equatable {
    public var index: UInt32
    public var name: String
    public var interfaceTypes: Set<WiphyInterfaceType>
    /// Usable channel centre frequencies in MHz (disabled ones left out), sorted.
    public var frequencies: [UInt32]
    /// Frequencies where the radio may not initiate radiation (NO_IR): a GO cannot start there.
    public var noIRFrequencies: [UInt32]

    public init(index: UInt32, name: String = "", interfaceTypes: Set<WiphyInterfaceType> = [],
                frequencies: [UInt32] = [], noIRFrequencies: [UInt32] = []) {
        self.index = index
        self.name = name
        self.interfaceTypes = interfaceTypes
        self.frequencies = frequencies
        self.noIRFrequencies = noIRFrequencies
    }

    /// Whether the radio can be a P2P group owner.
    public var supportsP2PGO: Bool { interfaceTypes.contains(.p2pGO) }

    /// The 2.4 GHz social channels (1, 6, 11) this radio may start a group on.
    public var socialFrequencies: [UInt32] {
        [2412, 2437, 2462].filter { frequencies.contains($0) && !noIRFrequencies.contains($0) }
    }

    /// One line for status: `phy0: p2p-go,p2p-client,p2p-device; 2412-2484 MHz (14 channels)`.
    public var summary: String {
        let types = interfaceTypes.filter { [.p2pGO, .p2pClient, .p2pDevice].contains($0) }
            .map(\.description).sorted().joined(separator: ",")
        let range = frequencies.isEmpty ? "no channels" : "\(frequencies.first!)-\(frequencies.last!) MHz (\(frequencies.count) channels)"
        return "\(name.isEmpty ? "phy#\(index)" : name): \(types.isEmpty ? "no p2p" : types); \(range)"
    }
}

/// Folds the messages of a (split) NL80211_CMD_GET_WIPHY dump into one ``Wiphy`` per radio.
/// A split dump sends several messages per wiphy, each with some of its attributes.
public struct WiphyDumpParser: Sendable {
    private var byIndex: [UInt32: Wiphy] = [:]
    private var order: [UInt32] = []

    public init() {}

    /// Adds one message's attributes (the generic netlink payload after the genl header).
    public mutating func add(messageAttributes bytes: [UInt8]) throws {
        let attributes = try NetlinkAttribute.parse(bytes)
        guard let index = attributes.first(where: { $0.type == NL80211.attrWiphy })?.u32 else { return }
        var w = byIndex[index] ?? Wiphy(index: index)
        if byIndex[index] == nil { order.append(index) }
        for a in attributes {
            switch a.type {
            case NL80211.attrWiphyName:
                w.name = a.string
            case NL80211.attrSupportedIftypes:
                for t in try a.nested() {
                    if let type = WiphyInterfaceType(rawValue: t.type) { w.interfaceTypes.insert(type) }
                }
            case NL80211.attrWiphyBands:
                for band in try a.nested() {
                    for bandAttr in try band.nested() where bandAttr.type == NL80211.bandAttrFreqs {
                        for freq in try bandAttr.nested() {
                            let fa = try freq.nested()
                            guard let mhz = fa.first(where: { $0.type == NL80211.frequencyAttrFreq })?.u32 else { continue }
                            if fa.contains(where: { $0.type == NL80211.frequencyAttrDisabled }) { continue }
                            if !w.frequencies.contains(mhz) { w.frequencies.append(mhz) }
                            if fa.contains(where: { $0.type == NL80211.frequencyAttrNoIR }), !w.noIRFrequencies.contains(mhz) {
                                w.noIRFrequencies.append(mhz)
                            }
                        }
                    }
                }
            default:
                break
            }
        }
        w.frequencies.sort()
        w.noIRFrequencies.sort()
        byIndex[index] = w
    }

    /// Every wiphy seen, in dump order.
    public var wiphys: [Wiphy] { order.compactMap { byIndex[$0] } }
}
