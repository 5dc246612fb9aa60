// libFuzzer harness: the secure link session (SecureLink, Docs/protocol.md §5) as responder and as
// initiator, stream and datagram (with LinkCookies admission), fed hostile records around an honest
// handshake whose ephemeral keys are fixed so the fuzzer can replay and mutate it; and an honest
// established pair whose sealed frames are replayed, reordered, skipped, forged and mutated.
//
// Input: mode byte (mod 3 of its low 6 bits: 0 responder, 1 initiator, 2 established pair; bit 6:
// the pair's target is the initiator; bit 7: datagram), then ops
// `[op(1)][chunk]` (chunk: length(2, BE) + bytes), see `runHandshake` and `runEstablished`.
import YaokCrypto
import YaokPluginKit
import YaokWire

/// The honest parties: an endpoint (FuzzKeys.sender) dials a hub (FuzzKeys.hub).
private enum Honest {
    static let initiatorEphemeral = [UInt8](repeating: 0x11, count: 32)
    static let responderEphemeral = [UInt8](repeating: 0x22, count: 32)

    static func initiator(_ channel: LinkChannel) -> SecureLink {
        SecureLink(identity: FuzzKeys.sender, role: .endpoint, isInitiator: true, channel: channel, ephemeralSecret: initiatorEphemeral)
    }

    static func responder(_ channel: LinkChannel) -> SecureLink {
        SecureLink(identity: FuzzKeys.hub, role: .hub, isInitiator: false, channel: channel, ephemeralSecret: responderEphemeral)
    }

    static func isInitiator(_ p: AuthenticatedPeer) -> Bool {
        p.role == .endpoint && p.signingKey == FuzzKeys.sender.signingKey && p.kxKey == FuzzKeys.sender.kxKey
    }

    static func isResponder(_ p: AuthenticatedPeer) -> Bool {
        p.role == .hub && p.signingKey == FuzzKeys.hub.signingKey && p.kxKey == FuzzKeys.hub.kxKey
    }
}

/// The honest handshake and a few sealed frames each way, for one channel kind (deterministic:
/// fixed identities, fixed ephemeral keys, deterministic Ed25519).
private struct Transcript {
    let hello: [UInt8]
    let reply: [UInt8]
    let identity: [UInt8]
    /// Inner frames the initiator sealed after its identity, and the responder sealed.
    let toResponder: [[UInt8]]
    let toInitiator: [[UInt8]]
    /// hello, reply, identity, the sealed frames to the responder, then those to the initiator.
    let records: [[UInt8]]
    /// The responder's handshake hash once it answered the honest hello.
    let responderHash: [UInt8]

    static let stream = Transcript(.stream)
    static let datagram = Transcript(.datagram)
    static func of(_ channel: LinkChannel) -> Transcript { channel == .stream ? stream : datagram }

