import Foundation
import YaokCrypto
import YaokPluginKit

/// The hub's identity for the link sessions it runs itself: signing is the hub's own closure
/// (the secret key stays where it is); verification and randomness need no secret.
struct HostLinkIdentity: LinkIdentity {
    let crypto: HostCrypto
    var signingKey: [UInt8] { crypto.signingKey }
    var kxKey: [UInt8] { crypto.kxKey }
    func sign(_ message: [UInt8]) throws -> [UInt8] {
        let signature = crypto.sign(message)
        guard signature.count == 64 else { throw SecureLinkError.unexpected("the hub refused to sign") }
        return signature
    }
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
        SigningKeyPair.verify(signature: signature, message: message, publicKey: publicKey)
    }
    func randomBytes(_ count: Int) -> [UInt8] { Random.bytes(count) }
}

/// The link sessions of one standalone-program transport's carriers (Docs/plugin-protocol.md,
/// "Carriers"). A program that cannot run `SecureLink` itself (Python's standard library has
/// neither X25519 nor ChaCha20-Poly1305) reports connections and moves whole link records; the
/// hub runs the handshake, seals and opens every frame, answers pings and honours link close,
/// exactly as the kit's stream engine does inside a plugin. The program sees only ciphertext
/// and handshake records, so a compromised program learns no more than a wire tap.
///
/// Bounds: at most ``maxCarriers`` carriers; at most ``maxHandshaking`` unfinished handshakes,
/// the oldest giving way to a new one; a handshake unfinished after ``handshakeTimeout`` is ended.
/// Every record is hostile: anything malformed, unsealed or replayed ends that carrier only.
/// Thread-safe; effects are returned, to be carried out outside the lock.
// @unchecked: its tables only under `lock`; the effects it returns run outside it.
final class CarrierLinks: @unchecked Sendable {
    enum Effect {
        case send(PluginMessage)
        case linkUp(LinkInfo)
        case frame([UInt8], LinkID)
        case linkDown(LinkID, String)
        case log(Int32, String)
    }

    static let maxCarriers = 256
    static let maxHandshaking = 32
    static let handshakeTimeout: UInt64 = 10_000_000_000
    /// The smallest record a carrier must move: a whole handshake reply and a useful frame.
    static let minimumMTU = 1024

    private final class Carrier {
        let info: CarrierInfo
        let link: SecureLink
        let opened = DispatchTime.now().uptimeNanoseconds
        init(info: CarrierInfo, link: SecureLink) { self.info = info; self.link = link }
    }

    private let identity: LinkIdentity
    private let lock = NSLock()
    private var carriers: [UInt64: Carrier] = [:]
    /// Refused records and carriers, for status.
    private(set) var refused = 0

    init(identity: LinkIdentity) { self.identity = identity }

    /// Whether `link` is a carrier (its frames are sealed here, not sent as `send` requests).
    func isCarrier(_ link: LinkID) -> Bool { lock.withLock { carriers[link] != nil } }

    /// The program reported a new connection.
    func up(_ info: CarrierInfo) -> [Effect] {
        lock.withLock {
            var effects = sweep()
            guard carriers[info.id] == nil else {
                refused += 1
                return effects + [.log(4, "carrier \(info.id) reported up twice; the second is ignored")]
            }
            guard info.mtu >= Self.minimumMTU else {
                refused += 1
                return effects + [.send(.carrierClose(link: info.id, reason: "a carrier must move records of \(Self.minimumMTU) bytes or more, not \(info.mtu)"))]
            }
            guard carriers.count < Self.maxCarriers else {
                refused += 1
                return effects + [.send(.carrierClose(link: info.id, reason: "the hub runs at most \(Self.maxCarriers) carriers per transport"))]
            }
            let unfinished = carriers.values.filter { !$0.link.isEstablished }
            if unfinished.count >= Self.maxHandshaking, let oldest = unfinished.min(by: { $0.opened < $1.opened }) {
                carriers[oldest.info.id] = nil
                refused += 1
                effects.append(.send(.carrierClose(link: oldest.info.id, reason: "handshake evicted: \(Self.maxHandshaking) unfinished at once")))
            }
            let c = Carrier(info: info, link: SecureLink(identity: identity, role: .hub, isInitiator: info.dialled, channel: .stream))
            carriers[info.id] = c
            guard info.dialled else { return effects }
            do {
                return effects + [.send(.carrierSend(link: info.id, record: try c.link.hello()))]
            } catch {
                carriers[info.id] = nil
                return effects + [.send(.carrierClose(link: info.id, reason: "\(error)"))]
            }
        }
    }

