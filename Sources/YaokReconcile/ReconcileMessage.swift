import YaokCrypto

/// The constants of the reconciliation protocol (Docs/protocol.md, `reconcile (0x0A)`).
public enum ReconcileLimits {
    /// Version 1: a strata estimator, then one IBLT sized from it.
    public static let version: UInt8 = 1
    /// Version 2: rateless coded symbols, asked for until the difference peels.
    public static let codedVersion: UInt8 = 2
    /// The versions this module speaks, as listed in an `abort` with reason 1.
    public static let supportedVersions: [UInt8] = [1, 2]
    /// The largest message: 60,000 bytes, so a message, its TLV header and the link's sealing
    /// fit every hub transport that can carry it (UDP frames are at most 65,000 bytes). Links
    /// with smaller frames (BLE, 10.5 KB) list offers (`offer`) instead.
    public static let maxMessageBytes = 60_000
    /// Bytes of one cell: count(4) + idSum(16) + hashSum(8).
    public static let cellBytes = 28
    /// Cells in one `table` part: as many as fit one record after the 18-byte part header.
    public static let maxCellsPerPart = (maxMessageBytes - 18) / cellBytes  // 2142
    /// The most cells a table may have (a multiple of 3; 1.83 MB in 31 parts).
    public static let maxTableCells = 65_535
    /// The most strata × cells per stratum in an estimate (it must fit one record).
    public static let maxEstimatorCells = (maxMessageBytes - 29) / cellBytes  // 2141
    /// The most strata in an estimate.
    public static let maxStrata = 32
    /// IDs in one `lacks` part.
    public static let maxIDsPerLacksPart = 3600
    /// `tableRequest`s per session.
    public static let maxRetries = 2
    /// Version 2: the most coded cells one `start`, `more` or `cells` message covers (as many
    /// as fit one record after the 12-byte `cells` header).
    public static let maxCodedCellsPerMessage = (maxMessageBytes - 12) / cellBytes  // 2142
    /// Version 2: the most coded cells an exchange may ask for (1.83 MB); beyond, it aborts.
    public static let maxCodedCells = 65_535
    /// Version 2: the most `start` + `more` messages an exchange may send. Each costs the
    /// responder one pass over its set, so this, not the cell cap alone, bounds its work.
    public static let maxCodedRequests = 128
}

/// Why an exchange ends without a result (the `abort` reason codes).
public enum ReconcileAbortReason: UInt8, Sendable, Equatable, CustomStringConvertible {
    /// The receiver does not speak the message's version (the abort lists the ones it does).
    case unsupportedVersion = 1
    /// The estimated difference needs a table above the cap.
    case tooDifferent = 2
    /// The responder is rate limited.
    case busy = 3
    /// The initiator could not decode a table after the allowed retries.
    case decodeFailed = 4
    /// A message broke the protocol.
    case malformed = 5

    public var description: String {
        switch self {
        case .unsupportedVersion: "unsupported version"
        case .tooDifferent: "too different"
        case .busy: "busy"
        case .decodeFailed: "decode failed"
        case .malformed: "malformed"
        }
    }
}

