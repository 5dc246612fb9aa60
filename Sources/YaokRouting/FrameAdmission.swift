import Foundation
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire

/// A bundle frame as the receiving plugin thread leaves it for the router: its record, and
/// the bundle parsed with its sender's signature checked. Checking there runs the
/// verification, the costliest step of taking a bundle, in parallel with the router's serial
/// queue (on the plugin's thread, one per transport). It costs no more than before for
/// a forged flood: admission has already bounded the frames of each link, and an endpoint
/// link, which anyone may open, already had every bundle it sent verified.
struct ReceivedBundleFrame: Sendable {
    struct Checked: Sendable {
        let bundle: YaokWire.Bundle
        let signatureValid: Bool
        /// A delivery receipt whose proof matched a recorded commitment: its signature was
        /// not checked (``signatureValid`` is false) and need not be.
        let proven: Bool
    }
    let record: TLVRecord
    /// nil when the record is not a well-formed bundle: the router parses it again for the reason.
    let checked: Checked?

    /// nil when the frame is not a TLV record at all (the router counts it as malformed).
    init?(_ frame: [UInt8], commitments: ReceiptCommitments) {
        guard let record = try? TLVRecord(parsing: frame) else { return nil }
        self.record = record
        if record.type == FrameType.bundle.rawValue, let bundle = try? YaokWire.Bundle(parsing: record.value) {
            if commitments.proves(bundle.envelope) {
                checked = Checked(bundle: bundle, signatureValid: false, proven: true)
            } else {
                checked = Checked(bundle: bundle, signatureValid: bundle.envelope.verifySignature(), proven: false)
            }
        } else {
            checked = nil
        }
    }
}

/// Per-link admission of received frames, before they are queued to the router: a token
/// bucket of `framesPerSecond` (burst of one second's worth) and at most ``maxBacklog``
/// bundles and, apart, ``maxBacklog`` other frames waiting in the router queue per link.
/// Apart, because a backlog of bundles must not crowd out the small frames that move it: a
/// dropped bundle is resent after the link's custody wait (seconds), but a dropped offer or
/// request is repeated only after `custody_timeout_s` (30 s by default: sharing one backlog
/// stalled a line of four hubs for 27 s). Called on plugin threads.
// @unchecked: the per-link entries and drop counters only under `lock`.
final class FrameAdmission: @unchecked Sendable {
    enum Decision { case admitted, rateLimited, backlogFull }
    /// Which backlog a frame waits in: bundles, or everything else (answers, offers, keep-alives).
    enum Kind { case bundle, other }
    /// Frames of one kind one link may have waiting in the router's queue.
    static let maxBacklog = 256

    struct Entry {
        var bucket: TokenBucket
        var backlog: (bundles: Int, other: Int) = (0, 0)
        subscript(_ kind: Kind) -> Int {
            get { kind == .bundle ? backlog.bundles : backlog.other }
            set { if kind == .bundle { backlog.bundles = newValue } else { backlog.other = newValue } }
        }
    }
    let lock = NSLock()
    var rate: Double
    var entries: [LinkKey: Entry] = [:]
    var droppedRate = 0, droppedBacklog = 0, droppedBacklogOther = 0

    init(framesPerSecond: Int) { rate = Double(max(1, framesPerSecond)) }

    func setRate(_ framesPerSecond: Int) { lock.withLock { rate = Double(max(1, framesPerSecond)) } }

    func admit(_ key: LinkKey, _ kind: Kind = .bundle) -> Decision {
        let nowNs = Int64(DispatchTime.now().uptimeNanoseconds)
        return lock.withLock {
            var e = entries[key] ?? Entry(bucket: TokenBucket(capacity: rate, nowNs: nowNs))
            e.bucket.refill(capacity: rate, perSecond: rate, nowNs: nowNs)
            let decision: Decision
            if e.bucket.tokens < 1 {
                droppedRate += 1
                decision = .rateLimited
            } else if e[kind] >= Self.maxBacklog {
                droppedBacklog += 1
                if kind == .other { droppedBacklogOther += 1 }
                decision = .backlogFull
            } else {
                e.bucket.tokens -= 1
                e[kind] += 1
                decision = .admitted
            }
            entries[key] = e
            return decision
        }
    }

    /// A queued frame was taken off the router queue.
    func done(_ key: LinkKey, _ kind: Kind = .bundle) {
        lock.withLock { if entries[key] != nil { entries[key]![kind] = max(0, entries[key]![kind] - 1) } }
    }

    /// The link is gone; frames still queued for it are dropped by the router.
    func forget(_ key: LinkKey) { lock.withLock { _ = entries.removeValue(forKey: key) } }

    var dropped: (rateLimited: Int, backlogFull: Int, backlogFullOther: Int) {
        lock.withLock { (droppedRate, droppedBacklog, droppedBacklogOther) }
    }
}
