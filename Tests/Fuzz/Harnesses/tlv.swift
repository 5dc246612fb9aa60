// libFuzzer harness: the TLV stream decoder fed in fuzzed pieces, every decoded record
// dispatched to its parser (host frames, bundles, hub certificates, and the secure link
// session on both sides: a responder, an initiator that sent its hello, and the stateless
// cookie check).
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
    let links = FuzzLinks()

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
            dispatch(record, links)
        }
    }
    check(Array(bytes[2...]).starts(with: consumed), "decoded frames are not a prefix of the stream")
    return 0
}

/// One responder, one initiator waiting for its reply, and a cookie checker, fed every record.
private struct FuzzLinks {
    let responder = SecureLink(identity: FuzzKeys.hub, role: .hub, isInitiator: false, channel: .stream)
    let initiator = SecureLink(identity: FuzzKeys.hub, role: .endpoint, isInitiator: true, channel: .datagram)
    let cookies = LinkCookies(clock: { 1 })
    init() { _ = try? initiator.hello() }
}

private func dispatch(_ record: TLVRecord, _ links: FuzzLinks) {
    switch HostFrameType(record.type) {
    case .link(.bundle): _ = try? Bundle(parsing: record.value)
    case .routing(.custodyAck): _ = try? CustodyAck(parsing: record.value)
    case .routing(.custodyRefused): _ = try? CustodyRefusal(parsing: record.value)
    case .routing(.offer), .routing(.request): _ = try? BundleIDList(parsing: record.value)
    case .routing(.attachment): _ = (try? AttachmentAnnouncement(parsing: record.value))?.verifySignature()
    case .routing(.hubCertificate): _ = try? HubCertificate(parsing: record.value)
    case .link(.linkHello):
        if case .reply(let r) = links.cookies.admit(record, from: [127, 0, 0, 1]) { check(r.count <= record.encoded.count, "cookie reply larger than the hello") }
        fallthrough
    default:
        // Every record type, the link session's included, goes to both session ends: none may crash.
        _ = try? links.responder.receive(record)
        _ = try? links.initiator.receive(record)
    }
}
