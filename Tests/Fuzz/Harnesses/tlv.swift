// libFuzzer harness: the TLV stream decoder fed in fuzzed pieces, every decoded record
// dispatched to its parser (host frames, bundles, link handshake).
import YaokCrypto
import YaokPluginKit
import YaokWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTLV(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    guard bytes.count >= 2 else { return 0 }
    let limit = Int(bytes[0]) * 64
    let step = 1 + Int(bytes[1] % 64)
    var decoder = TLVStreamDecoder(maxValueLength: limit)
    let handshake = LinkHandshake(identity: FuzzKeys.hub, role: .hub, clock: { 1 })
    _ = handshake.challengeFrame()

    var consumed: [UInt8] = []
    var offset = 2
    while offset < bytes.count {
        let piece = Array(bytes[offset..<min(offset + step, bytes.count)])
        offset += piece.count
        let frames: [[UInt8]]
        do {
            frames = try decoder.feed(piece)
        } catch {
            check(error is TLVError, "unexpected error type")
            return 0
        }
        check(decoder.pendingByteCount <= TLVRecord.headerLength + limit + step, "decoder holds too much")
        for frame in frames {
            consumed += frame
            guard let record = try? TLVRecord(parsing: frame) else { check(false, "decoded frame does not parse"); return 0 }
            check(record.value.count <= limit, "record above the limit")
            check(record.encoded == frame, "record does not round-trip")
            dispatch(record, handshake)
        }
    }
    check(Array(bytes[2...]).starts(with: consumed), "decoded frames are not a prefix of the stream")
    return 0
}

private func dispatch(_ record: TLVRecord, _ handshake: LinkHandshake) {
    switch FrameType(rawValue: record.type) {
    case .bundle: _ = try? Bundle(parsing: record.value)
    case .custodyAck: _ = try? CustodyAck(parsing: record.value)
    case .custodyRefused: _ = try? CustodyRefusal(parsing: record.value)
    case .summary, .request: _ = try? SummaryVector(parsing: record.value)
    case .attachment: _ = (try? AttachmentAnnouncement(parsing: record.value))?.verifySignature()
    case .linkChallenge, .linkProof: _ = try? handshake.handle(record)
    default: break   // ping, pong, linkClose and unknown types carry nothing to parse
    }
}
