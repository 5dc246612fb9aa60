import ArgumentParser
import Foundation
import YaokCrypto
import YaokEndpoint
import YaokQR
import YaokPluginKit
import YaokWire

/// `yaok`: a Ya OK user on Linux, so a person or a test can act as a phone.
struct Yaok: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "yaok",
        abstract: "A Ya OK messenger endpoint: identity, contacts, encrypted messages through a hub.",
        subcommands: [Init.self, QR.self, Contacts.self, Send.self, Inbox.self, Outbox.self, Listen.self, Events.self])
}

struct HomeOption: ParsableArguments {
    @Option(help: "Where the identity and encrypted store live (default: $YAOK_HOME or ~/.yaok).")
    var home: String?
    var path: String { home ?? Endpoint.defaultHome() }
    func open() throws -> Endpoint { try Endpoint.open(home: path) }
}

func hex(_ b: [UInt8]) -> String { YaokPluginKit.Hex.encode(b) }

/// Every line `yaok` prints goes straight to standard output, even into a file or a pipe (where
/// the C library would hold a block until exit): a script or a log reads each message as it
/// comes, and a SIGTERM loses nothing already printed.
func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    let line = items.map { "\($0)" }.joined(separator: separator) + terminator
    FileHandle.standardOutput.write(Data(line.utf8))
}

/// What went wrong while a well-formed command ran: printed as `Error: …` without the usage
/// banner (that is for mistyped commands, exit 64), with an exit code that says what happened.
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    /// Ended by its --timeout: worth running again (EX_TEMPFAIL).
    static func timedOut(_ message: String) -> ExitCode { fail(message, code: 75) }
    /// Refused: a check the user asked for failed.
    static func refused(_ message: String) -> ExitCode { fail(message, code: 1) }
    private static func fail(_ message: String, code: Int32) -> ExitCode {
        FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
        return ExitCode(code)
    }
}

func printJSON(_ object: [String: Any]) {
    if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
        print(String(decoding: data, as: UTF8.self))
    }
}

struct Init: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create your identity (Ed25519 + X25519 keys) and encrypted store.")
    @OptionGroup var home: HomeOption
    @Option(help: "Your display name (2-50 characters).") var name: String

    func run() throws {
        let e = try Endpoint.initialize(home: home.path, name: name)
        print("created identity for \(name)")
        print("fingerprint \(e.identity.fingerprint)")
    }
}

struct QR: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "qr", abstract: "Print your contact code (yaok://contact?...), on a terminal also as a QR code to scan.",
        discussion: "On a terminal the QR code comes first, black on white, then the code. Piped or redirected, only the code is printed "
            + "(so `yaok contacts add \"$(yaok qr --home bob)\"` works) unless --picture asks for the QR code too, drawn without colours.")
    @OptionGroup var home: HomeOption
    @Flag(help: "Draw the QR code even when the output is not a terminal.") var picture = false
    func run() throws {
        let code = try home.open().contactCode()
        let terminal = isatty(STDOUT_FILENO) == 1
        if terminal || picture {
            do {
                print(try QRCode.encode(Array(code.utf8), level: .medium).terminalText(colours: terminal))
            } catch {
                FileHandle.standardError.write(Data("no QR code: \(error)\n".utf8))
            }
        }
        print(code)
    }
}

