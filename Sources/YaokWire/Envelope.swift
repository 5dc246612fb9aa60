import YaokCrypto

/// Envelope v1: the immutable, end-to-end unit of Ya OK, signed by its sender.
///
/// Layout (big-endian; see Docs/protocol.md):
/// `version(1) kind(1) messageID(16) senderKey(32) recipientUserID(32) created(8) expires(8)
///  refID(16) ephemeralKey(32) nonce(24) ciphertextLength(2) ciphertext(n) signature(64)`.
/// Messages carry an XChaCha20-Poly1305 ciphertext whose associated data is bytes 0..<170;
/// receipts carry none. The signature covers every byte before it.
///
/// Hubs only parse (structure), check ``verifySignature()`` and forward ``encoded``;
/// only the recipient can ``open(with:)`` a message. A message's nonce begins with its
/// receipt commitment, and a delivery receipt that reveals the matching proof as its message
/// ID ``provesDelivery(of:)`` without a signature check.
public struct Envelope: Sendable, Equatable {
    /// What an envelope carries.
    public enum Kind: UInt8, Sendable, CaseIterable, CustomStringConvertible {
        case message = 1
        case deliveryReceipt = 2
        case readReceipt = 3

        public var description: String {
            switch self {
            case .message: return "message"
            case .deliveryReceipt: return "delivery receipt"
            case .readReceipt: return "read receipt"
            }
        }
    }

    public static let version: UInt8 = 1
    /// Length of the associated data: every byte before the ciphertext length field.
    public static let associatedDataLength = 170
    /// Offset of the ciphertext.
    public static let ciphertextOffset = 172
    public static let signatureLength = 64
    public static let maxPlaintextLength = 10240
    public static let minMessageCiphertextLength = SealedBox.tagLength
    public static let maxCiphertextLength = maxPlaintextLength + SealedBox.tagLength
    /// A receipt's size (no ciphertext).
    public static let minEncodedLength = ciphertextOffset + signatureLength
    /// The largest envelope: 10 KB of plaintext.
    public static let maxEncodedLength = ciphertextOffset + maxCiphertextLength + signatureLength
    /// Default lifetime: 7 days.
    public static let defaultTTLMilliseconds: Int64 = 7 * 24 * 3600 * 1000

    public let kind: Kind
    /// 16-byte UUIDv4 chosen by the sender.
    public let messageID: [UInt8]
    /// The sender's Ed25519 public key (verifies ``signature``).
    public let senderSigningKey: [UInt8]
    /// SHA-256 of the recipient's Ed25519 public key.
    public let recipientUserID: [UInt8]
    /// Creation time, UTC milliseconds.
    public let createdMs: Int64
    /// Expiry time, UTC milliseconds; hubs drop the envelope after it.
    public let expiresMs: Int64
    /// Receipts: the acknowledged message ID. Messages: 16 zero bytes.
    public let refID: [UInt8]
    /// Messages: the sender's one-time X25519 public key. Receipts: zeros.
    public let ephemeralKey: [UInt8]
    /// Messages: the 24-byte AEAD nonce. Receipts: zeros.
    public let nonce: [UInt8]
    /// Messages: ciphertext and 16-byte tag. Receipts: empty.
    public let ciphertext: [UInt8]
    /// Ed25519 signature over every byte before it.
    public let signature: [UInt8]
    /// The envelope's exact bytes (what is signed, stored and forwarded).
    public let encoded: [UInt8]

    /// SHA-256 of the sender's Ed25519 key: the sender's user ID, where receipts go.
    public var senderUserID: [UInt8] { Hash.sha256(senderSigningKey) }

    /// Messages: the receipt commitment `c` (the nonce's first 16 bytes, ``ReceiptChain``).
    /// A sender that commits makes it from the message key; an older sender's random nonce
    /// is a commitment nobody can answer, so its receipts are checked by signature only.
    public var receiptCommitment: ArraySlice<UInt8> { nonce.prefix(ReceiptChain.length) }

    /// Whether this delivery receipt proves, by its revealed delivery proof (its message ID),
    /// that `message` was delivered: it acknowledges that message (ref ID, addressed to its
    /// sender), lives at least as long as it, and its message ID hashes to the message's
    /// commitment. This needs no signature: only the message's recipient (or its sender)
    /// can compute the proof (Docs/protocol.md, "Receipt proofs").
    public func provesDelivery(of message: Envelope) -> Bool {
        message.kind == .message && refID == message.messageID && recipientUserID == message.senderUserID
            && revealsDeliveryProof(committedTo: message.receiptCommitment, messageExpiresMs: message.expiresMs)
    }

