import Foundation
import Logging
import Synchronization
import XCTest
import YaokCrypto
import YaokPluginKit
import YaokStore
import YaokWire
@testable import YaokHubCore
@testable import YaokRouting

/// A transport in memory: it records every frame the router sends, per link, and tests report
/// links and frames to the router as a plugin would. Links need no handshake here: the
/// transport host checks link proofs before the router hears of a link (LinkProofLedgerTests).
final class MemoryTransport: RouterTransport, @unchecked Sendable {
    let name: String
    let peerRoles: Set<PeerRole>
    let pinnedRelayKey: [UInt8]?
    /// Guards `sent` and `outbox`.
    private let lock = NSLock()
    private var sent: [LinkID: [TLVRecord]] = [:]
    /// Frames sent and not yet carried to the far end (``RouterPair``).
    private var outbox: [LinkID: [[UInt8]]] = [:]

    init(name: String = "mem", peerRoles: Set<PeerRole> = [.endpoint, .hub], pinnedRelayKey: [UInt8]? = nil) {
        self.name = name
        self.peerRoles = peerRoles
        self.pinnedRelayKey = pinnedRelayKey
    }

    /// Every frame is written at once: nothing waits for ``flushHeldSends()``.
    func send(_ frame: [UInt8], to link: LinkID, held: Bool) throws -> Bool {
        let record = try TLVRecord(parsing: frame)
        lock.withLock {
            sent[link, default: []].append(record)
            outbox[link, default: []].append(frame)
        }
        return false
    }

    /// The frames sent on `link` since the last call, for a test that carries them to the far end.
    func takeUncarried(on link: LinkID) -> [[UInt8]] { lock.withLock { outbox.removeValue(forKey: link) ?? [] } }

    func flushHeldSends() {}

    /// What the router sent on `link`, in order.
    func frames(on link: LinkID) -> [TLVRecord] { lock.withLock { sent[link] ?? [] } }
}

/// What a harness's router logged (info and above), kept in memory, not printed.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    /// Every message so far, one per line.
    var text: String { lines.withLock { $0.joined(separator: "\n") } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }

    /// The handler a `Logger` writes into this capture through.
    struct Handler: LogHandler {
        let capture: LogCapture
        var logLevel: Logger.Level = .info
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { capture.append("\(event.level) \(event.message)") }
    }
}

/// The monotonic clock a harness's router runs on: it moves only when the test says.
final class ManualClock: Sendable {
    private let ns = Mutex<UInt64>(1_000_000_000)
    var now: UInt64 { ns.withLock { $0 } }
    func advance(ms: Int64) { ns.withLock { $0 += UInt64(ms) * 1_000_000 } }
}

/// A ``Router`` on a real store (a SQLCipher file in a temporary directory) with an in-memory
/// transport and no timer: routing logic tested in milliseconds, no hub process. Every call
/// returns once the router has done the work it caused and committed it (``Router/settle()``).
final class RouterHarness {
    /// The custody wait a harness's router starts every link with (``Router/Settings``' default).
    static let defaultCustodyTimeoutMs = Router.Settings().custodyTimeoutMs
    let router: Router
    let store: BundleStore
    let transport: MemoryTransport
    /// The hub's own identity.
    let hub: Identity
    let clock = ManualClock()
    /// What the router logged (info and above), kept in memory, not printed.
    let log: LogCapture
    private var nextLink: LinkID = 1

