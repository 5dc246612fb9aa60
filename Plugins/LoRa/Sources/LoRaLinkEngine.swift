import YaokPluginKit

/// What a LoRa link engine is set to (the config keys, Plugins/LoRa/README.md).
public struct LoRaLinkSettings: Sendable {
    public var modulation: LoRaModulation
    /// Fraction of any hour this hub may transmit (0.01 for 1 %).
    public var dutyCycle: Double
    /// Seconds between beacons.
    public var beaconInterval: Double = 600
    /// A ping after this long without an authentic frame from a neighbour.
    public var keepalive: Double = 300
    /// A link goes down after this long without an authentic frame.
    public var idleTimeout: Double = 900
    /// Neighbours with a session (up or being made) at once.
    public var maxNeighbours = 16
    /// Hub keys this hub dials; empty: any hub it hears.
    public var peers: Set<[UInt8]> = []
    /// Bytes waiting for the air before ``LoRaLinkEngine/send(_:to:)`` says the queue is full.
    public var queueLimitBytes = 64 * 1024
    /// The longest a frame may be on the air (a dwell-time rule such as the US 400 ms), or none.
    public var dwellLimit: Double?

    public init(modulation: LoRaModulation, dutyCycle: Double) {
        self.modulation = modulation
        self.dutyCycle = dutyCycle
    }

    /// Airtime of one of our frames as the device sends it (its own header byte included).
    public func airtime(_ frameBytes: Int) -> Double { modulation.timeOnAir(payloadBytes: frameBytes + 1) }

    /// Seconds between hellos to a neighbour not yet linked: a handshake's four frames and
    /// their answers at these settings, several times over.
    public var handshakeRetry: Double { max(5, 8 * airtime(AirFrame.maxLength)) }
}

/// Hub-to-hub links over one LoRa channel (Docs/protocol.md §10.2–10.3), without threads or
/// devices: the owner feeds it received packets and the time, and carries out its effects
/// (packets to transmit, links up and down, frames for the host). Not thread-safe: the owner
/// serialises calls.
///
/// Each neighbour gets the kit's ``SecureLink`` in datagram mode, addressed by its short ID.
/// Every transmission passes one queue, in priority order (link records, then host frames of
/// at most 320 bytes — custody answers, receipts, offers — then of at most 1 KB, then the
/// rest; oldest first within a class), and one ``AirtimeLedger`` that keeps any hour within
/// the duty cycle. Beacons, and answers to hubs without a session (cookies, version
/// refusals), each have at most a tenth of that budget.
public final class LoRaLinkEngine {
    public enum Effect {
        case transmit([UInt8])
        case linkUp(LinkInfo)
        case linkDown(LinkID, String)
        case frame([UInt8], LinkID)
        case log(LogLevel, String)
    }

    /// Counters for status and metrics.
    public struct Counters: Sendable, Equatable {
        public var framesIn: UInt64 = 0, framesOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        /// Packets that are not our frames, or not for us.
        public var foreign: UInt64 = 0
        /// Sealed records that did not open (forged, damaged, replayed, or no session).
        public var sealedRefused: UInt64 = 0
        public var cookiesSent: UInt64 = 0
        public var handshakeFailures: UInt64 = 0
        /// Handshakes not started or answered for lack of a slot.
        public var slotsRefused: UInt64 = 0
        /// Answers to strangers and beacons not sent: their tenth of the budget was spent.
        public var budgetRefused: UInt64 = 0
        /// Fragments that were refused or whose frame never completed.
        public var fragmentsDropped: UInt64 = 0
        public var airtimeSeconds: Double = 0
    }

    /// One heard neighbour.
    public struct Neighbour: Sendable, Equatable {
        public var shortID: ShortID
        public var rssiDBm: Int?
        public var snrDB: Double?
        public var lastHeard: Double
        public var linked: Bool
    }

    enum Priority: Int, Comparable {
        case link = 0, small, medium, bulk
        static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
        init(hostFrame count: Int) {
            self = count <= 320 ? .small : count <= 1024 ? .medium : .bulk
        }
    }

    /// Who pays for a transmission beyond the shared budget.
    enum Budget { case ours, strangers, beacons }

    struct Queued {
        var bytes: [UInt8]
        var priority: Priority
        var sequence: UInt64
        var budget: Budget
        var link: LinkID?
    }