struct Contacts: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage contacts.", subcommands: [Add.self, List.self, Verify.self, Remove.self])

    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a contact from its contact code.")
        @OptionGroup var home: HomeOption
        @Argument(help: "The contact code: yaok://contact?v=1&d=...") var code: String
        @Option(help: "Name to store instead of the one in the code.") var name: String?
        func run() throws {
            let c = try home.open().addContact(uri: code, name: name)
            print("added \(c.name) \(Identity.fingerprint(c.userID))")
            print("compare this fingerprint with \(c.name) in person, then: yaok contacts verify \(c.name)")
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List contacts.")
        @OptionGroup var home: HomeOption
        @Flag var json = false
        func run() throws {
            for c in try home.open().store.contacts() {
                if json {
                    printJSON(["name": c.name, "id": hex(c.userID), "verified": c.verified])
                } else {
                    print("\(c.verified ? "✓" : " ") \(c.name)  \(hex(c.userID).prefix(16))…")
                }
            }
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Mark a contact verified after comparing fingerprints.")
        @OptionGroup var home: HomeOption
        @Argument(help: "Contact name or ID prefix.") var contact: String
        @Option(help: "The fingerprint they read out; checked against the stored key.") var fingerprint: String?
        func run() throws {
            let e = try home.open()
            let c = try e.resolveContact(contact)
            if let fingerprint {
                let given = fingerprint.lowercased().filter { $0.isHexDigit }
                guard given == hex(c.userID) else {
                    throw CommandFailure.refused("fingerprint does not match \(c.name)'s key: NOT verified")
                }
            }
            try e.store.setVerified(c.userID)
            print("verified \(c.name)")
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rm", abstract: "Remove a contact.")
        @OptionGroup var home: HomeOption
        @Argument var contact: String
        func run() throws {
            let e = try home.open()
            let c = try e.resolveContact(contact)
            try e.store.removeContact(c.userID)
            print("removed \(c.name)")
        }
    }
}

/// Where to attach: a hub, or the relay directly.
struct AttachOptions: ParsableArguments {
    @Option(help: "Hub to attach to: udp://HOST:PORT (UDP transport), tcp://HOST:PORT (Wi-Fi Direct group owner, port 7814) or ble://hciN/AA:BB:CC:DD:EE:FF (Bluetooth LE from adapter hciN to the hub's address; add ?type=random for a static random address, &mtu=N to ask for another ATT MTU), or p2p://IFACE[?ctrl=DIR][&pin=PIN][&name=INSTANCE][&timeout=S] (Wi-Fi Direct through this machine's wpa_supplicant on IFACE, control directory DIR, default /run/wpa_supplicant: find a hub by its _yaok._tcp service, join its group with push-button or the 8-digit PIN, take a DHCP lease, then TCP to the group owner; progress on stderr).") var hub: String?
    @Option(help: "Talk to the internet relay directly instead of a hub: HOST:PORT (UDP) or wss://HOST:PORT[/PATH] (WebSocket over TLS 1.3, with --relay-tls-pin). Repeated or comma-separated: nodes of one relay (same --relay-key), used in order; when the node in use stops answering the session moves to the next.")
    var relay: [String] = []
    @Option(name: .customLong("relay-tls-pin"), help: "With a wss:// relay: the SHA-256 of its TLS public key (64 hex digits, from `yaok-relay tls-pin`). One for every wss:// node, or repeated/comma-separated: one per wss:// node in order.")
    var relayTLSPin: [String] = []
    @Option(help: "The relay's pinned public key (64 hex digits, from `yaok-relay key`). With --hub: also register through the hub, if you trust it (--trust-hub, --hub-network), so internet users can reach you there.")
    var relayKey: String?
    @Option(help: ArgumentHelp("A hub you trust: its signing key (64 hex digits, from `yaok-hub identity`), or `any` for every hub. Repeated or comma-separated. A trusted hub's custody is final and it may collect your internet mail; any other hub only carries: what it takes is sent again after --untrusted-resend-s unless the delivery receipt came first, and it gets no relay registration.", valueName: "key|any"))
    var trustHub: [String] = []
    @Option(help: ArgumentHelp("A hub network you trust: its network key (64 hex digits, from `yaok-hub network-key show`); a hub that presents a valid certificate of it is trusted. Repeated or comma-separated.", valueName: "key"))
    var hubNetwork: [String] = []
    @Option(name: .customLong("untrusted-resend-s"), help: "Seconds after which a message an untrusted hub took is sent again (through any hub) if its delivery receipt has not come.")
    var untrustedResendSeconds: Double = 900

    func key() throws -> [UInt8]? {
        guard let relayKey else { return nil }
        guard let k = YaokPluginKit.Hex.decode(relayKey), k.count == 32 else { throw ValidationError("--relay-key must be 64 hex digits") }
        return k
    }

    var isSet: Bool { hub != nil || !relay.isEmpty }

    /// Everything that can be checked without a network, checked before a command changes
    /// anything (a `yaok send` with a mistyped option queues nothing).
    func validate() throws {
        if let hub {
            do {
                if hub.hasPrefix("p2p://") { _ = try P2PHubTarget.parse(hub) } else { _ = try HubSession.parseHubAddress(hub) }
            } catch {
                throw ValidationError("--hub \(hub): \(error)")
            }
            guard relay.isEmpty else { throw ValidationError("give --hub or --relay, not both") }
        }
        if !relay.isEmpty {
            guard relayKey != nil else { throw ValidationError("--relay needs --relay-key (pin the relay's key)") }
            do { _ = try RelaySession.nodes(relay, pins: relayTLSPin) } catch { throw ValidationError("--relay: \(error)") }
        }
        _ = try key()
        _ = try hubTrust()
        guard untrustedResendSeconds > 0, untrustedResendSeconds <= 7 * 86_400 else {
            throw ValidationError("--untrusted-resend-s must be more than 0 and at most 604800 (7 days)")
        }
    }

    func hubTrust() throws -> HubTrust {
        func split(_ values: [String]) -> [String] { values.flatMap { $0.split(separator: ",").map(String.init) } }
        do {
            return try HubTrust(trustHub: split(trustHub), hubNetwork: split(hubNetwork))
        } catch {
            throw ValidationError("\(error)")
        }
    }

    /// Applies the trust options to a hub session (before it starts).
    func configure(_ session: HubSession) throws {
        session.relayKey = try key()
        session.trust = try hubTrust()
        session.untrustedResendMs = Int64(untrustedResendSeconds * 1000)
    }
}

/// Runs a session with a hub or the relay until `done` says stop or `timeout` passes.
func withSession(_ endpoint: Endpoint, _ attach: AttachOptions, timeout: Double, json: Bool,
                 done: @escaping @Sendable (HubSession.Event) -> Bool) throws -> Bool {
    // @unchecked: `set` only under `lock`.
    final class Flag: @unchecked Sendable { var set = false; let lock = NSLock() }
    let flag = Flag()
    if !attach.relay.isEmpty {
        let handler: @Sendable (HubSession.Event) -> Void = { event in
            report(event, via: .relay, json: json)
            if done(event) { flag.lock.withLock { flag.set = true } }
        }
        guard let key = try attach.key() else { throw ValidationError("--relay needs --relay-key (pin the relay's key)") }
        let nodes = try RelaySession.nodes(attach.relay, pins: attach.relayTLSPin)
        let session = RelaySession(endpoint: endpoint, nodes: nodes, relayKey: key, onEvent: handler)
        defer { session.close() }
        try session.open()
        // Waits for the relay's pushes between paced polls; a lost datagram is retried, not fatal.
        try session.run(until: Date().addingTimeInterval(timeout)) { flag.lock.withLock { flag.set } }
        return flag.lock.withLock { flag.set }
    }
    guard let hub = attach.hub else { throw ValidationError("give --hub or --relay") }
    return try withHubSession(endpoint, hub: hub, attach: attach, timeout: timeout, json: json, done: done)
}

/// Runs a hub session until `done` says stop or `timeout` passes.
/// `during`, if given, runs once attached (on this thread); it returns whether it is already done.
func withHubSession(_ endpoint: Endpoint, hub: String, attach: AttachOptions, timeout: Double, json: Bool,
                    done: @escaping @Sendable (HubSession.Event) -> Bool,
                    during: ((HubSession) throws -> Bool)? = nil) throws -> Bool {
    let address = try P2PHubJoin.hubAddress(hub) { FileHandle.standardError.write(Data("\($0)\n".utf8)) }
    let finished = DispatchSemaphore(value: 0)
    final class Leaving: @unchecked Sendable { var now = false; let lock = NSLock() }
    let leaving = Leaving()
    #if DEBUG
    // Tests that kill `yaok` inside a commit window hold its commits open (debug builds only).
    let commitDelayMs = ProcessInfo.processInfo.environment["YAOK_TEST_ENDPOINT_COMMIT_DELAY_MS"].flatMap { UInt32($0) } ?? 0
    #else
    let commitDelayMs: UInt32 = 0
    #endif
    let session = HubSession(endpoint: endpoint, address: address, testCommitDelayUs: min(commitDelayMs, 2_000) * 1_000) { event in
        // Our own stop ends the link: not news (it read like a failure after every good run).
        if case .disconnected = event, leaving.lock.withLock({ leaving.now }) { return }
        report(event, via: .hub, json: json)
        if done(event) { finished.signal() }
    }
    try attach.configure(session)
    let terminated = Termination.watch { finished.signal() }
    try session.start()
    let ok: Bool
    do {
        defer {
            leaving.lock.withLock { leaving.now = true }
            // Says goodbye on the link: the hub forgets this session now, not after its idle timeout.
            session.stop()
        }
        let deadline = DispatchTime.now() + timeout
        ok = try during?(session) == true || finished.wait(timeout: deadline) == .success
        // Let receipts this session produced reach the hub before leaving.
        session.drain(timeout: 3)
    }
    if let signal = terminated() { exit(128 + signal) }
    return ok
}

/// SIGTERM and SIGINT while attached end the session as its own end would (receipts drained,
/// a goodbye to the hub), then the process exits 128 + the signal's number.
enum Termination {
    /// Calls `wake` on SIGTERM or SIGINT from now on; returns a check for which one came.
    static func watch(_ wake: @escaping @Sendable () -> Void) -> () -> Int32? {
        // The sources live as long as the check the caller holds.
        final class Caught: @unchecked Sendable { let lock = NSLock(); var signal: Int32?; var sources: [DispatchSourceSignal] = [] }
        let caught = Caught()
        for sig in [SIGTERM, SIGINT] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                caught.lock.withLock { if caught.signal == nil { caught.signal = sig } }
                wake()
            }
            source.resume()
            caught.sources.append(source)
        }
        return { caught.lock.withLock { caught.signal } }
    }
}