    init(_ test: XCTestCase, settings: Router.Settings = .init(), policy: RoutingPolicy = EpidemicPolicy(),
         transport: MemoryTransport = MemoryTransport(), hub: Identity = .generate()) throws {
        self.hub = hub
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("yaok-router-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        test.addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        store = try BundleStore(database: try SQLCipherDatabase(path: dir + "/store.db", key: Array(repeating: 7, count: 32)))
        let clock = self.clock
        let time = HubTime(startHubMs: WallClock.nowMilliseconds(), trust: .always, systemSynchronised: { true }, monotonicNs: { clock.now })
        let log = LogCapture()
        self.log = log
        var logger = Logger(label: "router-harness") { _ in LogCapture.Handler(capture: log) }
        logger.logLevel = .info
        self.transport = transport
        router = Router(hubIdentity: hub, store: store, settings: settings, policy: policy, logger: logger, time: time)
        router.start(ticking: false)
        test.addTeardownBlock { [router] in router.stop() }
    }

    /// A peer's link comes up on the transport.
    /// `mtu` below 60,003 bytes (BLE's frames) makes hub links list offers rather than reconcile.
    @discardableResult
    func attach(_ peer: Identity, as role: PeerRole, mtu: Int = 10_500) -> LinkID {
        let id = nextLink
        nextLink += 1
        router.linkUp(LinkInfo(id: id, peerSigningKey: peer.signingKey, peerKXKey: peer.kxKey, peerRole: role,
                               mtu: mtu, cost: 1, kind: "mem", remote: "mem:\(id)"), on: transport)
        router.settle()
        return id
    }

    func detach(_ link: LinkID) {
        router.linkDown(link, reason: "test", on: transport)
        router.settle()
    }

    /// A frame from the peer on `link`.
    func receive(_ record: TLVRecord, on link: LinkID) {
        router.frameReceived(record.encoded, link: link, on: transport)
        router.settle()
    }

    /// A bundle from the peer on `link` (as its sender hands it over: hop count 0).
    func receive(_ envelope: Envelope, on link: LinkID) {
        arrive(envelope, on: link)
        router.settle()
    }

    /// Bundles from the peer on `link` as one burst: every frame is in before the router runs.
    func receive(_ envelopes: [Envelope], on link: LinkID) {
        for e in envelopes { arrive(e, on: link) }
        router.settle()
    }

    /// A bundle frame reaches the router, which has not necessarily handled it on return.
    func arrive(_ envelope: Envelope, on link: LinkID) {
        router.frameReceived(TLVRecord(.bundle, value: YaokWire.Bundle(envelope: envelope).encoded).encoded, link: link, on: transport)
    }

    func tick() {
        router.tickNow()
        router.settle()
    }

    /// Time passes on a hub that runs: a tick each second, as its timer does.
    func run(seconds: Int) {
        for _ in 0..<seconds {
            clock.advance(ms: 1_000)
            tick()
        }
    }

    func frames(_ type: FrameType, on link: LinkID) -> [TLVRecord] {
        transport.frames(on: link).filter { $0.type == type.rawValue }
    }
    func frames(_ type: RoutingFrameType, on link: LinkID) -> [TLVRecord] {
        transport.frames(on: link).filter { $0.type == type.rawValue }
    }

    /// Bundle IDs offered on `link` (summary frames).
    func offered(on link: LinkID) -> [[UInt8]] { frames(.offer, on: link).listedBundleIDs }

    /// Envelopes sent on `link` in bundle frames.
    func envelopes(on link: LinkID) -> [Envelope] { transport.frames(on: link).envelopes }

    /// Every bundle ID acknowledged on `link`, by single acks and by lists.
    func acknowledged(on link: LinkID) -> Set<[UInt8]> { transport.frames(on: link).acknowledgedBundleIDs }

    /// The store's row for a bundle.
    func stored(_ id: [UInt8]) throws -> StoredBundle? { try store.bundle(id) }
}

/// What a peer reads out of the frames it was sent: the same for a ``RawPeer`` on a real hub
/// and a link of the in-memory ``MemoryTransport``.
extension Sequence where Element == TLVRecord {
    /// The bundle IDs these records list (`summary`, `request`, `held`, `custodyAcks`), in order.
    var listedBundleIDs: [[UInt8]] { flatMap { (try? BundleIDList(parsing: $0.value))?.bundleIDs ?? [] } }

    /// Every bundle ID these frames acknowledge, by single acks and by lists.
    var acknowledgedBundleIDs: Set<[UInt8]> {
        Set(filter { $0.type == RoutingFrameType.custodyAck.rawValue }.map(\.value))
            .union(filter { $0.type == RoutingFrameType.custodyAcks.rawValue }.listedBundleIDs)
    }

    /// The envelopes of the bundle frames, in order.
    var envelopes: [Envelope] {
        filter { $0.type == FrameType.bundle.rawValue }.compactMap { try? YaokWire.Bundle(parsing: $0.value).envelope }
    }
}

extension XCTestCase {
    /// A message from `sender` to `recipient`, sealed as a phone seals it.
    func seal(_ text: String, from sender: Identity, to recipient: Identity, ttl: Int64 = 3_600_000,
              messageID: [UInt8]? = nil, size: Int? = nil) throws -> Envelope {
        let body = size.map { [UInt8](repeating: 0x4A, count: $0) } ?? Array(text.utf8)
        return try Envelope.sealMessage(plaintext: body, from: sender, toSigningKey: recipient.signingKey, recipientKXKey: recipient.kxKey,
                                        createdMs: WallClock.nowMilliseconds(), ttlMs: ttl, messageID: messageID)
    }
}

/// Two in-memory routers linked to each other as hubs: what one sends on its link to the other
/// the test carries to the other, as a transport would, until neither has more to say.
final class RouterPair {
    let a: RouterHarness, b: RouterHarness
    /// A's link to B, and B's link to A, once ``connect(mtu:)`` ran.
    private(set) var linkA: LinkID = 0, linkB: LinkID = 0
    /// Frames carried each way so far.
    private(set) var carriedAToB = 0, carriedBToA = 0

