/// The RNode host protocol's command bytes this transport uses (Docs/protocol.md §10.1).
public enum RNodeCommand: UInt8, Sendable {
    case data = 0x00
    case frequency = 0x01
    case bandwidth = 0x02
    case txPower = 0x03
    case spreadingFactor = 0x04
    case codingRate = 0x05
    case radioState = 0x06
    case detect = 0x08
    case leave = 0x0A
    case shortTermAirtimeLimit = 0x0B
    case longTermAirtimeLimit = 0x0C
    case ready = 0x0F
    case statRSSI = 0x23
    case statSNR = 0x24
    case statChannelTime = 0x25
    case statPhyParams = 0x26
    case firmwareVersion = 0x50
    case reset = 0x55
    case error = 0x90
}

/// The radio settings a hub asks its RNode for.
public struct RNodeRadioSettings: Sendable, Equatable {
    public var frequencyHz: UInt32
    public var bandwidthHz: UInt32
    public var txPowerDBm: UInt8
    /// 7...12.
    public var spreadingFactor: UInt8
    /// The coding rate's denominator: 5 (4/5) ... 8 (4/8).
    public var codingRate: UInt8
    /// The most of any hour the device itself may transmit, in hundredths of a percent
    /// (100 = 1 %); the plugin's own ledger is the first fence, this the second.
    public var longTermAirtimeLimit: UInt16

    public init(frequencyHz: UInt32, bandwidthHz: UInt32, txPowerDBm: UInt8, spreadingFactor: UInt8, codingRate: UInt8,
                longTermAirtimeLimit: UInt16) {
        self.frequencyHz = frequencyHz
        self.bandwidthHz = bandwidthHz
        self.txPowerDBm = txPowerDBm
        self.spreadingFactor = spreadingFactor
        self.codingRate = codingRate
        self.longTermAirtimeLimit = longTermAirtimeLimit
    }

    /// How far the device may round the frequency it applies.
    public static let frequencyToleranceHz: UInt32 = 100
}

/// What the host writes to an RNode.
public enum RNodeRequest {
    /// The firmware's oldest version this transport speaks to: 1.52.
    public static let minimumFirmware = (major: UInt8(1), minor: UInt8(52))
    /// Largest packet per DATA frame we send: one LoRa frame, so the device never splits it.
    public static let maxPacket = 254

    /// Detect, then ask for the firmware version (the device answers only frames with a payload byte).
    public static let detect: [UInt8] = KISS.frame(command: RNodeCommand.detect.rawValue, payload: [0x73])
        + KISS.frame(command: RNodeCommand.firmwareVersion.rawValue, payload: [0x00])

    /// Every setting, then the radio on: the device echoes each with the value it applied.
    public static func configure(_ s: RNodeRadioSettings) -> [UInt8] {
        KISS.frame(command: RNodeCommand.frequency.rawValue, payload: bigEndian(s.frequencyHz))
            + KISS.frame(command: RNodeCommand.bandwidth.rawValue, payload: bigEndian(s.bandwidthHz))
            + KISS.frame(command: RNodeCommand.txPower.rawValue, payload: [s.txPowerDBm])
            + KISS.frame(command: RNodeCommand.spreadingFactor.rawValue, payload: [s.spreadingFactor])
            + KISS.frame(command: RNodeCommand.codingRate.rawValue, payload: [s.codingRate])
            + KISS.frame(command: RNodeCommand.longTermAirtimeLimit.rawValue,
                         payload: [UInt8(s.longTermAirtimeLimit >> 8), UInt8(s.longTermAirtimeLimit & 0xFF)])
            + KISS.frame(command: RNodeCommand.radioState.rawValue, payload: [0x01])
    }

    /// Radio off, then "the host has gone".
    public static let leave: [UInt8] = KISS.frame(command: RNodeCommand.radioState.rawValue, payload: [0x00])
        + KISS.frame(command: RNodeCommand.leave.rawValue, payload: [0xFF])

    /// One packet to transmit; nil when it is empty or longer than ``maxPacket``.
    public static func data(_ packet: [UInt8]) -> [UInt8]? {
        guard !packet.isEmpty, packet.count <= maxPacket else { return nil }
        return KISS.frame(command: RNodeCommand.data.rawValue, payload: packet)
    }

    package static func bigEndian(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
}

/// The device's channel statistics (STAT_CHTM, ESP32 and nRF52 RNodes).
public struct RNodeChannelStats: Sendable, Equatable {
    /// Own airtime over about 15 s and over the last hour, as fractions (0.01 = 1 %).
    public var airtimeShort: Double
    public var airtimeLong: Double
    /// Own airtime plus carrier heard from others, same windows.
    public var channelLoadShort: Double
    public var channelLoadLong: Double
    public var rssiDBm: Int
    public var noiseFloorDBm: Int
    /// Nil when the device reports none.
    public var interferenceDBm: Int?
}

/// What a device said.
public enum RNodeEvent: Sendable, Equatable {
    case detected
    case firmwareVersion(major: UInt8, minor: UInt8)
    case frequency(UInt32)
    case bandwidth(UInt32)
    case txPower(UInt8)
    case spreadingFactor(UInt8)
    case codingRate(UInt8)
    case longTermAirtimeLimit(UInt16)
    case radioState(on: Bool)
    case ready(Bool)
    /// A received packet with the signal it arrived with (nil when the device sent none before it).
    case packet([UInt8], rssiDBm: Int?, snrDB: Double?)
    case channelStats(RNodeChannelStats)
    /// The device (re)booted.
    case booted
    case error(RNodeError)
    /// A frame this transport does not use, or one too short for its command.
    case ignored(command: UInt8)
}

/// An RNode's ERROR codes.
public enum RNodeError: Sendable, Equatable, CustomStringConvertible {
    case radioInitFailed
    case transmitFailed
    case memoryLow
    case modemTimeout
    case other(UInt8)

