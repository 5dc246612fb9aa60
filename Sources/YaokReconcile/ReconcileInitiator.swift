import YaokCrypto

/// What a side does after a message.
public enum ReconcileStep: Sendable, Equatable {
    /// Send these messages to the peer, in order, then wait for its answer.
    case send([ReconcileMessage])
    /// Nothing to send (a table part of several, or a message of another session); wait.
    case wait
    /// Initiator: the exchange decoded and validated. `peerLacks`: my IDs the responder lacks
    /// (offer them); `iLack`: the responder's IDs I lack; `lacksMessages`: send these to the
    /// responder (they name `iLack`). Responder: `peerLacks` are the IDs the initiator lacks
    /// (offer them), `iLack` and `lacksMessages` are empty.
    case done(peerLacks: [BundleID], iLack: [BundleID], lacksMessages: [ReconcileMessage])
    /// The exchange is over without a result: fall back to listing offers. `send`, when
    /// present, is the abort to send to the peer (nil when the peer aborted).
    case fallBack(reason: ReconcileAbortReason, send: ReconcileMessage?, detail: String)
}

extension ReconcileStep {
    /// The peer ended the exchange (the `who` it was: "initiator" or "responder").
    static func peerAborted(_ a: ReconcileMessage.Abort, by who: String) -> ReconcileStep {
        .fallBack(reason: a.reason, send: nil, detail: "the \(who) aborted: \(a.reason)"
                  + (a.reason == .unsupportedVersion ? " (it speaks \(a.versions))" : ""))
    }

    /// The peer broke the protocol: end the exchange of `session` with abort 5.
    static func malformed(_ session: UInt32, _ detail: String) -> ReconcileStep {
        .fallBack(reason: .malformed, send: .abort(.init(session: session, reason: .malformed)), detail: detail)
    }

    /// What a side does with a record's value: the message to handle, or the step when it does
    /// not parse — `.wait` when its header names another exchange than `session` (when known),
    /// else a fallback answering it with an abort (unsupported version or malformed).
    static func read(_ bytes: [UInt8], session: UInt32?) -> Result<ReconcileMessage, Unparsable> {
        do {
            return .success(try ReconcileMessage(parsing: bytes))
        } catch {
            if let s = session, let h = ReconcileMessage.header(of: bytes), h.session != s { return .failure(Unparsable(step: .wait)) }
            let reason: ReconcileAbortReason = if case .unsupportedVersion = error { .unsupportedVersion } else { .malformed }
            return .failure(Unparsable(step: .fallBack(reason: reason, send: ReconcileMessage.abortAnswering(bytes, error: error),
                                                       detail: error.description)))
        }
    }

    /// Bytes that did not parse, and what to do about them.
    struct Unparsable: Error {
        let step: ReconcileStep
        /// The exchange ends (it was this exchange's message).
        var ends: Bool { if case .fallBack = step { true } else { false } }
    }
}

/// The side that starts an exchange. Value type; feed it every `reconcile` message of the
/// link and act on the returned step.
///
/// It sends its estimator, assembles the responder's table, subtracts its own table of the
/// same size and salt, peels it and validates the result: every ID found on its own side must
/// be in its set and every ID found on the peer's side must not be. It never reports a
/// difference it could not validate; a failed decode leads to at most two `tableRequest`s,
/// each for at least double the cells, then to `abort(decodeFailed)`.
public struct ReconcileInitiator: Sendable {
    /// The session number of this exchange.
    public let session: UInt32
    /// The message that starts the exchange (`estimate`).
    public let firstMessage: ReconcileMessage
    /// The IDs reconciled, sorted, unique.
    public let ids: [BundleID]
    /// The shape of the estimator.
    public let sizing: ReconcileSizing

    private var salt: [UInt8]
    private var digests: [ReconcileDigest]
    private var expectedTotal: UInt32?
    private var lastTotal = 0
    /// `tableRequest`s sent so far.
    public private(set) var retries = 0
    private var assembly: Assembly?
    private var finished = false

    private struct Assembly: Sendable {
        var total: UInt32
        var parts: UInt8
        var received: [Bool]
        var receivedCount = 0
        var cells: Cells
    }

    /// Starts an exchange over `ids` (duplicates are ignored). `session` and `salt` are random
    /// unless given (tests give them to get fixed bytes).
    public init(ids: [BundleID], session: UInt32? = nil, salt: [UInt8]? = nil, sizing: ReconcileSizing = .standard) {
        precondition(salt == nil || salt!.count == ReconcileHash.saltLength, "salt is 16 bytes")
        precondition(sizing.strata >= 1 && sizing.strata <= ReconcileLimits.maxStrata
                     && sizing.cellsPerStratum % 3 == 0 && sizing.cellsPerStratum >= 3
                     && sizing.strata * sizing.cellsPerStratum <= ReconcileLimits.maxEstimatorCells, "estimator shape")
        self.ids = BundleID.sortedUnique(ids)
        self.session = session ?? randomSession()
        self.salt = salt ?? randomBytes(ReconcileHash.saltLength)
        self.sizing = sizing
        digests = ReconcileHash.digests(self.ids, salt: self.salt)
        let estimator = StrataEstimator.build(ids: self.ids, digests: digests, strata: sizing.strata, cellsPerStratum: sizing.cellsPerStratum)
        firstMessage = .estimate(.init(session: self.session, salt: self.salt, strata: UInt8(sizing.strata),
                                       cellsPerStratum: UInt16(sizing.cellsPerStratum),
                                       setSize: UInt32(clamping: self.ids.count), cellBytes: estimator.encode(0..<estimator.cellCount)))
    }

