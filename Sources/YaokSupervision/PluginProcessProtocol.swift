import YaokPluginKit
import YaokWire

/// The messages between the hub and a plugin process (Docs/plugin-protocol.md): one message per
/// `SOCK_SEQPACKET` datagram, a type byte, then big-endian fields. Requests carry an ID the
/// reply echoes; events carry none. The same C ABI calls, one way and the other, as data.
public enum PluginMessage: Equatable, Sendable {
    // Hub → plugin process
    /// Creates the instance: the hub's public keys, the instance name and the config section as JSON.
    case create(request: UInt32, signingKey: [UInt8], kxKey: [UInt8], instance: String, configJSON: String)
    case start(request: UInt32)
    case stop(request: UInt32)
    case send(request: UInt32, link: UInt64, frame: [UInt8])
    /// Also the heartbeat: a process that does not answer within the bound is killed.
    case status(request: UInt32)
    /// The answer to ``sign(request:message:)``; an empty signature means refused.
    case signature(request: UInt32, signature: [UInt8])
    /// A link record (hello, reply, sealed frame) for the peer at the end of a carrier.
    case carrierSend(link: UInt64, record: [UInt8])
    /// The hub ends a carrier (a failed handshake, a refused peer): close the connection.
    case carrierClose(link: UInt64, reason: String)
    /// Several ``send(request:link:frame:)`` requests in one message: what the router sent in
    /// one pass over its queue. Only to the hub's own plugin host (`yaok-hub plugin-host
    /// --plugin`), never to a `command:` program.
    case sends([PluginSend])

    // Plugin process → hub
    /// First message after the plugin file was opened and checked.
    case hello(version: UInt16, kind: String, pluginVersion: String)
    /// The answer to a request: 0 is success; `text` is the error, or the status JSON.
    case reply(request: UInt32, code: Int32, text: String)
    case log(level: Int32, message: String)
    case sign(request: UInt32, message: [UInt8])
    case metric(kind: Int32, name: String, value: Double)
    case linkUp(LinkInfo)
    case linkDown(link: UInt64, reason: String)
    case frame(link: UInt64, frame: [UInt8])
    case statusChanged
    /// A connection whose link session the hub runs (a program that cannot run it itself).
    case carrierUp(CarrierInfo)
    /// One whole link record that arrived on a carrier.
    case carrierRecord(link: UInt64, record: [UInt8])
    /// These ``send(request:link:frame:)`` requests succeeded: one answer for a burst of sends
    /// instead of a ``reply(request:code:text:)`` each (a failed send still gets its own reply).
    case sent(requests: [UInt32])

    /// The protocol version both ends speak; a process announcing another is refused.
    public static let version: UInt16 = 1
    /// The largest message: a whole frame plus its header, with room to spare.
    public static let maxLength = 128 * 1024

    enum Tag: UInt8 {
        case create = 0x01, start = 0x02, stop = 0x03, send = 0x04, status = 0x05, signature = 0x06
        case carrierSend = 0x07, carrierClose = 0x08, sends = 0x09
        case hello = 0x80, reply = 0x81, log = 0x82, sign = 0x83, metric = 0x84, linkUp = 0x85, linkDown = 0x86
        case frame = 0x87, statusChanged = 0x88, carrierUp = 0x89, carrierRecord = 0x8A, sent = 0x8B
    }