    final class Session {
        let shortID: ShortID
        let linkID: LinkID
        var link: SecureLink
        /// A handshake beside a live session; it replaces `link` only if it proves the same key.
        var pending: SecureLink?
        var up = false
        var lastHeard: Double
        var lastAuthentic: Double
        var lastHello: Double = -.infinity
        /// When an initiator not yet up sends its next hello.
        var nextHello: Double = -.infinity
        var lastPing: Double = -.infinity
        var answered: (ephemeral: [UInt8], reply: [UInt8])?
        var reassembly = Fragments.Reassembly()
        var nextTag: UInt8 = 0
        init(shortID: ShortID, linkID: LinkID, link: SecureLink, now: Double) {
            self.shortID = shortID
            self.linkID = linkID
            self.link = link
            lastHeard = now
            lastAuthentic = now
        }
    }

    public let settings: LoRaLinkSettings
    public let shortID: ShortID
    private let identity: LinkIdentity
    private let cookies: LinkCookies
    private var ledger: AirtimeLedger
    private var strangerLedger: AirtimeLedger
    private var beaconLedger: AirtimeLedger
    private var sessions: [ShortID: Session] = [:]
    private var byLink: [LinkID: ShortID] = [:]
    private var heard: [ShortID: Neighbour] = [:]
    private var queue: [Queued] = []
    private var queuedBytes = 0
    private var sequence: UInt64 = 0
    private var nextLinkID: LinkID = 1
    private var radioFreeAt = -Double.infinity
    private var nextBeacon: Double?
    private var random = SystemRandomNumberGenerator()
    public private(set) var counters = Counters()
    static let maxHalfOpen = 4

    /// - Parameter cookieClock: milliseconds on a monotonic clock, for the stateless cookies.
    public init(identity: LinkIdentity, settings: LoRaLinkSettings, cookieClock: @escaping @Sendable () -> Int64) {
        self.identity = identity
        self.settings = settings
        shortID = ShortID(signingKey: identity.signingKey)
        cookies = LinkCookies(clock: cookieClock)
        ledger = AirtimeLedger(dutyCycle: settings.dutyCycle)
        strangerLedger = AirtimeLedger(dutyCycle: settings.dutyCycle / 10)
        beaconLedger = AirtimeLedger(dutyCycle: settings.dutyCycle / 10)
    }

    // MARK: What the status shows

    public func airtimeUsed(now: Double) -> Double { ledger.spent(now: now) }
    public func headroom(now: Double) -> Double { ledger.headroom(now: now) }
    public var queuedFrames: Int { queue.count }
    public var queuedByteCount: Int { queuedBytes }
    public var neighbours: [Neighbour] {
        heard.values.map { n in
            var n = n
            n.linked = sessions[n.shortID]?.up ?? false
            return n
        }.sorted { $0.shortID.value < $1.shortID.value }
    }
    public var linkCount: Int { sessions.values.filter(\.up).count }

    // MARK: Sending