    init(_ channel: LinkChannel) {
        let i = Honest.initiator(channel), r = Honest.responder(channel)
        hello = try! i.hello()
        guard case .send(let reply)? = try! r.receive(TLVRecord(parsing: hello)).first else { fatalError("no reply") }
        self.reply = reply
        let out = try! i.receive(TLVRecord(parsing: reply))
        guard out.count == 2, case .send(let identity) = out[0], case .established(let hub) = out[1], Honest.isResponder(hub) else {
            fatalError("honest initiator did not establish")
        }
        self.identity = identity
        guard case .established(let endpoint)? = try! r.receive(TLVRecord(parsing: identity)).first, Honest.isInitiator(endpoint) else {
            fatalError("honest responder did not establish")
        }
        responderHash = r.handshakeHash
        toResponder = [TLVRecord(.ping, value: Array("i2r ping".utf8)).encoded,
                       TLVRecord(.bundle, value: Array("i2r bundle".utf8)).encoded,
                       TLVRecord(.linkClose, value: []).encoded]
        toInitiator = [TLVRecord(.pong, value: Array("r2i pong".utf8)).encoded,
                       TLVRecord(.custodyAck, value: Array("r2i ack".utf8)).encoded]
        records = [hello, reply, identity] + toResponder.map { try! i.seal($0) } + toInitiator.map { try! r.seal($0) }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHandshake(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzStream(input(data, size))
    guard let mode = input.byte() else { return 0 }
    let channel: LinkChannel = mode & 0x80 != 0 ? .datagram : .stream
    switch (mode & 0x3f) % 3 {
    case 0: runHandshake(&input, channel: channel, asResponder: true)
    case 1: runHandshake(&input, channel: channel, asResponder: false)
    default: runEstablished(&input, channel: channel, targetIsInitiator: mode & 0x40 != 0)
    }
    return 0
}

/// A record from an op: 0 raw (`type ‖ value`), 1 transcript record `k`, 2 transcript record `k`
/// with the byte at `pos` (2 bytes) XORed with `x` (nonzero); nil for op 3 and empty chunks.
private func record(op: UInt8, _ c: [UInt8], transcript: [[UInt8]]) -> TLVRecord? {
    guard let first = c.first else { return nil }
    switch op % 4 {
    case 0:
        return TLVRecord(type: first, value: Array(c.dropFirst()))
    case 1:
        return try! TLVRecord(parsing: transcript[Int(first) % transcript.count])
    case 2:
        var r = try! TLVRecord(parsing: transcript[Int(first) % transcript.count])
        guard c.count >= 4, !r.value.isEmpty else { return r }
        r.value[(Int(c[1]) << 8 | Int(c[2])) % r.value.count] ^= max(c[3], 1)
        return r
    default:
        return nil
    }
}

/// Modes 0 and 1: one session end before its handshake (a responder, or an initiator that sent
/// its hello) fed records. Op 3 (datagram responder) brings back the last cookie the way an
/// honest initiator would: its hello again, with the cookie.
private func runHandshake(_ input: inout FuzzStream, channel: LinkChannel, asResponder: Bool) {
    let t = Transcript.of(channel)
    var target = asResponder ? Honest.responder(channel) : Honest.initiator(channel)
    if !asResponder { check((try? target.hello()) == t.hello, "the initiator's hello is not the honest one") }
    let cookies = LinkCookies(clock: { 1 })
    let address: [UInt8] = Array("192.0.2.1:7000".utf8)
    var lastCookie: TLVRecord?
    var delivered: Set<[UInt8]> = []
    let expected = asResponder ? t.toResponder : t.toInitiator

    func deliver(_ record: TLVRecord) {
        var link = target
        if asResponder && channel == .datagram && record.type == FrameType.linkHello.rawValue {
            // A datagram responder meets a hello only through the stateless cookie check.
            switch cookies.admit(record, from: address) {
            case .drop:
                return
            case .reply(let r):
                check(r.count <= record.encoded.count, "an answer to a hello larger than the hello")
                let answer = try? TLVRecord(parsing: r)
                check(answer?.type == FrameType.linkCookie.rawValue || answer?.type == FrameType.linkVersion.rawValue, "admission answered with another record")
                if answer?.type == FrameType.linkCookie.rawValue { lastCookie = answer }
                return
            case .admit:
                check(record.value.count >= SecureLink.datagramHelloLength, "admitted an unpadded hello")
                // As the UDP engine: an admitted hello gets a fresh session (beside an established one).
                link = Honest.responder(channel)
                if !target.isEstablished { target = link }
            }
        }
        let wasEstablished = link.isEstablished
        let outputs: [SecureLink.Output]
        do {
            outputs = try link.receive(record)
        } catch {
            check(error is SecureLinkError, "receive threw \(error)")
            check(link.isEstablished == wasEstablished, "a refused record changed whether the session is up")
            if case SecureLinkError.unsupportedVersion(let versions) = error, record.type == FrameType.linkVersion.rawValue {
                check(link.versionsClaimed == versions && !versions.contains(SecureLink.version), "version refusal not recorded as sent")
            }
            return
        }
        for out in outputs {
            switch out {
            case .send(let bytes):
                guard let sent = try? TLVRecord(parsing: bytes) else { check(false, "sent bytes are not one TLV record"); return }
                if asResponder && outputs.contains(where: { if case .refused = $0 { return true } else { return false } }) {
                    check(sent.type == FrameType.sealed.rawValue && !wasEstablished, "a refusal that is not one sealed record before the session was up")
                } else if asResponder {
                    check(sent.type == FrameType.linkReply.rawValue && sent.value.count == SecureLink.replyLength, "a responder sent something else than a reply")
                    if channel == .datagram { check(bytes.count <= record.encoded.count, "a datagram reply larger than its hello") }
                } else if sent.type == FrameType.linkHello.rawValue {
                    check(channel == .datagram && record.type == FrameType.linkCookie.rawValue, "a hello sent again without a cookie")
                    check(sent.value.count >= SecureLink.datagramHelloLength && Array(sent.value[1..<33]) == link.ephemeralKey
                          && Array(sent.value[33..<49]) == Array(record.value.prefix(LinkCookies.cookieLength)), "the hello with the cookie is not ours with that cookie")
                    check(record.value.count == LinkCookies.cookieLength
                          || Array(record.value.suffix(LinkCookies.echoLength)) == Array(link.ephemeralKey.prefix(LinkCookies.echoLength)),
                          "a hello sent again for a cookie that echoes another hello")
                } else {
                    check(bytes == t.identity, "the initiator's identity is not the honest one")
                }
            case .established(let peer):
                check(asResponder ? Honest.isInitiator(peer) : Honest.isResponder(peer), "established for a key other than the honest peer's")
                check(link.isEstablished && link.peer == peer && !wasEstablished, "established state inconsistent")
            case .refused:
                // Only an identity that opened under this session's key can be refused, and the
                // honest peer's verifies: a mutated record never gets this far.
                check(link.state == .refused, "refused without ending the session")
                check(false, "the honest peer was refused")
            case .frame(let inner):
                check(wasEstablished, "a frame before the session was up")
                check(expected.contains(inner), "a frame the honest peer never sealed for this end")
                check(delivered.insert(inner).inserted, "a frame delivered twice")
            }
        }
    }

    while let op = input.byte(), let c = input.chunk() {
        if let r = record(op: op, c, transcript: t.records) {
            deliver(r)
        } else if op % 4 == 3 {
            if channel == .datagram, let cookie = lastCookie {
                // The honest initiator takes the cookie and sends its hello again.
                let helper = Honest.initiator(channel)
                _ = try? helper.hello()
                // A cookie echoing another hello (the input changed its ephemeral key) is refused.
                let echoesOurs = cookie.value.count == LinkCookies.cookieLength
                    || Array(cookie.value.suffix(LinkCookies.echoLength)) == Array(helper.ephemeralKey.prefix(LinkCookies.echoLength))
                guard case .send(let again)? = try? helper.receive(cookie).first else { check(!echoesOurs, "a cookie was not taken"); continue }
                check(echoesOurs, "a cookie echoing another hello was taken")
                deliver(try! TLVRecord(parsing: again))
            } else {
                deliver(try! TLVRecord(parsing: t.hello))
            }
        }
    }

    // Whatever came before, the honest handshake still completes from where it stands.
    if asResponder, target.state == .awaitingIdentity, target.handshakeHash == t.responderHash {
        let out = try? target.receive(TLVRecord(parsing: t.identity))
        guard case .established(let p)? = out?.first else { check(false, "the honest identity no longer establishes"); return }
        check(Honest.isInitiator(p), "established for a key other than the honest peer's")
    }
    if !asResponder, target.state == .awaitingReply {
        // A forged reply must have left the handshake as it was.
        let out = try? target.receive(TLVRecord(parsing: t.reply))
        guard let out, out.count == 2, case .send(let identity) = out[0], case .established(let p) = out[1] else {
            check(false, "the honest reply no longer establishes")
            return
        }
        check(identity == t.identity && Honest.isResponder(p), "the honest reply gave another session")
    }
}

/// Which counters a session end has accepted, by the rule of ``ReplayWindow``: a counter is
/// taken once, and only while it is less than the window size behind the newest.
private struct WindowModel {
    var seen: Set<UInt64> = []
    var newest: UInt64?

    func accepts(_ n: UInt64) -> Bool {
        guard !seen.contains(n) else { return false }
        guard let newest else { return true }
        return n > newest || newest - n < ReplayWindow.size
    }

    mutating func mark(_ n: UInt64) {
        seen.insert(n)
        newest = max(newest ?? n, n)
    }
}

/// Mode 2: an honest pair, established in memory; the fuzzer is the network between them. Ops:
/// 0 raw record to the target; 1 the peer seals `type ‖ value` (held, not delivered); 2 deliver
/// held frame `k`; 3 deliver it with one byte changed (`k`, pos(2), xor); 4 the peer seals and
/// drops (`n`+1)·16 frames; 5 the peer seals raw bytes (maybe not one TLV record); 6 the target
/// seals `type ‖ value` and the peer must open it; 7 handshake record `k` again.
private func runEstablished(_ input: inout FuzzStream, channel: LinkChannel, targetIsInitiator: Bool) {
    let t = Transcript.of(channel)
    let i = Honest.initiator(channel), r = Honest.responder(channel)
    guard (try? i.hello()) == t.hello,
          (try? r.receive(TLVRecord(parsing: t.hello)))?.first == .send(t.reply),
          (try? i.receive(TLVRecord(parsing: t.reply)))?.first == .send(t.identity),
          (try? r.receive(TLVRecord(parsing: t.identity))) != nil,
          i.isEstablished, r.isEstablished else {
        check(false, "the honest handshake did not establish")
        return
    }
    let target = targetIsInitiator ? i : r, peer = targetIsInitiator ? r : i
    var model = WindowModel()
    if !targetIsInitiator { model.mark(0) }  // the initiator's identity was frame 0
    /// Sealed by the peer: the record's value (counter ‖ ciphertext) and the inner frame.
    var held: [(counter: UInt64, value: [UInt8], inner: [UInt8])] = []
    var skipped = 0

    func seal(_ inner: [UInt8]) {
        guard let sealed = try? peer.seal(inner) else {
            check(inner.count > SecureLink.maxFrameLength, "sealing a frame that fits failed")
            return
        }
        let rec = try! TLVRecord(parsing: sealed)
        let counter = rec.value.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        held.append((counter, rec.value, inner))
    }

    /// To an initiator, a sealed linkOutcome is the handshake's answer (nil inside: malformed),
    /// not a frame; `.none` for every other frame.
    func outcome(_ inner: [UInt8], to receiver: SecureLink) -> LinkOutcome?? {
        guard receiver.isInitiator, inner.first == FrameType.linkOutcome.rawValue, let r = try? TLVRecord(parsing: inner) else { return .none }
        return .some(try? LinkOutcome(parsing: r.value))
    }
    /// Set when an authentic refusal ended the session: nothing after it is checked.
    var ended = false

    func deliver(_ record: TLVRecord) {
        let authentic = record.type == FrameType.sealed.rawValue ? held.first { $0.value == record.value } : nil
        let fresh = authentic.map { model.accepts($0.counter) } ?? false
        do {
            let out = try target.receive(record)
            guard let a = authentic, fresh else { check(false, "accepted a record that is not a fresh frame of the peer's"); return }
            model.mark(a.counter)
            switch outcome(a.inner, to: target) {
            case .none: check(out == [.frame(a.inner)], "an accepted frame is not what the peer sealed")
            case .some(.none): check(false, "a malformed link outcome was taken")
            case .some(.some(.accepted)): check(out == [] && target.accepted, "an accepted outcome not taken as such")
            case .some(.some(.refused)):
                check(out.count == 1 && target.state == .refused, "a refusal did not end the session")
                ended = true
                return
            }
        } catch {
            check(error is SecureLinkError, "receive threw \(error)")
            if let a = authentic, fresh {
                // Authentic and fresh, refused only when it does not hold one TLV record or is a
                // malformed link outcome (its counter is spent either way).
                check((try? TLVRecord(parsing: a.inner)) == nil || outcome(a.inner, to: target) == .some(.none),
                      "refused a fresh frame of the peer's: \(error)")
                model.mark(a.counter)
            }
        }
        check(target.isEstablished && peer.isEstablished, "a session went down")
        check(targetIsInitiator ? Honest.isResponder(target.peer!) : Honest.isInitiator(target.peer!), "the peer changed")
    }

    while !ended, let op = input.byte(), let c = input.chunk() {
        switch op % 8 {
        case 0:
            if let first = c.first { deliver(TLVRecord(type: first, value: Array(c.dropFirst()))) }
        case 1:
            if let first = c.first { seal(TLVRecord(type: first, value: Array(c.dropFirst())).encoded) }
        case 2:
            if let k = c.first, !held.isEmpty { deliver(TLVRecord(.sealed, value: held[Int(k) % held.count].value)) }
        case 3:
            if c.count >= 4, !held.isEmpty {
                var value = held[Int(c[0]) % held.count].value
                value[(Int(c[1]) << 8 | Int(c[2])) % value.count] ^= max(c[3], 1)
                deliver(TLVRecord(.sealed, value: value))
            }
        case 4:
            let n = (Int(c.first ?? 0) + 1) * 16
            guard skipped + n <= 4096 else { break }
            skipped += n
            for _ in 0..<n { _ = try? peer.seal(TLVRecord(.ping, value: []).encoded) }
        case 5:
            seal(c)
        case 6:
            guard let first = c.first else { break }
            let inner = TLVRecord(type: first, value: Array(c.dropFirst())).encoded
            // To an initiator, a sealed linkOutcome is the handshake's answer, not a frame.
            let outcome: LinkOutcome?? = peer.isInitiator && first == FrameType.linkOutcome.rawValue
                ? .some(try? LinkOutcome(parsing: Array(c.dropFirst()))) : .none
            do {
                let sealed = try target.seal(inner)
                let out = try peer.receive(TLVRecord(parsing: sealed))
                switch outcome {
                case .none: check(out == [.frame(inner)], "the peer did not open the target's frame")
                case .some(.none): check(false, "a malformed link outcome was taken")
                case .some(.some(.accepted)): check(out == [] && peer.accepted, "an accepted outcome not taken as such")
                case .some(.some(.refused)):
                    check(out.count == 1 && peer.state == .refused, "a refusal did not end the session")
                    if case .refused? = out.first {} else { check(false, "a refusal gave another output") }
                    return
                }
            } catch let error where outcome == .some(.none) {
                check(error is SecureLinkError, "a malformed link outcome threw \(error)")
            } catch {
                check(inner.count > SecureLink.maxFrameLength, "round trip to the peer failed: \(error)")
            }
        default:
            if let k = c.first { deliver(try! TLVRecord(parsing: [t.hello, t.reply, t.identity][Int(k) % 3])) }
        }
    }

    if ended { return }
    // Hostile records cost the session nothing: the peer's next frame still arrives.
    let last = TLVRecord(.ping, value: Array("last".utf8)).encoded
    seal(last)
    if let a = held.last, a.inner == last {
        check((try? target.receive(TLVRecord(.sealed, value: a.value))) == [.frame(last)], "the peer's next frame was refused")
    }
}

@_cdecl("LLVMFuzzerInitialize")
public func initializeHandshake(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        let s = Transcript.stream, d = Transcript.datagram
        return [
            // Responder: the honest hello, then the identity and frames (stream).
            ("responder-stream", [0] + [1] + chunk([0]) + [1] + chunk([2]) + [1] + chunk([3]) + [1] + chunk([4])),
            // Responder, datagram: a hello without cookie (answered with one), the cookie back, the identity.
            ("responder-datagram", [0x80] + [1] + chunk([0]) + [3] + chunk([0]) + [1] + chunk([2]) + [1] + chunk([3])),
            // Initiator: a forged reply (one byte changed), then the honest one and the responder's frames.
            ("initiator-stream", [1] + [2] + chunk([1, 0, 40, 1]) + [1] + chunk([1]) + [1] + chunk([6]) + [1] + chunk([7])),
            // Initiator, datagram: a cookie, a version refusal, raw bytes.
            ("initiator-datagram", [0x81] + [0] + chunk([0x21] + [UInt8](repeating: 7, count: 16)) + [0] + chunk([0x24, 1, 3])
                + [0] + chunk(Array(s.reply.prefix(40)))),
            // Established pair: seal, deliver out of order, replay, skip past the window, deliver
            // a frame now too old, mutate, a frame that is not one TLV record, answer, replay the identity.
            ("pair-responder", [2] + [0] + chunk([0x12, 1]) + [1] + chunk([0x12, 2]) + [1] + chunk([0x13, 3]) + [1] + chunk([0x12, 4])
                + [2] + chunk([1]) + [2] + chunk([0]) + [2] + chunk([0]) + [4] + chunk([70]) + [1] + chunk([0x01, 9, 9])
                + [2] + chunk([3]) + [2] + chunk([2]) + [3] + chunk([3, 0, 9, 4]) + [5] + chunk([1, 2]) + [2] + chunk([4])
                + [2] + chunk([4]) + [6] + chunk([0x13, 5]) + [7] + chunk([2])),
            // The initiator as target: a frame, its replay, a frame sealed the other way.
            ("pair-initiator", [0xC2] + [1] + chunk([0x12, 1]) + [2] + chunk([0]) + [2] + chunk([0])
                + [0] + chunk([0x23] + d.records[3].dropFirst(3)) + [6] + chunk([0x12, 7])),
        ]
    }
    return 0
}
