// libFuzzer harness: the relay protocol (Docs/relay-protocol.md) in both directions: datagrams and
// every message a client receives (HELLO_REPLY, COOKIE_REPLY, REGISTERED, QUEUED, MSG, NO_MESSAGES,
// ERROR, PONG, FRAGMENT) or a relay receives (HELLO, REGISTER and its registrations, SEND, ACK, PING,
// FRAGMENT), parsed as RelayClient and the relay engine parse them; round trips; no forged
// handshake or registration verifies; the sealed session between an honest client and relay (fixed
// keys) with replayed, reordered, reflected and mutated packets; fragment reassembly.
//
// Input: mode byte (mod 4: 0 session, 1 one message, 2 fragments, 3 registrations), then see each run*.
import YaokCrypto
import YaokRelayProtocol
import YaokWire

private enum Honest {
    /// The relay's long-term identity (pinned by clients).
    static let relay = try! Identity(ed25519Seed: [UInt8](repeating: 0x07, count: 32), x25519Secret: [UInt8](repeating: 0x08, count: 32))
    static let otherRelayKey = FuzzKeys.hub.signingKey
    static let sessionID: UInt64 = 0x5E55_1011_0000_0001
    static let clientEphemeral = try! EphemeralKX(secretKey: [UInt8](repeating: 0x33, count: 32))
    static let relayEphemeral = try! EphemeralKX(secretKey: [UInt8](repeating: 0x44, count: 32))
    static let helloReply = HelloReply.make(sessionID: sessionID, clientKey: clientEphemeral.publicKey,
                                            relayEphemeralKey: relayEphemeral.publicKey, relay: relay)
    static let binding = ChannelBinding(sessionID: sessionID, clientKey: clientEphemeral.publicKey, relayEphemeralKey: relayEphemeral.publicKey)
    static let nowMs: Int64 = 1_700_000_000_000
    /// A hub's own registration for this session and a phone's carried by that hub.
    static let registrations: [Registration] = [
        try! .owner(FuzzKeys.hub, relaySigningKey: relay.signingKey, channel: binding, timestampMs: nowMs, nonce: [UInt8](repeating: 1, count: 16)),
        try! .carried(by: FuzzKeys.sender, relaySigningKey: relay.signingKey, collector: FuzzKeys.hub.signingKey, timestampMs: nowMs,
                      untilMs: nowMs + 86_400_000, nonce: [UInt8](repeating: 2, count: 16)),
    ]
    static let signedParts = Set(registrations.map { Array($0.encoded.dropLast(64)) })
    static let sealedTypes = RelayPacketType.allCases.filter(\.isSealed)

