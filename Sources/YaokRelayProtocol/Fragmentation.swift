import YaokWire

/// FRAGMENT payload (inside a sealed packet):
/// `fragmentID(4) index(1) count(1) innerType(1) chunk`.
///
/// A message larger than one sealed datagram (SEND or MSG of a bundle up to ~10.5 KB) is cut
/// into `count` chunks; each chunk is its own sealed, counter-protected packet, so only
/// authenticated data ever reaches the reassembly buffers.
public struct Fragment: Sendable, Equatable {
    public static let headerLength = 7
    /// Largest reassembled message.
    public static let maxMessageLength = 12_288
    public static let maxChunkLength = SecureSession.maxPlaintextLength - headerLength
    public static let maxCount = (maxMessageLength + maxChunkLength - 1) / maxChunkLength

    public let fragmentID: UInt32
    public let index: UInt8
    public let count: UInt8
    public let innerType: RelayPacketType
    public let chunk: [UInt8]

    public init(fragmentID: UInt32, index: UInt8, count: UInt8, innerType: RelayPacketType, chunk: [UInt8]) {
        self.fragmentID = fragmentID
        self.index = index
        self.count = count
        self.innerType = innerType
        self.chunk = chunk
    }

    public init(parsing payload: [UInt8]) throws {
        var r = RelayReader(payload, what: "FRAGMENT")
        fragmentID = try r.u32()
        index = try r.u8()
        count = try r.u8()
        let raw = try r.u8()
        guard let t = RelayPacketType(rawValue: raw), t.isSealed, t != .fragment else { throw RelayProtocolError.invalid("FRAGMENT cannot carry type 0x\(String(raw, radix: 16))") }
        guard count >= 2, Int(count) <= Self.maxCount, index < count else {
            throw RelayProtocolError.invalid("FRAGMENT index \(index) of \(count) (at most \(Self.maxCount))")
        }
        innerType = t
        chunk = r.rest()
        guard !chunk.isEmpty else { throw RelayProtocolError.badLength(what: "FRAGMENT", detail: "empty chunk") }
    }

    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: Self.headerLength + chunk.count)
        w.u32(fragmentID)
        w.u8(index)
        w.u8(count)
        w.u8(innerType.rawValue)
        w.raw(chunk)
        return w.bytes
    }

    /// Splits `message` of `type` into plaintexts ready to seal: one `(type, message)` if it
    /// fits a datagram, else FRAGMENT payloads.
    public static func split(type: RelayPacketType, message: [UInt8], fragmentID: UInt32) throws -> [(RelayPacketType, [UInt8])] {
        if message.count <= SecureSession.maxPlaintextLength { return [(type, message)] }
        // The receiver refuses fragments of fragments (``init(parsing:)``): never make one.
        guard type.isSealed, type != .fragment else { throw RelayProtocolError.invalid("FRAGMENT cannot carry type 0x\(String(type.rawValue, radix: 16))") }
        guard message.count <= maxMessageLength else {
            throw RelayProtocolError.oversized(what: "\(type) message", size: message.count, limit: maxMessageLength)
        }
        let n = (message.count + maxChunkLength - 1) / maxChunkLength
        return (0..<n).map { i in
            let chunk = Array(message[(i * maxChunkLength)..<min(message.count, (i + 1) * maxChunkLength)])
            return (.fragment, Fragment(fragmentID: fragmentID, index: UInt8(i), count: UInt8(n), innerType: type, chunk: chunk).encoded)
        }
    }
}

/// Reassembles fragments with bounded memory: at most `maxPartial` messages in progress per
/// owner (oldest dropped first), `maxMessageLength` each, and each dropped `timeoutMs` after
/// its first fragment. Not thread-safe.
public struct Reassembler: Sendable {
    struct Partial: Sendable {
        let count: UInt8
        let innerType: RelayPacketType
        let startedMs: Int64
        var chunks: [UInt8: [UInt8]]
        var bytes: Int
    }

    public let maxPartial: Int
    public let timeoutMs: Int64
    private var partial: [UInt32: Partial] = [:]
    /// Messages given up (timeout, eviction, inconsistency).
    public private(set) var dropped = 0

    public init(maxPartial: Int = 4, timeoutMs: Int64 = 10_000) {
        self.maxPartial = maxPartial
        self.timeoutMs = timeoutMs
    }

    /// Bytes currently buffered.
    public var bufferedBytes: Int { partial.values.reduce(0) { $0 + $1.bytes } }

    /// Adds a fragment; returns the whole message when it completes.
    public mutating func add(_ f: Fragment, nowMs: Int64) -> (RelayPacketType, [UInt8])? {
        expire(nowMs: nowMs)
        var p = partial[f.fragmentID] ?? Partial(count: f.count, innerType: f.innerType, startedMs: nowMs, chunks: [:], bytes: 0)
        guard p.count == f.count, p.innerType == f.innerType else {
            partial[f.fragmentID] = nil
            dropped += 1
            return nil
        }
        if p.chunks[f.index] == nil {
            guard p.bytes + f.chunk.count <= Fragment.maxMessageLength else {
                partial[f.fragmentID] = nil
                dropped += 1
                return nil
            }
            p.chunks[f.index] = f.chunk
            p.bytes += f.chunk.count
        }
        if p.chunks.count == Int(p.count) {
            partial[f.fragmentID] = nil
            var message: [UInt8] = []
            message.reserveCapacity(p.bytes)
            for i in 0..<p.count { message += p.chunks[i] ?? [] }
            return (p.innerType, message)
        }
        if partial[f.fragmentID] == nil && partial.count >= maxPartial,
           let oldest = partial.min(by: { $0.value.startedMs < $1.value.startedMs })?.key {
            partial[oldest] = nil
            dropped += 1
        }
        partial[f.fragmentID] = p
        return nil
    }

    /// Drops messages older than the timeout.
    public mutating func expire(nowMs: Int64) {
        for (id, p) in partial where nowMs - p.startedMs > timeoutMs {
            partial[id] = nil
            dropped += 1
        }
    }
}