/// A message that does not parse, or breaks the protocol's rules.
public enum ReconcileError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Fewer bytes than the fixed fields of the message need.
    case truncated(needed: Int, got: Int)
    /// The byte count does not match the counts the message declares.
    case lengthMismatch(expected: Int, got: Int)
    /// More than one record can carry.
    case tooLong(Int)
    /// A version this module does not speak.
    case unsupportedVersion(UInt8)
    /// A kind that is not 1…5.
    case unknownKind(UInt8)
    /// An abort reason that is not 1…5.
    case unknownAbortReason(UInt8)
    /// An abort with reason 1 that lists no version.
    case noVersionsListed
    /// `parts` is 0.
    case zeroParts
    /// `part` is 0 or above `parts`.
    case partOutOfRange(part: UInt8, parts: UInt8)
    /// A strata count outside 1…32.
    case strataOutOfRange(UInt8)
    /// Cells per stratum not a positive multiple of 3, or strata × cells above one record.
    case cellsPerStratumInvalid(strata: UInt8, cells: UInt16)
    /// A table size above the cap (65,535 cells).
    case totalCellsAboveCap(UInt32)
    /// A table size that is not a positive multiple of 3.
    case totalCellsInvalid(UInt32)
    /// `parts` does not match ceil(total / 2142).
    case partsMismatch(parts: UInt8, expected: Int)
    /// A table part whose first cell or cell count is not the one its number implies.
    case cellRangeMismatch(part: UInt8, first: UInt32, count: UInt16)
    /// A `lacks` part with more than 3,600 IDs.
    case countAboveCap(UInt16)
    /// A `lacks` part other than the last with fewer than 3,600 IDs, or an empty last part of several.
    case partNotFull(part: UInt8, count: UInt16)
    /// IDs not sorted ascending or repeated.
    case notSortedUnique
    /// Version 2: a cell count of 0 or above 2,142 in one message.
    case codedCountInvalid(UInt16)
    /// Version 2: cells that would end above the cap of 65,535.
    case codedRangeAboveCap(first: UInt32, count: UInt16)

    public var description: String {
        switch self {
        case .truncated(let n, let g): "reconcile message truncated: needs at least \(n) bytes, got \(g)"
        case .lengthMismatch(let e, let g): "reconcile message length \(g) does not match its counts (expected \(e))"
        case .tooLong(let n): "reconcile message of \(n) bytes is above one message (60,000)"
        case .unsupportedVersion(let v): "reconcile version \(v) is not supported (this hub speaks 1 and 2)"
        case .unknownKind(let k): "unknown reconcile message kind \(k)"
        case .unknownAbortReason(let r): "unknown reconcile abort reason \(r)"
        case .noVersionsListed: "reconcile abort for an unsupported version lists no version"
        case .zeroParts: "reconcile message has zero parts"
        case .partOutOfRange(let p, let n): "reconcile part \(p) outside 1...\(n)"
        case .strataOutOfRange(let s): "reconcile estimate has \(s) strata (1...32 allowed)"
        case .cellsPerStratumInvalid(let s, let c): "reconcile estimate has \(s) strata of \(c) cells (a positive multiple of 3, at most 2141 cells in all)"
        case .totalCellsAboveCap(let t): "reconcile table of \(t) cells is above the cap of 65,535"
        case .totalCellsInvalid(let t): "reconcile table of \(t) cells is not a positive multiple of 3"
        case .partsMismatch(let p, let e): "reconcile table in \(p) parts, its size needs \(e)"
        case .cellRangeMismatch(let p, let f, let c): "reconcile table part \(p) holds cells \(f)+\(c), not the range its number implies"
        case .countAboveCap(let c): "reconcile lacks part of \(c) IDs is above 3,600"
        case .partNotFull(let p, let c): "reconcile lacks part \(p) has \(c) IDs: every part but the last holds 3,600 and a last part of several is not empty"
        case .notSortedUnique: "reconcile lacks IDs are not sorted ascending and unique"
        case .codedCountInvalid(let c): "reconcile message covers \(c) coded cells (1...2142 allowed)"
        case .codedRangeAboveCap(let f, let c): "reconcile coded cells \(f)+\(c) end above the cap of 65,535"
        }
    }
}

/// One message of the reconciliation protocol: the value of one TLV record of type 0x0A
/// `reconcile`. All integers little-endian; every message starts with
/// version(1) + kind(1) + session(4).
public enum ReconcileMessage: Sendable, Equatable {
    /// Kind 1, initiator → responder: the initiator's strata estimator.
    case estimate(Estimate)
    /// Kind 2, responder → initiator: one part of the responder's table.
    case table(TablePart)
    /// Kind 3, initiator → responder: a bigger table under a new salt, please.
    case tableRequest(TableRequest)
    /// Kind 4, initiator → responder: one part of the IDs the initiator lacks.
    case lacks(LacksPart)
    /// Kind 5, either way: the exchange ends; fall back to listing offers.
    case abort(Abort)
    /// Version 2, kind 1, initiator → responder: the salt, and the first coded cells wanted.
    case start(Start)
    /// Version 2, kind 6, initiator → responder: the next coded cells, please.
    case more(More)
    /// Version 2, kind 7, responder → initiator: coded cells of the responder's set.
    case cells(CodedCells)

    /// Kind 1: salt(16) + strata(1) + cells per stratum(2) + set size(4) + strata·cells cells.
    public struct Estimate: Sendable, Equatable {
        public var session: UInt32
        /// The session's salt (16 bytes) for the estimator and the first table.
        public var salt: [UInt8]
        public var strata: UInt8
        public var cellsPerStratum: UInt16
        /// The initiator's set size; informational only.
        public var setSize: UInt32
        /// strata × cellsPerStratum cells, 28 bytes each, stratum 0 first.
        public var cellBytes: [UInt8]
        public init(session: UInt32, salt: [UInt8], strata: UInt8, cellsPerStratum: UInt16, setSize: UInt32, cellBytes: [UInt8]) {
            self.session = session; self.salt = salt; self.strata = strata
            self.cellsPerStratum = cellsPerStratum; self.setSize = setSize; self.cellBytes = cellBytes
        }
    }