/// What a session is attached to, for the words of its events.
enum Peer: String { case hub, relay }

func report(_ event: HubSession.Event, via peer: Peer, json: Bool) {
    switch event {
    case .connected(let name):
        json ? printJSON(["event": "connected", peer.rawValue: name]) : print("connected to \(peer.rawValue) \(name)")
    case .disconnected(let reason):
        json ? printJSON(["event": "disconnected", "reason": reason]) : print("disconnected: \(reason)")
    case .handedOver(let id):
        json ? printJSON(["event": "handed_over", "id": hex(id)].merging(peer == .hub ? ["hub_trusted": true] : [:]) { a, _ in a })
             : print("\(peer.rawValue) took \(hex(id).prefix(8))")
    case .receiptHandedOver(let id):
        // Your own receipts going out are not news; only --json says so.
        if json { printJSON(["event": "receipt_handed_over", "id": hex(id)]) }
    case .carried(let id):
        json ? printJSON(["event": "handed_over", "id": hex(id), "hub_trusted": false])
             : print("\(peer.rawValue) took \(hex(id).prefix(8)) (a hub you do not trust: sent again later unless it is delivered first)")
    case .refused(let id, let reason):
        json ? printJSON(["event": "refused", "id": hex(id), "reason": reason]) : print("\(peer.rawValue) refused \(hex(id).prefix(8)): \(reason)")
    case .incoming(let incoming):
        switch incoming {
        case .message(let m):
            json ? printJSON(["event": "message", "id": hex(m.messageID), "from": m.senderName, "text": m.text, "created_ms": m.createdMs])
                 : print("[\(m.senderName)] \(m.text)")
        case .receipt(let kind, let ref):
            json ? printJSON(["event": kind == .readReceipt ? "read" : "delivered", "id": hex(ref)])
                 : print("\(kind) for \(hex(ref).prefix(8))")
        case .duplicate(let id):
            json ? printJSON(["event": "duplicate", "id": hex(id)]) : print("duplicate \(hex(id).prefix(8)) ignored")
        case .rejected(let kind, let id):
            json ? printJSON(["event": "rejected", "kind": kind.rawValue, "id": hex(id)]) : print("rejected \(hex(id).prefix(8)): \(kind.rawValue)")
        case .malformed(let why):
            json ? printJSON(["event": "malformed", "reason": why]) : print("malformed bundle: \(why)")
        }
    case .registration(let a):
        if json {
            var fields: [String: Any] = ["event": "relay_registration", "status": Int(a.status), "meaning": a.meaning, "relay_key": hex(a.relayKey)]
            if a.untilMs > 0 { fields["until_ms"] = a.untilMs }
            if !a.reason.isEmpty { fields["reason"] = a.reason }
            printJSON(fields)
        } else if a.status == RegistrationAnswer.accepted {
            let minutes = max(0, (a.untilMs - Int64(Date().timeIntervalSince1970 * 1000)) / 60_000)
            print("relay registration accepted: internet mail is collected through this hub for \(minutes) min (renewed while attached)")
        } else {
            print("relay registration: \(a.meaning)\(a.reason.isEmpty || a.meaning.contains(a.reason) ? "" : " (\(a.reason))")")
        }
    case .hubRelay(let r, let pinned):
        if json {
            printJSON(["event": "hub_relay", "state": ["none", "configured", "linked"][Int(r.state.rawValue)], "relay_key": hex(r.relayKey)])
        } else if let pinned {
            // Said only to someone who asked for the relay (--relay-key), and only when it is not the one pinned.
            switch r.state {
            case .none: print("this hub has no relay: your internet mail is not collected through it")
            case _ where r.relayKey != pinned:
                print("this hub's relay is \(hex(r.relayKey).prefix(8)), not the \(hex(pinned).prefix(8)) you pinned (--relay-key): your internet mail is not collected through it")
            case .configured: print("this hub's relay \(hex(pinned).prefix(8)) is not reachable now; your registration waits at the hub")
            case .linked: break
            }
        }
    }
}

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Encrypt a message to a contact and hand it to a hub.")
    @OptionGroup var home: HomeOption
    @Argument(help: "Contact name or ID prefix.") var contact: String
    @Argument(help: "The message text (up to 10 KB).") var text: String
    @OptionGroup var attach: AttachOptions
    @Option(help: "Seconds to wait for the hub to take custody.") var timeout: Double = 30
    @Flag(help: "Also wait for the recipient's delivery receipt.") var waitDelivered = false
    @Option(help: ArgumentHelp("Queue this many messages (load tests); {n} in the text becomes each one's number, zero-padded to the width of the count.", valueName: "count"))
    var `repeat`: Int = 1
    @Option(help: ArgumentHelp("With --repeat and --hub: attach first, then compose the messages one at a time at this many per second, each sent at once (an offered load; without it all are composed first, a backlog).", valueName: "per-second"))
    var rate: Int?
    @Flag var json = false

    /// Messages composed per store transaction with --repeat (bounds memory and transaction size).
    static let batchSize = 1000

    func validate() throws {
        guard (1...1_000_000).contains(`repeat`) else { throw ValidationError("--repeat must be 1 to 1000000, got \(`repeat`)") }
        if let rate {
            guard (1...100_000).contains(rate) else { throw ValidationError("--rate must be 1 to 100000 messages per second, got \(rate)") }
            guard attach.hub != nil else { throw ValidationError("--rate needs --hub (it paces messages while attached)") }
        }
    }

    /// The text of message `n` (1-based) of a --repeat batch.
    static func numbered(_ text: String, _ n: Int, width: Int) -> String {
        guard text.contains("{n}") else { return text }
        let digits = String(n)
        return text.replacingOccurrences(of: "{n}", with: String(repeating: "0", count: max(0, width - digits.count)) + digits)
    }

    func run() throws {
        let e = try home.open()
        let c = try e.resolveContact(contact)
        let waiting = Waiting(expecting: `repeat`)
        func queued(_ id: [UInt8]) -> Bool {
            if json { printJSON(["event": "queued", "id": hex(id)]) }
            return waiting.expect(id)
        }
        if rate == nil {
            if `repeat` == 1 {
                let item = try e.compose(to: c, text: text)
                _ = queued(item.messageID)
                // The hubs see only the sealed bundle: its ID is the one their logs name.
                let bundle = (try? YaokWire.Bundle(parsing: item.bundle)).map { " (hubs log it as bundle \(hex($0.envelope.bundleID).prefix(8)))" } ?? ""
                if !json { print("queued \(hex(item.messageID).prefix(8)) for \(c.name)\(bundle)") }
            } else {
                let width = String(`repeat`).count
                for start in stride(from: 1, through: `repeat`, by: Self.batchSize) {
                    let texts = (start...min(`repeat`, start + Self.batchSize - 1)).map { Self.numbered(text, $0, width: width) }
                    for item in try e.compose(to: c, texts: texts) { _ = queued(item.messageID) }
                }
                if !json { print("queued \(`repeat`) messages for \(c.name)") }
            }
        }
        // Without --hub or --relay the messages wait in the outbox for the next session.
        guard attach.isSet else { return }
        let waitDelivered = self.waitDelivered
        let attached = DispatchSemaphore(value: 0)
        let done: @Sendable (HubSession.Event) -> Bool = { event in
            switch event {
            case .connected: attached.signal(); return false
            case .handedOver(let acked) where !waitDelivered, .carried(let acked) where !waitDelivered: return waiting.done(acked)
            case .incoming(.receipt(_, let ref)) where waitDelivered: return waiting.done(ref)
            default: return false
            }
        }
        let ok: Bool
        if let rate, let hub = attach.hub {
            // An offered load: attached first, then one message every 1/rate s, each pushed at once.
            let text = self.text, count = `repeat`, width = String(`repeat`).count
            ok = try withHubSession(e, hub: hub, attach: attach, timeout: timeout, json: json, done: done) { session in
                // The pace starts once attached (bounded by --timeout).
                guard attached.wait(timeout: .now() + timeout) == .success else { return false }
                let start = Date()
                var finished = false
                for n in 1...count {
                    let wait = start.addingTimeInterval(Double(n - 1) / Double(rate)).timeIntervalSinceNow
                    if wait > 0 { usleep(UInt32(wait * 1e6)) }
                    finished = queued(try e.compose(to: c, text: Self.numbered(text, n, width: width)).messageID)
                    session.flush()
                }
                if !json { print(String(format: "composed %d messages for %@ in %.2f s (offered %d/s)", count, c.name, Date().timeIntervalSince(start), rate)) }
                return finished
            }
        } else {
            ok = try withSession(e, attach, timeout: timeout, json: json, done: done)
        }
        guard ok else { throw CommandFailure.timedOut("timed out after \(timeout) s; the message stays in the outbox and goes with the next session") }
    }

    /// The messages this run sent, crossed off as their custody acks (or receipts) arrive. An
    /// answer can come before its ID is registered (a paced send pushes as it composes).
    // @unchecked: every field only under `lock`.
    final class Waiting: @unchecked Sendable {
        private let lock = NSLock()
        private var outstanding = Set<[UInt8]>(), answeredEarly = Set<[UInt8]>()
        private var toRegister: Int
        init(expecting count: Int) { toRegister = count }
        private var finished: Bool { toRegister == 0 && outstanding.isEmpty }
        /// Registers one of ours; true when all are registered and answered.
        func expect(_ id: [UInt8]) -> Bool {
            lock.withLock {
                toRegister -= 1
                if answeredEarly.remove(id) == nil { outstanding.insert(id) }
                return finished
            }
        }
        /// Crosses `id` off; true when all are registered and answered.
        func done(_ id: [UInt8]) -> Bool {
            lock.withLock {
                if outstanding.remove(id) == nil, toRegister > 0 { answeredEarly.insert(id) }
                return finished
            }
        }
    }
}