    static func session(client: Bool) -> SecureSession {
        client ? try! SecureSession(side: .client, sessionID: sessionID, ours: clientEphemeral, theirs: relayEphemeral.publicKey)
            : try! SecureSession(side: .relay, sessionID: sessionID, ours: relayEphemeral, theirs: clientEphemeral.publicKey)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRelay(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzStream(input(data, size))
    guard let mode = input.byte() else { return 0 }
    switch mode % 4 {
    case 0: runSession(&input)
    case 1: runMessage(&input)
    case 2: runFragments(&input)
    default: runRegistration(&input)
    }
    return 0
}

/// A session's replay rule (SecureSession): counters from 1, each once, at most 63 behind the highest.
private struct WindowModel {
    var seen: Set<UInt64> = []
    var highest: UInt64 = 0
    func accepts(_ n: UInt64) -> Bool { n > 0 && !seen.contains(n) && (n > highest || highest - n < SecureSession.replayWindow) }
    mutating func mark(_ n: UInt64) { seen.insert(n); highest = max(highest, n) }
}

/// One end of the session and what its owner does with what it receives.
private final class End {
    let isClient: Bool
    let session: SecureSession
    /// As RelayClient (16 partial messages) and the relay engine (4 per session).
    var reassembler: Reassembler
    var window = WindowModel()
    var cookies = RelayCookie(secret: [UInt8](repeating: 5, count: 32), previous: [UInt8](repeating: 6, count: 32), rotatedMs: Honest.nowMs)

    init(client: Bool) {
        isClient = client
        session = Honest.session(client: client)
        reassembler = Reassembler(maxPartial: client ? 16 : 4)
    }

    /// A datagram; `authentic` is the type and plaintext when the other end sealed exactly these bytes.
    func receive(_ datagram: [UInt8], authentic: (counter: UInt64, type: RelayPacketType, plaintext: [UInt8])?, nowMs: Int64) {
        guard let packet = try? RelayPacket(parsing: datagram) else {
            check(authentic == nil, "a sealed datagram does not parse")
            return
        }
        check((try? packet.encoded()) == datagram, "packet does not round-trip")
        guard packet.type.isSealed else {
            check(authentic == nil, "a sealed datagram parsed as cleartext")
            isClient ? clientCleartext(packet) : relayCleartext(packet, nowMs: nowMs)
            return
        }
        let fresh = authentic.map { window.accepts($0.counter) } ?? false
        let plaintext: [UInt8]
        do {
            plaintext = try session.open(packet)
        } catch {
            check(error is RelayProtocolError, "open threw \(error)")
            check(!fresh, "a fresh packet of the peer's was refused: \(error)")
            return
        }
        guard let a = authentic, fresh else { check(false, "opened a packet that is not a fresh one of the peer's"); return }
        window.mark(a.counter)
        check(packet.type == a.type && plaintext == a.plaintext, "opened to something else than was sealed")
        var type = packet.type, message = plaintext
        if type == .fragment {
            guard let f = try? Fragment(parsing: plaintext) else { return }
            check(f.encoded == plaintext, "fragment does not round-trip")
            let whole = reassembler.add(f, nowMs: nowMs)
            check(reassembler.bufferedBytes <= reassembler.maxPartial * Fragment.maxMessageLength, "reassembly holds too much")
            guard let whole else { return }
            check(whole.1.count <= Fragment.maxMessageLength && whole.0.isSealed && whole.0 != .fragment, "reassembled message out of bounds")
            (type, message) = whole
        }
        isClient ? clientMessage(type, message) : relayMessage(type, message)
    }

    /// RelayClient.handle for cleartext packets: a COOKIE_REPLY or a HELLO_REPLY while handshaking.
    private func clientCleartext(_ packet: RelayPacket) {
        switch packet.type {
        case .cookieReply:
            guard let r = try? CookieReply(parsing: packet.payload) else { return }
            check(r.encoded == packet.payload, "COOKIE_REPLY round trip")
            check(r.answers(clientKey: Honest.clientEphemeral.publicKey) == (r.echo == Array(Honest.clientEphemeral.publicKey.prefix(16))), "cookie echo check")
        case .helloReply:
            guard let r = try? HelloReply(parsing: packet.payload) else { return }
            check(r.encoded == packet.payload, "HELLO_REPLY round trip")
            do {
                try r.verify(pinnedKey: Honest.relay.signingKey, sessionID: packet.sessionID, clientKey: Honest.clientEphemeral.publicKey)
                check(packet.sessionID == Honest.sessionID && r.relayEphemeralKey == Honest.relayEphemeral.publicKey && r.relayKXKey == Honest.relay.kxKey,
                      "a forged HELLO_REPLY verified")
                _ = try? SecureSession(side: .client, sessionID: packet.sessionID, ours: Honest.clientEphemeral, theirs: r.relayEphemeralKey)
            } catch {
                check(error is RelayProtocolError, "verify threw \(error)")
            }
        default:
            break
        }
    }

    /// The relay engine for a HELLO: parse, then (under load) the stateless cookie for the source.
    private func relayCleartext(_ packet: RelayPacket, nowMs: Int64) {
        guard packet.type == .hello, let hello = try? Hello(parsing: packet.payload) else { return }
        check(hello.encoded.prefix(48) == packet.payload.prefix(48) && hello.encoded.count == Hello.length, "HELLO round trip")
        let source: [UInt8] = [192, 0, 2, 1, 0x1b, 0x58]
        if let c = hello.cookie {
            _ = cookies.verify(c, for: source, nowMs: nowMs)
        } else {
            let reply = CookieReply(clientKey: hello.clientKey, cookie: cookies.cookie(for: source, nowMs: nowMs))
            check(cookies.verify(reply.cookie, for: source, nowMs: nowMs), "a fresh cookie does not verify")
            let bytes = try? RelayPacket(type: .cookieReply, sessionID: 0, counter: 0, payload: reply.encoded).encoded()
            check((bytes?.count ?? .max) <= RelayPacket.headerLength + packet.payload.count, "a cookie reply larger than the HELLO")
        }
        _ = try? SecureSession(side: .relay, sessionID: 1, ours: Honest.relayEphemeral, theirs: hello.clientKey)
    }

    /// RelayClient.interpret.
    private func clientMessage(_ type: RelayPacketType, _ message: [UInt8]) {
        switch type {
        case .registered:
            guard let r = try? RegisteredResult(parsing: message) else { return }
            check(r.encoded == message && r.results.count <= RegisterRequest.maxCount, "REGISTERED round trip")
        case .queued:
            guard let q = try? QueuedNotice(parsing: message) else { return }
            check(q.encoded == message, "QUEUED round trip")
        case .msg:
            if let id = BundleID.of(bundle: message) { check(id.count == 16, "bundle ID length") }
            _ = try? Bundle(parsing: message)
        case .noMessages:
            guard let d = try? PollDone(parsing: message) else { return }
            check(d.encoded == message, "NO_MESSAGES round trip")
        case .error:
            guard let n = try? RelayErrorNotice(parsing: message) else { return }
            checkNotice(n, message)
        case .pong:
            guard message.count >= 16 else { return }
            var r = ByteReader(message, what: "pong")
            _ = try? r.u64()
            _ = try? r.u64()
        default:
            break
        }
    }

    /// The relay engine's handling of an opened packet (what needs no store).
    private func relayMessage(_ type: RelayPacketType, _ message: [UInt8]) {
        switch type {
        case .register:
            let v1 = RegisterRequest.isVersion1(message)
            do {
                let request = try RegisterRequest(parsing: message)
                check(!v1, "a v1 REGISTER parsed")
                check(request.encoded == message && (1...RegisterRequest.maxCount).contains(request.registrations.count), "REGISTER round trip")
                for reg in request.registrations { checkRegistration(reg) }
            } catch {
                check(!v1 || error as? RelayProtocolError == .registrationV1, "a v1 REGISTER not refused as v1")
            }
        case .send:
            let ref = BundleID.of(bundle: message)
            if let bundle = try? Bundle(parsing: message) {
                check(ref == bundle.envelope.bundleID, "the bundle ID read from the bytes is not the envelope's")
            }
        case .ack:
            guard let a = try? AckList(parsing: message) else { return }
            check(a.encoded == message && (1...AckList.maxCount).contains(a.bundleIDs.count), "ACK round trip")
        case .ping:
            var w = ByteWriter(capacity: message.count + 8)
            w.raw(message)
            w.u64(UInt64(Honest.nowMs))
            check(w.bytes.count == message.count + 8, "PONG length")
        default:
            break
        }
    }
}

private func checkNotice(_ n: RelayErrorNotice, _ bytes: [UInt8]) {
    check(n.reference.count == 16 && n.text.utf8.count <= RelayErrorNotice.maxTextLength, "ERROR fields out of bounds")
    let text = Array(bytes.dropFirst(23))
    if Array(String(decoding: text, as: UTF8.self).utf8) == text {
        check(n.encoded == bytes, "ERROR round trip")
    }
}

private func checkRegistration(_ reg: Registration) {
    check((try? Registration(parsing: reg.encoded)) == reg, "registration round trip")
    check((reg.collectorSigningKey == nil) == (reg.kind == .owner), "collector key only for carried registrations")
    if reg.verifySignature(relaySigningKey: Honest.relay.signingKey) {
        check(Honest.signedParts.contains(Array(reg.encoded.dropLast(64))), "a forged registration verified")
    }
    check(!reg.verifySignature(relaySigningKey: Honest.otherRelayKey) || !Honest.signedParts.contains(Array(reg.encoded.dropLast(64))),
          "a registration verified for another relay")
}

/// Mode 0: a client and a relay with one session between them; the fuzzer is the network. Op
/// byte: bits 0-2 the op, bit 3 the target end (0 client, 1 relay), bits 4-7 seconds to advance.
/// 0 raw datagram to the target; 1 the other end seals `type index ‖ message`; 2 deliver sealed
/// datagram `k` to its receiver; 3 the same with one byte changed (`k`, pos(2), xor); 4 the other
/// end spends `n`+1 counters; 5 it seals a message in FRAGMENTs (`type index`, `id`(1), message);
/// 6 the honest cleartext handshake packet to the target (HELLO or HELLO_REPLY); 7 deliver `k`
/// back to the end that sealed it.
private func runSession(_ input: inout FuzzStream) {
    let client = End(client: true), relay = End(client: false)
    var held: [(from: End, datagram: [UInt8], counter: UInt64, type: RelayPacketType, plaintext: [UInt8])] = []
    var now = Honest.nowMs
    var spent = 0

    func seal(by end: End, _ type: RelayPacketType, _ plaintext: [UInt8]) {
        do {
            let d = try end.session.seal(type, plaintext)
            let p = try RelayPacket(parsing: d)
            check(p.type == type && p.sessionID == Honest.sessionID, "sealed header")
            held.append((end, d, p.counter, type, plaintext))
        } catch {
            check(plaintext.count > SecureSession.maxPlaintextLength, "sealing a plaintext that fits failed: \(error)")
        }
    }

    func deliver(_ k: UInt8, to receiver: ((End) -> End)? = nil, mutate: (Int, UInt8)? = nil) {
        guard !held.isEmpty else { return }
        let h = held[Int(k) % held.count]
        let to = receiver?(h.from) ?? (h.from === client ? relay : client)
        var d = h.datagram
        if let (pos, x) = mutate { d[pos % d.count] ^= max(x, 1) }
        let authentic: (counter: UInt64, type: RelayPacketType, plaintext: [UInt8])? = to !== h.from && d == h.datagram ? (h.counter, h.type, h.plaintext) : nil
        to.receive(d, authentic: authentic, nowMs: now)
    }

    while let op = input.byte(), let c = input.chunk() {
        now += Int64(op >> 4) * 1000
        let target = op & 8 == 0 ? client : relay
        let other = target === client ? relay : client
        switch op & 7 {
        case 0:
            target.receive(c, authentic: nil, nowMs: now)
        case 1:
            guard let t = c.first else { break }
            seal(by: other, Honest.sealedTypes[Int(t) % Honest.sealedTypes.count], Array(c.dropFirst()))
        case 2:
            if let k = c.first { deliver(k) }
        case 3:
            if c.count >= 4 { deliver(c[0], mutate: (Int(c[1]) << 8 | Int(c[2]), c[3])) }
        case 4:
            let n = Int(c.first ?? 0) + 1
            guard spent + n <= 1024 else { break }
            spent += n
            for _ in 0..<n { _ = try? other.session.seal(.poll, []) }
        case 5:
            guard c.count >= 2 else { break }
            let type = Honest.sealedTypes[Int(c[0]) % Honest.sealedTypes.count]
            do {
                for (t, p) in try Fragment.split(type: type, message: Array(c.dropFirst(2)), fragmentID: UInt32(c[1])) { seal(by: other, t, p) }
            } catch {
                check(c.count - 2 > Fragment.maxMessageLength || type == .fragment, "splitting a message that fits failed")
            }
        case 6:
            let packet = target === client
                ? RelayPacket(type: .helloReply, sessionID: Honest.sessionID, counter: 0, payload: Honest.helloReply.encoded)
                : RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: Honest.clientEphemeral.publicKey).encoded)
            target.receive(try! packet.encoded(), authentic: nil, nowMs: now)
        default:
            if let k = c.first { deliver(k, to: { $0 }) }
        }
    }