    /// Kind 2: part(1) + parts(1) + total cells(4) + first cell(4) + cell count(2) + cells.
    /// Part p (1-based) holds cells (p−1)·2142 ..< min(p·2142, total).
    public struct TablePart: Sendable, Equatable {
        public var session: UInt32
        public var part: UInt8
        public var parts: UInt8
        public var totalCells: UInt32
        public var firstCell: UInt32
        public var cellCount: UInt16
        /// cellCount cells, 28 bytes each.
        public var cellBytes: [UInt8]
        public init(session: UInt32, part: UInt8, parts: UInt8, totalCells: UInt32, firstCell: UInt32, cellCount: UInt16, cellBytes: [UInt8]) {
            self.session = session; self.part = part; self.parts = parts; self.totalCells = totalCells
            self.firstCell = firstCell; self.cellCount = cellCount; self.cellBytes = cellBytes
        }
    }

    /// Kind 3: salt(16) + total cells(4).
    public struct TableRequest: Sendable, Equatable {
        public var session: UInt32
        public var salt: [UInt8]
        public var totalCells: UInt32
        public init(session: UInt32, salt: [UInt8], totalCells: UInt32) {
            self.session = session; self.salt = salt; self.totalCells = totalCells
        }
    }

    /// Kind 4: part(1) + parts(1) + count(2) + IDs (16 each, sorted ascending, unique).
    /// The same in both versions; its version byte is the exchange's.
    public struct LacksPart: Sendable, Equatable {
        public var session: UInt32
        public var part: UInt8
        public var parts: UInt8
        public var ids: [BundleID]
        /// The exchange's version (1 or 2).
        public var version: UInt8
        public init(session: UInt32, part: UInt8, parts: UInt8, ids: [BundleID], version: UInt8 = ReconcileLimits.version) {
            self.session = session; self.part = part; self.parts = parts; self.ids = ids; self.version = version
        }
    }

    /// Version 2, kind 1: salt(16) + set size(4) + cell count(2): cells 0 ..< count, please.
    public struct Start: Sendable, Equatable {
        public var session: UInt32
        /// The session's salt (16 bytes): it fixes every ID's cells.
        public var salt: [UInt8]
        /// The initiator's set size; informational only.
        public var setSize: UInt32
        /// 1 ... 2142.
        public var cellCount: UInt16
        public init(session: UInt32, salt: [UInt8], setSize: UInt32, cellCount: UInt16) {
            self.session = session; self.salt = salt; self.setSize = setSize; self.cellCount = cellCount
        }
    }

    /// Version 2, kind 6: first cell(4) + cell count(2). `first` is the number of cells asked
    /// for so far in the session: requests are contiguous.
    public struct More: Sendable, Equatable {
        public var session: UInt32
        public var firstCell: UInt32
        /// 1 ... 2142.
        public var cellCount: UInt16
        public init(session: UInt32, firstCell: UInt32, cellCount: UInt16) {
            self.session = session; self.firstCell = firstCell; self.cellCount = cellCount
        }
    }

    /// Version 2, kind 7: first cell(4) + cell count(2) + cells (28 bytes each): the answer to
    /// one `start` or `more`, for exactly the cells it asked for.
    public struct CodedCells: Sendable, Equatable {
        public var session: UInt32
        public var firstCell: UInt32
        public var cellCount: UInt16
        /// cellCount cells, 28 bytes each.
        public var cellBytes: [UInt8]
        public init(session: UInt32, firstCell: UInt32, cellCount: UInt16, cellBytes: [UInt8]) {
            self.session = session; self.firstCell = firstCell; self.cellCount = cellCount; self.cellBytes = cellBytes
        }
    }

    /// Kind 5: reason(1); reason 1 is followed by count(1) + the versions the sender speaks.
    public struct Abort: Sendable, Equatable {
        public var session: UInt32
        public var reason: ReconcileAbortReason
        /// With reason 1 only: the versions the sender speaks.
        public var versions: [UInt8]
        public init(session: UInt32, reason: ReconcileAbortReason, versions: [UInt8] = []) {
            self.session = session; self.reason = reason
            self.versions = reason == .unsupportedVersion ? (versions.isEmpty ? ReconcileLimits.supportedVersions : versions) : []
        }
    }

