import Foundation
import Synchronization
import XCTest
import YaokCrypto
import YaokEndpoint
import YaokPluginKit
import YaokStore
import YaokWire
import YaokProcess
import YaokTesting

/// The endpoint's group commit (HubSession): a burst of frames shares one durable commit,
/// and nothing that depends on it (custody answers, receipts, events) leaves before it.
///
/// A fake hub (the UDP engine in the hub role) drives the session and, at the moment each
/// answer arrives, looks at the endpoint's file through a second connection, which sees only
/// committed rows.
final class EndpointGroupCommitTests: XCTestCase {
    /// A hub as far as the link goes: takes one endpoint link, records what comes in.
    final class FakeHub: Sendable {
        let engine: UDPLinkEngine
        private let inbox = Inbox()
        var lock: NSLock { inbox.lock }
        /// The endpoint's link (under `lock`).
        var link: LinkID? {
            get { inbox.link }
            set { inbox.link = newValue }
        }
        /// Runs on the engine's thread for every frame, before it is recorded.
        var inspect: (@Sendable (TLVRecord) -> Void)? {
            get { inbox.inspect }
            set { inbox.inspect = newValue }
        }
        var frames: [TLVRecord] { inbox.frames }

        /// What the engine reports: the link and every frame.
        // @unchecked: `link`, `frames` and `inspector` only under `lock` (tests too).
        final class Inbox: LinkEvents, @unchecked Sendable {
            let lock = NSLock()
            var link: LinkID?
            private var inspector: (@Sendable (TLVRecord) -> Void)?
            /// Set by tests while the engine runs: read and written under `lock`.
            var inspect: (@Sendable (TLVRecord) -> Void)? {
                get { lock.withLock { inspector } }
                set { lock.withLock { inspector = newValue } }
            }
            var frames: [TLVRecord] = []

            func linkUp(_ info: LinkInfo) { lock.withLock { link = info.id } }
            func linkDown(_ id: LinkID, reason: String?) {}
            func frameReceived(_ bytes: [UInt8], on link: LinkID) {
                guard let r = try? TLVRecord(parsing: bytes) else { return }
                inspect?(r)
                lock.withLock { frames.append(r) }
            }
            func statusChanged() {}
        }

        init() throws {
            engine = UDPLinkEngine(identity: Identity.generate(), role: .hub, listen: IPEndpoint(host: "127.0.0.1", port: 0),
                                   staticPeers: [], clock: Endpoint.wallClock, events: inbox)
            try engine.start()
        }

        var address: IPEndpoint { engine.boundAddress! }

        func send(_ record: TLVRecord) throws {
            try engine.send(record.encoded, to: XCTUnwrap(lock.withLock { link }))
        }

        func frames(_ type: FrameType) -> [TLVRecord] { lock.withLock { frames.filter { $0.type == type.rawValue } } }
        func frames(_ type: RoutingFrameType) -> [TLVRecord] { lock.withLock { frames.filter { $0.type == type.rawValue } } }

        /// Bundle IDs named by custody acks received so far.
        var acked: Set<[UInt8]> { Set(frames(.custodyAck).compactMap { try? CustodyAck(parsing: $0.value).bundleID }) }
        var refused: Set<[UInt8]> { Set(frames(.custodyRefused).compactMap { try? CustodyRefusal(parsing: $0.value).bundleID }) }

        deinit { engine.stop() }
    }

    /// A second connection on an endpoint's file: sees committed rows only.
    final class Observer: Sendable {
        let db: SQLCipherDatabase
        init(home: String) throws {
            db = try SQLCipherDatabase(path: home + "/endpoint.db", key: try DatabaseKey.load(keyFile: home + "/store.key"))
        }
        func inboxHas(_ bundleID: [UInt8]) -> Bool {
            ((try? db.scalar("SELECT count(*) FROM inbox_messages WHERE bundle_id = ?", [.blob(bundleID)]))?.int64Value ?? 0) == 1
        }
        func outboxState(_ messageID: [UInt8]) -> String? {
            (try? db.scalar("SELECT state FROM outbox WHERE message_id = ?", [.blob(messageID)]))?.textValue
        }
        func inboxCount() -> Int { Int(((try? db.scalar("SELECT count(*) FROM inbox_messages"))?.int64Value) ?? -1) }
    }

