import Foundation
import YaokCrypto
import YaokLoRaPlugin
import YaokPluginKit
import YaokRNodeEmulator
import YaokWire

// `yaok-bench --lora [--hours H] [--step S]`: what one delivered message costs on a LoRa hop,
// in simulated time. Two hubs in range, each a real `LoRaLinkEngine` (beacons, the handshake
// with its cookie round, sealed fragments, keepalives, the airtime ledger) on a `SimulatedAir`
// (listen before talk, collisions, seeded loss), stepped as `LoRaLinkEngineTests.Air` steps
// them. Above the engines, this file plays the two routers' custody for one hop: hub A always
// has messages for hub B (a backlog); each message is a real bundle frame (0x01: hop header
// version 2 and a sealed 200-byte text); B answers with a custody ack and sends A the delivery
// receipt as a bundle; A acks that. A message counts as delivered when A has B's ack and B has
// A's ack of the receipt. What is not acknowledged within four times the airtime of the frame
// and its ack (Docs/protocol.md §10.3) is sent again, each resend of a bundle waiting twice as
// long. That wait starts when the bundle's last fragment went on the air (the headline
// figures), or, in a second pair of runs, when the engine handed it to the device, which
// holds it while the other hub transmits. Per setting: loss 0 % and 5 %, the handshake's
// cost, and where the airtime went. Figures only; nothing is asserted.

/// Milliseconds of simulated time: the engines' cookie clock.
private final class SimulatedMilliseconds: @unchecked Sendable {
    private let lock = NSLock()
    private var ms: Int64 = 0
    var value: Int64 {
        get { lock.withLock { ms } }
        set { lock.withLock { ms = newValue } }
    }
}

/// Where a hub's airtime went, as far as this file handed the engine the frame.
private enum Spend: Int, CaseIterable {
    case messages, messageResends, receipts, receiptResends, acks, routerFrames
    var label: String {
        switch self {
        case .messages: return "message bundles"
        case .messageResends: return "message resends"
        case .receipts: return "receipts"
        case .receiptResends: return "receipt resends"
        case .acks: return "custody acks"
        case .routerFrames: return "router link-up frames"
        }
    }
}

/// The LoRa frames (whole, our 5-byte header included) one host frame of `n` bytes becomes on
/// a link (Docs/protocol.md §10.2): one sealed record, or sealed `linkFragment` slices.
func loraFrameLengths(hostFrame n: Int) -> [Int] {
    let wrap = AirFrame.headerLength + SecureLink.overhead
    if n <= Fragments.maxInner { return [n + wrap] }
    let count = (n + Fragments.maxSlice - 1) / Fragments.maxSlice
    return (0..<count).map { i in
        TLVRecord.headerLength + Fragments.headerLength + min(Fragments.maxSlice, n - i * Fragments.maxSlice) + wrap
    }
}

private struct LoRaRunResult {
    var measuredHours = 0.0
    var delivered = 0
    var messagesSent = 0
    var airtime = 0.0
    var spent: [Spend: Double] = [:]
    var beacons = 0.0
    var handshakeClear = 0.0
    var frames = 0
    var handshake: (frames: Int, bytes: Int, airtime: Double, seconds: Double, sizes: [Int])?
    var linkDowns = 0
    var collisions = 0
    var lost = 0
    var messageResends = 0
    var receiptResends = 0
    var linkedAfter: Double?
    var failed: String?

    var perMessage: Double { delivered > 0 ? airtime / Double(delivered) : .infinity }
    var perHour: Double { measuredHours > 0 ? Double(delivered) / measuredHours : 0 }
}

/// One hub: its engine and the custody of the bundles it sends over the one link.
private final class BenchHub {
    struct Outgoing {
        let frame: [UInt8]
        let first: Spend
        let resend: Spend
        /// Index of the message this bundle is, or carries the receipt of.
        let message: Int
        /// The custody wait before the first resend.
        let timeout: Double
        var sends = 0
        var deadline = Double.infinity
    }

