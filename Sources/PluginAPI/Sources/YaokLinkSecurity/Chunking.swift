/// Splitting frames into chunks for links with a small MTU (BLE GATT writes and notifications).
///
/// A chunk is `index(2, big-endian) total(2, big-endian) payload`. Every chunk but the last
/// carries exactly `chunkSize - 4` payload bytes, where `chunkSize` is the largest write the
/// link takes (for BLE, ATT MTU − 3). Chunks of one frame are sent in order on one link, and
/// one frame is finished before the next starts. Byte layout in Docs/protocol.md.

/// Chunking and reassembly errors.
public enum ChunkError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The chunk size leaves no room for payload.
    case chunkSizeTooSmall(chunkSize: Int, minimum: Int)
    /// The frame needs more chunks than the 16-bit total field or the reassembler's limit allows.
    case tooManyChunks(count: Int, limit: Int)
    /// A chunk shorter than its 4-byte header.
    case truncated(length: Int)
    /// A chunk announcing a total of zero chunks.
    case zeroTotal
    /// A chunk index not below the total.
    case indexOutOfRange(index: Int, total: Int)
    /// A chunk whose total differs from the frame being reassembled.
    case totalMismatch(expected: Int, got: Int)
    /// A chunk index that already arrived for this frame.
    case duplicateIndex(Int)
    /// The frame would be larger than the reassembler accepts.
    case oversized(size: Int, limit: Int)
    /// A non-final chunk whose payload size differs from the frame's other chunks,
    /// or a final chunk larger than them.
    case inconsistentChunkSize(expected: Int, got: Int)

    public var description: String {
        switch self {
        case .chunkSizeTooSmall(let size, let minimum): return "chunk size \(size) is below the minimum of \(minimum)"
        case .tooManyChunks(let count, let limit): return "frame needs \(count) chunks, more than the limit of \(limit)"
        case .truncated(let length): return "chunk of \(length) bytes is shorter than its 4-byte header"
        case .zeroTotal: return "chunk announces a total of zero chunks"
        case .indexOutOfRange(let index, let total): return "chunk index \(index) is not below the total \(total)"
        case .totalMismatch(let expected, let got): return "chunk total \(got) differs from the frame's total \(expected)"
        case .duplicateIndex(let index): return "chunk \(index) arrived twice"
        case .oversized(let size, let limit): return "reassembled frame of at least \(size) bytes exceeds the limit of \(limit)"
        case .inconsistentChunkSize(let expected, let got): return "chunk payload of \(got) bytes where \(expected) were expected"
        }
    }
}

/// Splits frames into chunks.
public enum Chunker {
    /// Index and total.
    public static let headerLength = 4
    /// The 16-bit total field's limit.
    public static let maxChunks = 0xFFFF

    /// Splits `frame` into chunks of at most `chunkSize` bytes (header included).
    /// An empty frame becomes one chunk with an empty payload.
    public static func split(_ frame: [UInt8], chunkSize: Int) throws -> [[UInt8]] {
        guard chunkSize > headerLength else { throw ChunkError.chunkSizeTooSmall(chunkSize: chunkSize, minimum: headerLength + 1) }
        let payloadSize = chunkSize - headerLength
        let total = max(1, (frame.count + payloadSize - 1) / payloadSize)
        guard total <= maxChunks else { throw ChunkError.tooManyChunks(count: total, limit: maxChunks) }
        var chunks: [[UInt8]] = []
        chunks.reserveCapacity(total)
        for index in 0..<total {
            let start = index * payloadSize
            let end = min(start + payloadSize, frame.count)
            var chunk = [UInt8]()
            chunk.reserveCapacity(headerLength + end - start)
            chunk.append(UInt8(index >> 8)); chunk.append(UInt8(index & 0xFF))
            chunk.append(UInt8(total >> 8)); chunk.append(UInt8(total & 0xFF))
            chunk.append(contentsOf: frame[start..<end])
            chunks.append(chunk)
        }
        return chunks
    }
}

/// Reassembles one frame at a time from chunks arriving on one link, with bounded memory.
///
/// It holds at most `maxFrameSize` payload bytes and `maxFrameSize` chunks; a frame whose chunks
/// do not all arrive within `timeoutNanoseconds` of its first chunk is dropped. Any error also
/// drops the partial frame (framing is lost); the next chunk starts a new frame. Not thread-safe:
/// use one per link from one queue.
public struct ChunkReassembler: Sendable {
    /// A 10 KB envelope (10 492 bytes) plus the hop header and TLV header, rounded up.
    public static let defaultMaxFrameSize = 10_600
    public static let defaultTimeoutNanoseconds: UInt64 = 30_000_000_000