    // Hostile packets cost the session nothing: each end's next packet still arrives.
    for (from, to) in [(client, relay), (relay, client)] {
        let before = held.count
        seal(by: from, .ping, Array("last".utf8))
        if held.count > before { to.receive(held[before].datagram, authentic: (held[before].counter, .ping, Array("last".utf8)), nowMs: now) }
    }
}

/// Mode 1: one message of each kind: parser `k` (second byte) on the rest.
private func runMessage(_ input: inout FuzzStream) {
    guard let k = input.byte() else { return }
    var rest: [UInt8] = []
    while let b = input.byte() { rest.append(b) }
    switch k % 13 {
    case 0:
        guard let h = try? Hello(parsing: rest) else { return }
        check(rest.count == Hello.length && h.encoded.prefix(48) == rest.prefix(48), "HELLO round trip")
        check(h.cookie == nil || h.cookie!.contains { $0 != 0 }, "an all-zero cookie kept")
    case 1:
        guard let r = try? HelloReply(parsing: rest) else { return }
        check(r.encoded == rest, "HELLO_REPLY round trip")
        if (try? r.verify(pinnedKey: Honest.relay.signingKey, sessionID: Honest.sessionID, clientKey: Honest.clientEphemeral.publicKey)) != nil {
            check(r.relayEphemeralKey == Honest.relayEphemeral.publicKey && r.relayKXKey == Honest.relay.kxKey, "a forged HELLO_REPLY verified")
        }
    case 2:
        guard let r = try? CookieReply(parsing: rest) else { return }
        check(r.encoded == rest, "COOKIE_REPLY round trip")
    case 3:
        do {
            checkRegistration(try Registration(parsing: rest))
        } catch {
            check(rest.count != Registration.v1Length || error as? RelayProtocolError == .registrationV1, "a v1 registration not refused as v1")
        }
    case 4:
        guard let r = try? RegisterRequest(parsing: rest) else { return }
        check(r.encoded == rest && !RegisterRequest.isVersion1(rest), "REGISTER round trip")
        for reg in r.registrations { checkRegistration(reg) }
    case 5:
        guard let r = try? RegisteredResult(parsing: rest) else { return }
        check(r.encoded == rest, "REGISTERED round trip")
    case 6:
        guard let q = try? QueuedNotice(parsing: rest) else { return }
        check(q.encoded == rest, "QUEUED round trip")
    case 7:
        guard let a = try? AckList(parsing: rest) else { return }
        check(a.encoded == rest, "ACK round trip")
    case 8:
        guard let d = try? PollDone(parsing: rest) else { return }
        check(d.encoded == rest, "NO_MESSAGES round trip")
    case 9:
        guard let n = try? RelayErrorNotice(parsing: rest) else { return }
        checkNotice(n, rest)
        check((try? RelayErrorNotice(parsing: n.encoded)) == n, "ERROR does not re-parse")
    case 10:
        guard let f = try? Fragment(parsing: rest) else { return }
        check(f.encoded == rest && f.count >= 2 && Int(f.count) <= Fragment.maxCount && f.index < f.count, "FRAGMENT round trip")
    case 11:
        guard let p = try? RelayPacket(parsing: rest) else { return }
        check((try? p.encoded()) == rest && rest.count <= RelayPacket.maxDatagramLength, "packet round trip")
    default:
        // A RESET, COOKIE_REPLY or HELLO in the clear, and a registration in a REGISTER of one.
        if rest.count == Registration.length, let reg = try? Registration(parsing: rest) {
            check((try? RegisterRequest(parsing: RegisterRequest([reg]).encoded)) == RegisterRequest([reg]), "REGISTER of one round trip")
        }
    }
}

