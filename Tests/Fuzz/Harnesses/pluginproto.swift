// libFuzzer harness: the hub's side of the plugin-process protocol (Docs/plugin-protocol.md): what a
// hostile plugin process sends the hub. PluginMessage decoding and its round trip; and the carrier
// link sessions the hub runs for the process (CarrierLinks: carrierUp, carrierRecord and linkDown
// routed as PluginProcess.dispatch routes them), some carriers with an honest peer at the far end.
//
// Input: mode byte (bit 0: 0 one message, 1 a carrier session), then the message, or ops
// `[op(1)][chunk]` (chunk: length(2, BE) + bytes), see `runCarriers`.
@testable import YaokHubPluginProtocol
import YaokCrypto
import YaokPluginKit
import YaokWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPluginProto(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let all = input(data, size)
    guard let mode = all.first else { return 0 }
    if mode & 1 == 0 {
        _ = parse(Array(all.dropFirst()))
    } else {
        var input = FuzzStream(Array(all.dropFirst()))
        runCarriers(&input)
    }
    return 0
}

/// Whether a message is one a plugin process sends (the hub ignores the others).
private func isFromPlugin(_ m: PluginMessage) -> Bool {
    switch m {
    case .create, .start, .stop, .send, .status, .signature, .carrierSend, .carrierClose, .sends: return false
    case .hello, .reply, .log, .sign, .metric, .linkUp, .linkDown, .frame, .statusChanged, .carrierUp, .carrierRecord, .sent: return true
    }
}

/// Parses one message: it re-encodes to its bytes (unless a string held bytes that are not UTF-8,
/// which decode to U+FFFD) and its encoding parses back to itself.
private func parse(_ bytes: [UInt8]) -> PluginMessage? {
    guard let m = try? PluginMessage(parsing: bytes) else { return nil }
    let encoded = m.encoded
    let replacement: [UInt8] = [0xEF, 0xBF, 0xBD]
    let replaced = encoded.count >= 3 && (0...(encoded.count - 3)).contains { encoded[$0..<$0 + 3].elementsEqual(replacement) }
    check(encoded == bytes || replaced, "message does not round-trip")
    check((try? PluginMessage(parsing: encoded))?.encoded == encoded, "an encoded message does not parse back")
    check(isFromPlugin(m) == (bytes[0] >= 0x80), "message direction")
    return m
}

/// An honest peer at the far end of one carrier (an endpoint dialling the hub, or the hub it dials).
private final class Peer {
    let link: SecureLink
    /// Inner frames it sealed and the hub has not delivered yet (how many of each).
    var undelivered: [[UInt8]: Int] = [:]
    let ownKey: Bool

    init(dialled: Bool, ownKey: Bool) {
        self.ownKey = ownKey
        link = SecureLink(identity: ownKey ? FuzzKeys.hub : FuzzKeys.sender, role: .hub, isInitiator: !dialled, channel: .stream)
    }
}

