import Foundation
import YaokCrypto

/// Either side of an exchange, whatever its version: what the router holds per link.
public protocol ReconcileExchange: Sendable {
    /// The IDs reconciled, sorted, unique.
    var ids: [BundleID] { get }
    /// The exchange's session number, once known (a responder learns it from the first message).
    var exchangeSession: UInt32? { get }
    /// The exchange is over: every later message is ignored (`.wait`).
    var isFinished: Bool { get }
    /// Handles one message of this exchange (``receive(_:)`` has dropped the others).
    mutating func handle(_ message: ReconcileMessage) -> ReconcileStep
    /// Ends the exchange (a message of its own did not parse).
    mutating func end()
}

extension ReconcileExchange {
    /// Handles one message of the peer's: nothing once the exchange is over, and nothing of
    /// another session (a responder takes the session of its first message).
    public mutating func receive(_ message: ReconcileMessage) -> ReconcileStep {
        guard !isFinished else { return .wait }
        if let s = exchangeSession, message.session != s { return .wait }
        return handle(message)
    }

    /// Parses `bytes` (a `reconcile` record's value) and handles the message. Bytes that do not
    /// parse end the exchange with an abort (unsupported version, or malformed), unless their
    /// header names another session.
    public mutating func receive(bytes: [UInt8]) -> ReconcileStep {
        guard !isFinished else { return .wait }
        switch ReconcileStep.read(bytes, session: exchangeSession) {
        case .success(let message): return receive(message)
        case .failure(let e):
            if e.ends { end() }
            return e.step
        }
    }
}

extension ReconcileInitiator: ReconcileExchange {}
extension ReconcileResponder: ReconcileExchange {}

/// The side that starts a version 2 exchange (coded symbols). Value type; feed it every
/// `reconcile` message of the link and act on the returned step.
///
/// It asks for the responder's coded cells a batch at a time, subtracts its own, peels, and
/// asks for more until every cell received is empty; then it validates the result as version 1
/// does (every ID found on its side is in its set, none found on the peer's side is) and sends
/// `lacks`. How many cells it asks for next is its own choice (``plan(received:emptyCells:peeled:)``);
/// the responder only checks that requests are contiguous and under the cap.
public struct CodedInitiator: ReconcileExchange {
    public let session: UInt32
    /// The message that starts the exchange (`start`).
    public let firstMessage: ReconcileMessage
    public let ids: [BundleID]
    private let salt: [UInt8]
    private var decoder: CodedSymbolDecoder
    /// Cells asked for so far (received or on the way).
    public private(set) var requested: Int
    /// The versions the responder listed when it refused this one (abort 1): a hub from before
    /// version 2 lists `[1]`, and the exchange can start again in version 1.
    public private(set) var responderVersions: [UInt8]?
    /// `start` and `more` messages sent.
    private var requests = 1
    /// Requests not yet answered: first cell → cell count.
    private var outstanding: [Int: Int] = [:]
    /// Cells that arrived out of order, by first cell, until the ones before them come.
    private var early: [Int: Cells] = [:]
    /// How many cells had an empty difference before any peeling, from cell 1 on: they
    /// estimate the difference while it is still too large to peel.
    private var emptyCells = 0
    private var finished = false

    /// The first request: small, so a small difference costs little.
    public static let firstCells = 128

    public init(ids: [BundleID], session: UInt32? = nil, salt: [UInt8]? = nil) {
        precondition(salt == nil || salt!.count == ReconcileHash.saltLength, "salt is 16 bytes")
        self.ids = BundleID.sortedUnique(ids)
        self.session = session ?? randomSession()
        self.salt = salt ?? randomBytes(ReconcileHash.saltLength)
        decoder = CodedSymbolDecoder(ids: self.ids, digests: ReconcileHash.digests(self.ids, salt: self.salt), salt: self.salt)
        requested = Self.firstCells
        outstanding[0] = Self.firstCells
        firstMessage = .start(.init(session: self.session, salt: self.salt, setSize: UInt32(clamping: self.ids.count),
                                    cellCount: UInt16(Self.firstCells)))
    }

    public var exchangeSession: UInt32? { session }
    public var isFinished: Bool { finished }
    public mutating func end() { finished = true }

    public mutating func handle(_ message: ReconcileMessage) -> ReconcileStep {
        switch message {
        case .abort(let a):
            finished = true
            if a.reason == .unsupportedVersion { responderVersions = a.versions }
            return .peerAborted(a, by: "responder")
        case .cells(let c):
            let first = Int(c.firstCell), count = Int(c.cellCount)
            guard outstanding[first] == count else { return malformed("cells \(first)+\(count) were not asked for") }
            outstanding[first] = nil
            var cells = Cells(cells: count)
            cells.decode(c.cellBytes, first: 0)
            early[first] = cells
            var done = false
            while !done, let next = early.removeValue(forKey: decoder.received) {
                done = decoder.add(next)
                emptyCells += decoder.emptyBeforePeeling
            }
            if done { return finish() }
            guard outstanding.isEmpty else { return .wait }
            return askForMore()
        default:
            return malformed("an initiator got kind \(message.kind)")
        }
    }