/// Mode 2: fragments into a reassembler (op: bits 0-3 seconds to advance, bit 4 split instead):
/// each chunk a FRAGMENT payload; or a message split with `Fragment.split` and put back in an
/// order the chunk's first byte picks.
private func runFragments(_ input: inout FuzzStream) {
    var r = Reassembler(maxPartial: 4, timeoutMs: 10_000)
    var now: Int64 = 0
    while let op = input.byte(), let c = input.chunk() {
        now += Int64(op & 15) * 1000
        if op & 16 == 0 {
            guard let f = try? Fragment(parsing: c) else { continue }
            if let (type, message) = r.add(f, nowMs: now) {
                check(message.count <= Fragment.maxMessageLength && type.isSealed && type != .fragment, "reassembled message out of bounds")
            }
            check(r.bufferedBytes <= r.maxPartial * Fragment.maxMessageLength, "reassembly holds too much")
            continue
        }
        guard let order = c.first else { continue }
        let type = Honest.sealedTypes[Int(order) % Honest.sealedTypes.count]
        let message = Array(c.dropFirst())
        guard let pieces = try? Fragment.split(type: type, message: message, fragmentID: 0xF0F0_0000 | UInt32(order)) else {
            check(message.count > Fragment.maxMessageLength || type == .fragment, "split refused a message that fits")
            continue
        }
        check(pieces.allSatisfy { $0.1.count <= SecureSession.maxPlaintextLength }, "a piece larger than a datagram")
        if pieces.count == 1 {
            check(pieces[0].0 == type && pieces[0].1 == message, "a small message was changed")
            continue
        }
        var fragments = pieces.map { try! Fragment(parsing: $0.1) }
        if order & 1 == 1 { fragments.reverse() }
        if order & 2 == 2 { fragments.append(fragments[0]) }  // a duplicate
        var fresh = Reassembler(maxPartial: 1)
        var out: (RelayPacketType, [UInt8])?
        for f in fragments { if let whole = fresh.add(f, nowMs: now) { out = whole } }
        check(out?.0 == type && out?.1 == message, "split and reassembled message differs")
    }
}