    /// The kind byte of the message that starts an exchange in either version (`estimate`, `start`).
    public static let estimateKind: UInt8 = 1

    public var kind: UInt8 {
        switch self {
        case .estimate, .start: Self.estimateKind
        case .table: 2
        case .tableRequest: 3
        case .lacks: 4
        case .abort: 5
        case .more: 6
        case .cells: 7
        }
    }

    /// The version byte it is sent with: 2 for the coded messages, the exchange's for `lacks`,
    /// 1 for the rest (an `abort`'s version byte is never checked).
    public var version: UInt8 {
        switch self {
        case .start, .more, .cells: ReconcileLimits.codedVersion
        case .lacks(let m): m.version
        case .estimate, .table, .tableRequest, .abort: ReconcileLimits.version
        }
    }

    /// The session number this message belongs to.
    public var session: UInt32 {
        switch self {
        case .estimate(let m): m.session
        case .table(let m): m.session
        case .tableRequest(let m): m.session
        case .lacks(let m): m.session
        case .abort(let m): m.session
        case .start(let m): m.session
        case .more(let m): m.session
        case .cells(let m): m.session
        }
    }

    // MARK: Parsing

    /// Parses one message. Every count and length is checked against the byte count and the
    /// caps before anything is allocated. Kind 5 (`abort`) parses whatever the version byte,
    /// so an abort listing versions is always readable; any other kind must be version 1 or 2,
    /// and the kinds of one version are not read under the other (`lacks` is in both).
    public init(parsing bytes: [UInt8]) throws(ReconcileError) {
        let n = bytes.count
        guard n <= ReconcileLimits.maxMessageBytes else { throw .tooLong(n) }
        guard n >= 6 else { throw .truncated(needed: 6, got: n) }
        let version = bytes[0], kind = bytes[1]
        let session = Self.u32(bytes, 2)
        if kind != 5 && !ReconcileLimits.supportedVersions.contains(version) { throw .unsupportedVersion(version) }
        if version == ReconcileLimits.codedVersion && kind != 5 {
            self = try Self.parseCoded(bytes, kind: kind, session: session)
            return
        }
        switch kind {
        case 1:
            guard n >= 29 else { throw .truncated(needed: 29, got: n) }
            let strata = bytes[22]
            let cells = Self.u16(bytes, 23)
            guard strata >= 1 && Int(strata) <= ReconcileLimits.maxStrata else { throw .strataOutOfRange(strata) }
            guard cells >= 3 && cells % 3 == 0 && Int(strata) * Int(cells) <= ReconcileLimits.maxEstimatorCells else {
                throw .cellsPerStratumInvalid(strata: strata, cells: cells)
            }
            let expected = 29 + Int(strata) * Int(cells) * ReconcileLimits.cellBytes
            guard n == expected else { throw .lengthMismatch(expected: expected, got: n) }
            self = .estimate(Estimate(session: session, salt: Array(bytes[6..<22]), strata: strata, cellsPerStratum: cells,
                                      setSize: Self.u32(bytes, 25), cellBytes: Array(bytes[29...])))
        case 2:
            guard n >= 18 else { throw .truncated(needed: 18, got: n) }
            let part = bytes[6], parts = bytes[7]
            let total = Self.u32(bytes, 8), first = Self.u32(bytes, 12), count = Self.u16(bytes, 16)
            guard parts >= 1 else { throw .zeroParts }
            guard part >= 1 && part <= parts else { throw .partOutOfRange(part: part, parts: parts) }
            guard total <= UInt32(ReconcileLimits.maxTableCells) else { throw .totalCellsAboveCap(total) }
            guard total >= 3 && total % 3 == 0 else { throw .totalCellsInvalid(total) }
            let per = ReconcileLimits.maxCellsPerPart
            let expectedParts = (Int(total) + per - 1) / per
            guard Int(parts) == expectedParts else { throw .partsMismatch(parts: parts, expected: expectedParts) }
            let expectedFirst = (Int(part) - 1) * per
            guard Int(first) == expectedFirst && Int(count) == min(per, Int(total) - expectedFirst) else {
                throw .cellRangeMismatch(part: part, first: first, count: count)
            }
            let expected = 18 + Int(count) * ReconcileLimits.cellBytes
            guard n == expected else { throw .lengthMismatch(expected: expected, got: n) }
            self = .table(TablePart(session: session, part: part, parts: parts, totalCells: total, firstCell: first,
                                    cellCount: count, cellBytes: Array(bytes[18...])))
        case 3:
            guard n >= 26 else { throw .truncated(needed: 26, got: n) }
            guard n == 26 else { throw .lengthMismatch(expected: 26, got: n) }
            let total = Self.u32(bytes, 22)
            guard total <= UInt32(ReconcileLimits.maxTableCells) else { throw .totalCellsAboveCap(total) }
            guard total >= 3 && total % 3 == 0 else { throw .totalCellsInvalid(total) }
            self = .tableRequest(TableRequest(session: session, salt: Array(bytes[6..<22]), totalCells: total))
        case 4:
            guard n >= 10 else { throw .truncated(needed: 10, got: n) }
            let part = bytes[6], parts = bytes[7], count = Self.u16(bytes, 8)
            guard parts >= 1 else { throw .zeroParts }
            guard part >= 1 && part <= parts else { throw .partOutOfRange(part: part, parts: parts) }
            guard Int(count) <= ReconcileLimits.maxIDsPerLacksPart else { throw .countAboveCap(count) }
            if (part < parts && Int(count) != ReconcileLimits.maxIDsPerLacksPart) || (parts > 1 && part == parts && count == 0) {
                throw .partNotFull(part: part, count: count)
            }
            let expected = 10 + Int(count) * 16
            guard n == expected else { throw .lengthMismatch(expected: expected, got: n) }
            var ids: [BundleID] = []
            ids.reserveCapacity(Int(count))
            bytes.withUnsafeBytes { p in
                for i in 0..<Int(count) { ids.append(BundleID.read(p, at: 10 + 16 * i)) }
            }
            for i in ids.indices.dropFirst() where !(ids[i - 1] < ids[i]) { throw .notSortedUnique }
            self = .lacks(LacksPart(session: session, part: part, parts: parts, ids: ids, version: version))
        case 5:
            guard n >= 7 else { throw .truncated(needed: 7, got: n) }
            guard let reason = ReconcileAbortReason(rawValue: bytes[6]) else { throw .unknownAbortReason(bytes[6]) }
            if reason == .unsupportedVersion {
                guard n >= 8 else { throw .truncated(needed: 8, got: n) }
                let count = Int(bytes[7])
                guard count >= 1 else { throw .noVersionsListed }
                guard n == 8 + count else { throw .lengthMismatch(expected: 8 + count, got: n) }
                self = .abort(Abort(session: session, reason: reason, versions: Array(bytes[8...])))
            } else {
                guard n == 7 else { throw .lengthMismatch(expected: 7, got: n) }
                self = .abort(Abort(session: session, reason: reason))
            }
        default:
            throw .unknownKind(kind)
        }
    }