    /// Queues one host frame for an up link: sealed now (cut into sealed fragments if it is
    /// longer than one LoRa frame holds), sent when the air and the budget allow.
    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard frame.count <= Fragments.maxFrame else { throw TransportError.frameTooLarge(size: frame.count, mtu: Fragments.maxFrame) }
        guard let id = byLink[link], let s = sessions[id], s.up else { throw TransportError.unknownLink(link) }
        guard queuedBytes + frame.count <= settings.queueLimitBytes else {
            throw TransportError.queueFull("\(queuedBytes) bytes wait for the air (the limit is \(settings.queueLimitBytes))")
        }
        let inner: [[UInt8]]
        if frame.count <= Fragments.maxInner {
            inner = [frame]
        } else {
            inner = Fragments.split(frame, tag: s.nextTag)
            s.nextTag &+= 1
        }
        let priority = Priority(hostFrame: frame.count)
        for record in inner {
            let sealed: [UInt8]
            do { sealed = try s.link.seal(record) } catch { throw TransportError.failed("sealing for link \(link): \(error)") }
            enqueue(.link, sealed, to: id, priority: priority, link: link)
        }
    }

    private func enqueue(_ kind: AirFrame.Kind, _ body: [UInt8], to receiver: ShortID, priority: Priority, budget: Budget = .ours, link: LinkID? = nil) {
        let bytes = AirFrame(kind: kind, sender: shortID, receiver: receiver, body: body).encoded
        sequence += 1
        queue.append(Queued(bytes: bytes, priority: priority, sequence: sequence, budget: budget, link: link))
        queuedBytes += bytes.count
    }

    /// The next frame to hand the device, if the radio is free and the budget allows it: the
    /// highest priority, oldest first. A frame the budget cannot take now waits, and so does
    /// everything behind it (a smaller one would only take the airtime it needs).
    private func nextTransmission(now: Double) -> [UInt8]? {
        guard now >= radioFreeAt, !queue.isEmpty else { return nil }
        while let i = queue.indices.min(by: { (queue[$0].priority, queue[$0].sequence) < (queue[$1].priority, queue[$1].sequence) }) {
            let q = queue[i]
            let airtime = settings.airtime(q.bytes.count)
            if let link = q.link, byLink[link] == nil {
                // The link went down while this waited: it would reach nobody.
                drop(at: i)
                continue
            }
            if let dwell = settings.dwellLimit, airtime > dwell {
                drop(at: i)
                continue
            }
            switch q.budget {
            case .ours: break
            case .strangers, .beacons:
                let side = q.budget == .strangers ? strangerLedger : beaconLedger
                guard side.allows(airtime, at: now) else {
                    counters.budgetRefused += 1
                    drop(at: i)
                    continue
                }
            }
            // Host frames, beacons and answers to strangers leave a tenth of the budget to the
            // links' own records (handshakes, keepalives): a backlog that spends the hour, or a
            // stranger's hellos, must not starve a link into timing out.
            let maintenance = q.priority == .link && q.budget == .ours
            guard ledger.allows(airtime, at: now, reserve: maintenance ? 0 : ledger.budget / 10) else {
                if q.budget != .ours {
                    // A beacon or a cookie that cannot go now is worth nothing later.
                    counters.budgetRefused += 1
                    drop(at: i)
                    continue
                }
                // Nothing of lower priority goes before this frame; look again within a second
                // (a link record that comes meanwhile may go first).
                radioFreeAt = now + min(1, max(0.005, (ledger.earliestStart(of: airtime, from: now) ?? now + 1) - now))
                return nil
            }
            drop(at: i)
            ledger.record(start: now, airtime: airtime)
            if q.budget == .strangers { strangerLedger.record(start: now, airtime: airtime) }
            if q.budget == .beacons { beaconLedger.record(start: now, airtime: airtime) }
            counters.airtimeSeconds += airtime
            counters.framesOut += 1
            counters.bytesOut += UInt64(q.bytes.count)
            // A short random pause after each frame, so two hubs that heard the same thing do
            // not answer into each other every time.
            radioFreeAt = now + airtime + Double.random(in: 0.02...0.02 + 2 * settings.airtime(32), using: &random)
            return q.bytes
        }
        return nil
    }

    private func drop(at i: Int) {
        queuedBytes -= queue[i].bytes.count
        queue.remove(at: i)
    }

    /// When the engine next has something to do (a frame's turn or a timer), at the latest.
    public func nextWake(now: Double) -> Double {
        guard !queue.isEmpty else { return now + 1 }
        return max(now + 0.005, radioFreeAt)
    }

    // MARK: Timers

    /// Timers (beacons, hellos, keepalives, idle links, partial frames) and the next frame for
    /// the air. Call often (every few tens of milliseconds) and after each received packet.
    public func tick(now: Double) -> [Effect] {
        var effects: [Effect] = []
        if nextBeacon == nil {
            // The first beacon soon, but not at the same instant as a neighbour that started with us.
            nextBeacon = now + Double.random(in: 0...min(5, settings.beaconInterval), using: &random)
        }
        if let due = nextBeacon, now >= due {
            // Each interval drawn from ±20 %: two hubs never stay in step, beaconing into each other.
            nextBeacon = now + settings.beaconInterval * Double.random(in: 0.8...1.2, using: &random)
            enqueue(.beacon, identity.signingKey, to: .everyone, priority: .link, budget: .beacons)
        }
        for (id, s) in sessions {
            s.reassembly.expire(now: now)
            if now - s.lastAuthentic > settings.idleTimeout || (!s.up && now - s.lastHeard > 4 * settings.handshakeRetry) {
                sessions[id] = nil
                if s.up {
                    byLink[s.linkID] = nil
                    effects.append(.linkDown(s.linkID, "no frame from the hub for \(Int(settings.idleTimeout)) s"))
                }
                continue
            }
            if !s.up, s.link.isInitiator, now >= s.nextHello {
                s.link = newLink(initiator: true)
                hello(s, on: s.link, now: now)
            } else if s.up, now - max(s.lastPing, s.lastAuthentic) >= settings.keepalive {
                redialIfSilent(s, now: now)
                s.lastPing = now
                if let ping = try? s.link.seal(TLVRecord(.ping, value: []).encoded) { enqueue(.link, ping, to: id, priority: .link) }
            }
            if s.up, s.pending != nil, now - s.lastHello > 4 * settings.handshakeRetry { s.pending = nil }
        }
        for (id, n) in heard where now - n.lastHeard > settings.idleTimeout && sessions[id] == nil { heard[id] = nil }
        if let bytes = nextTransmission(now: now) { effects.append(.transmit(bytes)) }
        return effects
    }

    private func newLink(initiator: Bool) -> SecureLink {
        SecureLink(identity: identity, role: .hub, isInitiator: initiator, channel: .datagram)
    }

    /// Sends a hello, and sets when the next one goes if this gets no answer: after a random
    /// one to two retry intervals, so that two hubs that heard the same beacon and cannot
    /// hear each other (both dialling a third) do not collide there every time.
    private func hello(_ s: Session, on link: SecureLink, now: Double) {
        s.lastHello = now
        s.nextHello = now + settings.handshakeRetry * Double.random(in: 1...2, using: &random)
        if let hello = try? link.hello() { enqueue(.link, hello, to: s.shortID, priority: .link) }
    }

    /// Every link goes down and what waited for the air is dropped (the device went away, or
    /// the transport stops); the router keeps custody of what the links carried. Neighbours
    /// notice by the idle timeout, or by the handshake this hub makes when it is back.
    public func forgetAll(reason: String) -> [Effect] {
        let effects = sessions.values.filter(\.up).map { Effect.linkDown($0.linkID, reason) }
        sessions.removeAll()
        byLink.removeAll()
        queue.removeAll()
        queuedBytes = 0
        return effects
    }

    // MARK: Receiving

    /// One packet the device heard (anyone's: every byte is a claim).
    public func received(_ packet: [UInt8], rssiDBm: Int?, snrDB: Double?, now: Double) -> [Effect] {
        counters.framesIn += 1
        counters.bytesIn += UInt64(packet.count)
        guard let frame = try? AirFrame(parsing: packet), frame.sender != shortID,
              frame.receiver == shortID || frame.receiver == .everyone else {
            counters.foreign += 1
            return []
        }
        var effects: [Effect] = []
        switch frame.kind {
        case .beacon:
            beacon(frame, rssiDBm: rssiDBm, snrDB: snrDB, now: now)
        case .link:
            guard frame.receiver == shortID, let record = try? TLVRecord(parsing: frame.body) else { counters.foreign += 1; return [] }
            link(record, from: frame.sender, rssiDBm: rssiDBm, snrDB: snrDB, now: now, effects: &effects)
        }
        return effects
    }

    private func note(_ id: ShortID, rssiDBm: Int?, snrDB: Double?, now: Double) {
        // Only a neighbour that proved itself, or one of a bounded few, is remembered: a
        // stranger inventing short IDs must not grow this table.
        guard heard[id] != nil || heard.count < 4 * settings.maxNeighbours else { return }
        heard[id] = Neighbour(shortID: id, rssiDBm: rssiDBm, snrDB: snrDB, lastHeard: now, linked: false)
    }

    /// A beacon: the lower key of two dials (so exactly one of them does), within the slots.
    private func beacon(_ frame: AirFrame, rssiDBm: Int?, snrDB: Double?, now: Double) {
        let key = frame.body
        guard key.count == 32, ShortID(signingKey: key) == frame.sender, key != identity.signingKey else { counters.foreign += 1; return }
        note(frame.sender, rssiDBm: rssiDBm, snrDB: snrDB, now: now)
        guard identity.signingKey.lexicographicallyPrecedes(key), settings.peers.isEmpty || settings.peers.contains(key) else { return }
        if let s = sessions[frame.sender] {
            redialIfSilent(s, now: now)
            return
        }
        // Half-open slots are counted by direction: beacons with made-up keys (keys are free)
        // can keep our own dials busy, never the slots neighbours dial us in.
        guard sessions.count < settings.maxNeighbours, sessions.values.filter({ !$0.up && $0.link.isInitiator }).count < Self.maxHalfOpen else {
            counters.slotsRefused += 1
            return
        }
        // The first hello after a random pause: every hub that heard this beacon heard it at once.
        let s = makeSession(frame.sender, link: newLink(initiator: true), now: now)
        s.nextHello = now + Double.random(in: 0...settings.handshakeRetry / 2, using: &random)
    }

    /// An up link whose neighbour has sent nothing authentic for longer than its keepalive
    /// (it would have pinged): it may have restarted and lost our session. The side that dials
    /// handshakes again beside the live session, which the new one replaces if it proves the
    /// same key.
    private func redialIfSilent(_ s: Session, now: Double) {
        guard s.up, s.pending == nil, let key = s.link.peer?.signingKey, identity.signingKey.lexicographicallyPrecedes(key),
              now - s.lastAuthentic > settings.keepalive + 2 * settings.handshakeRetry, now - s.lastHello >= settings.handshakeRetry else { return }
        let fresh = newLink(initiator: true)
        s.pending = fresh
        hello(s, on: fresh, now: now)
    }

    private func makeSession(_ id: ShortID, link: SecureLink, now: Double) -> Session {
        let s = Session(shortID: id, linkID: nextLinkID, link: link, now: now)
        nextLinkID += 1
        sessions[id] = s
        return s
    }

    private func link(_ record: TLVRecord, from id: ShortID, rssiDBm: Int?, snrDB: Double?, now: Double, effects: inout [Effect]) {
        switch FrameType(rawValue: record.type) {
        case .linkHello:
            switch cookies.admit(record, from: [UInt8(id.value >> 8), UInt8(id.value & 0xFF)]) {
            case .drop:
                counters.foreign += 1
                return
            case .reply(let r):
                if r.first == FrameType.linkCookie.rawValue { counters.cookiesSent += 1 }
                enqueue(.link, r, to: id, priority: .link, budget: .strangers)
                return
            case .admit:
                break
            }
            let theirs = Array(record.value[1..<33])
            let existing = sessions[id]
            if let s = existing, !s.up, s.link.isInitiator, s.link.state == .awaitingReply,
               s.link.ephemeralKey.lexicographicallyPrecedes(theirs) {
                return   // both dialled: the hello with the lower ephemeral key wins, on both sides
            }
            if let s = existing, s.up {
                guard s.pending == nil || now - s.lastHello > settings.handshakeRetry else { counters.slotsRefused += 1; return }
                let fresh = newLink(initiator: false)
                guard let outs = try? fresh.receive(record) else { counters.handshakeFailures += 1; return }
                s.pending = fresh
                s.lastHello = now
                for case .send(let r) in outs { enqueue(.link, r, to: id, priority: .link) }
                return
            }
            if let s = existing, !s.link.isInitiator, s.link.state == .awaitingIdentity, let a = s.answered, a.ephemeral == theirs {
                s.lastHeard = now
                enqueue(.link, a.reply, to: id, priority: .link)
                return
            }
            guard existing != nil || (sessions.count < settings.maxNeighbours
                                      && sessions.values.filter({ !$0.up && !$0.link.isInitiator }).count < Self.maxHalfOpen) else {
                counters.slotsRefused += 1
                return
            }
            let s = existing ?? makeSession(id, link: newLink(initiator: false), now: now)
            s.link = newLink(initiator: false)
            s.lastHeard = now
            s.answered = nil
            do {
                for case .send(let r) in try s.link.receive(record) {
                    s.answered = (theirs, r)
                    enqueue(.link, r, to: id, priority: .link)
                }
            } catch {
                counters.handshakeFailures += 1
                sessions[id] = nil
            }
        case .linkCookie, .linkReply, .linkVersion:
            guard let s = sessions[id], let link = s.up ? s.pending : s.link, link.isInitiator else { counters.foreign += 1; return }
            do {
                for out in try link.receive(record) {
                    switch out {
                    case .send(let r): enqueue(.link, r, to: id, priority: .link)
                    case .established(let peer): established(s, link: link, peer: peer, now: now, effects: &effects)
                    case .frame, .refused: break
                    }
                }
            } catch {
                // In clear, so anyone's: it ends nothing; the handshake waits for one that verifies.
                counters.handshakeFailures += 1
            }
        case .sealed:
            guard let s = sessions[id] else { counters.sealedRefused += 1; return }
            var outputs: [SecureLink.Output]?
            var from = s.link
            if s.link.acceptsSealed { outputs = try? s.link.receive(record) }
            if outputs == nil, let p = s.pending, p.acceptsSealed {
                outputs = try? p.receive(record)
                from = p
            }
            guard let outputs else { counters.sealedRefused += 1; return }
            s.lastHeard = now
            s.lastAuthentic = now
            note(id, rssiDBm: rssiDBm, snrDB: snrDB, now: now)
            for out in outputs {
                switch out {
                case .send(let r): enqueue(.link, r, to: id, priority: .link)
                case .established(let peer): established(s, link: from, peer: peer, now: now, effects: &effects)
                case .refused(let why):
                    counters.handshakeFailures += 1
                    if from === s.link {
                        sessions[id] = nil
                        if s.up {
                            byLink[s.linkID] = nil
                            effects.append(.linkDown(s.linkID, why))
                        }
                    } else {
                        s.pending = nil
                    }
                    effects.append(.log(.warning, "LoRa link with hub \(id) refused: \(why)"))
                case .frame(let inner):
                    guard s.up, from === s.link else { continue }
                    switch FrameType(rawValue: inner[0]) {
                    case .ping:
                        if let pong = try? s.link.seal(TLVRecord(.pong, value: []).encoded) { enqueue(.link, pong, to: id, priority: .link) }
                    case .pong, .linkIdentity, .linkOutcome:
                        break
                    case .linkClose:
                        sessions[id] = nil
                        byLink[s.linkID] = nil
                        effects.append(.linkDown(s.linkID, "the hub closed the link"))
                    case .linkFragment:
                        let before = s.reassembly.dropped
                        // A partial frame may wait twice the airtime of a whole one, and at least a handshake's retry.
                        let timeout = max(settings.handshakeRetry, 2 * Double(Fragments.maxCount) * settings.airtime(AirFrame.maxLength))
                        if let whole = s.reassembly.add(Array(inner[TLVRecord.headerLength...]), now: now, timeout: timeout),
                           (try? TLVRecord(parsing: whole)) != nil {
                            effects.append(.frame(whole, s.linkID))
                        }
                        counters.fragmentsDropped += UInt64(s.reassembly.dropped - before)
                    default:
                        effects.append(.frame(inner, s.linkID))
                    }
                }
            }
        default:
            // Anything else in clear (a spoofed custody ack, a link close) is refused.
            counters.foreign += 1
        }
    }

    /// A handshake completed. As responder it answers (accepted, or refused for lack of room).
    private func established(_ s: Session, link: SecureLink, peer: AuthenticatedPeer, now: Double, effects: inout [Effect]) {
        s.lastAuthentic = now
        func answer(_ record: [UInt8]?) { if !link.isInitiator, let record { enqueue(.link, record, to: s.shortID, priority: .link) } }
        if s.up {
            s.pending = nil
            guard link !== s.link else { return }
            guard s.link.peer?.signingKey == peer.signingKey else {
                answer(try? link.refuse(.noRoom, "a live session under this short ID has another key"))
                effects.append(.log(.warning, "refused a second hub under short ID \(s.shortID) while the link with the first is live"))
                return
            }
            s.link = link
            answer(try? link.accept())
            return
        }
        guard settings.peers.isEmpty || settings.peers.contains(peer.signingKey) || !link.isInitiator else { return }
        s.link = link
        s.up = true
        byLink[s.linkID] = s.shortID
        answer(try? link.accept())
        effects.append(.linkUp(LinkInfo(id: s.linkID, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey, peerRole: peer.role,
                                        mtu: Fragments.maxFrame, cost: 100, kind: "lora", remote: "lora:\(s.shortID)", proof: peer.proof)))
    }
}
