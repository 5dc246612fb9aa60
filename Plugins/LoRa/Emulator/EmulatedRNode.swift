import YaokLoRaPlugin

/// One emulated RNode: the host protocol of Docs/protocol.md §10.1 on one side, the
/// ``SimulatedAir`` on the other. It answers as the firmware does (echoes of what it applied,
/// clamped; the radio starts only when every setting is there) and can be made to misbehave
/// the ways a real device does.
public final class EmulatedRNode {
    public enum Fault: Sendable, Equatable {
        case none
        /// Never answers detect (not an RNode, or no firmware).
        case silent
        /// Reports this firmware version.
        case firmware(major: UInt8, minor: UInt8)
    }

    public let index: Int
    public var fault: Fault
    /// The most TX power the emulated chip gives (an SX1276 board: 17 dBm).
    public var maxTxPowerDBm: UInt8 = 17
    public private(set) var radioOn = false
    private var decoder = KISSDecoder()
    private var frequency: UInt32 = 0, bandwidth: UInt32 = 0, txPower: UInt8?, spreadingFactor: UInt8 = 0, codingRate: UInt8 = 5

    public init(index: Int, fault: Fault = .none) {
        self.index = index
        self.fault = fault
    }

    /// What its radio listens and sends on, once on.
    public var channel: SimulatedAir.Channel? {
        guard radioOn else { return nil }
        return SimulatedAir.Channel(frequencyHz: frequency, bandwidthHz: bandwidth, spreadingFactor: spreadingFactor, codingRate: codingRate)
    }

    /// The host wrote `bytes`: what the device answers, and the packets it puts on the air.
    public func fromHost(_ bytes: [UInt8]) -> (reply: [UInt8], transmit: [[UInt8]]) {
        var reply: [UInt8] = [], transmit: [[UInt8]] = []
        for f in decoder.feed(bytes) {
            let p = f.payload
            guard fault != .silent, let command = RNodeCommand(rawValue: f.command), !p.isEmpty else { continue }
            func echo(_ payload: [UInt8]) { reply += KISS.frame(command: f.command, payload: payload) }
            switch command {
            case .detect where p == [0x73]: echo([0x46])
            case .firmwareVersion:
                if case .firmware(let major, let minor) = fault { echo([major, minor]) } else { echo([0x01, 0x56]) }
            case .frequency where p.count == 4:
                frequency = p.reduce(0) { $0 << 8 | UInt32($1) }
                echo(RNodeRequest.bigEndian(frequency))
            case .bandwidth where p.count == 4:
                bandwidth = p.reduce(0) { $0 << 8 | UInt32($1) }
                echo(RNodeRequest.bigEndian(bandwidth))
            case .txPower:
                txPower = min(p[0], maxTxPowerDBm)
                echo([txPower!])
            case .spreadingFactor:
                spreadingFactor = min(max(p[0], 5), 12)
                echo([spreadingFactor])
            case .codingRate:
                codingRate = min(max(p[0], 5), 8)
                echo([codingRate])
            case .longTermAirtimeLimit where p.count == 2: echo(p)
            case .radioState:
                radioOn = p[0] == 0x01 && frequency != 0 && bandwidth != 0 && txPower != nil && spreadingFactor != 0
                echo([radioOn ? 0x01 : 0x00])
            case .ready: echo([0x01])
            case .leave: radioOn = false
            case .data where radioOn: transmit.append(p)
            case .data: reply += KISS.frame(command: RNodeCommand.error.rawValue, payload: [0x02])
            default: break
            }
        }
        return (reply, transmit)
    }

    /// A frame reached this radio whole: the three frames the device sends its host, or
    /// nothing when its radio is off or set to another channel.
    public func received(_ r: SimulatedAir.Reception) -> [UInt8] {
        guard channel == r.channel else { return [] }
        return KISS.frame(command: RNodeCommand.statRSSI.rawValue, payload: [UInt8(clamping: r.rssiDBm + 157)])
            + KISS.frame(command: RNodeCommand.statSNR.rawValue, payload: [UInt8(bitPattern: Int8(clamping: Int(r.snrDB * 4)))])
            + KISS.frame(command: RNodeCommand.data.rawValue, payload: r.bytes)
    }

    /// What the firmware says when it has booted.
    public static let bootFrame = KISS.frame(command: RNodeCommand.reset.rawValue, payload: [0xF8])
}