    final class Violations: Sendable {
        private let list = Mutex<[String]>([])
        func add(_ s: String) { list.withLock { $0.append(s) } }
        var all: [String] { list.withLock { $0 } }
    }

    var dir: String!
    var alice: Endpoint!
    var bob: Endpoint!

    override func setUpWithError() throws {
        dir = try TestSupport.temporaryDirectory(self)
        (alice, bob, _) = try TestSupport.aliceAndBob(in: dir)
    }

    func bundles(_ n: Int, prefix: String = "m") throws -> [YaokWire.Bundle] {
        try (0..<n).map { i in
            YaokWire.Bundle(envelope: try Envelope.sealMessage(plaintext: Array("\(prefix) \(i)".utf8), from: alice.identity,
                                                               toSigningKey: bob.identity.signingKey, recipientKXKey: bob.identity.kxKey,
                                                               createdMs: Endpoint.wallClock()))
        }
    }

    /// Bob attached to the fake hub; every receipt bundle Bob sends is acknowledged by the hub.
    func attachBob(_ hub: FakeHub, onEvent: @escaping @Sendable (HubSession.Event) -> Void = { _ in }) throws -> HubSession {
        let session = HubSession(endpoint: bob, hub: hub.address, onEvent: onEvent)
        try session.start()
        try Wait.until(timeout: 10, "bob linked to the fake hub") { hub.lock.withLock { hub.link != nil } }
        return session
    }

    /// A burst of bundles: each custody ack leaves only once its message is committed, each
    /// receipt only once it is committed in the outbox, and the burst shares few commits.
    func testCustodyAcksAndReceiptsLeaveOnlyAfterTheirCommit() throws {
        let hub = try FakeHub()
        let observer = try Observer(home: dir + "/bob")
        let violations = Violations()
        let incoming = try bundles(300)
        let byReceipt = Violations()
        hub.inspect = { r in
            switch HostFrameType(r.type) {
            case .routing(.custodyAck):
                guard let id = try? CustodyAck(parsing: r.value).bundleID else { return }
                if !observer.inboxHas(id) { violations.add("custody ack for \(Hex.encode(id.prefix(4))) before its message was committed") }
            case .link(.bundle):
                guard let e = try? YaokWire.Bundle(parsing: r.value).envelope else { return }
                if observer.outboxState(e.messageID) == nil { violations.add("receipt \(Hex.encode(e.messageID.prefix(4))) sent before it was committed") }
                byReceipt.add(Hex.encode(e.refID))
                try? hub.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
            default: break
            }
        }
        let events = Violations()
        let session = try attachBob(hub) { event in
            // An event reports a change already durable.
            if case .incoming(.message(let m)) = event,
               !observer.inboxHas(BundleID.of(senderUserID: m.senderUserID, messageID: m.messageID)) {
                events.add("message event before its commit")
            }
        }
        defer { session.stop() }
        for b in incoming { try hub.send(TLVRecord(.bundle, value: b.encoded)) }
        try Wait.until(timeout: 30, "all 300 acknowledged") { hub.acked.count == incoming.count }
        try Wait.until(timeout: 30, "all 300 receipts sent") { Set(byReceipt.all).count == incoming.count }
        XCTAssertEqual(violations.all, [])
        XCTAssertEqual(events.all, [])
        XCTAssertEqual(hub.acked, Set(incoming.map(\.envelope.bundleID)))
        XCTAssertEqual(observer.inboxCount(), incoming.count)
        let commits = session.groupCommits
        XCTAssertLessThan(commits.groups, incoming.count, "a burst shares commits: \(commits)")
        print("300 bundles in a burst: \(commits.groups) group commits covering \(commits.frames) frames")
        // The receipts were taken by the hub: handed over, durably.
        try Wait.until(timeout: 10, "receipts handed over") {
            try bob.store.outbox(states: [.pending]).isEmpty
        }
    }