    /// The part of ``provesDelivery(of:)`` that needs only the acknowledged message's
    /// commitment and expiry, for a caller that found them under ``acknowledgedBundleID``
    /// (which binds the ref ID and the addressee): a delivery receipt that lives at least as
    /// long as the message and whose message ID hashes to `commitment`.
    public func revealsDeliveryProof(committedTo commitment: some Collection<UInt8>, messageExpiresMs: Int64) -> Bool {
        kind == .deliveryReceipt && expiresMs >= messageExpiresMs
            && ReceiptChain.commitment(deliveryProof: messageID).elementsEqual(commitment)
    }

    /// Whether the envelope has expired at `nowMs`.
    public func isExpired(atMs nowMs: Int64) -> Bool { nowMs >= expiresMs }

    public static func == (lhs: Envelope, rhs: Envelope) -> Bool { lhs.encoded == rhs.encoded }

    // MARK: Parsing

    /// Parses an envelope and checks its structure (lengths, version, kind, zero fields,
    /// timestamps). It does not verify the signature: call ``verifySignature()`` or ``verified()``.
    public init(parsing bytes: [UInt8]) throws {
        let what = "envelope"
        guard bytes.count <= Self.maxEncodedLength else {
            throw WireError.oversized(what: what, size: bytes.count, limit: Self.maxEncodedLength)
        }
        guard bytes.count >= Self.minEncodedLength else {
            throw WireError.truncated(what: what, needed: Self.minEncodedLength, have: bytes.count)
        }
        var r = ByteReader(bytes, what: what)
        let version = try r.u8()
        guard version == Self.version else { throw WireError.wrongVersion(what: what, version: Int(version)) }
        let rawKind = try r.u8()
        guard let kind = Kind(rawValue: rawKind) else { throw WireError.badKind(rawKind) }
        let messageID = try r.take(16)
        let sender = try r.take(32)
        let recipient = try r.take(32)
        let created = try r.u64()
        let expires = try r.u64()
        let refID = try r.take(16)
        let ephemeral = try r.take(32)
        let nonce = try r.take(24)
        let n = Int(try r.u16())

        switch kind {
        case .message:
            guard n >= Self.minMessageCiphertextLength, n <= Self.maxCiphertextLength else {
                throw WireError.badLength(what: what, detail: "message ciphertext length \(n) outside \(Self.minMessageCiphertextLength)...\(Self.maxCiphertextLength)")
            }
            guard isAllZero(refID) else { throw WireError.nonZeroField("refID (message)") }
        case .deliveryReceipt, .readReceipt:
            guard n == 0 else { throw WireError.badLength(what: what, detail: "receipt ciphertext length must be 0, got \(n)") }
            guard isAllZero(ephemeral) else { throw WireError.nonZeroField("ephemeral key (receipt)") }
            guard isAllZero(nonce) else { throw WireError.nonZeroField("nonce (receipt)") }
        }
        let expected = Self.ciphertextOffset + n + Self.signatureLength
        guard bytes.count >= expected else { throw WireError.truncated(what: what, needed: expected, have: bytes.count) }
        guard bytes.count == expected else {
            throw WireError.badLength(what: what, detail: "ciphertext length \(n) implies \(expected) bytes, got \(bytes.count)")
        }
        let ciphertext = try r.take(n)
        let signature = try r.take(Self.signatureLength)
        try r.expectEnd()

        guard created <= UInt64(Int64.max), expires <= UInt64(Int64.max) else {
            throw WireError.badTimestamp("above Int64.max")
        }
        guard expires >= created else { throw WireError.badTimestamp("expires before it was created") }

        self.kind = kind
        self.messageID = messageID
        self.senderSigningKey = sender
        self.recipientUserID = recipient
        self.createdMs = Int64(created)
        self.expiresMs = Int64(expires)
        self.refID = refID
        self.ephemeralKey = ephemeral
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.signature = signature
        self.encoded = bytes
    }

    // MARK: Signatures

    /// Whether the sender's signature covers these exact bytes.
    public func verifySignature() -> Bool {
        let signedCount = encoded.count - Self.signatureLength
        return SigningKeyPair.verify(signature: signature, message: encoded[0..<signedCount], publicKey: senderSigningKey)
    }

