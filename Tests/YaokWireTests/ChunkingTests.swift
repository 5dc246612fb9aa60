import XCTest
import YaokPluginKit

final class ChunkingTests: XCTestCase {
    private let second: UInt64 = 1_000_000_000

    func testSplitAndReassembleManySizes() throws {
        for chunkSize in [5, 20, 23 - 3 + 4, 182, 244, 509] {
            for length in [0, 1, 2, chunkSize - 4, chunkSize - 3, 3 * (chunkSize - 4), 1000, 10_492] {
                let frame = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
                if length > ChunkReassembler.defaultMaxFrameSize { continue }
                let chunks = try Chunker.split(frame, chunkSize: chunkSize)
                XCTAssertEqual(chunks.count, max(1, (length + chunkSize - 5) / (chunkSize - 4)))
                XCTAssertTrue(chunks.allSatisfy { $0.count <= chunkSize })
                var r = ChunkReassembler()
                var result: [UInt8]?
                for (i, c) in chunks.enumerated() {
                    result = try r.add(c, now: 0)
                    if i < chunks.count - 1 { XCTAssertNil(result) }
                }
                XCTAssertEqual(result, frame, "chunk size \(chunkSize) length \(length)")
                XCTAssertTrue(r.isIdle)
            }
        }
    }

    func testOutOfOrderChunksReassemble() throws {
        let frame = (0..<100).map { UInt8($0) }
        var chunks = try Chunker.split(frame, chunkSize: 14)
        chunks.reverse()
        chunks.swapAt(2, 5)
        var r = ChunkReassembler()
        var out: [UInt8]?
        for c in chunks { out = try r.add(c, now: 0) }
        XCTAssertEqual(out, frame)
    }

    func testSplitErrors() {
        XCTAssertThrowsError(try Chunker.split([1], chunkSize: 4)) { XCTAssertEqual($0 as? ChunkError, .chunkSizeTooSmall(chunkSize: 4, minimum: 5)) }
        XCTAssertThrowsError(try Chunker.split([UInt8](repeating: 0, count: 65_536), chunkSize: 5)) {
            XCTAssertEqual($0 as? ChunkError, .tooManyChunks(count: 65_536, limit: 65_535))
        }
    }

    private func assertAdd(_ r: inout ChunkReassembler, _ chunk: [UInt8], throws expected: ChunkError, line: UInt = #line) {
        XCTAssertThrowsError(try r.add(chunk, now: 0), line: line) { XCTAssertEqual($0 as? ChunkError, expected, line: line) }
        XCTAssertTrue(r.isIdle, "an error drops the partial frame", line: line)
    }

    func testReassemblyErrors() throws {
        var r = ChunkReassembler()
        assertAdd(&r, [], throws: .truncated(length: 0))
        assertAdd(&r, [0, 0, 0], throws: .truncated(length: 3))
        assertAdd(&r, [0, 0, 0, 0, 1], throws: .zeroTotal)
        assertAdd(&r, [0, 2, 0, 2, 1], throws: .indexOutOfRange(index: 2, total: 2))
        assertAdd(&r, [0xFF, 0xFF, 0xFF, 0xFF], throws: .indexOutOfRange(index: 65_535, total: 65_535))
        assertAdd(&r, [0, 0, 0xFF, 0xFF, 1], throws: .tooManyChunks(count: 65_535, limit: 10_600))

        XCTAssertNil(try r.add([0, 0, 0, 3, 1, 2], now: 0))
        assertAdd(&r, [0, 1, 0, 4, 1, 2], throws: .totalMismatch(expected: 3, got: 4))
        XCTAssertNil(try r.add([0, 0, 0, 3, 1, 2], now: 0))
        assertAdd(&r, [0, 0, 0, 3, 1, 2], throws: .duplicateIndex(0))
        XCTAssertNil(try r.add([0, 0, 0, 3, 1, 2], now: 0))
        assertAdd(&r, [0, 1, 0, 3, 1, 2, 3], throws: .inconsistentChunkSize(expected: 2, got: 3))
        XCTAssertNil(try r.add([0, 0, 0, 3, 1, 2], now: 0))
        assertAdd(&r, [0, 2, 0, 3, 1, 2, 3], throws: .inconsistentChunkSize(expected: 2, got: 3))
        // Last chunk first, then a smaller non-final chunk.
        XCTAssertNil(try r.add([0, 2, 0, 3, 1, 2, 3], now: 0))
        assertAdd(&r, [0, 0, 0, 3, 1, 2], throws: .inconsistentChunkSize(expected: 2, got: 3))
        // After errors, a good frame still goes through.
        XCTAssertEqual(try r.add([0, 0, 0, 1, 9, 9], now: 0), [9, 9])
    }

    func testOversizedFramesRefusedEarly() throws {
        var r = ChunkReassembler(maxFrameSize: 100)
        // 10 chunks of 20 bytes announce at least 181 bytes: refused at the first chunk.
        assertAdd(&r, [0, 0, 0, 10] + [UInt8](repeating: 0, count: 20), throws: .oversized(size: 180, limit: 100))
        assertAdd(&r, [0, 0, 0, 1] + [UInt8](repeating: 0, count: 101), throws: .oversized(size: 101, limit: 100))
        XCTAssertEqual(try r.add([0, 0, 0, 1] + [UInt8](repeating: 7, count: 100), now: 0)?.count, 100)
        XCTAssertEqual(r.maxTotalChunks, 100)
        assertAdd(&r, [0, 0, 0, 101, 1], throws: .tooManyChunks(count: 101, limit: 100))
    }

    func testTimeoutDropsPartialFrame() throws {
        var r = ChunkReassembler(timeoutNanoseconds: 5 * second)
        let chunks = try Chunker.split([UInt8](repeating: 1, count: 30), chunkSize: 14)
        XCTAssertEqual(chunks.count, 3)
        XCTAssertNil(try r.add(chunks[0], now: 10 * second))
        XCTAssertFalse(r.expire(now: 15 * second))
        XCTAssertNil(try r.add(chunks[1], now: 15 * second))
        XCTAssertEqual(r.receivedChunkCount, 2)
        // Too late: the partial frame is dropped and the late chunk starts a new one.
        XCTAssertNil(try r.add(chunks[2], now: 16 * second))
        XCTAssertEqual(r.receivedChunkCount, 1)
        XCTAssertTrue(r.expire(now: 22 * second))
        XCTAssertTrue(r.isIdle)
        XCTAssertFalse(r.expire(now: 23 * second))
    }
}