    /// A hub that announced it reads `custodyAcks` gets the acks of a commit as one list, each
    /// list only after its commit; the session announces too, and takes the hub's lists.
    func testAHubThatReadsListsGetsOneListPerCommitAndItsListsAreTaken() throws {
        let hub = try FakeHub()
        let observer = try Observer(home: dir + "/bob")
        let violations = Violations()
        let incoming = try bundles(300)
        let receipts = Violations()
        hub.inspect = { r in
            switch HostFrameType(r.type) {
            case .routing(.custodyAck):
                // A commit that covered one bundle answers it alone.
                if let id = try? CustodyAck(parsing: r.value).bundleID, !observer.inboxHas(id) {
                    violations.add("custody ack for \(Hex.encode(id.prefix(4))) before its message was committed")
                }
            case .routing(.custodyAcks):
                for id in (try? BundleIDList(parsing: r.value))?.bundleIDs ?? [] where !observer.inboxHas(id) {
                    violations.add("listed ack for \(Hex.encode(id.prefix(4))) before its message was committed")
                }
            case .link(.bundle):
                if let e = try? YaokWire.Bundle(parsing: r.value).envelope { receipts.add(Hex.encode(e.bundleID)) }
            default: break
            }
        }
        let session = try attachBob(hub)
        defer { session.stop() }
        try Wait.until(timeout: 10, "the session's announcement") {
            hub.frames(.custodyAcks).first?.value == CustodyAcks.announcement.value
        }
        // The session reads one link's frames in order: the announcement before the burst.
        try hub.send(CustodyAcks.announcement)
        for b in incoming { try hub.send(TLVRecord(.bundle, value: b.encoded)) }
        func acknowledged() -> Set<[UInt8]> {
            hub.acked.union(hub.frames(.custodyAcks).listedBundleIDs)
        }
        try Wait.until(timeout: 30, "all 300 acknowledged") { acknowledged().count == incoming.count }
        XCTAssertEqual(acknowledged(), Set(incoming.map(\.envelope.bundleID)))
        XCTAssertEqual(violations.all, [])
        let lists = hub.frames(.custodyAcks).count - 1, singles = hub.frames(.custodyAck).count
        XCTAssertGreaterThan(lists, 0)
        XCTAssertLessThan(lists + singles, incoming.count / 4, "300 acks in \(lists) lists and \(singles) single acks")
        print("300 bundles acknowledged to a hub that reads lists: \(lists) lists, \(singles) single acks")

        // The hub takes the receipts with lists of its own: whatever arrived since its last list
        // (the session sends at most its window before it hears back).
        var taken = Set<String>()
        try Wait.until(timeout: 30, "all 300 receipts sent and taken") {
            let fresh = Set(receipts.all).subtracting(taken)
            if !fresh.isEmpty {
                let ids = try fresh.map { try XCTUnwrap(Hex.decode($0)) }
                try hub.send(TLVRecord(.custodyAcks, value: try BundleIDList(bundleIDs: ids).encoded))
                taken.formUnion(fresh)
            }
            return taken.count == incoming.count
        }
        try Wait.until(timeout: 10, "receipts handed over") {
            try bob.store.outbox(states: [.pending]).isEmpty
        }
    }

    /// A group whose commit fails (one message's store change fails half-way, poisoning the
    /// group) is rolled back whole and none of its answers leave; the rest are unaffected, and
    /// when the hub sends again everything is stored exactly once.
    func testAFailedGroupCommitAcknowledgesNothingInItAndLosesNothing() throws {
        let hub = try FakeHub()
        let observer = try Observer(home: dir + "/bob")
        let violations = Violations()
        let incoming = try bundles(120)
        let trapped = incoming[60].envelope.bundleID
        // One bundle's store change fails after its inbox row was written (RAISE(FAIL) keeps
        // what the statement did so far): it throws half-way, as a full disk or an I/O error
        // would.
        try observer.db.execute("""
            CREATE TRIGGER fail_one AFTER INSERT ON inbox_messages WHEN NEW.bundle_id = x'\(Hex.encode(trapped))'
            BEGIN SELECT RAISE(FAIL, 'injected failure'); END
            """)
        hub.inspect = { r in
            switch HostFrameType(r.type) {
            case .routing(.custodyAck):
                guard let id = try? CustodyAck(parsing: r.value).bundleID else { return }
                if !observer.inboxHas(id) { violations.add("custody ack for \(Hex.encode(id.prefix(4))) not committed") }
            case .routing(.custodyRefused):
                guard let id = try? CustodyRefusal(parsing: r.value).bundleID else { return }
                violations.add("refusal for \(Hex.encode(id.prefix(4))) left although its group was rolled back")
            case .link(.bundle):
                guard let e = try? YaokWire.Bundle(parsing: r.value).envelope else { return }
                try? hub.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
            default: break
            }
        }
        let session = try attachBob(hub)
        defer { session.stop() }
        for b in incoming { try hub.send(TLVRecord(.bundle, value: b.encoded)) }
        // Everything outside the failed group is answered; let the session settle.
        var last = -1
        try Wait.until(timeout: 30, "answers settle") {
            let n = hub.acked.count
            defer { last = n }
            if n != last || n == 0 { usleep(500_000); return false }
            return true
        }
        XCTAssertEqual(violations.all, [])
        XCTAssertFalse(hub.acked.contains(trapped), "the failed message was acknowledged")
        XCTAssertFalse(observer.inboxHas(trapped), "the failed message was half-stored")
        let unanswered = Set(incoming.map(\.envelope.bundleID)).subtracting(hub.acked)
        XCTAssertTrue(unanswered.contains(trapped))
        // Rolled back whole: nothing unanswered is stored.
        for id in unanswered { XCTAssertFalse(observer.inboxHas(id), "a message of the failed group is stored") }
        XCTAssertEqual(observer.inboxCount(), incoming.count - unanswered.count)

        // The hub keeps custody and sends everything again once the fault is gone.
        try observer.db.execute("DROP TRIGGER fail_one")
        for b in incoming { try hub.send(TLVRecord(.bundle, value: b.encoded)) }
        try Wait.until(timeout: 30, "all acknowledged") { hub.acked.count == incoming.count }
        XCTAssertEqual(violations.all, [])
        let inbox = try bob.store.inbox()
        XCTAssertEqual(inbox.count, incoming.count, "each message stored once")
        XCTAssertEqual(Set(inbox.map(\.text)), Set((0..<incoming.count).map { "m \($0)" }))
    }