    let index: Int
    let identity: Identity
    let engine: LoRaLinkEngine
    var link: LinkID?
    var everUp: Double?
    var downs = 0
    /// Bundles sent (or to send) and not yet acknowledged, by bundle ID.
    var outgoing: [[UInt8]: Outgoing] = [:]
    /// Bundle IDs waiting for their (first or next) send, oldest first.
    var due: [[UInt8]] = []
    /// The bundle in the engine's queue now (one at a time, so that its custody wait starts
    /// when its last fragment leaves, not when the duty cycle lets it).
    var current: [UInt8]?
    /// IDs to acknowledge, sent once per step (one `custodyAck`, or a `custodyAcks` list).
    var acksToSend: [[UInt8]] = []
    /// Host frames in the engine's queue, not yet seen to leave.
    var handed: [(Spend, Double)] = []
    var spent: [Spend: Double] = [:]
    var resends = 0
    /// LoRa frames the engine handed the device, and those the device put on the air.
    var toDevice = 0, onAir = 0

    init(index: Int, identity: Identity, engine: LoRaLinkEngine) {
        self.index = index
        self.identity = identity
        self.engine = engine
    }
}

private final class LoRaBenchRun {
    let settings: LoRaLinkSettings
    let channel: SimulatedAir.Channel
    var air: SimulatedAir
    let hubs: [BenchHub]
    let alice = Identity.generate(), bob = Identity.generate()   // the users at each end
    let ms = SimulatedMilliseconds()
    var now = 0.0
    let text = [UInt8](repeating: 0x6D, count: 200)
    /// A's messages: bundle ID → index; whether A has B's ack, whether B has A's ack of its receipt.
    var messageIndex: [[UInt8]: Int] = [:]
    var messageAcked: [Bool] = []
    var receiptAcked: [Bool] = []
    var receiptMade: Set<Int> = []
    /// At most this many of A's messages unacknowledged at once (the router's first window).
    let window = 32
    var result = LoRaRunResult()
    // The handshake: the first hello, the transmissions of the handshake, who initiated.
    var firstHello: Double?
    var handshakeFrames: [(sender: Int, bytes: Int, airtime: Double, sealed: Bool)] = []
    var firstSealedSeen: Set<Int> = []
    var bothUpAt: Double?

    /// When a bundle's custody wait starts: when its last fragment went on the air (true), or
    /// when the engine handed it to the device (false: the device may still hold it, waiting
    /// for the channel, since the engine paces itself by its own airtime only).
    let waitFromAir: Bool

    init(settings: LoRaLinkSettings, loss: Double, seed: UInt64, waitFromAir: Bool) {
        self.settings = settings
        self.waitFromAir = waitFromAir
        channel = SimulatedAir.Channel(frequencyHz: 869_525_000, bandwidthHz: UInt32(settings.modulation.bandwidthHz),
                                       spreadingFactor: UInt8(settings.modulation.spreadingFactor),
                                       codingRate: UInt8(settings.modulation.codingRate))
        air = SimulatedAir(inRange: [0: [1], 1: [0]], loss: loss, seed: seed)
        let ms = self.ms
        hubs = (0..<2).map { i in
            let id = Identity.generate()
            return BenchHub(index: i, identity: id,
                            engine: LoRaLinkEngine(identity: id, settings: settings, cookieClock: { ms.value }))
        }
    }

    func airtime(hostFrame n: Int) -> Double { loraFrameLengths(hostFrame: n).reduce(0) { $0 + settings.airtime($1) } }
    lazy var ackAirtime = airtime(hostFrame: CustodyAck(bundleID: [UInt8](repeating: 0, count: 16)).frame.count)

    // MARK: Frames

    func hopHeader(by hub: BenchHub) -> HopHeader {
        HopHeader(hopCount: 1, previousHop: hub.identity.userID, ageMs: 1_000)
    }