    /// Version 2's own kinds (1 `start`, 6 `more`, 7 `cells`) and its `lacks`.
    private static func parseCoded(_ bytes: [UInt8], kind: UInt8, session: UInt32) throws(ReconcileError) -> ReconcileMessage {
        let n = bytes.count
        func range(first: UInt32, count: UInt16) throws(ReconcileError) {
            guard count >= 1 && Int(count) <= ReconcileLimits.maxCodedCellsPerMessage else { throw .codedCountInvalid(count) }
            guard Int(first) + Int(count) <= ReconcileLimits.maxCodedCells else { throw .codedRangeAboveCap(first: first, count: count) }
        }
        switch kind {
        case 1:
            guard n == 28 else { throw n < 28 ? .truncated(needed: 28, got: n) : .lengthMismatch(expected: 28, got: n) }
            let count = u16(bytes, 26)
            try range(first: 0, count: count)
            return .start(Start(session: session, salt: Array(bytes[6..<22]), setSize: u32(bytes, 22), cellCount: count))
        case 6:
            guard n == 12 else { throw n < 12 ? .truncated(needed: 12, got: n) : .lengthMismatch(expected: 12, got: n) }
            let first = u32(bytes, 6), count = u16(bytes, 10)
            try range(first: first, count: count)
            return .more(More(session: session, firstCell: first, cellCount: count))
        case 7:
            guard n >= 12 else { throw .truncated(needed: 12, got: n) }
            let first = u32(bytes, 6), count = u16(bytes, 10)
            try range(first: first, count: count)
            let expected = 12 + Int(count) * ReconcileLimits.cellBytes
            guard n == expected else { throw .lengthMismatch(expected: expected, got: n) }
            return .cells(CodedCells(session: session, firstCell: first, cellCount: count, cellBytes: Array(bytes[12...])))
        case 4:
            var v1 = bytes
            v1[0] = ReconcileLimits.version
            guard case .lacks(var l) = try ReconcileMessage(parsing: v1) else { throw .unknownKind(kind) }
            l.version = ReconcileLimits.codedVersion
            return .lacks(l)
        default:
            throw .unknownKind(kind)
        }
    }