struct Listen: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Attach to a hub or the relay: send the outbox, receive messages and receipts.")
    @OptionGroup var home: HomeOption
    @OptionGroup var attach: AttachOptions
    @Option(help: "Stop after this many new messages.") var count: Int?
    @Option(help: "Stop after this many seconds.") var timeout: Double = 3600
    @Flag var json = false

    func run() throws {
        let e = try home.open()
        // Crash-test hook: die like a SIGKILL right after a message and its receipt are stored.
        if ProcessInfo.processInfo.environment["YAOK_FAULT"] == "exit-after-receive" {
            Endpoint.faultAfterReceive = { _exit(137) }
        }
        // @unchecked: `n` is read and written only under `lock` (the session's threads may outlive it).
        final class Counter: @unchecked Sendable { var n = 0; let lock = NSLock() }
        let counter = Counter()
        let limit = count
        _ = try withSession(e, attach, timeout: timeout, json: json) { event in
            guard case .incoming(.message) = event, let limit else { return false }
            return counter.lock.withLock { counter.n += 1; return counter.n >= limit }
        }
        let received = counter.lock.withLock { counter.n }
        if let limit, received < limit { throw CommandFailure.timedOut("received \(received) of \(limit) messages before the timeout") }
    }
}

struct Inbox: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show received messages.")
    @OptionGroup var home: HomeOption
    @Flag var json = false
    func run() throws {
        for m in try home.open().store.inbox() {
            json ? printJSON(["id": hex(m.messageID), "from": m.senderName, "text": m.text, "created_ms": m.createdMs, "received_ms": m.receivedMs])
                 : print("[\(m.senderName)] \(m.text)")
        }
    }
}