    /// A's next message: a real sealed 200-byte text in a bundle frame.
    func newMessage() throws -> ([UInt8], [UInt8]) {
        let envelope = try Envelope.sealMessage(plaintext: text, from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey,
                                                createdMs: 1_700_000_000_000 + Int64(now * 1000))
        let frame = Bundle(hop: hopHeader(by: hubs[0]), envelope: envelope).frame
        return (envelope.bundleID, frame)
    }

    func queue(_ id: [UInt8], frame: [UInt8], on hub: BenchHub, first: Spend, resend: Spend, message: Int) {
        hub.outgoing[id] = BenchHub.Outgoing(frame: frame, first: first, resend: resend, message: message,
                                             timeout: max(2, 4 * (airtime(hostFrame: frame.count) + ackAirtime)))
        hub.due.append(id)
    }

    /// A host frame reached `hub` whole.
    func deliver(_ frame: [UInt8], to hub: BenchHub) throws {
        guard let record = try? TLVRecord(parsing: frame) else { return }
        switch record.type {
        case FrameType.bundle.rawValue:
            let bundle = try Bundle(parsing: record.value)
            let id = bundle.envelope.bundleID
            hub.acksToSend.append(id)   // a duplicate is acknowledged again
            if bundle.envelope.kind == .message, let i = messageIndex[id], !receiptMade.contains(i) {
                receiptMade.insert(i)
                let receipt = try Envelope.receipt(kind: .deliveryReceipt, for: bundle.envelope.messageID,
                                                   originalSenderUserID: alice.userID, from: bob,
                                                   createdMs: 1_700_000_000_000 + Int64(now * 1000))
                queue(receipt.bundleID, frame: Bundle(hop: hopHeader(by: hub), envelope: receipt).frame, on: hub,
                      first: .receipts, resend: .receiptResends, message: i)
            }
        case RoutingFrameType.custodyAck.rawValue:
            acknowledged([try CustodyAck(parsing: record.value).bundleID], at: hub)
        case RoutingFrameType.custodyAcks.rawValue:
            acknowledged(try BundleIDList(parsing: record.value).bundleIDs, at: hub)
        default:
            break   // clock, the ack-list announcement
        }
    }

    func acknowledged(_ ids: [[UInt8]], at hub: BenchHub) {
        for id in ids {
            guard let o = hub.outgoing.removeValue(forKey: id) else { continue }
            hub.due.removeAll { $0 == id }
            if hub.index == 0 { messageAcked[o.message] = true } else { receiptAcked[o.message] = true }
        }
    }

    // MARK: Stepping

    func apply(_ hub: BenchHub, _ effects: [LoRaLinkEngine.Effect]) throws {
        for e in effects {
            switch e {
            case .transmit(let bytes):
                air.queue(from: hub.index, bytes: bytes, channel: channel, at: now)
                hub.toDevice += 1
            case .linkUp(let info):
                hub.link = info.id
                if hub.everUp == nil { hub.everUp = now }
                if bothUpAt == nil, hubs.allSatisfy({ $0.everUp != nil }) { bothUpAt = now }
                // What a hub's router sends first on a hub link (Router.handleLinkUp): its time
                // and "I read ack lists". No certificate (no network key), no reconciliation.
                for record in [ClockFrame(source: .system, timeMs: 1_700_000_000_000).record, CustodyAcks.announcement] {
                    try hub.engine.send(record.encoded, to: info.id)
                    hub.handed.append((.routerFrames, airtime(hostFrame: record.encoded.count)))
                }
            case .linkDown:
                hub.link = nil
                hub.downs += 1
                if let c = hub.current {   // dropped with the link: sent again once it is back
                    hub.current = nil
                    hub.due.insert(c, at: 0)
                }
                hub.handed.removeAll()
            case .frame(let f, _):
                try deliver(f, to: hub)
            case .log:
                break
            }
        }
    }

