// libFuzzer harness: the BLE chunk reassembler fed arbitrary chunk sequences, and split/reassemble round trips.
import YaokPluginKit

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzChunks(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    guard bytes.count >= 2 else { return 0 }

    // 1. Arbitrary chunks: [length(1)][advance seconds(1)][chunk(length)]...
    var reassembler = ChunkReassembler(maxFrameSize: 600, timeoutNanoseconds: 5_000_000_000)
    var now: UInt64 = 0
    var i = 0
    while i + 2 <= bytes.count {
        let length = Int(bytes[i]); now += UInt64(bytes[i + 1] % 8) * 1_000_000_000
        i += 2
        let chunk = Array(bytes[i..<min(i + length, bytes.count)])
        i += chunk.count
        do {
            if let frame = try reassembler.add(chunk, now: now) {
                check(frame.count <= 600, "reassembled frame above the limit")
                check(reassembler.isIdle, "reassembler not idle after a frame")
            }
        } catch {
            check(error is ChunkError, "unexpected error type")
            check(reassembler.isIdle, "error did not drop the partial frame")
        }
        check(reassembler.receivedChunkCount <= 600, "too many chunks held")
    }

    // 2. Round trip: chunk size from the first byte, order permuted by the second.
    let chunkSize = 5 + Int(bytes[0])
    let frame = Array(bytes.dropFirst(2).prefix(ChunkReassembler.defaultMaxFrameSize))
    guard var chunks = try? Chunker.split(frame, chunkSize: chunkSize) else {
        check(false, "split failed")
        return 0
    }
    check(chunks.allSatisfy { $0.count <= chunkSize }, "chunk larger than the chunk size")
    if bytes[1] & 1 == 1 { chunks.reverse() }
    var r = ChunkReassembler()
    var out: [UInt8]?
    for c in chunks {
        do {
            out = try r.add(c, now: 0)
        } catch {
            check(false, "valid chunk refused: \(error)")
        }
    }
    check(out == frame, "round trip changed the frame")
    return 0
}