    /// Alice's side: custody acks from the hub move her outbox forward in groups, each
    /// "handed over" event after its commit, and the window keeps the outbox flowing.
    func testCustodyAcksFromTheHubAreCommittedBeforeTheyAreReported() throws {
        let hub = try FakeHub()
        let observer = try Observer(home: dir + "/alice")
        let bobContact = try XCTUnwrap(try alice.store.contacts().first)
        let sent = try alice.compose(to: bobContact, texts: (0..<200).map { "out \($0)" })
        hub.inspect = { r in
            guard FrameType(rawValue: r.type) == .bundle, let e = try? YaokWire.Bundle(parsing: r.value).envelope else { return }
            try? hub.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
        }
        let violations = Violations()
        let handed = Violations()
        let session = HubSession(endpoint: alice, hub: hub.address) { event in
            guard case .handedOver(let id) = event else { return }
            if observer.outboxState(id) != "handed_over" { violations.add("handed-over event before its commit") }
            handed.add(Hex.encode(id))
        }
        session.trust = HubTrust(anyHub: true)   // final custody (an untrusted hub's is `.carried`)
        try session.start()
        defer { session.stop() }
        try Wait.until(timeout: 30, "all 200 handed over") { Set(handed.all).count == sent.count }
        XCTAssertEqual(violations.all, [])
        XCTAssertTrue(try alice.store.outbox(states: [.pending]).isEmpty)
        XCTAssertTrue(sent.allSatisfy { observer.outboxState($0.messageID) == "handed_over" })
    }

    /// A caller on another thread never joins the session's open group: what it writes is
    /// durable when the call returns (a second connection sees it at once).
    func testAnotherThreadsWriteDuringASessionIsDurableWhenItReturns() throws {
        let hub = try FakeHub()
        let observer = try Observer(home: dir + "/bob")
        hub.inspect = { r in
            guard FrameType(rawValue: r.type) == .bundle, let e = try? YaokWire.Bundle(parsing: r.value).envelope else { return }
            try? hub.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
        }
        let session = try attachBob(hub)
        defer { session.stop() }
        let incoming = try bundles(400)
        let sender = Thread { for b in incoming { try? hub.send(TLVRecord(.bundle, value: b.encoded)) } }
        sender.start()
        var notDurable = 0
        for i in 0..<40 {
            try bob.store.setProfile("note", "\(i)")
            if (try? observer.db.scalar("SELECT value FROM profile WHERE key = 'note'"))?.textValue != "\(i)" { notDurable += 1 }
        }
        XCTAssertEqual(notDurable, 0, "a write from another thread returned before it was committed")
        try Wait.until(timeout: 30, "all acknowledged") { hub.acked.count == incoming.count }
    }