    /// Hands the engine this hub's acks, and its next bundle if none is in the engine.
    func handOver(_ hub: BenchHub) throws {
        guard let link = hub.link else { return }
        if !hub.acksToSend.isEmpty {
            for record in CustodyAcks.records(for: hub.acksToSend, peerReadsLists: true) {
                try hub.engine.send(record.encoded, to: link)
                hub.handed.append((.acks, airtime(hostFrame: record.encoded.count)))
            }
            hub.acksToSend.removeAll()
        }
        guard hub.current == nil else { return }
        if hub.due.isEmpty, hub.index == 0, hub.outgoing.count < window {
            let (id, frame) = try newMessage()
            messageIndex[id] = messageAcked.count
            messageAcked.append(false)
            receiptAcked.append(false)
            queue(id, frame: frame, on: hub, first: .messages, resend: .messageResends, message: messageAcked.count - 1)
        }
        guard let id = hub.due.first, var o = hub.outgoing[id] else { return }
        do {
            try hub.engine.send(o.frame, to: link)
        } catch TransportError.queueFull {
            return
        }
        hub.due.removeFirst()
        if o.sends > 0 { hub.resends += 1 }
        hub.handed.append((o.sends == 0 ? o.first : o.resend, airtime(hostFrame: o.frame.count)))
        o.sends += 1
        o.deadline = .infinity
        hub.outgoing[id] = o
        hub.current = id
    }

    func step(to t: Double) throws {
        now = t
        ms.value = Int64(t * 1000)
        let heard = air.receptions(until: now)
        for r in heard {
            let hub = hubs[r.receiver]
            try apply(hub, hub.engine.received(r.bytes, rssiDBm: r.rssiDBm, snrDB: r.snrDB, now: now))
        }
        for hub in hubs { try handOver(hub) }
        for hub in hubs { try apply(hub, hub.engine.tick(now: now)) }
        for tx in air.startWaiting(at: now) {
            hubs[tx.sender].onAir += 1
            record(tx)
        }
        for hub in hubs {
            let engineEmpty = hub.engine.queuedFrames == 0, deviceEmpty = hub.onAir == hub.toDevice
            if engineEmpty {
                // Everything handed has gone to the device (and goes on the air in turn).
                for (spend, seconds) in hub.handed { hub.spent[spend, default: 0] += seconds }
                hub.handed.removeAll()
            }
            if engineEmpty && (deviceEmpty || !waitFromAir), let id = hub.current {
                // The bundle has left: its custody wait starts now.
                hub.current = nil
                if var o = hub.outgoing[id] {
                    o.deadline = now + o.timeout * pow(2, Double(o.sends - 1))
                    hub.outgoing[id] = o
                }
            }
            for (id, o) in hub.outgoing where o.deadline <= now {
                hub.outgoing[id]!.deadline = .infinity
                hub.due.append(id)
            }
        }
    }

    func record(_ tx: SimulatedAir.Transmission) {
        let seconds = tx.end - tx.start
        result.airtime += seconds
        result.frames += 1
        guard let frame = try? AirFrame(parsing: tx.bytes) else { return }
        if frame.kind == .beacon { result.beacons += seconds; return }
        guard let type = frame.body.first else { return }
        let clear = (0x20...0x24).contains(type) && type != FrameType.sealed.rawValue
        if clear { result.handshakeClear += seconds }
        if type == FrameType.linkHello.rawValue, firstHello == nil { firstHello = tx.start }
        // The handshake: its records in clear, and each side's first sealed frame (the
        // initiator's identity, the responder's outcome).
        guard firstHello != nil, !firstSealedSeen.isSuperset(of: [0, 1]) else { return }
        if clear {
            handshakeFrames.append((tx.sender, tx.bytes.count, seconds, false))
        } else if type == FrameType.sealed.rawValue, firstSealedSeen.insert(tx.sender).inserted {
            handshakeFrames.append((tx.sender, tx.bytes.count, seconds, true))
        }
    }

    /// Whether anything is on the air or waiting for it.
    var airBusy: Bool { air.waitingCount > 0 || air.busy(for: 0, at: now) }

