// libFuzzer harness: host frame values (custody ack/refusal, summary/request, attachment, clock) and the hop header.
import YaokCrypto
import YaokWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let all = input(data, size)
    guard let selector = all.first else { return 0 }
    let value = Array(all.dropFirst())
    switch selector % 6 {
    case 0:
        if let ack = try? CustodyAck(parsing: value) { check(ack.encoded == value, "ack round trip") }
    case 1:
        if let r = try? CustodyRefusal(parsing: value) { check(r.encoded == value, "refusal round trip") }
    case 2:
        if let s = try? BundleIDList(parsing: value) {
            check(s.encoded == value, "summary round trip")
            check(s.bundleIDs.count <= BundleIDList.maxCount, "summary above its limit")
            check((try? BundleIDList(bundleIDs: s.bundleIDs.reversed())) == s, "summary not canonical")
        }
    case 3:
        if let a = try? AttachmentAnnouncement(parsing: value) {
            check(a.encoded == value, "attachment round trip")
            check(a.userIDs.count <= AttachmentAnnouncement.maxCount, "attachment above its limit")
            _ = a.verifySignature()
            let resigned = try? AttachmentAnnouncement.signed(by: FuzzKeys.hub, timestampMs: a.timestampMs, userIDs: a.userIDs)
            check(resigned?.verifySignature() == true, "re-signed attachment does not verify")
        }
    case 4:
        if let c = try? ClockFrame(parsing: value) { check(c.encoded == value, "clock frame round trip") }
    default:
        if let h = try? HopHeader(parsing: value) {
            check(h.encoded == Array(value.prefix(h.length)), "hop header round trip")
        }
    }
    return 0
}