    init(code: UInt8) {
        switch code {
        case 0x01: self = .radioInitFailed
        case 0x02: self = .transmitFailed
        case 0x05: self = .memoryLow
        case 0x06: self = .modemTimeout
        default: self = .other(code)
        }
    }

    /// Whether the radio must be brought up again (the other errors are reported and counted).
    public var needsBringUp: Bool {
        switch self {
        case .radioInitFailed, .transmitFailed, .other: return true
        case .memoryLow, .modemTimeout: return false
        }
    }

    public var description: String {
        switch self {
        case .radioInitFailed: return "the radio failed to start"
        case .transmitFailed: return "a transmission failed"
        case .memoryLow: return "the device is low on memory"
        case .modemTimeout: return "the modem did not finish a transmission (the device reboots)"
        case .other(let code): return "device error 0x\(String(code, radix: 16))"
        }
    }
}

/// Reads a device's frames as events. Holds only the signal figures the device sends just
/// before each packet; every length is checked, none is trusted.
public struct RNodeReader: Sendable {
    private var rssi: Int?
    private var snr: Double?

    public init() {}

    public mutating func event(_ f: KISSFrame) -> RNodeEvent {
        let p = f.payload
        guard let command = RNodeCommand(rawValue: f.command) else { return .ignored(command: f.command) }
        switch command {
        case .data:
            defer { rssi = nil; snr = nil }
            guard !p.isEmpty else { return .ignored(command: f.command) }
            return .packet(p, rssiDBm: rssi, snrDB: snr)
        case .statRSSI:
            guard p.count == 1 else { return .ignored(command: f.command) }
            rssi = Int(p[0]) - 157
            return .ignored(command: f.command)
        case .statSNR:
            guard p.count == 1 else { return .ignored(command: f.command) }
            snr = Double(Int8(bitPattern: p[0])) / 4
            return .ignored(command: f.command)
        case .detect:
            return p == [0x46] ? .detected : .ignored(command: f.command)
        case .firmwareVersion:
            return p.count == 2 ? .firmwareVersion(major: p[0], minor: p[1]) : .ignored(command: f.command)
        case .frequency, .bandwidth:
            guard p.count == 4 else { return .ignored(command: f.command) }
            let v = p.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            return command == .frequency ? .frequency(v) : .bandwidth(v)
        case .txPower:
            return p.count == 1 ? .txPower(p[0]) : .ignored(command: f.command)
        case .spreadingFactor:
            return p.count == 1 ? .spreadingFactor(p[0]) : .ignored(command: f.command)
        case .codingRate:
            return p.count == 1 ? .codingRate(p[0]) : .ignored(command: f.command)
        case .longTermAirtimeLimit:
            return p.count == 2 ? .longTermAirtimeLimit(UInt16(p[0]) << 8 | UInt16(p[1])) : .ignored(command: f.command)
        case .radioState:
            return p.count == 1 ? .radioState(on: p[0] == 0x01) : .ignored(command: f.command)
        case .ready:
            return p.count == 1 ? .ready(p[0] == 0x01) : .ignored(command: f.command)
        case .statChannelTime:
            guard p.count == 11 else { return .ignored(command: f.command) }
            func fraction(_ i: Int) -> Double { Double(UInt16(p[i]) << 8 | UInt16(p[i + 1])) / 10_000 }
            return .channelStats(RNodeChannelStats(
                airtimeShort: fraction(0), airtimeLong: fraction(2), channelLoadShort: fraction(4), channelLoadLong: fraction(6),
                rssiDBm: Int(p[8]) - 157, noiseFloorDBm: Int(p[9]) - 157, interferenceDBm: p[10] == 0xFF ? nil : Int(p[10]) - 157))
        case .reset:
            return p == [0xF8] ? .booted : .ignored(command: f.command)
        case .error:
            return p.count == 1 ? .error(RNodeError(code: p[0])) : .ignored(command: f.command)
        case .shortTermAirtimeLimit, .leave, .statPhyParams:
            return .ignored(command: f.command)
        }
    }
}

/// Compares what the device applied with what was asked; one line per difference, naming
/// the config key (empty: the radio runs as configured).
public func radioMismatches(asked: RNodeRadioSettings, applied: [RNodeEvent]) -> [String] {
    var frequency: UInt32?, bandwidth: UInt32?, power: UInt8?, sf: UInt8?, cr: UInt8?, on: Bool?
    for e in applied {
        switch e {
        case .frequency(let v): frequency = v
        case .bandwidth(let v): bandwidth = v
        case .txPower(let v): power = v
        case .spreadingFactor(let v): sf = v
        case .codingRate(let v): cr = v
        case .radioState(let v): on = v
        default: break
        }
    }
    var out: [String] = []
    func check<T: Equatable>(_ key: String, _ got: T?, _ want: T, _ unit: String, close: (T, T) -> Bool = { $0 == $1 }) {
        guard let got else { return out.append("\(key): the device did not confirm \(want)\(unit)") }
        if !close(got, want) { out.append("\(key): asked \(want)\(unit), the device applies \(got)\(unit)") }
    }
    check("frequency_hz", frequency, asked.frequencyHz, " Hz") { a, b in (a > b ? a - b : b - a) <= RNodeRadioSettings.frequencyToleranceHz }
    check("bandwidth_hz", bandwidth, asked.bandwidthHz, " Hz")
    check("tx_power_dbm", power, asked.txPowerDBm, " dBm")
    check("spreading_factor", sf, asked.spreadingFactor, "")
    check("coding_rate", cr, asked.codingRate, "")
    if on != true { out.append("the radio did not start (parameters rejected, or the device is not provisioned)") }
    return out
}