    private mutating func askForMore() -> ReconcileStep {
        let plan = Self.plan(received: requested, emptyCells: emptyCells, peeled: decoder.plus.count + decoder.minus.count)
        let capped = min(plan.total, ReconcileLimits.maxCodedCells)
        // An honest difference of d decodes within about 1.4·d cells; four times the estimate
        // without decoding means the cells are not what they claim (or the sets changed).
        let hopeless = emptyCells > 0 && requested >= 4 * plan.estimate + 256
        let messagesNeeded = (capped - requested + ReconcileLimits.maxCodedCellsPerMessage - 1) / ReconcileLimits.maxCodedCellsPerMessage
        guard capped > requested, !hopeless, requests + messagesNeeded <= ReconcileLimits.maxCodedRequests else {
            finished = true
            return .fallBack(reason: .decodeFailed, send: .abort(.init(session: session, reason: .decodeFailed)),
                             detail: "\(requested) coded cells did not decode")
        }
        var messages: [ReconcileMessage] = []
        var first = requested
        while first < capped {
            let count = min(ReconcileLimits.maxCodedCellsPerMessage, capped - first)
            messages.append(.more(.init(session: session, firstCell: UInt32(first), cellCount: UInt16(count))))
            outstanding[first] = count
            requests += 1
            first += count
        }
        requested = capped
        return .send(messages)
    }

    /// How many cells to have after the next request, from `received` cells that did not
    /// decode. An ID reaches cell i with probability about p_i = 2 / (i + 1.5), so with d
    /// differences cell i is empty before peeling with probability (1 − p_i)^d; the d that
    /// expects as many empty cells as were seen (at least one) is the estimate d̂. Decoding
    /// needs about 1.37·d cells; ask for 1.45·d̂, and at least 1/8 more than now (twice as
    /// many while no cell was empty: d̂ is then only a lower bound).
    /// Returns d̂ and that total.
    static func plan(received: Int, emptyCells: Int, peeled: Int) -> (estimate: Int, total: Int) {
        let d = estimate(received: received, emptyCells: emptyCells, peeled: peeled)
        let byGrowth = emptyCells == 0 ? 2 * received : received + max(32, received / 8)
        return (d, max(d + (d * 45 + 99) / 100 + 16, byGrowth))
    }

    /// d̂: the difference that expects as many empty cells among cells 1 ..< `received` as
    /// were seen (at least one), and at least the IDs already peeled.
    static func estimate(received: Int, emptyCells: Int, peeled: Int) -> Int {
        let seen = Double(max(1, emptyCells))
        func expectedEmpty(_ d: Double) -> Double {
            var sum = 0.0
            for i in 1..<max(2, received) { sum += Foundation.exp(d * Foundation.log1p(-2 / (Double(i) + 1.5))) }
            return sum
        }
        var lo = Double(max(1, peeled)), hi = Double(ReconcileLimits.maxCodedCells)
        if expectedEmpty(lo) < seen { hi = lo }
        for _ in 0..<40 where hi - lo > 0.5 {
            let mid = (lo + hi) / 2
            if expectedEmpty(mid) >= seen { lo = mid } else { hi = mid }
        }
        return Int(lo.rounded(.up))
    }

    private mutating func finish() -> ReconcileStep {
        finished = true
        let peerLacks = decoder.minus.sorted(), iLack = decoder.plus.sorted()
        for i in peerLacks.indices.dropFirst() where peerLacks[i - 1] == peerLacks[i] { return invalid() }
        for i in iLack.indices.dropFirst() where iLack[i - 1] == iLack[i] { return invalid() }
        for id in peerLacks where !ReconcileInitiator.contains(ids, id) { return invalid() }
        for id in iLack where ReconcileInitiator.contains(ids, id) { return invalid() }
        return .done(peerLacks: peerLacks, iLack: iLack,
                     lacksMessages: ReconcileMessage.lacksParts(session: session, ids: iLack, version: ReconcileLimits.codedVersion))
    }

    private func invalid() -> ReconcileStep {
        .fallBack(reason: .decodeFailed, send: .abort(.init(session: session, reason: .decodeFailed)),
                  detail: "the coded cells decoded to a difference that does not hold")
    }

    private mutating func malformed(_ detail: String) -> ReconcileStep {
        finished = true
        return .malformed(session, detail)
    }
}