/// Mode 3: registrations made with fuzzed fields: `kind(1) timestamp(8) until(8) nonce(16) binding(32)`.
private func runRegistration(_ input: inout FuzzStream) {
    var f: [UInt8] = []
    while let b = input.byte(), f.count < 65 { f.append(b) }
    guard f.count == 65 else { return }
    func i64(_ at: Int) -> Int64 { Int64(bitPattern: f[at..<at + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }) }
    let kind: Registration.Kind = f[0] & 1 == 0 ? .owner : .carried
    guard let reg = try? Registration.make(kind: kind, relaySigningKey: Honest.relay.signingKey, userSigningKey: FuzzKeys.sender.signingKey,
                                           timestampMs: i64(1), binding: Array(f[33..<65]), untilMs: i64(9), nonce: Array(f[17..<33]),
                                           sign: FuzzKeys.sender.sign) else {
        check(false, "making a registration failed")
        return
    }
    check(reg.encoded.count == Registration.length && (try? Registration(parsing: reg.encoded)) == reg, "registration round trip")
    check(reg.verifySignature(relaySigningKey: Honest.relay.signingKey), "a made registration does not verify")
    check(!reg.verifySignature(relaySigningKey: Honest.otherRelayKey), "a registration verified for another relay")
    check(reg.userID == FuzzKeys.sender.userID, "user ID")
}