    /// Runs until the link is up, then `hours` more; `step` is the finest step.
    func run(hours: Double, step fine: Double) throws -> LoRaRunResult {
        while bothUpAt == nil {
            // A lost identity frame can leave the dialling hub up alone, spending its hour on
            // frames the other cannot open, until the link times out and the budget allows a
            // new hello: so hours, not seconds.
            guard now < 4 * 3600 else {
                result.failed = "the hubs did not link in 4 h"
                return result
            }
            try advance(fine: fine)
        }
        result.linkedAfter = bothUpAt
        let end = now + hours * 3600
        while now < end { try advance(fine: fine, limit: end) }
        result.measuredHours = hours
        result.delivered = zip(messageAcked, receiptAcked).filter { $0 && $1 }.count
        result.messagesSent = messageAcked.count
        for hub in hubs { for (k, v) in hub.spent { result.spent[k, default: 0] += v } }
        result.linkDowns = hubs.reduce(0) { $0 + $1.downs }
        result.collisions = air.collisions
        result.lost = air.lost
        result.messageResends = hubs[0].resends
        result.receiptResends = hubs[1].resends
        if let up = bothUpAt, let hello = firstHello {
            result.handshake = (handshakeFrames.count, handshakeFrames.reduce(0) { $0 + $1.bytes },
                                handshakeFrames.reduce(0) { $0 + $1.airtime }, up - hello, handshakeFrames.map(\.bytes))
        }
        return result
    }

    /// One step: fine while anything is on the air, else straight to the next thing due
    /// (an engine's turn or timer, a custody deadline), at most a second ahead.
    func advance(fine: Double, limit: Double = .infinity) throws {
        var next = now + fine
        if !airBusy {
            next = min(hubs[0].engine.nextWake(now: now), hubs[1].engine.nextWake(now: now), now + 1)
            for hub in hubs {
                if hub.link != nil && (hub.current == nil && (!hub.due.isEmpty || (hub.index == 0 && hub.outgoing.count < window)) || !hub.acksToSend.isEmpty) {
                    next = now + fine   // something to hand over
                }
                for o in hub.outgoing.values where o.deadline < next { next = o.deadline }
            }
            next = max(next, now + fine)
        }
        try step(to: min(next, limit))
    }
}

private func percent(_ part: Double, _ whole: Double) -> String {
    String(format: "%.0f %%", whole > 0 ? 100 * part / whole : 0)
}

/// Where the airtime of one run went, in shares of the whole.
private func breakdown(_ r: LoRaRunResult) -> String {
    let hostTotal = r.spent.values.reduce(0, +)
    let linkRecords = max(0, r.airtime - hostTotal - r.beacons - r.handshakeClear)
    var parts: [String] = []
    for s in Spend.allCases {
        if let v = r.spent[s], v > 0 { parts.append("\(s.label) \(percent(v, r.airtime))") }
    }
    parts.append("beacons \(percent(r.beacons, r.airtime))")
    parts.append("handshake in clear \(percent(r.handshakeClear, r.airtime))")
    parts.append("sealed link records (identity, outcome, pings) \(percent(linkRecords, r.airtime))")
    return parts.joined(separator: ", ")
}

