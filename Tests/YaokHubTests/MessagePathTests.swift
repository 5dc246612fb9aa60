import HubTestSupport
import Foundation
import XCTest
@testable import YaokHubCore
import YaokTesting

/// `yaok` endpoints (real processes) exchanging messages through a real hub.
final class MessagePathTests: XCTestCase {
    struct Event { var fields: [String: Any] }

    /// Runs `yaok` with `--home` and returns its JSON lines.
    static func yaok(_ home: String, _ args: [String], timeout: TimeInterval = 60, expectSuccess: Bool = true) throws -> [[String: Any]] {
        let exe = try TestSupport.product("yaok")
        var full = [args[0]]
        if args.first == "contacts" { full = [args[0], args[1]] }
        full += ["--home", home] + args.dropFirst(full.count)
        let r = try TestSupport.run(exe, full, timeout: timeout)
        if expectSuccess { XCTAssertEqual(r.status, 0, "yaok \(full.joined(separator: " ")): \(r.output)") }
        return r.output.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    static func initPair(_ dir: String) throws -> (alice: String, bob: String) {
        let alice = dir + "/alice", bob = dir + "/bob"
        _ = try yaok(alice, ["init", "--name", "Alice"])
        _ = try yaok(bob, ["init", "--name", "Bob"])
        let exe = try TestSupport.product("yaok")
        let codeA = try TestSupport.run(exe, ["qr", "--home", alice]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let codeB = try TestSupport.run(exe, ["qr", "--home", bob]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(codeA.hasPrefix("yaok://contact?v=1&d="))
        _ = try yaok(alice, ["contacts", "add", codeB])
        _ = try yaok(bob, ["contacts", "add", codeA])
        return (alice, bob)
    }

    func startHub() throws -> (HubProcess, UInt16) {
        let plugins = try TestSupport.pluginDirectory(self)
        let dir = try TestSupport.temporaryDirectory(self)
        let port = HubProcessTests.freePort()
        let hub = try HubProcess(dir: dir, config: HubProcessTests.config(dir: dir, pluginDirs: [plugins], udpPort: port),
                                 executable: try TestSupport.product("yaok-hub"))
        try hub.waitReady()
        return (hub, port)
    }

    /// A hub that does not run for seconds at a time (overloaded, a slow VM; here stopped
    /// with SIGSTOP) must not push messages a phone has already taken again after each stall:
    /// the custody deadlines would pass while the phone's acknowledgements wait behind the
    /// hub's own timer. A late tick moves the deadlines on by the time lost, and each message
    /// goes to the phone once. (Without the move, this run pushes about 24 copies in 500.)
    func testAHubThatStallsPushesEachMessageOnce() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try Self.initPair(dir)
        let (hub, port) = try startHub()
        defer { hub.stop() }
        let url = "udp://127.0.0.1:\(port)"
        let count = 600
        let sent = try Self.yaok(alice, ["send", "Bob", "stalled {n}", "--repeat", "\(count)", "--hub", url, "--json", "--timeout", "60"])
        XCTAssertEqual(sent.filter { $0["event"] as? String == "handed_over" }.count, count)
        // Stopped most of the time: the pushes to Bob span several stalls.
        let stalls = StallingProcess(hub.process.processIdentifier, stoppedFor: 2, runningFor: 0.25)
        let got = try Self.yaok(bob, ["listen", "--hub", url, "--count", "\(count)", "--json", "--timeout", "120"])
        let stops = stalls.end()
        XCTAssertGreaterThan(stops, 0)
        XCTAssertEqual(Set(got.filter { $0["event"] as? String == "message" }.compactMap { $0["id"] as? String }).count, count)
        XCTAssertEqual(got.filter { $0["event"] as? String == "duplicate" }.count, 0, "copies pushed again within one session")
        // The first tick after the last stall counts it (ticks are 1 s apart).
        try Wait.until(timeout: 5, "the hub noticed it had not run (\(stops) stops)") { try hub.status().router.counters.stallsDeferred > 0 }
        XCTAssertEqual(try hub.status().router.counters.custodyTimeouts, 0)
    }

    /// A stalling hub, the sending side: on a hub that runs 5 ms in every 100 ms (stopped the rest:
    /// a slow, overloaded Pi; its plugin process runs on), a phone sending 400 messages while
    /// another takes them gets each acknowledged without having to send it again (its custody
    /// wait never runs out), and each is pushed to the recipient once per session. The timing,
    /// with the hub's custody-answer and commit times, is printed, not asserted.
    func testASlowedHubAcknowledgesAndPushesEachMessageOnce() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try Self.initPair(dir)
        let (hub, port) = try startHub()
        defer { hub.stop() }
        let url = "udp://127.0.0.1:\(port)"
        let count = 400
        let exe = try TestSupport.product("yaok")
        // Bob listens throughout.
        let listenOut = dir + "/listen.json"
        _ = FileManager.default.createFile(atPath: listenOut, contents: nil)
        let listen = Process()
        listen.executableURL = URL(fileURLWithPath: exe)
        listen.arguments = ["listen", "--home", bob, "--hub", url, "--count", "\(count)", "--json", "--timeout", "300"]
        listen.standardOutput = FileHandle(forWritingAtPath: listenOut)
        listen.standardError = FileHandle.nullDevice
        try listen.run()
        defer { if listen.isRunning { listen.terminate() } }
        try Wait.until(timeout: 10, "Bob attached") { try hub.status().router.links.contains { $0.role == "endpoint" } }

        let slowed = StallingProcess(hub.process.processIdentifier, stoppedFor: 0.095, runningFor: 0.005)
        let send = Process()
        send.executableURL = URL(fileURLWithPath: exe)
        send.arguments = ["send", "--home", alice, "Bob", "slowed {n}", "--repeat", "\(count)", "--hub", url, "--json", "--timeout", "300"]
        let pipe = Pipe()
        send.standardOutput = pipe
        send.standardError = FileHandle.nullDevice
        let started = DispatchTime.now().uptimeNanoseconds
        try send.run()
        // Each line's arrival time: the longest wait between two acknowledgements is the stall.
        var stamps: [(UInt64, [String: Any])] = []
        var buffered = Data()
        while true {
            let chunk = pipe.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            let t = DispatchTime.now().uptimeNanoseconds
            buffered.append(chunk)
            while let nl = buffered.firstIndex(of: 0x0A) {
                let line = buffered[buffered.startIndex..<nl]
                buffered = Data(buffered[(nl + 1)...])
                if let o = try? JSONSerialization.jsonObject(with: line) as? [String: Any] { stamps.append((t, o)) }
            }
        }
        send.waitUntilExit()
        let acks = stamps.filter { $0.1["event"] as? String == "handed_over" }
        XCTAssertEqual(Set(acks.compactMap { $0.1["id"] as? String }).count, count, "every message acknowledged")
        try Wait.until(timeout: 300, "Bob got them all") {
            ((try? String(contentsOfFile: listenOut, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.contains("\"message\"") }.count >= count
        }
        let stops = slowed.end()
        let status = try hub.status().router
        let gaps = zip(acks.dropFirst(), acks).map { Double($0.0 &- $1.0) / 1e6 }
        let total = Double((acks.last?.0 ?? started) &- started) / 1e9
        print(String(format: "SLOWED_HUB: %d messages acknowledged in %.1f s (%d stops); longest wait between acks %.0f ms; hub custody answer p50 %.1f ms p99 %.1f ms max %.1f ms; commits p50 %.1f ms max %.1f ms; copies resent by the phone %d; pushes timed out %d",
                     count, total, stops, gaps.max() ?? 0, Double(status.counters.custodyLatencyP50Us) / 1000, Double(status.counters.custodyLatencyP99Us) / 1000,
                     Double(status.counters.custodyLatencyMaxUs) / 1000, Double(status.counters.commitDurationP50Us) / 1000,
                     Double(status.counters.commitDurationMaxUs) / 1000, status.counters.duplicates, status.counters.custodyTimeouts))
        XCTAssertGreaterThan(status.counters.commitDurationMaxUs, 0, "commit times are measured")
        XCTAssertTrue(StatusFormatter.text(try hub.status()).contains("store commits"), "and shown")
        XCTAssertEqual(status.counters.duplicates, 0, "the phone never had to send a message twice")
        let got = ((try? String(contentsOfFile: listenOut, encoding: .utf8)) ?? "").split(separator: "\n")
        XCTAssertEqual(got.filter { $0.contains("\"duplicate\"") }.count, 0, "copies pushed again within one session")
        XCTAssertEqual(status.counters.custodyTimeouts, 0)
    }

    func testTwoEndpointsExchangeMessagesAndReceiptsThroughAHub() throws {
        let (hub, port) = try startHub()
        defer { hub.stop() }
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try Self.initPair(dir)
        let url = "udp://127.0.0.1:\(port)"

        // Alice hands a message to the hub while Bob is away.
        let sent = try Self.yaok(alice, ["send", "Bob", "meet at the well at noon", "--hub", url, "--json", "--timeout", "20"])
        let id = try XCTUnwrap(sent.first { $0["event"] as? String == "queued" }?["id"] as? String)
        XCTAssertTrue(sent.contains { $0["event"] as? String == "handed_over" && $0["id"] as? String == id }, "\(sent)")
        XCTAssertEqual(try hub.status().router.queue.queued + hub.status().router.queue.inFlight, 1)

        // Bob attaches later and gets it; his delivery receipt goes back through the hub.
        let got = try Self.yaok(bob, ["listen", "--hub", url, "--count", "1", "--json", "--timeout", "20"])
        let message = try XCTUnwrap(got.first { $0["event"] as? String == "message" })
        XCTAssertEqual(message["text"] as? String, "meet at the well at noon")
        XCTAssertEqual(message["from"] as? String, "Alice")
        XCTAssertEqual(message["id"] as? String, id)
        try Wait.until(timeout: 10, "message delivered at the hub") { try hub.status().router.queue.delivered >= 1 }
        // Bob's receipt revealed the proof Alice's message committed to: the hub took it by
        // that proof, without an Ed25519 verification (Docs/protocol.md, "Receipt proofs").
        XCTAssertEqual(try hub.status().router.counters.receiptsProven, 1)
        XCTAssertEqual(try hub.status().router.counters.receiptsUnverified, 0)

        // Alice attaches and learns it was delivered.
        let receipts = try Self.yaok(alice, ["listen", "--hub", url, "--json", "--timeout", "5"], expectSuccess: true)
        XCTAssertTrue(receipts.contains { $0["event"] as? String == "delivered" && $0["id"] as? String == id }, "\(receipts)")
        let outbox = try Self.yaok(alice, ["outbox", "--json"])
        XCTAssertEqual(outbox.first?["state"] as? String, "delivered")

        // A good run in words ends without a "disconnected" that reads like a failure.
        let words = try TestSupport.run(try TestSupport.product("yaok"), ["send", "--home", alice, "Bob", "again, in words", "--hub", url, "--timeout", "20"])
        XCTAssertEqual(words.status, 0, words.output)
        XCTAssertTrue(words.output.contains("hub took"), words.output)
        XCTAssertFalse(words.output.contains("disconnected"), words.output)
        // One name for one thing: the message's ID, and the bundle ID the hub's log uses for it.
        let queuedLine = try XCTUnwrap(words.output.split(separator: "\n").first { $0.hasPrefix("queued ") }, words.output)
        let bundleShort = try XCTUnwrap(queuedLine.range(of: "hubs log it as bundle ").map { String(queuedLine[$0.upperBound...].prefix(8)) })
        XCTAssertTrue(hub.log.contains("bundle \(bundleShort)"), "the hub's (debug) log names bundle \(bundleShort)")
        // Bob's own receipt going out is not "hub took …" in his words.
        let bobWords = try TestSupport.run(try TestSupport.product("yaok"), ["listen", "--home", bob, "--hub", url, "--count", "1", "--timeout", "20"])
        XCTAssertTrue(bobWords.output.contains("[Alice] again, in words"), bobWords.output)
        XCTAssertFalse(bobWords.output.contains("took"), bobWords.output)

        // Bob answers with --wait-delivered: it returns only when Alice's receipt is back.
        let aliceListening = DispatchQueue(label: "alice")
        let aliceDone = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var aliceGot: [[String: Any]] = []
        aliceListening.async {
            aliceGot = (try? Self.yaok(alice, ["listen", "--hub", url, "--count", "1", "--json", "--timeout", "30"])) ?? []
            aliceDone.signal()
        }
        let reply = try Self.yaok(bob, ["send", "Alice", "ok, noon", "--hub", url, "--json", "--wait-delivered", "--timeout", "30"])
        XCTAssertTrue(reply.contains { $0["event"] as? String == "delivered" }, "\(reply)")
        XCTAssertEqual(aliceDone.wait(timeout: .now() + 40), .success)
        XCTAssertTrue(aliceGot.contains { $0["text"] as? String == "ok, noon" }, "\(aliceGot)")

        // The hub never saw plaintext: its store file has none of it.
        let storeBytes = try Data(contentsOf: URL(fileURLWithPath: hub.dir + "/data/store.db"))
        XCTAssertNil(storeBytes.range(of: Data("meet at the well".utf8)))
        XCTAssertNil(storeBytes.range(of: Data("ok, noon".utf8)))
    }

    /// `yaok send --rate`: attached first, then composed and sent at the offered rate; it returns
    /// once the hub has taken custody of every one, each composed after the last was paced.
    func testAPacedSendComposesWhileAttachedAndWaitsForEveryCustodyAck() throws {
        let (hub, port) = try startHub()
        defer { hub.stop() }
        let (alice, bob) = try Self.initPair(try TestSupport.temporaryDirectory(self))
        let url = "udp://127.0.0.1:\(port)"
        let started = Date()
        let sent = try Self.yaok(alice, ["send", "Bob", "paced {n}", "--repeat", "40", "--rate", "100", "--hub", url, "--json", "--timeout", "30"])
        let elapsed = Date().timeIntervalSince(started)
        let queued = Set(sent.filter { $0["event"] as? String == "queued" }.compactMap { $0["id"] as? String })
        let handed = Set(sent.filter { $0["event"] as? String == "handed_over" }.compactMap { $0["id"] as? String })
        XCTAssertEqual(queued.count, 40)
        XCTAssertEqual(handed, queued, "every paced message was taken by the hub before the command returned")
        XCTAssertGreaterThanOrEqual(elapsed, 0.39, "40 messages at 100/s take at least 0.39 s to compose")
        XCTAssertEqual(try hub.status().router.queue.queued, 40)
        let got = try Self.yaok(bob, ["listen", "--hub", url, "--count", "40", "--json", "--timeout", "20"])
        let texts = Set(got.filter { $0["event"] as? String == "message" }.compactMap { $0["text"] as? String })
        XCTAssertEqual(texts, Set((1...40).map { "paced " + String(format: "%02d", $0) }))

        // --rate paces a session: without --hub there is none, and the command says so.
        let exe = try TestSupport.product("yaok")
        let refused = try TestSupport.run(exe, ["send", "--home", alice, "Bob", "x", "--repeat", "2", "--rate", "10"])
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.output.contains("--rate needs --hub"), refused.output)
    }

    /// `yaok listen` into a file or a pipe writes each line as it comes (not a block the C
    /// library holds, which shows nothing and is lost on SIGTERM).
    func testListenIntoAFileWritesEachMessageAsItComesAndKeepsItOnSIGTERM() throws {
        let s = try startUDPHub()
        defer { s.hub.stop() }
        let homes = try TestSupport.temporaryDirectory(self)
        let (alice, bob) = try Self.initPair(homes)
        let url = "udp://127.0.0.1:\(s.port)"
        let out = homes + "/listen.txt"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        let listen = Process()
        listen.executableURL = URL(fileURLWithPath: try TestSupport.product("yaok"))
        listen.arguments = ["listen", "--home", bob, "--hub", url, "--timeout", "60"]
        listen.standardOutput = FileHandle(forWritingAtPath: out)
        listen.standardError = FileHandle.nullDevice
        try listen.run()
        defer { if listen.isRunning { listen.terminate() } }
        _ = try Self.yaok(alice, ["send", "Bob", "into a file, line by line", "--hub", url, "--json", "--timeout", "20"])
        try Wait.until(timeout: 30, "the message in \(out) while listen runs") {
            ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("into a file, line by line")
        }
        XCTAssertTrue(listen.isRunning)
        try Wait.until(timeout: 10, "only Bob's link at the hub") { try s.hub.transport("udp")?.status.links == 1 }
        kill(listen.processIdentifier, SIGTERM)
        listen.waitUntilExit()
        XCTAssertTrue(try String(contentsOfFile: out, encoding: .utf8).contains("into a file, line by line"), "kept after SIGTERM")
        // A SIGTERM ends the session as its own end would: a goodbye, so the hub frees Bob's
        // session now, not after its 45 s idle timeout (a new process on the same port was
        // refused meanwhile); then the exit code says what ended it.
        XCTAssertEqual(listen.terminationReason, .exit)
        XCTAssertEqual(listen.terminationStatus, 128 + SIGTERM)
        try Wait.until(timeout: 5, "Bob's session gone at the hub after his SIGTERM") { try s.hub.transport("udp")?.status.links == 0 }
    }

    /// A mistyped option queues nothing: queued despite the error, a "failed" send still
    /// reaches the recipient (five copies of one have been seen). Options are checked before
    /// anything is queued; `yaok outbox --drop` removes an unsent message.
    func testAMistypedOptionQueuesNothingAndAnUnsentMessageCanBeDropped() throws {
        let dir = try TestSupport.temporaryDirectory(self)
        let (alice, _) = try Self.initPair(dir)
        let exe = try TestSupport.product("yaok")
        for (args, says) in [(["--hub", "udp:/127.0.0.1:7811"], "is not of the form udp://HOST:PORT"),
                             (["--relay", "127.0.0.1:7900"], "--relay needs --relay-key"),
                             (["--relay", "127.0.0.1:7900", "--relay-key", "12ab"], "--relay-key must be 64 hex digits"),
                             (["--hub", "udp://127.0.0.1:7811", "--trust-hub", "nope"], "--trust-hub takes a 64-hex-digit Ed25519 key")] {
            let r = try TestSupport.run(exe, ["send", "--home", alice, "Bob", "mistyped", "--timeout", "1"] + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.output.contains(says), "\(args): \(r.output)")
            XCTAssertFalse(r.output.contains("queued"), "\(args): \(r.output)")
        }
        XCTAssertEqual(try Self.yaok(alice, ["outbox", "--json"]).count, 0, "nothing was queued")
        // Queued without a hub, then dropped before any hub took it; a second drop finds nothing.
        let queued = try Self.yaok(alice, ["send", "Bob", "changed my mind", "--json"])
        let id = try XCTUnwrap(queued.first { $0["event"] as? String == "queued" }?["id"] as? String)
        XCTAssertEqual(try Self.yaok(alice, ["outbox", "--drop", String(id.prefix(8)), "--json"]).first?["event"] as? String, "dropped")
        XCTAssertEqual(try Self.yaok(alice, ["outbox", "--json"]).count, 0)
        let again = try TestSupport.run(exe, ["outbox", "--home", alice, "--drop", String(id.prefix(8))])
        XCTAssertNotEqual(again.status, 0)
        XCTAssertTrue(again.output.contains("no sent message has an ID starting with"), again.output)
        // A runtime failure is no usage error: no banner, and an exit code that says what happened
        // (75: timed out, try again; 1: a check failed), not 64.
        let noHub = try TestSupport.run(exe, ["send", "--home", alice, "Bob", "nobody home", "--hub", "udp://127.0.0.1:9", "--timeout", "1"])
        XCTAssertEqual(noHub.status, 75, noHub.output)
        XCTAssertTrue(noHub.output.contains("Error: timed out after 1.0 s; the message stays in the outbox"), noHub.output)
        XCTAssertFalse(noHub.output.contains("Usage:"), noHub.output)
        let wrongPrint = try TestSupport.run(exe, ["contacts", "verify", "--home", alice, "Bob", "--fingerprint", "0000"])
        XCTAssertEqual(wrongPrint.status, 1, wrongPrint.output)
        XCTAssertFalse(wrongPrint.output.contains("Usage:"), wrongPrint.output)
        // A garbled code says so (not "version 0"); adding a contact again changes nothing
        // (not even the fingerprint check, which a re-add must not reset) and says why.
        let garbled = try TestSupport.run(exe, ["contacts", "add", "--home", alice, "yaok://contact?v=1&d=AAAAAAAA"])
        XCTAssertNotEqual(garbled.status, 0)
        XCTAssertTrue(garbled.output.contains("cut short or garbled"), garbled.output)
        let bobCode = try TestSupport.run(exe, ["qr", "--home", dir + "/bob"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        let twice = try TestSupport.run(exe, ["contacts", "add", "--home", alice, bobCode])
        XCTAssertNotEqual(twice.status, 0)
        XCTAssertTrue(twice.output.contains("Bob is already a contact; nothing changed"), twice.output)
        // `yaok-hub status` where no hub listens names the socket and how to find another.
        let socket = dir + "/no-hub.sock"
        let status = try TestSupport.run(try TestSupport.product("yaok-hub"), ["status", "--socket", socket])
        XCTAssertNotEqual(status.status, 0)
        XCTAssertTrue(status.output.contains("nothing listens on \(socket)") && status.output.contains("give that --config FILE, or --socket PATH"), status.output)
        // A mistyped command still gets the banner and 64.
        let mistyped = try TestSupport.run(exe, ["send", "--home", alice, "Bob", "x", "--no-such-option"])
        XCTAssertEqual(mistyped.status, 64, mistyped.output)
        XCTAssertTrue(mistyped.output.contains("Usage:"), mistyped.output)
    }

    func testMessagesFromNonContactsAreRejectedAndRecordedWithoutContent() throws {
        let (hub, port) = try startHub()
        defer { hub.stop() }
        let dir = try TestSupport.temporaryDirectory(self)
        let (_, bob) = try Self.initPair(dir)
        let mallory = dir + "/mallory"
        _ = try Self.yaok(mallory, ["init", "--name", "Mallory"])
        let codeB = try TestSupport.run(try TestSupport.product("yaok"), ["qr", "--home", bob]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try Self.yaok(mallory, ["contacts", "add", codeB])
        let url = "udp://127.0.0.1:\(port)"
        _ = try Self.yaok(mallory, ["send", "Bob", "SECRET-SPAM-TEXT", "--hub", url, "--json", "--timeout", "20"])
        let got = try Self.yaok(bob, ["listen", "--hub", url, "--json", "--timeout", "4"])
        XCTAssertTrue(got.contains { $0["event"] as? String == "rejected" && $0["kind"] as? String == "non_contact" }, "\(got)")
        XCTAssertTrue(try Self.yaok(bob, ["inbox", "--json"]).isEmpty)
        let events = try Self.yaok(bob, ["events", "--json"])
        XCTAssertEqual(events.first?["kind"] as? String, "non_contact")
        let raw = try TestSupport.run(try TestSupport.product("yaok"), ["events", "--home", bob, "--json"]).output
        XCTAssertFalse(raw.contains("SECRET-SPAM-TEXT"))
    }
}

/// Stops and continues a process in a loop (SIGSTOP, SIGCONT), as a starved machine would,
/// until ``end()``, which leaves it running and says how many stops there were.
final class StallingProcess: @unchecked Sendable {
    private let lock = NSLock()
    private var ending = false
    private var stops = 0
    private let done = DispatchSemaphore(value: 0)

    init(_ pid: Int32, stoppedFor: TimeInterval, runningFor: TimeInterval) {
        Thread.detachNewThread { [self] in
            while !lock.withLock({ ending }) {
                kill(pid, SIGSTOP)
                lock.withLock { stops += 1 }
                Thread.sleep(forTimeInterval: stoppedFor)
                kill(pid, SIGCONT)
                Thread.sleep(forTimeInterval: runningFor)
            }
            done.signal()
        }
    }

    func end() -> Int {
        lock.withLock { ending = true }
        _ = done.wait(timeout: .now() + 10)
        return lock.withLock { stops }
    }
}
