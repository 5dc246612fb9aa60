import YaokCrypto

/// The sizes an exchange uses: the initiator's estimator shape and the responder's rule for
/// sizing a table from the estimated difference. The defaults are protocol version 1's.
public struct ReconcileSizing: Sendable, Equatable {
    /// Strata in the initiator's estimator.
    public var strata: Int
    /// Cells per stratum (a multiple of 3).
    public var cellsPerStratum: Int
    /// Table cells per estimated difference when the estimate is approximate.
    public var cellsPerDifference: Double
    /// Table cells per difference when every stratum decoded (the count is exact).
    public var cellsPerExactDifference: Double
    /// Cells added to every table.
    public var extraCells: Int

    /// 16 strata × 42 cells (a 18,845-byte estimate); tables of 2.0·d̂ + 36 cells, or
    /// 1.5·d + 36 when the estimate is exact (see Docs/protocol.md for the measurements).
    public static let standard = ReconcileSizing(strata: 16, cellsPerStratum: 42, cellsPerDifference: 2.0,
                                                 cellsPerExactDifference: 1.5, extraCells: 36)

    public init(strata: Int, cellsPerStratum: Int, cellsPerDifference: Double, cellsPerExactDifference: Double, extraCells: Int) {
        self.strata = strata
        self.cellsPerStratum = cellsPerStratum
        self.cellsPerDifference = cellsPerDifference
        self.cellsPerExactDifference = cellsPerExactDifference
        self.extraCells = extraCells
    }

    /// The table size for an estimated difference: a multiple of 3, at least 3; may exceed
    /// the cap (the responder then aborts with "too different").
    public func tableCells(estimate: Int, exact: Bool) -> Int {
        let f = exact ? cellsPerExactDifference : cellsPerDifference
        let raw = min(Double(Int32.max), (Double(estimate) * f).rounded(.up) + Double(extraCells))
        return max(3, (Int(raw) + 2) / 3 * 3)
    }
}

/// A strata estimator: `strata` IBLTs of `cellsPerStratum` cells; an ID goes to the stratum
/// given by the trailing zero bits of its stratum word.
struct StrataEstimator {
    static func build(ids: [BundleID], digests: [ReconcileDigest], strata: Int, cellsPerStratum: Int) -> Cells {
        var cells = Cells(cells: strata * cellsPerStratum)
        cells.insert(ids, digests, size: cellsPerStratum, strata: strata)
        return cells
    }

    /// The estimated size of the difference between the sets behind two estimators of the
    /// same shape and salt. Every stratum is peeled. When all peel, the count is exact.
    /// Otherwise, with L the lowest stratum that peeled: the IDs found in the strata from L up
    /// that peeled, divided by the share of all IDs those strata hold (2^−(s+1) for stratum s,
    /// 2^−(S−1) for the last), at least 2^L × cellsPerStratum / 4 (stratum L − 1 did not peel);
    /// when no stratum peeled, 2^S × cellsPerStratum.
    static func estimate(_ a: Cells, minus b: Cells, strata: Int, cellsPerStratum: Int, salt: [UInt8]) -> (difference: Int, exact: Bool) {
        var diff = a
        diff.subtract(b)
        var found = [Int](repeating: 0, count: strata)
        var peeled = [Bool](repeating: false, count: strata)
        for s in 0..<strata {
            let r = diff.peel(base: s * cellsPerStratum, size: cellsPerStratum, salt: salt)
            peeled[s] = r.complete
            found[s] = r.plus.count + r.minus.count
        }
        if !peeled.contains(false) { return (found.reduce(0, +), true) }
        guard let lowest = peeled.firstIndex(of: true) else { return ((1 << strata) * cellsPerStratum, false) }
        var ids = 0, share = 0.0
        for s in lowest..<strata where peeled[s] {
            ids += found[s]
            share += s == strata - 1 ? 1 / Double(1 << (strata - 1)) : 1 / Double(1 << (s + 1))
        }
        let floor = lowest >= 1 ? (1 << lowest) * cellsPerStratum / 4 : 0
        return (max(Int((Double(ids) / share).rounded(.up)), floor), false)
    }
}
