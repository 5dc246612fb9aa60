import Foundation
import Synchronization
import YaokReconcile
import YaokWire
import YaokCrypto

/// The receipt commitments of messages this hub took lately, so that the thread receiving
/// a delivery receipt can check its proof (two hashes) instead of its Ed25519 signature
/// (Docs/protocol.md, "Receipt proofs").
///
/// The router records every message it stores; a transport's thread asks ``proves(_:)``.
/// A commitment stays valid for ever (it is part of a signed message the hub verified), so
/// an entry for a message that was delivered, expired or evicted since is harmless; the
/// table only has to be large enough to hold the messages whose receipts are on their way.
/// A receipt whose message is not here (older, or taken before a restart) is checked by
/// its signature, as every other bundle. Bounded: the oldest entry makes room.
final class ReceiptCommitments: Sendable {
    /// About 64 bytes an entry: 1 MB at most.
    static let defaultCapacity = 16_384

    /// `value`: the commitment's 16 bytes, held in two words as a bundle ID is.
    private struct Commitment { var value: BundleID; var expiresMs: Int64 }
    private struct Table {
        var byMessage: [BundleID: Commitment] = [:]
        var order: [BundleID] = []   // insertion ring, for eviction
        var next = 0
    }
    private let capacity: Int
    private let table = Mutex(Table())

    init(capacity: Int = defaultCapacity) { self.capacity = max(1, capacity) }

    /// Remembers a stored message's commitment, under its bundle ID.
    func record(_ message: Envelope) {
        guard message.kind == .message, let id = BundleID(message.bundleID),
              let value = BundleID(message.receiptCommitment) else { return }
        let entry = Commitment(value: value, expiresMs: message.expiresMs)
        table.withLock { t in
            if t.byMessage.updateValue(entry, forKey: id) != nil { return }
            if t.order.count < capacity {
                t.order.append(id)
            } else {
                t.byMessage[t.order[t.next]] = nil
                t.order[t.next] = id
                t.next = (t.next + 1) % capacity
            }
        }
    }

    /// Whether `receipt` is a delivery receipt whose message ID is the delivery proof of a
    /// message recorded here, and lives at least as long as that message (the rule of
    /// ``YaokWire/Envelope/provesDelivery(of:)``, without the message itself).
    func proves(_ receipt: Envelope) -> Bool {
        guard receipt.kind == .deliveryReceipt, let message = receipt.acknowledgedBundleID,
              let key = BundleID(message), let entry = table.withLock({ $0.byMessage[key] }) else { return false }
        return receipt.revealsDeliveryProof(committedTo: entry.value.bytes, messageExpiresMs: entry.expiresMs)
    }

    var count: Int { table.withLock { $0.byMessage.count } }
}
