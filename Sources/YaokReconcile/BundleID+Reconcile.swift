import YaokCrypto

extension BundleID {
    /// Sorted, duplicates removed.
    static func sortedUnique(_ ids: [BundleID]) -> [BundleID] {
        let sorted = ids.sorted()
        var out: [BundleID] = []
        out.reserveCapacity(sorted.count)
        for id in sorted where out.last != id { out.append(id) }
        return out
    }

    /// IDs from byte arrays; nil when any is not 16 bytes long.
    static func parseAll(_ ids: [[UInt8]]) -> [BundleID]? {
        var out: [BundleID] = []
        out.reserveCapacity(ids.count)
        for bytes in ids {
            guard let id = BundleID(bytes) else { return nil }
            out.append(id)
        }
        return out
    }
}