/// Mode 1: one CarrierLinks, as a plugin process's PluginProcess holds it. Ops:
/// 0 a raw message, dispatched as the hub would; 1 carrierUp (`id`, flags: bit 0 dialled, `mtu`/16,
/// `cost`); 2 carrierRecord (`id`, record); 3 an honest peer on carrier `id` (bit 7: with the hub's
/// own key), which then handshakes; 4 that peer sends `type ‖ value`; 5 linkDown `id`; 6 record `k`
/// the peers sent, again, on carrier `id`; 7 expire.
private func runCarriers(_ input: inout FuzzStream) {
    let hub = FuzzKeys.hub
    let carriers = CarrierLinks(identity: HostLinkIdentity(crypto: HostCrypto(signingKey: hub.signingKey, kxKey: hub.kxKey, sign: { hub.sign($0) })))
    var known: [UInt64: CarrierInfo] = [:]
    var peers: [UInt64: Peer] = [:]
    var hubSent: [UInt64: [[UInt8]]] = [:]
    var peerSent: [[UInt8]] = []
    var up: Set<UInt64> = []
    var depth = 0

    func apply(_ effects: [CarrierLinks.Effect]) {
        depth += 1
        defer { depth -= 1 }
        check(depth < 64, "the hub and a peer answer each other for ever")
        var toPeers: [(UInt64, [UInt8])] = []
        var closed: [UInt64] = [], downed: Set<UInt64> = []
        let upBefore = up
        for e in effects {
            switch e {
            case .send(let m):
                check(!isFromPlugin(m) && (try? PluginMessage(parsing: m.encoded)) == m, "the hub sends something it would not")
                switch m {
                case .carrierSend(let link, let record):
                    check((try? TLVRecord(parsing: record)) != nil, "a carrier record that is not one TLV record")
                    hubSent[link, default: []].append(record)
                    toPeers.append((link, record))
                case .carrierClose(let link, _):
                    closed.append(link)
                    peers[link] = nil
                    known[link] = nil
                    hubSent[link] = nil
                default:
                    check(false, "the carriers sent \(m)")
                }
            case .linkUp(let info):
                guard let p = peers[info.id] else { check(false, "link up on a carrier without an honest peer"); break }
                check(!p.ownKey && info.peerSigningKey == FuzzKeys.sender.signingKey && info.peerKXKey == FuzzKeys.sender.kxKey,
                      "link up for a key other than the honest peer's")
                check(info.mtu <= TLVRecord.headerLength + TLVRecord.maxValueLength - SecureLink.overhead, "link MTU above what a record carries")
                check(up.insert(info.id).inserted, "link up twice")
                check(up.count <= 1, "two links up to one peer")
            case .frame(let inner, let link):
                check(up.contains(link), "a frame on a link that is not up")
                guard let p = peers[link] else { check(false, "a frame from no peer"); break }
                check(p.undelivered[inner, default: 0] > 0, "a frame the peer did not send, or more often than it did")
                p.undelivered[inner, default: 0] -= 1
                let type = FrameType(rawValue: inner[0])
                check(type != .ping && type != .pong && type != .linkClose && type != .linkIdentity, "a link frame passed up")
            case .linkDown(let link, _):
                check(up.remove(link) != nil, "link down for a link not up")
                downed.insert(link)
            case .log:
                break
            }
        }
        for link in closed where upBefore.contains(link) { check(downed.contains(link), "an up link closed without link down") }
        for (link, record) in toPeers {
            guard let p = peers[link], let r = try? TLVRecord(parsing: record) else { continue }
            let outs: [SecureLink.Output]
            do { outs = try p.link.receive(r) } catch { check(false, "an honest peer refused the hub's record: \(error)"); continue }
            for case .send(let back) in outs {
                peerSent.append(back)
                apply(carriers.record(back, on: link))
            }
        }
    }

    /// The program reported a link down: a carrier whose link was not up is gone silently (the
    /// hub forgets it, and a carrier with that ID may come up again, either way round).
    func carrierDown(_ link: UInt64) {
        if carriers.isCarrier(link) {
            let wasUp = carriers.down(link)
            known[link] = nil
            hubSent[link] = nil
            if !wasUp { peers[link] = nil; return }
        }
        up.remove(link)
        peers[link] = nil
    }

    while let op = input.byte(), let c = input.chunk() {
        let id = UInt64((c.first ?? 0) & 7)
        switch op % 8 {
        case 0:
            guard let m = parse(c) else { break }
            switch m {
            case .carrierUp(let info):
                // A second report of a live carrier is ignored by the hub: the first one stands.
                if !carriers.isCarrier(info.id) { known[info.id] = info }
                apply(carriers.up(info))
            case .carrierRecord(let link, let record): apply(carriers.record(record, on: link))
            case .linkDown(let link, _):
                carrierDown(link)
            default: break
            }
        case 1:
            let flags = c.count > 1 ? c[1] : 0
            let mtu = c.count > 2 ? Int(c[2]) * 16 : 2048
            let info = CarrierInfo(id: id, dialled: flags & 1 == 1, mtu: mtu, cost: Int(c.count > 3 ? c[3] : 1), kind: "tcp",
                                   remote: flags & 2 == 0 ? nil : "198.51.100.7:7000")
            if !carriers.isCarrier(id) { known[id] = info }
            apply(carriers.up(info))
        case 2:
            apply(carriers.record(Array(c.dropFirst()), on: id))
        case 3:
            guard let info = known[id], carriers.isCarrier(id), peers[id] == nil else { break }
            let p = Peer(dialled: info.dialled, ownKey: (c.first ?? 0) & 0x80 != 0)
            peers[id] = p
            if info.dialled {
                // The hub dialled: its hello went out when the carrier came up.
                for record in hubSent[id] ?? [] {
                    guard let outs = try? p.link.receive(TLVRecord(parsing: record)) else { continue }
                    for case .send(let back) in outs { peerSent.append(back); apply(carriers.record(back, on: id)) }
                }
            } else if let hello = try? p.link.hello() {
                peerSent.append(hello)
                apply(carriers.record(hello, on: id))
            }
        case 4:
            guard let p = peers[id], p.link.isEstablished, c.count >= 2 else { break }
            let inner = TLVRecord(type: c[1], value: Array(c.dropFirst(2))).encoded
            guard let sealed = try? p.link.seal(inner) else { break }
            p.undelivered[inner, default: 0] += 1
            peerSent.append(sealed)
            apply(carriers.record(sealed, on: id))
        case 5:
            carrierDown(id)
        case 6:
            guard c.count >= 2, !peerSent.isEmpty else { break }
            apply(carriers.record(peerSent[Int(c[1]) % peerSent.count], on: id))
        default:
            apply(carriers.expire())
        }
    }
}