    /// One record from the peer at the end of carrier `link`.
    func record(_ bytes: [UInt8], on link: LinkID) -> [Effect] {
        lock.withLock {
            guard let c = carriers[link] else { return [] }
            let wasUp = c.link.isEstablished
            func end(_ why: String) -> [Effect] {
                carriers[link] = nil
                refused += 1
                return [.send(.carrierClose(link: link, reason: why))] + (wasUp ? [.linkDown(link, why)] : [])
            }
            guard let record = try? TLVRecord(parsing: bytes) else { return end("a carrier record that is not one whole TLV record") }
            let outputs: [SecureLink.Output]
            do {
                outputs = try c.link.receive(record)
            } catch {
                return end(wasUp ? "a frame that is not sealed for this session: \(error)" : "handshake failed: \(error)")
            }
            var effects: [Effect] = []
            for output in outputs {
                switch output {
                case .send(let r):
                    effects.append(.send(.carrierSend(link: link, record: r)))
                case .established(let peer):
                    guard peer.signingKey != identity.signingKey else { return effects + end("the carrier leads back to this hub") }
                    // One link per peer, chosen on the two keys alone so both ends keep the same
                    // carrier: the one the lower key dialled; the newer if both went one way.
                    if let other = carriers.values.first(where: { $0 !== c && $0.link.isEstablished && $0.link.peer?.signingKey == peer.signingKey }) {
                        func rank(_ x: Carrier) -> Int { SecureLink.duplicateRank(ourKey: identity.signingKey, peerKey: peer.signingKey, weDialled: x.info.dialled) }
                        if rank(other) < rank(c) {
                            return effects + end("duplicate carrier to this peer; keeping carrier \(other.info.id)")
                        }
                        carriers[other.info.id] = nil
                        let why = "duplicate carrier to this peer; keeping carrier \(link)"
                        effects += [.send(.carrierClose(link: other.info.id, reason: why)), .linkDown(other.info.id, why)]
                    }
                    if !c.link.isInitiator, let accepted = try? c.link.accept() {
                        effects.append(.send(.carrierSend(link: link, record: accepted)))
                    }
                    let mtu = min(c.info.mtu, TLVRecord.headerLength + TLVRecord.maxValueLength) - SecureLink.overhead
                    effects.append(.linkUp(LinkInfo(id: link, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey, peerRole: peer.role,
                                                     mtu: mtu, cost: c.info.cost, kind: c.info.kind, remote: c.info.remote)))
                case .frame(let inner):
                    switch FrameType(rawValue: inner[0]) {
                    case .ping:
                        if let pong = try? c.link.seal(TLVRecord(.pong, value: Array(inner.dropFirst(TLVRecord.headerLength))).encoded) {
                            effects.append(.send(.carrierSend(link: link, record: pong)))
                        }
                    case .pong, .linkIdentity:
                        break
                    case .linkClose:
                        carriers[link] = nil
                        return effects + [.send(.carrierClose(link: link, reason: "the peer closed the link")), .linkDown(link, "the peer closed the link")]
                    default:
                        effects.append(.frame(inner, link))
                    }
                case .refused(let why):
                    // A refusal of the peer's identity went out as the output before this one.
                    return effects + end("handshake refused: \(why)")
                }
            }
            return effects
        }
    }

    /// The program reported the connection gone. Returns whether its link was up.
    func down(_ link: LinkID) -> Bool {
        lock.withLock { carriers.removeValue(forKey: link)?.link.isEstablished ?? false }
    }

    /// Seals a frame for carrier `link`: the record to hand the program.
    func seal(_ frame: [UInt8], on link: LinkID) throws -> PluginMessage {
        try lock.withLock {
            guard let c = carriers[link], c.link.isEstablished else { throw TransportError.failed("carrier \(link) has no link up") }
            return .carrierSend(link: link, record: try c.link.seal(frame))
        }
    }

    /// Ends handshakes older than ``handshakeTimeout`` (called on every new carrier and every heartbeat).
    func expire() -> [Effect] { lock.withLock { sweep() } }

    private func sweep() -> [Effect] {
        let now = DispatchTime.now().uptimeNanoseconds
        let stale = carriers.values.filter { !$0.link.isEstablished && now - $0.opened > Self.handshakeTimeout }
        for c in stale { carriers[c.info.id] = nil }
        refused += stale.count
        return stale.map { .send(.carrierClose(link: $0.info.id, reason: "handshake unfinished after \(Self.handshakeTimeout / 1_000_000_000) s")) }
    }

    /// Forgets every carrier (the process ended).
    func reset() { lock.withLock { carriers.removeAll() } }
}