    /// Starts an exchange over IDs given as 16-byte arrays (any other length is a precondition failure).
    public init(ids: [[UInt8]], session: UInt32? = nil, salt: [UInt8]? = nil, sizing: ReconcileSizing = .standard) {
        guard let parsed = BundleID.parseAll(ids) else { preconditionFailure("IDs are 16 bytes") }
        self.init(ids: parsed, session: session, salt: salt, sizing: sizing)
    }

    public var exchangeSession: UInt32? { session }
    public var isFinished: Bool { finished }
    public mutating func end() { finished = true }

    /// Handles one message from the responder.
    public mutating func handle(_ message: ReconcileMessage) -> ReconcileStep {
        switch message {
        case .abort(let a):
            finished = true
            return .peerAborted(a, by: "responder")
        case .table(let part):
            return receiveTable(part)
        case .estimate, .tableRequest, .lacks, .start, .more, .cells:
            return malformed("a version 1 initiator got kind \(message.kind) of version \(message.version)")
        }
    }

    private mutating func malformed(_ detail: String) -> ReconcileStep {
        finished = true
        return .malformed(session, detail)
    }

    private mutating func receiveTable(_ part: ReconcileMessage.TablePart) -> ReconcileStep {
        if let expected = expectedTotal, part.totalCells != expected {
            return malformed("table of \(part.totalCells) cells, \(expected) requested")
        }
        if var a = assembly {
            guard a.total == part.totalCells, a.parts == part.parts else { return malformed("table parts disagree on its size") }
            let i = Int(part.part) - 1
            guard !a.received[i] else { return malformed("table part \(part.part) received twice") }
            assembly = nil  // keep the cells uniquely referenced while writing
            a.received[i] = true
            a.receivedCount += 1
            a.cells.decode(part.cellBytes, first: Int(part.firstCell))
            assembly = a
        } else {
            // The parser bounds totalCells by the cap (65,535 cells, 1.8 MB here).
            var a = Assembly(total: part.totalCells, parts: part.parts, received: [Bool](repeating: false, count: Int(part.parts)),
                             cells: Cells(cells: Int(part.totalCells)))
            a.received[Int(part.part) - 1] = true
            a.receivedCount = 1
            a.cells.decode(part.cellBytes, first: Int(part.firstCell))
            assembly = a
        }
        guard let a = assembly, a.receivedCount == Int(a.parts) else { return .wait }
        assembly = nil
        return decode(a.cells, total: Int(a.total))
    }

    private mutating func decode(_ theirs: Cells, total: Int) -> ReconcileStep {
        lastTotal = total
        var diff = theirs
        var mine = Cells(cells: total)
        mine.insert(ids, digests, size: total)
        diff.subtract(mine)
        let peeled = diff.peel(base: 0, size: total, salt: salt)
        if peeled.complete, let result = validate(peeled) {
            finished = true
            return .done(peerLacks: result.peerLacks, iLack: result.iLack,
                         lacksMessages: ReconcileMessage.lacksParts(session: session, ids: result.iLack))
        }
        let next = 2 * total
        guard retries < ReconcileLimits.maxRetries, next <= ReconcileLimits.maxTableCells else {
            finished = true
            return .fallBack(reason: .decodeFailed, send: .abort(.init(session: session, reason: .decodeFailed)),
                             detail: "a table of \(total) cells did not decode after \(retries) retries")
        }
        retries += 1
        salt = randomBytes(ReconcileHash.saltLength)
        digests = ReconcileHash.digests(ids, salt: salt)
        expectedTotal = UInt32(next)
        return .send([.tableRequest(.init(session: session, salt: salt, totalCells: UInt32(next)))])
    }

    /// Both lists sorted and unique; mine in `ids`, theirs not.
    private func validate(_ p: Cells.Peeled) -> (peerLacks: [BundleID], iLack: [BundleID])? {
        let peerLacks = p.minus.sorted(), iLack = p.plus.sorted()
        for i in peerLacks.indices.dropFirst() where peerLacks[i - 1] == peerLacks[i] { return nil }
        for i in iLack.indices.dropFirst() where iLack[i - 1] == iLack[i] { return nil }
        for id in peerLacks where !Self.contains(ids, id) { return nil }
        for id in iLack where Self.contains(ids, id) { return nil }
        return (peerLacks, iLack)
    }

    static func contains(_ sorted: [BundleID], _ id: BundleID) -> Bool {
        var lo = 0, hi = sorted.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if sorted[mid] < id { lo = mid + 1 } else { hi = mid }
        }
        return lo < sorted.count && sorted[lo] == id
    }
}
