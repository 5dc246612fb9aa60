import Foundation
import YaokPluginKit

/// The `_yaok._tcp` service the group owner advertises through P2P service discovery, in the
/// `P2P_SERVICE_ADD bonjour <query hex> <RDATA hex>` form wpa_supplicant takes (DNS wire
/// format; `c00c` is the compressed `_tcp.local.` and `c027` the compressed `_yaok._tcp.local.`
/// as in wpa_supplicant's README-P2P examples).
public enum P2PService {
    static func label(_ s: String) -> [UInt8] {
        let bytes = Array(s.utf8.prefix(63))
        return [UInt8(bytes.count)] + bytes
    }

    /// The bonjour key of the PTR record: `_yaok._tcp.local.` PTR, version 1.
    static let ptrKey: [UInt8] = label("_yaok") + [0xc0, 0x0c, 0x00, 0x0c, 0x01]

    /// PTR `_yaok._tcp.local.` → `<instance>._yaok._tcp.local.`
    public static func ptrCommand(instance: String) -> String {
        let rdata = label(instance) + [0xc0, 0x27]
        return "P2P_SERVICE_ADD bonjour \(Hex.encode(ptrKey)) \(Hex.encode(rdata))"
    }

    static func txtKey(instance: String) -> [UInt8] { label(instance) + label("_yaok") + [0xc0, 0x0c, 0x00, 0x10, 0x01] }

    /// TXT `<instance>._yaok._tcp.local.` → `port=<port>` (the phone connects to the group owner's address on it).
    public static func txtCommand(instance: String, port: UInt16) -> String {
        "P2P_SERVICE_ADD bonjour \(Hex.encode(txtKey(instance: instance))) \(Hex.encode(label("port=\(port)")))"
    }

    /// A Service Query TLV (Wi-Fi P2P spec 6.1.4.1, as `P2P_SERV_DISC_REQ` takes it in hex):
    /// length (2 bytes, little endian, counting what follows), protocol 1 (Bonjour), transaction
    /// id, then the query: the bonjour key.
    static func queryTLV(_ key: [UInt8], transaction: UInt8) -> [UInt8] {
        let length = key.count + 2
        return [UInt8(length & 0xff), UInt8(length >> 8), 0x01, transaction] + key
    }

    /// The phone's query for every `_yaok._tcp` instance (PTR), for
    /// `P2P_SERV_DISC_REQ 00:00:00:00:00:00 <this>` (sent to every peer the find meets).
    public static var ptrQueryHex: String { Hex.encode(queryTLV(ptrKey, transaction: 1)) }

    /// The query for one instance's TXT record (its port), sent to that hub's device address.
    public static func txtQueryHex(instance: String) -> String { Hex.encode(queryTLV(txtKey(instance: instance), transaction: 2)) }
}

/// What a `P2P-SERV-DISC-RESP` event says about `_yaok._tcp`: instances (from PTR answers) and
/// ports (from TXT answers). Parsed with bounds checks: bad bytes give an error, never a trap.
public struct P2PServiceResponse: Sendable, Equatable {
    /// The responding peer's P2P device address.
    public var peer: String
    /// `_yaok._tcp` instance names the peer advertises.
    public var instances: [String] = []
    /// `port=` values from TXT records, by instance name.
    public var ports: [String: UInt16] = [:]
    /// Response TLVs whose status was not success (1: protocol not available, 2: no such
    /// service, 3: bad request), by transaction id.
    public var failures: [UInt8: UInt8] = [:]

    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case notAResponse(String)
        case badHex
        case truncated(offset: Int)
        public var description: String {
            switch self {
            case .notAResponse(let name): return "\(name) is not a P2P-SERV-DISC-RESP event"
            case .badHex: return "the response TLVs are not hex"
            case .truncated(let offset): return "service response truncated at byte \(offset)"
            }
        }
    }

    /// Parses `P2P-SERV-DISC-RESP <peer> <update indicator> <TLVs hex>`.
    public init(event: WPAEvent) throws {
        guard event.name == "P2P-SERV-DISC-RESP", event.arguments.count >= 3 else { throw ParseError.notAResponse(event.name) }
        guard let bytes = Hex.decode(event.arguments[2]) else { throw ParseError.badHex }
        try self.init(peer: event.arguments[0], tlvs: bytes)
    }

    /// Parses response TLVs: length (2, LE) | protocol | transaction | status | data; for
    /// Bonjour the data is the key (DNS name, type, version) then the record's RDATA.
    public init(peer: String, tlvs bytes: [UInt8]) throws {
        self.peer = peer
        var offset = 0
        while offset + 2 <= bytes.count {
            let length = Int(bytes[offset]) | Int(bytes[offset + 1]) << 8
            let start = offset + 2, end = start + length
            guard length >= 3, end <= bytes.count else { throw ParseError.truncated(offset: offset) }
            let proto = bytes[start], transaction = bytes[start + 1], status = bytes[start + 2]
            offset = end
            guard proto == 1 else { continue }
            guard status == 0 else { failures[transaction] = status; continue }
            guard start + 3 < end else { continue }
            try record(Array(bytes[(start + 3)..<end]))
        }
        if offset != bytes.count { throw ParseError.truncated(offset: offset) }
    }

    /// Labels of a compressed DNS name up to its end or its first pointer; returns the labels
    /// and the offset after the name.
    static func name(_ b: [UInt8], at start: Int) throws -> ([String], Int) {
        var labels: [String] = [], i = start
        while true {
            guard i < b.count else { throw ParseError.truncated(offset: i) }
            let n = Int(b[i])
            if n == 0 { return (labels, i + 1) }
            if n & 0xc0 == 0xc0 {
                guard i + 1 < b.count else { throw ParseError.truncated(offset: i) }
                return (labels, i + 2)
            }
            guard n <= 63, i + 1 + n <= b.count else { throw ParseError.truncated(offset: i) }
            labels.append(String(decoding: b[(i + 1)...(i + n)], as: UTF8.self))
            i += 1 + n
        }
    }

    private mutating func record(_ data: [UInt8]) throws {
        let (owner, after) = try Self.name(data, at: 0)
        guard after + 3 <= data.count else { throw ParseError.truncated(offset: after) }
        let type = Int(data[after]) << 8 | Int(data[after + 1])
        let rdata = Array(data[(after + 3)...])
        switch type {
        case 12 where owner == ["_yaok"]: // PTR _yaok._tcp → instance
            let (target, _) = try Self.name(rdata, at: 0)
            if let instance = target.first, !instances.contains(instance) { instances.append(instance) }
        case 16 where owner.count == 2 && owner[1] == "_yaok": // TXT <instance>._yaok._tcp
            var i = 0
            while i < rdata.count {
                let n = Int(rdata[i])
                guard i + 1 + n <= rdata.count else { throw ParseError.truncated(offset: i) }
                let text = String(decoding: rdata[(i + 1)..<(i + 1 + n)], as: UTF8.self)
                if text.hasPrefix("port="), let port = UInt16(text.dropFirst(5)) { ports[owner[0]] = port }
                i += 1 + n
            }
        default:
            break
        }
    }
}