func runLoRaBench(hours: Double, step: Double) throws {
    let wall0 = Date()
    // The frames of one message, from real ones.
    do {
        let a = Identity.generate(), b = Identity.generate(), hub = Identity.generate()
        let envelope = try Envelope.sealMessage(plaintext: [UInt8](repeating: 0x6D, count: 200), from: a, toSigningKey: b.signingKey,
                                                recipientKXKey: b.kxKey, createdMs: 1)
        let receipt = try Envelope.receipt(kind: .deliveryReceipt, for: envelope.messageID, originalSenderUserID: a.userID, from: b, createdMs: 2)
        let hop = HopHeader(hopCount: 1, previousHop: hub.userID, ageMs: 1)
        let m = Bundle(hop: hop, envelope: envelope).frame, r = Bundle(hop: hop, envelope: receipt).frame
        let ack = CustodyAck(bundleID: envelope.bundleID).frame
        print("== LoRa: one message over one hub-to-hub hop, in simulated time (\(String(format: "%g", hours)) h after link up per run, 2 hubs in range)")
        print("a 200-byte text: envelope \(envelope.encoded.count) B, bundle frame \(m.count) B → LoRa frames \(loraFrameLengths(hostFrame: m.count)) B; "
              + "receipt envelope \(receipt.encoded.count) B, bundle frame \(r.count) B → \(loraFrameLengths(hostFrame: r.count)) B; "
              + "custody ack \(ack.count) B → \(loraFrameLengths(hostFrame: ack.count)) B (LoRa frames include our 5-byte header and the seal's \(SecureLink.overhead))")
        print("model: A always has a message for B; one bundle at a time in each engine, custody acks at once; resend after 4 × (airtime of the frame + its ack), "
              + "doubling per resend; hop header v2; no offers, requests or reconciliation (the router offers before it sends to a hub); "
              + "engine defaults (beacons 600 s, keepalive 300 s); airtime per message = every frame both hubs sent from start, over messages delivered")
    }
    for sf in [7, 10] {
        for duty in [0.01, 0.1] {
            let modulation = LoRaModulation(spreadingFactor: sf, bandwidthHz: 125_000, codingRate: 5)
            let settings = LoRaLinkSettings(modulation: modulation, dutyCycle: duty)
            var results: [LoRaRunResult] = []
            for (i, (loss, fromAir)) in [(0.0, true), (0.05, true), (0.0, false), (0.05, false)].enumerated() {
                // The air's losses are seeded per run; the engines' random pauses are not.
                let seed = UInt64(sf * 1000 + Int(duty * 100) * 10 + i)
                results.append(try LoRaBenchRun(settings: settings, loss: loss, seed: seed, waitFromAir: fromAir).run(hours: hours, step: step))
            }
            let name = "lora SF\(sf)/125k duty \(Int(duty * 100))%"
            if let i = results.firstIndex(where: { $0.failed != nil }) {
                print("\(name): run \(i + 1) of 4: \(results[i].failed!)")
                continue
            }
            let clean = results[0], lossy = results[1]
            let payload = modulation.timeOnAir(payloadBytes: 200)
            print(String(format: "%@: %.1f messages/hour delivered, %.2f s airtime per message (message + receipt + acks + link overhead), "
                         + "payload alone %.3f s, ratio X/Y = %.1f; loss 5%%: %.1f messages/hour, %.2f s per message",
                         name, clean.perHour, clean.perMessage, payload, clean.perMessage / payload, lossy.perHour, lossy.perMessage))
            if let h = clean.handshake {
                print(String(format: "  handshake: %d frames (%@ B: hello, cookie, hello, reply, sealed identity, sealed outcome), %d bytes, %.2f s airtime; %.1f s from the first hello to link up on both sides",
                             h.frames, h.sizes.map(String.init).joined(separator: ", "), h.bytes, h.airtime, h.seconds))
            }
            for (label, r) in [("loss 0 %", clean), ("loss 5 %", lossy),
                               ("custody wait from the hand-off to the device, loss 0 %", results[2]), ("the same, loss 5 %", results[3])] {
                print(String(format: "  %@: %.1f messages/hour, %.2f s per message; %d delivered of %d sent, %.1f s airtime in all (%d frames); resends: %d messages, %d receipts; linked %.0f s after start, link downs %d; collisions %d, lost %d",
                             label, r.perHour, r.perMessage, r.delivered, r.messagesSent, r.airtime, r.frames, r.messageResends, r.receiptResends,
                             r.linkedAfter ?? 0, r.linkDowns, r.collisions, r.lost))
                print("    airtime: " + breakdown(r))
            }
        }
    }
    print(String(format: "(%.1f s of wall time)", Date().timeIntervalSince(wall0)))
}