/// The side that answers a version 2 exchange. Value type; one per session.
///
/// It answers `start` and each `more` with exactly the coded cells asked for (requests must be
/// contiguous and stay under 65,535 cells in all) and ends with `.done(peerLacks:)` when the
/// `lacks` parts are complete; every lacked ID must be one it holds.
public struct CodedResponder: ReconcileExchange {
    public let ids: [BundleID]
    public private(set) var session: UInt32?
    private var encoder: CodedSymbolEncoder?
    /// Cells sent so far.
    public var cellsSent: Int { encoder?.produced ?? 0 }
    /// `start` and `more` messages answered.
    private var requests = 0
    private var lacks = LacksAssembly()
    private var finished = false

    public init(ids: [BundleID]) {
        self.ids = BundleID.sortedUnique(ids)
    }

    public var exchangeSession: UInt32? { session }
    public var isFinished: Bool { finished }
    public mutating func end() { finished = true }

    public mutating func handle(_ message: ReconcileMessage) -> ReconcileStep {
        switch message {
        case .start(let m):
            guard session == nil else { return malformed(m.session, "a second start") }
            session = m.session
            encoder = CodedSymbolEncoder(ids: ids, digests: ReconcileHash.digests(ids, salt: m.salt))
            return answer(first: 0, count: Int(m.cellCount), session: m.session)
        case .more(let m):
            guard session != nil else { return malformed(m.session, "more before any start") }
            guard Int(m.firstCell) == cellsSent else { return malformed(m.session, "more from cell \(m.firstCell) after \(cellsSent) sent") }
            guard requests < ReconcileLimits.maxCodedRequests else {
                return malformed(m.session, "more than \(ReconcileLimits.maxCodedRequests) requests")
            }
            return answer(first: Int(m.firstCell), count: Int(m.cellCount), session: m.session)
        case .lacks(let l):
            guard session != nil else { return malformed(l.session, "lacks before any start") }
            switch lacks.add(l, holding: ids) {
            case .failure(let why): return malformed(l.session, why.description)
            case .success(nil): return .wait
            case .success(let all?):
                finished = true
                return .done(peerLacks: all, iLack: [], lacksMessages: [])
            }
        case .abort(let a):
            finished = true
            return .peerAborted(a, by: "initiator")
        case .estimate, .table, .tableRequest, .cells:
            return malformed(message.session, "a version 2 responder got kind \(message.kind) of version \(message.version)")
        }
    }

    private mutating func answer(first: Int, count: Int, session: UInt32) -> ReconcileStep {
        guard var e = encoder else { return .wait }
        requests += 1
        encoder = nil  // keep its walks uniquely referenced while they move
        let cells = e.next(count)
        encoder = e
        return .send([.cells(.init(session: session, firstCell: UInt32(first), cellCount: UInt16(count),
                                   cellBytes: cells.encode(0..<count)))])
    }

    private mutating func malformed(_ session: UInt32, _ detail: String) -> ReconcileStep {
        finished = true
        return .malformed(session, detail)
    }
}

/// The `lacks` parts of one exchange, put back together (both versions' responders).
struct LacksAssembly: Sendable {
    private var parts: [UInt8: [BundleID]] = [:]
    private var expected: UInt8 = 0
    private var count = 0

    /// Adds a part; the whole sorted list once every part is in, nil before; a failure names
    /// the rule broken.
    mutating func add(_ l: ReconcileMessage.LacksPart, holding ids: [BundleID]) -> Result<[BundleID]?, LacksError> {
        let allowedParts = max(1, (ids.count + ReconcileLimits.maxIDsPerLacksPart - 1) / ReconcileLimits.maxIDsPerLacksPart)
        guard Int(l.parts) <= allowedParts else { return .failure("lacks in \(l.parts) parts for a set of \(ids.count)") }
        if expected == 0 { expected = l.parts }
        guard l.parts == expected else { return .failure("lacks parts disagree on their number") }
        guard parts[l.part] == nil else { return .failure("lacks part \(l.part) received twice") }
        for id in l.ids where !ReconcileInitiator.contains(ids, id) {
            return .failure("lacks names \(id), which this side did not hold")
        }
        parts[l.part] = l.ids
        count += l.ids.count
        guard parts.count == Int(expected) else { return .success(nil) }
        var all: [BundleID] = []
        all.reserveCapacity(count)
        for p in 1...expected {
            let ids = parts[p]!
            if let last = all.last, let first = ids.first, !(last < first) { return .failure("lacks parts out of order") }
            all += ids
        }
        return .success(all)
    }

    /// Why `lacks` parts were refused.
    struct LacksError: Error, ExpressibleByStringLiteral, ExpressibleByStringInterpolation {
        var description: String
        init(stringLiteral value: String) { description = value }
        init(stringInterpolation: DefaultStringInterpolation) { description = String(stringInterpolation: stringInterpolation) }
    }
}
