import YaokCrypto

/// A run of IBLT cells, struct-of-arrays. One table is the whole run; an estimator is
/// `strata` tables of `cellsPerStratum` cells back to back (stratum 0 first).
struct Cells: Sendable, Equatable {
    var count: [Int32]
    var idHi: [UInt64]
    var idLo: [UInt64]
    var hashSum: [UInt64]

    /// Bytes of one cell on the wire: count(4, int32 LE) + idSum(16) + hashSum(8, LE).
    static let cellBytes = 28

    init(cells: Int) {
        count = [Int32](repeating: 0, count: cells)
        idHi = [UInt64](repeating: 0, count: cells)
        idLo = [UInt64](repeating: 0, count: cells)
        hashSum = [UInt64](repeating: 0, count: cells)
    }

    var cellCount: Int { count.count }

    /// Adds (`sign` = 1) or removes (`sign` = -1) every ID to the table of `size` cells at `base`.
    /// With `strata` > 0, each ID goes to the table of its stratum instead: base + stratum·size.
    mutating func insert(_ ids: [BundleID], _ digests: [ReconcileDigest], base: Int = 0, size: Int, strata: Int = 0, sign: Int32 = 1) {
        precondition(ids.count == digests.count && size % 3 == 0 && size >= 3)
        let p = size / 3
        let pu = UInt32(p)
        count.withUnsafeMutableBufferPointer { c in
        idHi.withUnsafeMutableBufferPointer { h in
        idLo.withUnsafeMutableBufferPointer { l in
        hashSum.withUnsafeMutableBufferPointer { s in
        ids.withUnsafeBufferPointer { ids in
        digests.withUnsafeBufferPointer { ds in
            for i in 0..<ids.count {
                let d = ds[i], id = ids[i]
                let b = strata > 0 ? base + d.stratum(of: strata) * size : base
                let i0 = b + Int(d.w0 % pu), i1 = b + p + Int(d.w1 % pu), i2 = b + 2 * p + Int(d.w2 % pu)
                c[i0] &+= sign; h[i0] ^= id.hi; l[i0] ^= id.lo; s[i0] ^= d.check
                c[i1] &+= sign; h[i1] ^= id.hi; l[i1] ^= id.lo; s[i1] ^= d.check
                c[i2] &+= sign; h[i2] ^= id.hi; l[i2] ^= id.lo; s[i2] ^= d.check
            }
        }}}}}}
    }

    /// self − other, cell by cell (same length).
    mutating func subtract(_ other: Cells) {
        precondition(other.cellCount == cellCount)
        for i in 0..<cellCount {
            count[i] &-= other.count[i]
            idHi[i] ^= other.idHi[i]
            idLo[i] ^= other.idLo[i]
            hashSum[i] ^= other.hashSum[i]
        }
    }

    /// The result of peeling one table.
    struct Peeled {
        /// IDs found with count +1 (in the minuend only) and −1 (in the subtrahend only).
        var plus: [BundleID] = []
        var minus: [BundleID] = []
        /// Every cell emptied.
        var complete = false
    }

    /// Peels the table of `size` cells at `base` (destroys it). A cell is pure when its count
    /// is ±1, its hashSum is the check hash of its idSum and the cell is one of that ID's
    /// cells. Work is bounded: at most `size` IDs are taken out, then it stops, incomplete.
    mutating func peel(base: Int, size: Int, salt: [UInt8]) -> Peeled {
        var result = Peeled()
        let p = size / 3
        var stack = Array((base..<(base + size)).reversed())
        var taken = 0
        while let cell = stack.popLast() {
            let c = count[cell]
            guard c == 1 || c == -1 else { continue }
            let id = BundleID(hi: idHi[cell], lo: idLo[cell])
            let d = ReconcileHash.digest(id, salt: salt)
            guard d.check == hashSum[cell] else { continue }
            let idx = [base + Int(d.w0 % UInt32(p)), base + p + Int(d.w1 % UInt32(p)), base + 2 * p + Int(d.w2 % UInt32(p))]
            guard idx.contains(cell) else { continue }
            taken += 1
            if taken > size { return result }
            if c == 1 { result.plus.append(id) } else { result.minus.append(id) }
            for i in idx {
                take(id, check: d.check, count: c, at: i)
                if i != cell { stack.append(i) }
            }
        }
        result.complete = isZero(base..<(base + size))
        return result
    }

    /// Takes an ID that went in with `count` (+1 or −1) out of cell `i`.
    @inline(__always)
    mutating func take(_ id: BundleID, check: UInt64, count c: Int32, at i: Int) {
        count[i] &-= c
        idHi[i] ^= id.hi
        idLo[i] ^= id.lo
        hashSum[i] ^= check
    }

    /// Cell `i` is all zero.
    func isZero(at i: Int) -> Bool { count[i] == 0 && idHi[i] == 0 && idLo[i] == 0 && hashSum[i] == 0 }

    /// Every cell of `range` is all zero.
    func isZero(_ range: Range<Int>) -> Bool { range.allSatisfy(isZero(at:)) }

    /// Wire bytes of cells `range`.
    func encode(_ range: Range<Int>) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: range.count * Self.cellBytes)
        out.withUnsafeMutableBytes { p in
            var o = 0
            for i in range {
                p.storeBytes(of: UInt32(bitPattern: count[i]).littleEndian, toByteOffset: o, as: UInt32.self)
                p.storeBytes(of: idHi[i].bigEndian, toByteOffset: o + 4, as: UInt64.self)
                p.storeBytes(of: idLo[i].bigEndian, toByteOffset: o + 12, as: UInt64.self)
                p.storeBytes(of: hashSum[i].littleEndian, toByteOffset: o + 20, as: UInt64.self)
                o += Self.cellBytes
            }
        }
        return out
    }

    /// Writes wire bytes (a multiple of 28) into cells starting at `first`.
    mutating func decode(_ bytes: [UInt8], first: Int) {
        let n = bytes.count / Self.cellBytes
        precondition(first + n <= cellCount)
        bytes.withUnsafeBytes { p in
            var o = 0
            for i in first..<(first + n) {
                count[i] = Int32(bitPattern: UInt32(littleEndian: p.loadUnaligned(fromByteOffset: o, as: UInt32.self)))
                idHi[i] = UInt64(bigEndian: p.loadUnaligned(fromByteOffset: o + 4, as: UInt64.self))
                idLo[i] = UInt64(bigEndian: p.loadUnaligned(fromByteOffset: o + 12, as: UInt64.self))
                hashSum[i] = UInt64(littleEndian: p.loadUnaligned(fromByteOffset: o + 20, as: UInt64.self))
                o += Self.cellBytes
            }
        }
    }
}