    /// The message's bytes (the TLV value).
    public var encoded: [UInt8] {
        var out: [UInt8] = [version, kind]
        Self.put32(&out, session)
        switch self {
        case .estimate(let m):
            out += m.salt
            out.append(m.strata)
            Self.put16(&out, m.cellsPerStratum)
            Self.put32(&out, m.setSize)
            out += m.cellBytes
        case .table(let m):
            out += [m.part, m.parts]
            Self.put32(&out, m.totalCells)
            Self.put32(&out, m.firstCell)
            Self.put16(&out, m.cellCount)
            out += m.cellBytes
        case .tableRequest(let m):
            out += m.salt
            Self.put32(&out, m.totalCells)
        case .lacks(let m):
            out += [m.part, m.parts]
            Self.put16(&out, UInt16(m.ids.count))
            let start = out.count
            out += [UInt8](repeating: 0, count: 16 * m.ids.count)
            out.withUnsafeMutableBytes { p in
                for (i, id) in m.ids.enumerated() { id.write(to: p, at: start + 16 * i) }
            }
        case .abort(let m):
            out.append(m.reason.rawValue)
            if m.reason == .unsupportedVersion {
                out.append(UInt8(m.versions.count))
                out += m.versions
            }
        case .start(let m):
            out += m.salt
            Self.put32(&out, m.setSize)
            Self.put16(&out, m.cellCount)
        case .more(let m):
            Self.put32(&out, m.firstCell)
            Self.put16(&out, m.cellCount)
        case .cells(let m):
            Self.put32(&out, m.firstCell)
            Self.put16(&out, m.cellCount)
            out += m.cellBytes
        }
        return out
    }

    /// The `lacks` parts for `ids` (sorted and deduplicated here): parts of 3,600, the last
    /// possibly shorter; no IDs is one part with count 0.
    public static func lacksParts(session: UInt32, ids: [BundleID], version: UInt8 = ReconcileLimits.version) -> [ReconcileMessage] {
        let sorted = BundleID.sortedUnique(ids)
        let per = ReconcileLimits.maxIDsPerLacksPart
        let parts = max(1, (sorted.count + per - 1) / per)
        precondition(parts <= 255, "more than 1,020,000 lacked IDs")
        return (0..<parts).map { i in
            .lacks(LacksPart(session: session, part: UInt8(i + 1), parts: UInt8(parts),
                             ids: Array(sorted[(i * per)..<min(sorted.count, (i + 1) * per)]), version: version))
        }
    }

    /// The answer to bytes that did not parse: an `abort` for the same session, reason 1
    /// (with our versions) for an unsupported version, else 5 (malformed); nil when the
    /// bytes are too short to name a session.
    public static func abortAnswering(_ bytes: [UInt8], error: ReconcileError) -> ReconcileMessage? {
        guard let header = header(of: bytes), header.kind != 5 else { return nil }  // never answer an abort
        let session = header.session
        if case .unsupportedVersion = error { return .abort(Abort(session: session, reason: .unsupportedVersion)) }
        return .abort(Abort(session: session, reason: .malformed))
    }

    /// The common header of a message's bytes, whatever its version and even when the rest does
    /// not parse: for routing a message to its exchange (nil below 6 bytes).
    public static func header(of bytes: [UInt8]) -> (version: UInt8, kind: UInt8, session: UInt32)? {
        bytes.count >= 6 ? (bytes[0], bytes[1], u32(bytes, 2)) : nil
    }

    static func u16(_ b: [UInt8], _ o: Int) -> UInt16 { UInt16(b[o]) | UInt16(b[o + 1]) << 8 }
    static func u32(_ b: [UInt8], _ o: Int) -> UInt32 {
        UInt32(b[o]) | UInt32(b[o + 1]) << 8 | UInt32(b[o + 2]) << 16 | UInt32(b[o + 3]) << 24
    }
    static func put16(_ out: inout [UInt8], _ v: UInt16) { out += [UInt8(v & 0xff), UInt8(v >> 8)] }
    static func put32(_ out: inout [UInt8], _ v: UInt32) {
        out += [UInt8(v & 0xff), UInt8(v >> 8 & 0xff), UInt8(v >> 16 & 0xff), UInt8(v >> 24)]
    }
}