    /// `advance` is one UPDATE whose WHERE names the states it may move from: still never backwards.
    func testAdvanceMovesForwardOnly() throws {
        let c = try XCTUnwrap(try alice.store.contacts().first)
        let item = try alice.compose(to: c, text: "x")
        func state() throws -> OutboxItem.State? { try alice.store.outboxItem(item.messageID)?.state }
        try alice.store.advance(item.messageID, to: .delivered)
        XCTAssertEqual(try state(), .delivered)
        try alice.store.advance(item.messageID, to: .handedOver)
        XCTAssertEqual(try state(), .delivered, "a late custody ack does not undo delivery")
        try alice.store.advance(item.messageID, to: .pending)
        XCTAssertEqual(try state(), .delivered)
        try alice.store.advance(item.messageID, to: .read)
        XCTAssertEqual(try state(), .read)
        try alice.store.advance(Random.uuidV4(), to: .read)
        XCTAssertEqual(try alice.store.outbox().count, 1)
    }

    /// `yaok listen` killed (SIGKILL) while its groups are held open before their commits
    /// (`YAOK_TEST_ENDPOINT_COMMIT_DELAY_MS`): every bundle the hub saw acknowledged is in the
    /// store, and after a restart and a resend each message is stored exactly once.
    func testKilledInsideTheCommitWindowAcknowledgedOnlyWhatIsStored() throws {
        let exe = try TestSupport.product("yaok")
        let bobHome = dir + "/bob"
        bob.close()
        let hub = try FakeHub()
        let observer = try Observer(home: bobHome)
        let violations = Violations()
        hub.inspect = { r in
            switch HostFrameType(r.type) {
            case .routing(.custodyAck):
                guard let id = try? CustodyAck(parsing: r.value).bundleID else { return }
                if !observer.inboxHas(id) { violations.add("custody ack for \(Hex.encode(id.prefix(4))) not committed") }
            case .link(.bundle):
                guard let e = try? YaokWire.Bundle(parsing: r.value).envelope else { return }
                try? hub.send(TLVRecord(.custodyAck, value: CustodyAck(bundleID: e.bundleID).encoded))
            default: break
            }
        }
        let incoming = try bundles(40)
        func listen(delayMs: Int?) throws -> Process {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: exe)
            p.arguments = ["listen", "--home", bobHome, "--hub", "udp://\(hub.address)", "--json", "--timeout", "60"]
            var env = ProcessInfo.processInfo.environment
            if let delayMs { env["YAOK_TEST_ENDPOINT_COMMIT_DELAY_MS"] = "\(delayMs)" }
            p.environment = env
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            return p
        }
        hub.lock.withLock { hub.link = nil }
        let slow = try listen(delayMs: 400)
        try Wait.until(timeout: 20, "yaok linked") { hub.lock.withLock { hub.link != nil } }
        // Bundles in small bursts: several groups, each held 400 ms before its commit.
        for (i, b) in incoming.enumerated() {
            try hub.send(TLVRecord(.bundle, value: b.encoded))
            if i % 8 == 7 { usleep(150_000) }
        }
        try Wait.until(timeout: 20, "some acknowledged") { !hub.acked.isEmpty }
        usleep(200_000)
        kill(slow.processIdentifier, SIGKILL)
        slow.waitUntilExit()
        let ackedBeforeKill = hub.acked
        XCTAssertEqual(violations.all, [])
        for id in ackedBeforeKill { XCTAssertTrue(observer.inboxHas(id)) }
        XCTAssertLessThan(ackedBeforeKill.count, incoming.count, "killed before everything was acknowledged")

        // Restarted: the hub sends everything it still holds (here: all of it) again.
        hub.lock.withLock { hub.link = nil }
        let again = try listen(delayMs: nil)
        defer { again.terminateWithin(seconds: 10) }
        try Wait.until(timeout: 20, "yaok linked again") { hub.lock.withLock { hub.link != nil } }
        for b in incoming { try hub.send(TLVRecord(.bundle, value: b.encoded)) }
        try Wait.until(timeout: 30, "all acknowledged") { hub.acked.count == incoming.count }
        XCTAssertEqual(violations.all, [])
        XCTAssertEqual(observer.inboxCount(), incoming.count, "each message stored once")
        let texts = try observer.db.query("SELECT text FROM inbox_messages").compactMap { $0.first?.textValue }
        XCTAssertEqual(Set(texts), Set((0..<incoming.count).map { "m \($0)" }))
        XCTAssertEqual(texts.count, Set(texts).count)
    }
}