struct Outbox: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show sent messages and their state; drop one not yet sent.")
    @OptionGroup var home: HomeOption
    @Option(help: ArgumentHelp("Drop a message that no hub or relay has taken yet (pending or refused), by its ID or an unambiguous prefix.", valueName: "id"))
    var drop: String?
    @Flag var json = false
    func run() throws {
        let e = try home.open()
        if let drop {
            let id = try e.store.dropUnsentMessage(prefix: drop.lowercased())
            json ? printJSON(["event": "dropped", "id": hex(id)]) : print("dropped \(hex(id).prefix(8)); it will not be sent")
            return
        }
        let names = Dictionary(try e.store.contacts().map { ($0.userID, $0.name) }) { a, _ in a }
        for o in try e.store.outbox() where o.kind == Envelope.Kind.message.rawValue {
            let to = names[o.recipientUserID] ?? String(hex(o.recipientUserID).prefix(8))
            json ? printJSON(["id": hex(o.messageID), "to": hex(o.recipientUserID), "to_name": to, "state": o.state.rawValue])
                 : print("\(hex(o.messageID).prefix(8)) → \(to)  \(o.state.rawValue)")
        }
    }
}

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show security events (rejected, duplicate and replayed messages; no contents).")
    @OptionGroup var home: HomeOption
    @Flag var json = false
    func run() throws {
        for ev in try home.open().store.securityEvents() {
            json ? printJSON(["kind": ev.kind.rawValue, "sender": ev.sender, "id": hex(ev.messageID), "at_ms": ev.atMs])
                 : print("\(ev.kind.rawValue)  from \(ev.sender)  message \(hex(ev.messageID).prefix(8))")
        }
    }
}

Yaok.main()