    public var encoded: [UInt8] {
        var w = ByteWriter()
        func str(_ s: String) { let b = Array(s.utf8); w.u32(UInt32(b.count)); w.raw(b) }
        switch self {
        case .create(let r, let key, let kx, let name, let json):
            w.u8(Tag.create.rawValue); w.u32(r); w.raw(key.prefix(32)); w.raw(kx.prefix(32)); str(name); str(json)
        case .start(let r): w.u8(Tag.start.rawValue); w.u32(r)
        case .stop(let r): w.u8(Tag.stop.rawValue); w.u32(r)
        case .send(let r, let link, let frame): w.u8(Tag.send.rawValue); w.u32(r); w.u64(link); w.raw(frame)
        case .status(let r): w.u8(Tag.status.rawValue); w.u32(r)
        case .signature(let r, let sig): w.u8(Tag.signature.rawValue); w.u32(r); w.raw(sig)
        case .hello(let v, let kind, let version): w.u8(Tag.hello.rawValue); w.u16(v); str(kind); str(version)
        case .reply(let r, let code, let text): w.u8(Tag.reply.rawValue); w.u32(r); w.u32(UInt32(bitPattern: code)); w.raw(Array(text.utf8))
        case .log(let level, let m): w.u8(Tag.log.rawValue); w.u32(UInt32(bitPattern: level)); w.raw(Array(m.utf8))
        case .sign(let r, let m): w.u8(Tag.sign.rawValue); w.u32(r); w.raw(m)
        case .metric(let kind, let name, let value):
            w.u8(Tag.metric.rawValue); w.u32(UInt32(bitPattern: kind)); w.u64(value.bitPattern); w.raw(Array(name.utf8))
        case .linkUp(let i):
            w.u8(Tag.linkUp.rawValue); w.u64(i.id); w.raw(i.peerSigningKey.prefix(32)); w.raw(i.peerKXKey.prefix(32))
            w.u32(i.peerRole.rawValue); w.u32(UInt32(clamping: i.mtu)); w.u32(UInt32(clamping: i.cost)); str(i.kind); str(i.remote ?? "")
            w.raw(i.proof?.encoded ?? [])
        case .linkDown(let link, let reason): w.u8(Tag.linkDown.rawValue); w.u64(link); w.raw(Array(reason.utf8))
        case .frame(let link, let frame): w.u8(Tag.frame.rawValue); w.u64(link); w.raw(frame)
        case .statusChanged: w.u8(Tag.statusChanged.rawValue)
        case .carrierSend(let link, let record): w.u8(Tag.carrierSend.rawValue); w.u64(link); w.raw(record)
        case .carrierClose(let link, let reason): w.u8(Tag.carrierClose.rawValue); w.u64(link); w.raw(Array(reason.utf8))
        case .sends(let sends):
            w.u8(Tag.sends.rawValue)
            for s in sends { w.u32(s.request); w.u64(s.link); w.u32(UInt32(s.frame.count)); w.raw(s.frame) }
        case .carrierUp(let c):
            w.u8(Tag.carrierUp.rawValue); w.u64(c.id); w.u8(c.dialled ? 1 : 0); w.u32(UInt32(clamping: c.mtu)); w.u32(UInt32(clamping: c.cost))
            str(c.kind); str(c.remote ?? "")
        case .carrierRecord(let link, let record): w.u8(Tag.carrierRecord.rawValue); w.u64(link); w.raw(record)
        case .sent(let requests): w.u8(Tag.sent.rawValue); for r in requests { w.u32(r) }
        }
        return w.bytes
    }

