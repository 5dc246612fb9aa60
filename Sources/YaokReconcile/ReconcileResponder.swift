import YaokCrypto

/// The side that answers an exchange. Value type; one per session. Feed it the session's
/// `reconcile` messages and act on the returned step.
///
/// It answers `estimate` with its table (sized from the estimated difference, or
/// `abort(tooDifferent)` above the cap), answers up to two `tableRequest`s (each at least
/// double the previous table) and ends with `.done(peerLacks:)` when the `lacks` parts are
/// complete. Every lacked ID must be one it held when it built its table.
public struct ReconcileResponder: Sendable {
    /// The IDs reconciled, sorted, unique.
    public let ids: [BundleID]
    /// The table sizing rule.
    public let sizing: ReconcileSizing
    /// The session being answered, once an `estimate` arrived.
    public private(set) var session: UInt32?
    /// The estimated difference from the last `estimate`, and whether it was exact.
    public private(set) var estimate: (difference: Int, exact: Bool)?
    /// Cells of the last table sent.
    public private(set) var lastTableCells = 0
    private var retries = 0
    private var lacks = LacksAssembly()
    private var finished = false

    /// A responder over `ids` (duplicates are ignored).
    public init(ids: [BundleID], sizing: ReconcileSizing = .standard) {
        self.ids = BundleID.sortedUnique(ids)
        self.sizing = sizing
    }

    /// A responder over IDs given as 16-byte arrays (any other length is a precondition failure).
    public init(ids: [[UInt8]], sizing: ReconcileSizing = .standard) {
        guard let parsed = BundleID.parseAll(ids) else { preconditionFailure("IDs are 16 bytes") }
        self.init(ids: parsed, sizing: sizing)
    }

    public var exchangeSession: UInt32? { session }
    public var isFinished: Bool { finished }
    public mutating func end() { finished = true }

    /// Handles one message from the initiator.
    public mutating func handle(_ message: ReconcileMessage) -> ReconcileStep {
        switch message {
        case .estimate(let e):
            guard session == nil else { return malformed(message.session, "a second estimate") }
            session = e.session
            return answer(e)
        case .tableRequest(let r):
            guard session != nil else { return malformed(r.session, "a tableRequest before any estimate") }
            guard retries < ReconcileLimits.maxRetries else { return malformed(r.session, "a third tableRequest") }
            guard Int(r.totalCells) >= 2 * lastTableCells else {
                return malformed(r.session, "a tableRequest for \(r.totalCells) cells after \(lastTableCells)")
            }
            retries += 1
            lacks = LacksAssembly()
            return .send(table(salt: r.salt, cells: Int(r.totalCells), digests: ReconcileHash.digests(ids, salt: r.salt), session: r.session))
        case .lacks(let l):
            guard session != nil else { return malformed(l.session, "lacks before any estimate") }
            return receiveLacks(l)
        case .abort(let a):
            finished = true
            return .peerAborted(a, by: "initiator")
        case .table, .start, .more, .cells:
            return malformed(message.session, "a version 1 responder got kind \(message.kind) of version \(message.version)")
        }
    }

    private mutating func malformed(_ session: UInt32, _ detail: String) -> ReconcileStep {
        finished = true
        return .malformed(session, detail)
    }

    private mutating func answer(_ e: ReconcileMessage.Estimate) -> ReconcileStep {
        let strata = Int(e.strata), c = Int(e.cellsPerStratum)
        var theirs = Cells(cells: strata * c)
        theirs.decode(e.cellBytes, first: 0)
        let digests = ReconcileHash.digests(ids, salt: e.salt)
        let mine = StrataEstimator.build(ids: ids, digests: digests, strata: strata, cellsPerStratum: c)
        let est = StrataEstimator.estimate(mine, minus: theirs, strata: strata, cellsPerStratum: c, salt: e.salt)
        estimate = est
        let cells = sizing.tableCells(estimate: est.difference, exact: est.exact)
        guard cells <= ReconcileLimits.maxTableCells else {
            finished = true
            return .fallBack(reason: .tooDifferent, send: .abort(.init(session: e.session, reason: .tooDifferent)),
                             detail: "estimated difference \(est.difference) needs \(cells) cells, above the cap")
        }
        return .send(table(salt: e.salt, cells: cells, digests: digests, session: e.session))
    }

    private mutating func table(salt: [UInt8], cells: Int, digests: [ReconcileDigest], session: UInt32) -> [ReconcileMessage] {
        lastTableCells = cells
        var t = Cells(cells: cells)
        t.insert(ids, digests, size: cells)
        let per = ReconcileLimits.maxCellsPerPart
        let parts = (cells + per - 1) / per
        return (0..<parts).map { i in
            let range = (i * per)..<min(cells, (i + 1) * per)
            return .table(.init(session: session, part: UInt8(i + 1), parts: UInt8(parts), totalCells: UInt32(cells),
                                firstCell: UInt32(range.lowerBound), cellCount: UInt16(range.count), cellBytes: t.encode(range)))
        }
    }

    private mutating func receiveLacks(_ l: ReconcileMessage.LacksPart) -> ReconcileStep {
        switch lacks.add(l, holding: ids) {
        case .failure(let why): return malformed(l.session, why.description)
        case .success(nil): return .wait
        case .success(let all?):
            finished = true
            return .done(peerLacks: all, iLack: [], lacksMessages: [])
        }
    }
}
