import YaokCrypto

/// What the peer holds after an exchange, for the router's "offer this?" question.
///
/// Built from the set this side reconciled and the difference found. The peer holds every
/// reconciled ID it does not lack, plus the IDs only it had. Memory: 8 bytes per reconciled ID
/// not lacked (a sorted array of 8-byte prefixes: 800 KB for 100,000) plus about 16 bytes
/// (and the hash table's overhead, about 2×) per ID in the two exact sets.
///
/// An ID that was not in the reconciled set but shares its first 8 bytes with one that was
/// answers true. Bundle IDs are BLAKE2b outputs: hitting a given ID's prefix costs 2⁶⁴ work,
/// and a sender who grinds two of its own bundles to one prefix (2³² work) only keeps its own
/// second bundle from being offered to that peer.
public struct PeerHoldings: Sendable {
    private let prefixes: [UInt64]
    private let lacked: Set<BundleID>
    private let peerOnly: Set<BundleID>

    /// `reconciled`: the IDs this side reconciled; `peerLacks`: those of them the peer lacks;
    /// `peerOnly`: IDs the peer holds that this side lacked (empty on the responder's side).
    public init(reconciled: [BundleID], peerLacks: [BundleID], peerOnly: [BundleID] = []) {
        let lacked = Set(peerLacks)
        var prefixes: [UInt64] = []
        prefixes.reserveCapacity(reconciled.count)
        for id in reconciled where !lacked.contains(id) { prefixes.append(id.hi) }
        prefixes.sort()
        self.prefixes = prefixes
        self.lacked = lacked
        self.peerOnly = Set(peerOnly)
    }

    /// Whether the peer held `id` when the exchange ran.
    public func peerHolds(_ id: BundleID) -> Bool {
        if lacked.contains(id) { return false }
        if peerOnly.contains(id) { return true }
        var lo = 0, hi = prefixes.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if prefixes[mid] < id.hi { lo = mid + 1 } else { hi = mid }
        }
        return lo < prefixes.count && prefixes[lo] == id.hi
    }

    /// Whether the peer held the ID whose bytes are `id` (false for a length other than 16).
    public func peerHolds(_ id: [UInt8]) -> Bool {
        guard let parsed = BundleID(id) else { return false }
        return peerHolds(parsed)
    }

    /// An upper estimate of the memory held, in bytes.
    public var approximateMemoryBytes: Int {
        prefixes.capacity * 8 + (lacked.capacity + peerOnly.capacity) * 16 * 2
    }
}