    public let maxFrameSize: Int
    /// Every chunk but the last carries at least one byte, so a frame has at most this many.
    public var maxTotalChunks: Int { min(maxFrameSize, Chunker.maxChunks) }
    public let timeoutNanoseconds: UInt64

    private var total = 0
    private var pieces: [Int: [UInt8]] = [:]
    private var receivedBytes = 0
    /// Payload size of non-final chunks, learned from the first one seen.
    private var payloadSize: Int?
    private var lastPayloadSize: Int?
    private var startedAt: UInt64 = 0

    public init(maxFrameSize: Int = defaultMaxFrameSize, timeoutNanoseconds: UInt64 = defaultTimeoutNanoseconds) {
        self.maxFrameSize = max(1, maxFrameSize)
        self.timeoutNanoseconds = timeoutNanoseconds
    }

    /// Whether no frame is partly received.
    public var isIdle: Bool { total == 0 }

    /// Chunks received for the current frame.
    public var receivedChunkCount: Int { pieces.count }

    /// Drops the partial frame, if any.
    public mutating func reset() {
        total = 0
        pieces = [:]
        receivedBytes = 0
        payloadSize = nil
        lastPayloadSize = nil
        startedAt = 0
    }

    /// Drops a partial frame older than the timeout; returns whether one was dropped.
    /// `now` is monotonic nanoseconds.
    @discardableResult
    public mutating func expire(now: UInt64) -> Bool {
        guard total != 0, now >= startedAt, now - startedAt > timeoutNanoseconds else { return false }
        reset()
        return true
    }

    /// Adds one chunk received at monotonic time `now` (nanoseconds); returns the whole frame
    /// when its last missing chunk arrives, nil while more are needed.
    public mutating func add(_ chunk: [UInt8], now: UInt64) throws -> [UInt8]? {
        expire(now: now)
        do {
            return try accept(chunk, now: now)
        } catch {
            reset()
            throw error
        }
    }

    private mutating func accept(_ chunk: [UInt8], now: UInt64) throws -> [UInt8]? {
        guard chunk.count >= Chunker.headerLength else { throw ChunkError.truncated(length: chunk.count) }
        let index = Int(chunk[0]) << 8 | Int(chunk[1])
        let chunkTotal = Int(chunk[2]) << 8 | Int(chunk[3])
        let payloadCount = chunk.count - Chunker.headerLength
        guard chunkTotal > 0 else { throw ChunkError.zeroTotal }
        guard index < chunkTotal else { throw ChunkError.indexOutOfRange(index: index, total: chunkTotal) }
        guard chunkTotal <= maxTotalChunks else { throw ChunkError.tooManyChunks(count: chunkTotal, limit: maxTotalChunks) }
        if total == 0 {
            total = chunkTotal
            startedAt = now
        } else if chunkTotal != total {
            throw ChunkError.totalMismatch(expected: total, got: chunkTotal)
        }
        guard pieces[index] == nil else { throw ChunkError.duplicateIndex(index) }

        if index < total - 1 {
            if let expected = payloadSize {
                guard payloadCount == expected else { throw ChunkError.inconsistentChunkSize(expected: expected, got: payloadCount) }
            } else {
                guard payloadCount > 0 else { throw ChunkError.inconsistentChunkSize(expected: 1, got: 0) }
                if let last = lastPayloadSize, last > payloadCount {
                    throw ChunkError.inconsistentChunkSize(expected: payloadCount, got: last)
                }
                payloadSize = payloadCount
            }
        } else {
            if let expected = payloadSize, payloadCount > expected {
                throw ChunkError.inconsistentChunkSize(expected: expected, got: payloadCount)
            }
            lastPayloadSize = payloadCount
        }
        // The smallest frame consistent with what we know must fit.
        let minimumSize: Int
        if let p = payloadSize {
            minimumSize = (total - 1) * p + (lastPayloadSize ?? 0)
        } else {
            minimumSize = receivedBytes + payloadCount
        }
        guard minimumSize <= maxFrameSize, receivedBytes + payloadCount <= maxFrameSize else {
            throw ChunkError.oversized(size: max(minimumSize, receivedBytes + payloadCount), limit: maxFrameSize)
        }

        pieces[index] = Array(chunk[Chunker.headerLength...])
        receivedBytes += payloadCount
        guard pieces.count == total else { return nil }

        var frame = [UInt8]()
        frame.reserveCapacity(receivedBytes)
        for i in 0..<total {
            guard let piece = pieces[i] else { return nil }
            frame.append(contentsOf: piece)
        }
        reset()
        return frame
    }
}