    /// Two hubs that trust each other by name (`hub_trust: list`). A has the lower user ID, so
    /// A starts every reconciliation (the lower ID initiates); `testingA`/`testingB` make either
    /// behave like an older hub.
    init(_ test: XCTestCase, testingA: Router.Testing = .init(), testingB: Router.Testing = .init()) throws {
        var keys = [Identity.generate(), Identity.generate()]
        keys.sort { $0.userID.lexicographicallyPrecedes($1.userID) }
        func settings(trusting other: Identity, _ testing: Router.Testing) -> Router.Settings {
            var s = Router.Settings(senderEnvelopesPerMinute: 100_000, trust: HubTrustSettings(mode: .list, trustedHubs: [other.signingKey]))
            s.testing = testing
            return s
        }
        a = try RouterHarness(test, settings: settings(trusting: keys[1], testingA), hub: keys[0])
        b = try RouterHarness(test, settings: settings(trusting: keys[0], testingB), hub: keys[1])
    }

    /// The two hubs meet. `mtu` below 60,003 bytes makes them list offers rather than reconcile.
    func connect(mtu: Int = 65_000) {
        linkA = a.attach(b.hub, as: .hub, mtu: mtu)
        linkB = b.attach(a.hub, as: .hub, mtu: mtu)
        settle()
    }

    /// The two part (the link is down at both ends).
    func disconnect() {
        a.detach(linkA)
        b.detach(linkB)
        _ = a.transport.takeUncarried(on: linkA)
        _ = b.transport.takeUncarried(on: linkB)
    }

    /// Two routers that answer each other for ever are a bug, not a wait.
    static let maxSettleRounds = 10_000

    /// Carries frames both ways until neither router sends more.
    func settle() {
        for _ in 0..<Self.maxSettleRounds {
            a.router.settle()
            b.router.settle()
            let toB = a.transport.takeUncarried(on: linkA), toA = b.transport.takeUncarried(on: linkB)
            if toB.isEmpty && toA.isEmpty { return }
            for frame in toB { b.router.frameReceived(frame, link: linkB, on: b.transport) }
            for frame in toA { a.router.frameReceived(frame, link: linkA, on: a.transport) }
            carriedAToB += toB.count
            carriedBToA += toA.count
        }
        XCTFail("the two routers still answered each other after \(Self.maxSettleRounds) rounds")
    }

    /// Time passes on both hubs: a tick each second, and what the ticks send is carried.
    func run(seconds: Int) {
        for _ in 0..<seconds {
            a.clock.advance(ms: 1_000)
            b.clock.advance(ms: 1_000)
            a.router.tickNow()
            b.router.tickNow()
            settle()
        }
    }

    /// A phone hands each envelope to `hub` (in bursts, as its window would).
    func load(_ envelopes: [Envelope], into hub: RouterHarness, from phone: Identity) {
        let link = hub.attach(phone, as: .endpoint)
        hub.receive(envelopes, on: link)
        hub.detach(link)
    }
}

extension XCTestCase {
    /// Two current hubs, each holding `unique` bundles the other lacks besides what they share,
    /// reconciled once and listed only the difference: what RouterReconcileTests checks in memory
    /// and ReconcileTests on two real hubs.
    func assertReconciledOnlyTheDifference(_ a: Router.Counters, _ b: Router.Counters, unique: Int,
                                           file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(a.reconciled, 1, file: file, line: line)
        XCTAssertEqual(b.reconciled, 1, file: file, line: line)
        XCTAssertEqual(a.reconcileFallbacks + b.reconcileFallbacks, 0, file: file, line: line)
        XCTAssertEqual(a.reconciledVersion1 + b.reconciledVersion1, 0, "two current hubs use version 2", file: file, line: line)
        // The initiator found both directions, the responder learned what it must offer.
        XCTAssertEqual(a.reconcileDifferences + b.reconcileDifferences, 3 * unique, file: file, line: line)
        // Only the difference was listed: the shared IDs were never offered or answered `held`.
        XCTAssertEqual(a.idsOffered, unique, file: file, line: line)
        XCTAssertEqual(b.idsOffered, unique, file: file, line: line)
        XCTAssertEqual(a.heldSent + b.heldSent, 0, file: file, line: line)
        XCTAssertEqual(a.duplicates + b.duplicates, 0, "no shared bundle crossed", file: file, line: line)
        XCTAssertEqual(a.reconcileBytesOut, b.reconcileBytesIn, file: file, line: line)
        XCTAssertEqual(b.reconcileBytesOut, a.reconcileBytesIn, file: file, line: line)
    }
}