    /// Returns `self` if the signature verifies; throws ``WireError/badSignature`` otherwise.
    @discardableResult
    public func verified() throws -> Envelope {
        guard verifySignature() else { throw WireError.badSignature }
        return self
    }

    // MARK: Opening

    /// Verifies and decrypts a message addressed to `identity`.
    public func open(with identity: Identity) throws -> [UInt8] {
        try checkAddressed(to: identity)
        try verified()
        return try decryptVerified(with: identity)
    }

    private func checkAddressed(to identity: Identity) throws {
        guard kind == .message else { throw WireError.wrongKind(expected: "message", actual: kind.rawValue) }
        guard constantTimeEqual(recipientUserID, identity.userID) else { throw WireError.wrongRecipient }
    }

    /// Decrypts a message addressed to `identity` whose signature the caller has already
    /// checked with ``verifySignature()`` (a receiver that verifies first, to tell a forgery
    /// from a stranger's message, need not pay for a second Ed25519 verification).
    public func decryptVerified(with identity: Identity) throws -> [UInt8] {
        try decryptVerifiedWithProof(with: identity).plaintext
    }

    /// ``decryptVerified(with:)``, and the delivery proof to reveal in the delivery receipt
    /// when the sender committed to one (nil for an older sender's message).
    public func decryptVerifiedWithProof(with identity: Identity) throws -> (plaintext: [UInt8], deliveryProof: [UInt8]?) {
        try checkAddressed(to: identity)
        do {
            let key = try SealedBox.MessageKey(ephemeralPublicKey: ephemeralKey, recipient: identity.kxKeyPair)
            let plaintext = try key.open(ciphertext: encoded[Self.ciphertextOffset..<(Self.ciphertextOffset + ciphertext.count)],
                                         additionalData: encoded[0..<Self.associatedDataLength], nonce: nonce)
            let proof = key.deliveryProof
            return (plaintext, ReceiptChain.commitment(deliveryProof: proof)[...] == receiptCommitment ? proof : nil)
        } catch CryptoError.decryptionFailed {
            throw WireError.decryptionFailed
        } catch CryptoError.weakPublicKey {
            throw WireError.decryptionFailed
        } catch let error as CryptoError {
            throw WireError.crypto(error)
        }
    }

    // MARK: Building

    /// Encrypts and signs a message to the user with Ed25519 key `recipientSigningKey`.
    public static func sealMessage(plaintext: [UInt8], from sender: Identity, toSigningKey recipientSigningKey: [UInt8],
                                   recipientKXKey: [UInt8], createdMs: Int64, ttlMs: Int64 = defaultTTLMilliseconds,
                                   messageID: [UInt8]? = nil, ephemeral: KXKeyPair? = nil, nonce: [UInt8]? = nil,
                                   nonceTail: [UInt8]? = nil) throws -> Envelope {
        try checkLength(recipientSigningKey, 32, "recipient Ed25519 key")
        return try sealMessage(plaintext: plaintext, from: sender, toUserID: Hash.sha256(recipientSigningKey),
                               recipientKXKey: recipientKXKey, createdMs: createdMs, ttlMs: ttlMs,
                               messageID: messageID, ephemeral: ephemeral, nonce: nonce, nonceTail: nonceTail)
    }