@_cdecl("LLVMFuzzerInitialize")
public func initializeRelay(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        func typeIndex(_ t: RelayPacketType) -> UInt8 { UInt8(Honest.sealedTypes.firstIndex(of: t)!) }
        let register = RegisterRequest(Honest.registrations).encoded
        let registered = RegisteredResult(Honest.registrations.map { ($0.userID, RegistrationStatus.accepted) }).encoded
        let notice = RelayErrorNotice(code: .rateLimited, reference: [UInt8](repeating: 9, count: 16), retryAfterMs: 1000, text: "slow down").encoded
        let helloPacket = try RelayPacket(type: .hello, sessionID: 0, counter: 0, payload: Hello(clientKey: Honest.clientEphemeral.publicKey).encoded).encoded()
        // Large enough to travel in two FRAGMENTs.
        let bundle = try Bundle(envelope: Envelope.sealMessage(
            plaintext: [UInt8](repeating: 0x78, count: 1300), from: FuzzKeys.sender, toUserID: FuzzKeys.recipient.userID,
            recipientKXKey: FuzzKeys.recipient.kxKey, createdMs: Honest.nowMs, messageID: [UInt8](repeating: 0x4D, count: 16),
            ephemeral: KXKeyPair(secretKey: [UInt8](repeating: 0x45, count: 32)), nonceTail: [UInt8](repeating: 0x4E, count: 8))).encoded
        return [
            // The handshake, REGISTER to the relay, REGISTERED back, a replay, PING/PONG.
            ("session-register", [0] + [6] + chunk([]) + [14] + chunk([]) + [9] + chunk([typeIndex(.register)] + register)
                + [1] + chunk([typeIndex(.registered)] + registered) + [2] + chunk([0]) + [2] + chunk([1]) + [2] + chunk([0])
                + [0x11] + chunk([typeIndex(.ping)] + [0, 0, 0, 0, 0, 0, 0, 1]) + [2] + chunk([2])),
            // SEND of a bundle in fragments, delivered out of order; QUEUED, ERROR, NO_MESSAGES back; a reflection.
            ("session-send", [0] + [13] + chunk([typeIndex(.send), 7] + bundle) + [10] + chunk([1]) + [10] + chunk([0])
                + [1] + chunk([typeIndex(.queued)] + [UInt8](repeating: 3, count: 16) + [1]) + [2] + chunk([2])
                + [1] + chunk([typeIndex(.error)] + notice) + [2] + chunk([3]) + [1] + chunk([typeIndex(.noMessages), 0, 0, 0, 4])
                + [2] + chunk([4]) + [7] + chunk([0]) + [12] + chunk([200]) + [10] + chunk([2]) + [3] + chunk([5, 0, 30, 1])),
            ("session-hello", [0] + [8] + chunk(helloPacket) + [0] + chunk(try RelayPacket(type: .reset, sessionID: Honest.sessionID, counter: 0, payload: []).encoded())),
            ("message-register", [1, 4] + register),
            ("message-registration-v1", [1, 3] + [UInt8](repeating: 1, count: Registration.v1Length)),
            ("message-hello-reply", [1, 1] + Honest.helloReply.encoded),
            ("message-error", [1, 9] + notice),
            ("message-fragment", [1, 10] + Fragment(fragmentID: 1, index: 0, count: 2, innerType: .send, chunk: [1, 2, 3]).encoded),
            ("message-packet", [1, 11] + helloPacket),
            ("fragments", [2] + [0x10] + chunk([0] + [UInt8](repeating: 0xAB, count: 1500))
                + [0] + chunk(Fragment(fragmentID: 2, index: 1, count: 2, innerType: .msg, chunk: [4, 5]).encoded)
                + [1] + chunk(Fragment(fragmentID: 2, index: 0, count: 2, innerType: .msg, chunk: [6]).encoded)),
            ("registration", [3] + [1] + [UInt8](repeating: 0x10, count: 64)),
        ]
    }
    return 0
}