    /// Parses one message; every field is checked, nothing traps on hostile bytes.
    public init(parsing bytes: [UInt8]) throws {
        var r = ByteReader(bytes, what: "plugin-process message")
        func str() throws -> String {
            let n = Int(try r.u32())
            guard n <= r.remaining else { throw WireError.badLength(what: "plugin-process string", detail: "\(n) bytes, \(r.remaining) left") }
            return String(decoding: try r.take(n), as: UTF8.self)
        }
        func rest() throws -> [UInt8] { try r.take(r.remaining) }
        let raw = try r.u8()
        guard let tag = Tag(rawValue: raw) else { throw WireError.badLength(what: "plugin-process message", detail: "unknown type 0x\(String(raw, radix: 16))") }
        switch tag {
        case .create: self = .create(request: try r.u32(), signingKey: try r.take(32), kxKey: try r.take(32), instance: try str(), configJSON: try str())
        case .start: self = .start(request: try r.u32())
        case .stop: self = .stop(request: try r.u32())
        case .send: self = .send(request: try r.u32(), link: try r.u64(), frame: try rest())
        case .status: self = .status(request: try r.u32())
        case .signature: self = .signature(request: try r.u32(), signature: try rest())
        case .hello: self = .hello(version: try r.u16(), kind: try str(), pluginVersion: try str())
        case .reply: self = .reply(request: try r.u32(), code: Int32(bitPattern: try r.u32()), text: String(decoding: try rest(), as: UTF8.self))
        case .log: self = .log(level: Int32(bitPattern: try r.u32()), message: String(decoding: try rest(), as: UTF8.self))
        case .sign: self = .sign(request: try r.u32(), message: try rest())
        case .metric:
            let kind = Int32(bitPattern: try r.u32()), value = Double(bitPattern: try r.u64())
            self = .metric(kind: kind, name: String(decoding: try rest(), as: UTF8.self), value: value)
        case .linkUp:
            let id = try r.u64(), key = try r.take(32), kx = try r.take(32), roleRaw = try r.u32()
            let mtu = Int(try r.u32()), cost = Int(try r.u32()), kind = try str(), remote = try str()
            // The proof is the rest: none (empty) or a whole one.
            let proofBytes = try rest()
            var proof: LinkProof?
            if !proofBytes.isEmpty {
                guard let p = try? LinkProof(parsing: proofBytes) else {
                    throw WireError.badLength(what: "plugin-process linkUp", detail: "a link proof of \(proofBytes.count) bytes or of an unknown kind")
                }
                proof = p
            }
            guard let role = PeerRole(rawValue: roleRaw) else {
                throw WireError.badLength(what: "plugin-process linkUp", detail: "unknown peer role \(roleRaw)")
            }
            self = .linkUp(LinkInfo(id: id, peerSigningKey: key, peerKXKey: kx, peerRole: role, mtu: mtu, cost: cost,
                                    kind: kind, remote: remote.isEmpty ? nil : remote,
                                    proof: proof))
        case .linkDown: self = .linkDown(link: try r.u64(), reason: String(decoding: try rest(), as: UTF8.self))
        case .frame: self = .frame(link: try r.u64(), frame: try rest())
        case .statusChanged: self = .statusChanged
        case .carrierSend: self = .carrierSend(link: try r.u64(), record: try rest())
        case .carrierClose: self = .carrierClose(link: try r.u64(), reason: String(decoding: try rest(), as: UTF8.self))
        case .sends:
            var sends: [PluginSend] = []
            repeat {
                let request = try r.u32(), link = try r.u64(), n = Int(try r.u32())
                guard n <= r.remaining else {
                    throw WireError.badLength(what: "plugin-process sends", detail: "a frame of \(n) bytes, \(r.remaining) left")
                }
                sends.append(PluginSend(request: request, link: link, frame: try r.take(n)))
            } while r.remaining > 0
            self = .sends(sends)
        case .carrierUp:
            let id = try r.u64(), dialled = try r.u8()
            guard dialled <= 1 else { throw WireError.badLength(what: "plugin-process carrierUp", detail: "dialled flag \(dialled), not 0 or 1") }
            let mtu = Int(try r.u32()), cost = Int(try r.u32()), kind = try str(), remote = try str()
            self = .carrierUp(CarrierInfo(id: id, dialled: dialled == 1, mtu: mtu, cost: cost, kind: kind, remote: remote.isEmpty ? nil : remote))
        case .carrierRecord: self = .carrierRecord(link: try r.u64(), record: try rest())
        case .sent:
            guard r.remaining % 4 == 0 else {
                throw WireError.badLength(what: "plugin-process sent", detail: "\(r.remaining) bytes, not a whole number of request IDs")
            }
            var requests: [UInt32] = []
            requests.reserveCapacity(r.remaining / 4)
            while r.remaining > 0 { requests.append(try r.u32()) }
            self = .sent(requests: requests)
        }
        try r.expectEnd()
    }
}

/// One `send` request inside a ``PluginMessage/sends(_:)`` message.
public struct PluginSend: Equatable, Sendable {
    public var request: UInt32
    public var link: UInt64
    public var frame: [UInt8]

    public init(request: UInt32, link: UInt64, frame: [UInt8]) {
        self.request = request; self.link = link; self.frame = frame
    }

    /// Bytes it adds to a ``PluginMessage/sends(_:)`` message.
    var encodedLength: Int { 16 + frame.count }
}

/// A carrier: a connection a standalone program made or accepted, over which the hub runs the
/// link session itself (the program moves whole link records and nothing else).
public struct CarrierInfo: Equatable, Sendable {
    public var id: UInt64
    /// This side connected out: the hub is the handshake's initiator.
    public var dialled: Bool
    /// The largest record the carrier moves; the link's MTU is this less the sealing overhead.
    public var mtu: Int
    public var cost: Int
    public var kind: String
    public var remote: String?

    public init(id: UInt64, dialled: Bool, mtu: Int, cost: Int, kind: String, remote: String?) {
        self.id = id; self.dialled = dialled; self.mtu = mtu; self.cost = cost; self.kind = kind; self.remote = remote
    }
}
