import YaokCrypto

/// Rateless coded symbols (reconciliation version 2, Docs/protocol.md "Version 2: coded
/// symbols"), after Yang, Gilad and Alizadeh's rateless IBLT (SIGCOMM 2024): an endless
/// sequence of IBLT cells over a set, where an ID goes into cell 0 and then into later cells
/// ever more rarely (about 2 / (i + 2) of the IDs reach cell i). Any prefix of the sequence is
/// a usable table, so the side that decodes asks for more cells until its difference peels,
/// and the exchange costs about 1.4 cells per difference without any estimate of it.

/// Where one ID goes next in the coded sequence. The walk is fixed by the ID's digest under the
/// session salt: the state starts at `stratumWord` (H[8..<16], little-endian), every step is one
/// SplitMix64 output `z`, `r` = its upper 32 bits, `u` = (r + 1) / 2^32, and the next cell is
/// `i + max(1, ceil((i + 1.5) · (1/√u − 1)))` in IEEE-754 double arithmetic.
struct SymbolWalk: Sendable, Equatable {
    /// The next cell this ID goes into.
    private(set) var next: Int = 0
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    @inline(__always)
    mutating func advance() {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        let u = (Double(z >> 32) + 1) / 4_294_967_296.0
        let gap = ((Double(next) + 1.5) * (1 / u.squareRoot() - 1)).rounded(.up)
        // u ≥ 2^-32 bounds the gap by (next + 1.5) · 2^16: no overflow below the cell cap.
        next += max(1, Int(gap))
    }

    /// The cells below `end` this ID goes into, from cell 0, and its walk from there on.
    static func cells(seed: UInt64, below end: Int) -> (cells: [Int], rest: SymbolWalk) {
        var walk = SymbolWalk(seed: seed), out: [Int] = []
        while walk.next < end { out.append(walk.next); walk.advance() }
        return (out, walk)
    }
}

/// Makes the coded cells of a set, a range at a time, in order.
struct CodedSymbolEncoder: Sendable {
    let ids: [BundleID]
    let digests: [ReconcileDigest]
    private var walks: [SymbolWalk]
    /// Cells made so far: the next range starts here.
    private(set) var produced = 0

    init(ids: [BundleID], digests: [ReconcileDigest]) {
        self.ids = ids
        self.digests = digests
        walks = digests.map { SymbolWalk(seed: $0.stratumWord) }
    }

    /// Cells `produced ..< produced + count`, with `sign` (+1 or −1) on every count.
    mutating func next(_ count: Int, sign: Int32 = 1) -> Cells {
        let start = produced, end = produced + count
        var cells = Cells(cells: count)
        cells.count.withUnsafeMutableBufferPointer { c in
        cells.idHi.withUnsafeMutableBufferPointer { h in
        cells.idLo.withUnsafeMutableBufferPointer { l in
        cells.hashSum.withUnsafeMutableBufferPointer { s in
        walks.withUnsafeMutableBufferPointer { w in
            for k in 0..<w.count {
                guard w[k].next < end else { continue }
                let id = ids[k], check = digests[k].check
                repeat {
                    let i = w[k].next - start
                    c[i] &+= sign; h[i] ^= id.hi; l[i] ^= id.lo; s[i] ^= check
                    w[k].advance()
                } while w[k].next < end
            }
        }}}}}
        produced = end
        return cells
    }
}

/// The decoding side: the peer's cells minus its own, peeled as they arrive.
struct CodedSymbolDecoder: Sendable {
    private var own: CodedSymbolEncoder
    private let salt: [UInt8]
    /// The difference cells received so far (peer − own − what peeled).
    private var cells = Cells(cells: 0)
    /// IDs peeled so far, with their walks, to take out of the cells still to come.
    private var found: [(id: BundleID, check: UInt64, sign: Int32, walk: SymbolWalk)] = []
    /// Of the cells the last ``add(_:)`` brought, from cell 1 on: how many had an empty
    /// difference before anything was taken out (no differing ID reached them).
    private(set) var emptyBeforePeeling = 0
    /// IDs in the peer's set only (+1) and in ours only (−1).
    private(set) var plus: [BundleID] = []
    private(set) var minus: [BundleID] = []

    init(ids: [BundleID], digests: [ReconcileDigest], salt: [UInt8]) {
        own = CodedSymbolEncoder(ids: ids, digests: digests)
        self.salt = salt
    }

    /// Cells received so far.
    var received: Int { cells.cellCount }

    /// Adds the peer's next cells (in order) and peels. Returns true when every cell received
    /// is empty: the difference is fully decoded.
    mutating func add(_ theirs: Cells) -> Bool {
        let start = cells.cellCount, n = theirs.cellCount, end = start + n
        var fresh = theirs
        let mine = own.next(n)
        fresh.subtract(mine)
        emptyBeforePeeling = (max(1, start)..<end).count { fresh.isZero(at: $0 - start) }
        // What already peeled goes into these cells too: take it out.
        for f in found.indices {
            while found[f].walk.next < end {
                fresh.take(found[f].id, check: found[f].check, count: found[f].sign, at: found[f].walk.next - start)
                found[f].walk.advance()
            }
        }
        cells.append(fresh)
        peel(candidates: Array((start..<end).reversed()))
        return cells.isEmpty
    }

    /// Peels pure cells until none is left. A cell is pure when its count is ±1, its hashSum is
    /// the check hash of its idSum, and the ID's walk passes through it; taking the ID out of
    /// every cell it is in may make others pure. At most one ID per cell received comes out.
    private mutating func peel(candidates: [Int]) {
        var stack = candidates
        let end = cells.cellCount
        while let cell = stack.popLast() {
            let c = cells.count[cell]
            guard c == 1 || c == -1 else { continue }
            let id = BundleID(hi: cells.idHi[cell], lo: cells.idLo[cell])
            let d = ReconcileHash.digest(id, salt: salt)
            guard d.check == cells.hashSum[cell] else { continue }
            let (path, rest) = SymbolWalk.cells(seed: d.stratumWord, below: end)
            guard path.contains(cell) else { continue }
            guard plus.count + minus.count < end else { return }
            if c == 1 { plus.append(id) } else { minus.append(id) }
            for i in path {
                cells.take(id, check: d.check, count: c, at: i)
                if i != cell { stack.append(i) }
            }
            found.append((id, d.check, c, rest))
        }
    }
}

extension Cells {
    /// Appends `other`'s cells after these.
    mutating func append(_ other: Cells) {
        count += other.count
        idHi += other.idHi
        idLo += other.idLo
        hashSum += other.hashSum
    }

    /// Every cell is zero.
    var isEmpty: Bool { isZero(0..<cellCount) }
}