    /// Encrypts and signs a message to `recipientUserID`, whose X25519 key is `recipientKXKey`.
    ///
    /// The nonce is the message's receipt commitment (16 bytes, ``ReceiptChain``) and 8
    /// random bytes. `messageID`, `ephemeral` and `nonceTail` (those 8 bytes) default to
    /// fresh random values; pass them only for test vectors. `nonce` replaces the whole
    /// nonce, so the message commits to nothing (an older sender's message, for tests).
    public static func sealMessage(plaintext: [UInt8], from sender: Identity, toUserID recipientUserID: [UInt8],
                                   recipientKXKey: [UInt8], createdMs: Int64, ttlMs: Int64 = defaultTTLMilliseconds,
                                   messageID: [UInt8]? = nil, ephemeral: KXKeyPair? = nil, nonce: [UInt8]? = nil,
                                   nonceTail: [UInt8]? = nil) throws -> Envelope {
        guard plaintext.count <= maxPlaintextLength else {
            throw WireError.plaintextTooLarge(size: plaintext.count, limit: maxPlaintextLength)
        }
        try checkLength(recipientUserID, 32, "recipient user ID")
        try checkLength(recipientKXKey, 32, "recipient X25519 key")
        let id = messageID ?? Random.uuidV4()
        try checkLength(id, 16, "message ID")
        let eph = ephemeral ?? KXKeyPair.generate()
        let key: SealedBox.MessageKey
        do {
            key = try SealedBox.MessageKey(ephemeral: eph, recipientKXKey: recipientKXKey)
        } catch let error as CryptoError {
            throw WireError.crypto(error)
        }
        // The message key is fresh for every message, so a nonce that is mostly a hash of it
        // is still never reused under one key.
        let tail = nonceTail ?? Random.bytes(SealedBox.nonceLength - ReceiptChain.length)
        try checkLength(tail, SealedBox.nonceLength - ReceiptChain.length, "nonce tail")
        let nonce = nonce ?? (key.receiptCommitment + tail)
        try checkLength(nonce, SealedBox.nonceLength, "nonce")
        let expires = try expiry(createdMs: createdMs, ttlMs: ttlMs)

        var w = header(kind: .message, messageID: id, sender: sender, recipientUserID: recipientUserID,
                       createdMs: createdMs, expiresMs: expires, refID: [UInt8](repeating: 0, count: 16),
                       ephemeralKey: eph.publicKey, nonce: nonce)
        let ciphertext: [UInt8]
        do {
            ciphertext = try key.seal(plaintext: plaintext, additionalData: w.bytes[0..<associatedDataLength], nonce: nonce)
        } catch let error as CryptoError {
            throw WireError.crypto(error)
        }
        w.u16(UInt16(ciphertext.count))
        w.raw(ciphertext)
        return try signAndParse(w, by: sender)
    }

    /// Builds a signed delivery or read receipt for `messageID`, addressed to the original sender.
    /// A delivery receipt for a message that committed to a proof takes that proof as its
    /// `messageID` (``decryptVerifiedWithProof(with:)``); any other gets a random one.
    public static func receipt(kind: Kind, for acknowledgedMessageID: [UInt8], originalSenderUserID: [UInt8],
                               from sender: Identity, createdMs: Int64, ttlMs: Int64 = defaultTTLMilliseconds,
                               messageID: [UInt8]? = nil) throws -> Envelope {
        guard kind != .message else { throw WireError.invalidArgument("a receipt's kind must be a receipt kind") }
        try checkLength(acknowledgedMessageID, 16, "acknowledged message ID")
        try checkLength(originalSenderUserID, 32, "original sender user ID")
        let id = messageID ?? Random.uuidV4()
        try checkLength(id, 16, "message ID")
        let expires = try expiry(createdMs: createdMs, ttlMs: ttlMs)
        var w = header(kind: kind, messageID: id, sender: sender, recipientUserID: originalSenderUserID,
                       createdMs: createdMs, expiresMs: expires, refID: acknowledgedMessageID,
                       ephemeralKey: [UInt8](repeating: 0, count: 32), nonce: [UInt8](repeating: 0, count: 24))
        w.u16(0)
        return try signAndParse(w, by: sender)
    }

    private static func expiry(createdMs: Int64, ttlMs: Int64) throws -> Int64 {
        guard createdMs >= 0 else { throw WireError.invalidArgument("createdMs must not be negative") }
        guard ttlMs > 0 else { throw WireError.invalidArgument("ttlMs must be positive") }
        let (sum, overflow) = createdMs.addingReportingOverflow(ttlMs)
        guard !overflow else { throw WireError.invalidArgument("createdMs + ttlMs overflows") }
        return sum
    }

    private static func header(kind: Kind, messageID: [UInt8], sender: Identity, recipientUserID: [UInt8],
                               createdMs: Int64, expiresMs: Int64, refID: [UInt8],
                               ephemeralKey: [UInt8], nonce: [UInt8]) -> ByteWriter {
        var w = ByteWriter(capacity: maxEncodedLength)
        w.u8(version)
        w.u8(kind.rawValue)
        w.raw(messageID)
        w.raw(sender.signingKey)
        w.raw(recipientUserID)
        w.u64(UInt64(createdMs))
        w.u64(UInt64(expiresMs))
        w.raw(refID)
        w.raw(ephemeralKey)
        w.raw(nonce)
        return w
    }

    private static func signAndParse(_ w: ByteWriter, by sender: Identity) throws -> Envelope {
        var w = w
        let signature = sender.signingKeyPair.sign(w.bytes)
        w.raw(signature)
        return try Envelope(parsing: w.bytes)
    }
}