@_cdecl("LLVMFuzzerInitialize")
public func initializePluginProto(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        let hub = FuzzKeys.hub
        let messages: [(String, PluginMessage)] = [
            ("hello", .hello(version: PluginMessage.version, kind: "tcp", pluginVersion: "1.0")),
            ("reply", .reply(request: 7, code: 0, text: "{\"links\":1}")),
            ("log", .log(level: 3, message: "listening on 0.0.0.0:7000")),
            ("sign", .sign(request: 8, message: SecureLink.responderContext + [UInt8](repeating: 1, count: 32))),
            ("metric", .metric(kind: 1, name: "frames_in", value: 12.5)),
            ("link-up", .linkUp(LinkInfo(id: 3, peerSigningKey: hub.signingKey, peerKXKey: hub.kxKey, peerRole: .hub, mtu: 65000, cost: 10,
                                         kind: "tcp", remote: "192.0.2.1:7000"))),
            ("link-down", .linkDown(link: 3, reason: "closed")),
            ("frame", .frame(link: 3, frame: TLVRecord(.ping, value: [1]).encoded)),
            ("carrier-up", .carrierUp(CarrierInfo(id: 4, dialled: true, mtu: 4096, cost: 5, kind: "py", remote: nil))),
            ("carrier-record", .carrierRecord(link: 4, record: SecureLink.versionRecord())),
            ("sent", .sent(requests: [1, 2, 3])),
            ("sends", .sends([PluginSend(request: 1, link: 2, frame: [3]), PluginSend(request: 4, link: 5, frame: [])])),
            ("create", .create(request: 1, signingKey: hub.signingKey, kxKey: hub.kxKey, instance: "tcp0", configJSON: "{}")),
        ]
        let up = PluginMessage.carrierUp(CarrierInfo(id: 1, dialled: false, mtu: 2048, cost: 1, kind: "py", remote: nil)).encoded
        return messages.map { ("message-\($0.0)", [0] + $0.1.encoded) } + [
            // Carrier 1 (the peer dials the hub) and carrier 2 (the hub dials): honest handshakes,
            // frames, a ping, a duplicate link to the same peer, a replay, link close.
            ("carriers", [1] + [0] + chunk(up) + [3] + chunk([1]) + [4] + chunk([1, 0x01, 9, 9]) + [4] + chunk([1, 0x12, 1])
                + [1] + chunk([2, 1, 128, 1]) + [3] + chunk([2]) + [6] + chunk([1, 2]) + [4] + chunk([2, 0x14]) + [5] + chunk([1])),
            // A carrier to the hub itself, a raw record, a too-small MTU, link down of an unknown link.
            ("carriers-hostile", [1] + [1] + chunk([3, 0, 128]) + [3] + chunk([0x83]) + [2] + chunk([3, 0x23, 0, 0]) + [1] + chunk([4, 0, 1])
                + [5] + chunk([5]) + [7] + chunk([])),
        ]
    }
    return 0
}
