import Foundation
import YaokCrypto
import YaokEndpoint
import YaokStore
import YaokStoreBenchmark
import YaokWire
import YaokReconcile
import YaokPluginKit

// yaok-bench: prints the message path's figures. Speed is measured here, never asserted
// in tests. Usage: yaok-bench [--path-only] [--messages N] [--rate MSG_PER_S] [--kill-every SECONDS [--kills N]] [--hub-binary PATH] [--plugin-dir DIR] | --reconcile | --lora
// yaok-bench --reconcile [--trials N] [--shape N:FRACTION] [--sizing STRATA,CELLS,FACTOR,EXACT_FACTOR,EXTRA]:
// set reconciliation figures only (ReconcileBench.swift).
// yaok-bench --lora [--hours H] [--step S]: what a message costs on a LoRa hop, in simulated
// time (LoRaBench.swift): H simulated hours per run after link up (2), finest step S s (0.01).

// yaok-bench --store-lifecycle N [--per-commit K]: the hub store's share of one message (see
// BundleStoreBenchmark.hubLifecycle), for callgrind: valgrind --tool=callgrind
// --toggle-collect='*hubLifecycle*' yaok-bench --store-lifecycle 2000
if let n = argument("--store-lifecycle").flatMap({ Int($0) }) {
    let perCommit = argument("--per-commit").flatMap { Int($0) } ?? 16
    let micros = try BundleStoreBenchmark.hubLifecycle(messages: n, messagesPerCommit: perCommit)
    print(String(format: "hub store, one message and its receipt (%d messages, %d per commit): %.1f µs per message", n, perCommit, micros))
    exit(0)
}
if CommandLine.arguments.contains("--reconcile") {
    setvbuf(stdout, nil, _IOLBF, 0)
    var shapes: [(n: Int, fraction: Double)]?
    if let spec = argument("--shape") {
        let parts = spec.split(separator: ":")
        guard parts.count == 2, let n = Int(parts[0]), let f = Double(parts[1]), n > 0, f > 0, f < 1 else {
            FileHandle.standardError.write(Data("--shape wants N:FRACTION, e.g. 100000:0.01; got \(spec)\n".utf8)); exit(2)
        }
        shapes = [(n, f)]
    }
    var sizing = ReconcileSizing.standard
    if let spec = argument("--sizing") {
        let v = spec.split(separator: ",").map(String.init)
        guard v.count == 5, let s = Int(v[0]), let c = Int(v[1]), let f = Double(v[2]), let fe = Double(v[3]), let x = Int(v[4]),
              (1...32).contains(s), c > 0, c % 3 == 0, s * c <= 2_141 else {
            FileHandle.standardError.write(Data("--sizing wants STRATA,CELLS,FACTOR,EXACT_FACTOR,EXTRA (CELLS a multiple of 3, STRATA×CELLS ≤ 2141); got \(spec)\n".utf8)); exit(2)
        }
        sizing = ReconcileSizing(strata: s, cellsPerStratum: c, cellsPerDifference: f, cellsPerExactDifference: fe, extraCells: x)
    }
    var versions = ReconcileLimits.supportedVersions
    if let v = argument("--version") {
        guard let n = UInt8(v), ReconcileLimits.supportedVersions.contains(n) else {
            FileHandle.standardError.write(Data("--version wants 1 or 2; got \(v)\n".utf8)); exit(2)
        }
        versions = [n]
    }
    runReconcileBench(trials: Int(argument("--trials") ?? "") ?? 10, shapes: shapes, sizing: sizing, versions: versions)
    exit(0)
}

if CommandLine.arguments.contains("--lora") {
    setvbuf(stdout, nil, _IOLBF, 0)
    let hours = argument("--hours").flatMap(Double.init) ?? 2
    let step = argument("--step").flatMap(Double.init) ?? 0.01
    guard hours > 0, step > 0, step <= 0.1 else {
        FileHandle.standardError.write(Data("--hours wants a positive number, --step one in (0, 0.1]\n".utf8)); exit(2)
    }
    try runLoRaBench(hours: hours, step: step)
    exit(0)
}

/// A UDP engine's events for the link benchmark: signals `up` when a link comes up.
struct LinkUpSignal: LinkEvents {
    let up: DispatchSemaphore?
    func linkUp(_ link: LinkInfo) { up?.signal() }
    func linkDown(_ id: LinkID, reason: String?) {}
    func frameReceived(_ frame: [UInt8], on link: LinkID) {}
    func statusChanged() {}
}

func argument(_ name: String) -> String? {
    guard let i = CommandLine.arguments.firstIndex(of: name), i + 1 < CommandLine.arguments.count else { return nil }
    return CommandLine.arguments[i + 1]
}

func measure(_ label: String, iterations: Int, unit: String = "ops/s", _ body: () throws -> Void) rethrows {
    let start = DispatchTime.now().uptimeNanoseconds
    for _ in 0..<iterations { try body() }
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    print(label.padding(toLength: 56, withPad: " ", startingAt: 0) + String(format: "%10.0f ", Double(iterations) / seconds) + unit
          + String(format: "   (%.1f µs each)", seconds / Double(iterations) * 1e6))
}

func cpuSeconds() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
    return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
}

func peakRSSKiB(pid: Int32) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.split(separator: " ").dropFirst().first ?? "")
    }
    return nil
}

setvbuf(stdout, nil, _IOLBF, 0)
// --path-only skips the micro-benchmarks, so a profiler attached to the run sees only the message path.
let pathOnly = CommandLine.arguments.contains("--path-only")
let alice = Identity.generate(), bob = Identity.generate()
if !pathOnly {
print("== crypto (libsodium)")
for size in [200, 10_240] {
    let plaintext = [UInt8](repeating: 0x61, count: size)
    try measure("seal \(size) B (X25519 + XChaCha20-Poly1305 + Ed25519)", iterations: size > 1000 ? 2000 : 5000) {
        _ = try Envelope.sealMessage(plaintext: plaintext, from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey, createdMs: 1)
    }
    let envelope = try Envelope.sealMessage(plaintext: plaintext, from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey, createdMs: 1)
    try measure("open \(size) B (verify + decrypt)", iterations: size > 1000 ? 2000 : 5000) {
        _ = try Envelope(parsing: envelope.encoded).open(with: bob)
    }
}
let signed = try Envelope.sealMessage(plaintext: Array("x".utf8), from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey, createdMs: 1)
measure("Ed25519 signature verification", iterations: 10_000, unit: "sig/s") { _ = signed.verifySignature() }
// What a hub and the sender do instead for a delivery receipt that reveals its message's proof.
let committed = try Envelope.sealMessage(plaintext: Array("x".utf8), from: alice, toSigningKey: bob.signingKey, recipientKXKey: bob.kxKey, createdMs: 1)
guard let proof = try committed.decryptVerifiedWithProof(with: bob).deliveryProof else { fatalError("a new message commits to a proof") }
let provenReceipt = try Envelope.receipt(kind: .deliveryReceipt, for: committed.messageID, originalSenderUserID: alice.userID,
                                         from: bob, createdMs: 2, messageID: proof)
measure("delivery receipt proof check (instead of a verification)", iterations: 100_000, unit: "checks/s") {
    _ = provenReceipt.provesDelivery(of: committed)
}

print("== secure link session (Noise NN + Ed25519 identities; Docs/protocol.md §5)")
func inMemoryHandshake() throws -> (SecureLink, SecureLink) {
    let i = SecureLink(identity: alice, role: .endpoint, isInitiator: true, channel: .stream)
    let r = SecureLink(identity: bob, role: .hub, isInitiator: false, channel: .stream)
    let answer = try r.receive(TLVRecord(parsing: i.hello()))
    guard case .send(let reply)? = answer.first else { fatalError("handshake") }
    let proof = try i.receive(TLVRecord(parsing: reply))
    guard case .send(let identityFrame)? = proof.first else { fatalError("handshake") }
    _ = try r.receive(TLVRecord(parsing: identityFrame))
    return (i, r)
}
let handshakes = 500
let cpu0 = cpuSeconds()
try measure("handshake, both ends (2 X25519, 2 sign, 2 verify)", iterations: handshakes, unit: "links/s") { _ = try inMemoryHandshake() }
print(String(format: "  CPU per link, both ends together: %.0f µs", (cpuSeconds() - cpu0) / Double(handshakes) * 1e6))
let (sender, receiver) = try inMemoryHandshake()
for size in [236, 1_200, 10_500] {
    let frame = TLVRecord(.bundle, value: [UInt8](repeating: 0x42, count: size - 3)).encoded
    try measure("seal + open a \(size) B frame", iterations: 20_000, unit: "frames/s") {
        _ = try receiver.receive(TLVRecord(parsing: sender.seal(frame)))
    }
}
print("  bytes added per frame: \(SecureLink.overhead) (UDP datagram, TCP stream); BLE: the same, plus 4 bytes per extra chunk")
// Over real sockets: two UDP engines on loopback, cookie round included.
do {
    var times: [Double] = []
    for _ in 0..<20 {
        let up = DispatchSemaphore(value: 0)
        let server = UDPLinkEngine(identity: bob, role: .hub, listen: IPEndpoint(host: "127.0.0.1", port: 0), staticPeers: [],
                                   clock: { Int64(Date().timeIntervalSince1970 * 1000) }, events: LinkUpSignal(up: nil))
        try server.start()
        let client = UDPLinkEngine(identity: alice, role: .endpoint, listen: IPEndpoint(host: "127.0.0.1", port: 0),
                                   staticPeers: [server.boundAddress!], clock: { Int64(Date().timeIntervalSince1970 * 1000) },
                                   events: LinkUpSignal(up: up))
        let t0 = DispatchTime.now().uptimeNanoseconds
        try client.start()
        guard up.wait(timeout: .now() + 5) == .success else { print("  UDP link did not come up"); break }
        times.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e6)
        client.stop()
        server.stop()
    }
    times.sort()
    if !times.isEmpty {
        print(String(format: "UDP link up over loopback (hello, cookie, hello, reply, identity): median %.2f ms, max %.2f ms (%d links)",
                     times[times.count / 2], times.last!, times.count))
    }
}

print("== store (SQLCipher, durable commits)")
let rate = try BundleStoreBenchmark.acceptRate(count: 2000)
print("bundle store accept (1 KB, WAL, synchronous=FULL)".padding(toLength: 56, withPad: " ", startingAt: 0) + String(format: "%10.0f accepts/s", rate))

// Router throughput: a real hub process on loopback, two in-process endpoints.
}
print("== router: envelopes through one hub on loopback (UDP example transport)")
let count = Int(argument("--messages") ?? "") ?? 5000
let exeDir = (CommandLine.arguments[0] as NSString).deletingLastPathComponent
let hubBinary = argument("--hub-binary") ?? exeDir + "/yaok-hub"
let pluginSource = argument("--plugin-dir") ?? exeDir
let work = NSTemporaryDirectory() + "yaok-bench-\(getpid())"
try FileManager.default.createDirectory(atPath: work + "/plugins", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
defer { try? FileManager.default.removeItem(atPath: work) }
try FileManager.default.copyItem(atPath: pluginSource + "/libyaok-plugin-udp.so", toPath: work + "/plugins/libyaok-plugin-udp.so")
let port = 20_000 + Int(getpid() % 20_000)
let config = """
hub:
  data_dir: \(work)/hub
  control_socket: \(work)/control.sock
  plugin_dirs: ["\(work)/plugins"]
  log_level: warning
router:
  link_frames_per_second: 1000000
  sender_envelopes_per_minute: 1000000
transports:
  udp:
    enabled: true
    listen: 127.0.0.1:\(port)
"""
try config.write(toFile: work + "/hub.yaml", atomically: true, encoding: .utf8)
if !FileManager.default.isExecutableFile(atPath: hubBinary) { fatalError("no hub binary at \(hubBinary); pass --hub-binary") }
_ = FileManager.default.createFile(atPath: work + "/hub.log", contents: nil)
func startHub() throws -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: hubBinary)
    p.arguments = ["run", "--config", work + "/hub.yaml"]
    let log = FileHandle(forWritingAtPath: work + "/hub.log")
    log?.seekToEndOfFile()
    p.standardError = log
    try p.run()
    return p
}
/// The running hub; `--kill-every` replaces it after each SIGKILL.
// @unchecked: `process`, `kills` and `stopped` only under `lock` once the killer thread runs.
final class HubBox: @unchecked Sendable {
    let lock = NSLock()
    var process: Process
    var kills = 0
    var stopped = false
    init(_ p: Process) { process = p }
    var current: Process { lock.withLock { process } }
}
let hubBox = HubBox(try startHub())
let hub = hubBox.process
defer { hubBox.lock.withLock { hubBox.stopped = true; hubBox.process.terminate() } }
// `--start-timeout S`: how long the hub may take to answer (under callgrind it takes minutes).
let deadline = Date().addingTimeInterval(argument("--start-timeout").flatMap(Double.init) ?? 30)
while !FileManager.default.fileExists(atPath: work + "/control.sock") && Date() < deadline { usleep(50_000) }
guard FileManager.default.fileExists(atPath: work + "/control.sock") else {
    fatalError("the hub did not start: \((try? String(contentsOfFile: work + "/hub.log", encoding: .utf8)) ?? "")")
}

let a = try Endpoint.initialize(home: work + "/a", name: "Alice")
let b = try Endpoint.initialize(home: work + "/b", name: "Bob")
let bobContact = try a.addContact(uri: b.contactCode())
try b.addContact(uri: a.contactCode())
let text = String(repeating: "m", count: 200)
var composedIDs: [[UInt8]] = []
// `--rate R`: messages are composed one at a time at R per second while the run is on (the
// added latency at an offered load); without it, all are composed first (a backlog).
let pacedRate = argument("--rate").flatMap { Int($0) }.map { max(1, $0) }
if pacedRate == nil {
    for chunk in stride(from: 0, to: count, by: 1000) {
        composedIDs += try a.compose(to: bobContact, texts: Array(repeating: text, count: min(1000, count - chunk))).map(\.messageID)
    }
}
// @unchecked: `values` only under `lock`.
final class Latencies: @unchecked Sendable {
    let lock = NSLock()
    var values: [Int64] = []
}
let latencies = Latencies()
let hubAddress = try HubSession.parseHub("udp://127.0.0.1:\(port)")
let bobSession = HubSession(endpoint: b, hub: hubAddress) { event in
    if case .incoming(.message(let m)) = event {
        latencies.lock.withLock { latencies.values.append(m.receivedMs - m.createdMs) }
    }
}
try bobSession.start()
let aliceSession = HubSession(endpoint: a, hub: hubAddress) { _ in }
// Alice's own hub: its custody is final (the common case; an untrusted hub's acks cost the
// phone a read of each item to decide whether to resend it later).
aliceSession.trust = HubTrust(anyHub: true)
/// CPU seconds of the hub and of its plugin processes (its children), from /proc.
func hubTreeCPU(_ pid: Int32) -> Double {
    func ticks(_ p: String) -> Double {
        let stat = (try? String(contentsOfFile: "/proc/\(p)/stat", encoding: .utf8)) ?? ""
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        return fields.count > 13 ? (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0) : 0
    }
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    let children = tasks.flatMap { ((try? String(contentsOfFile: "/proc/\(pid)/task/\($0)/children", encoding: .utf8)) ?? "").split(separator: " ").map(String.init) }
    return ([String(pid)] + children).map(ticks).reduce(0, +) / Double(sysconf(Int32(_SC_CLK_TCK)))
}
/// Bytes the hub process has caused to be written to storage (`write_bytes` in /proc/PID/io):
/// what wears a Pi's SD card. Plugin processes write nothing to disk here.
func hubWriteBytes(_ pid: Int32) -> Int64? {
    guard let io = try? String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8) else { return nil }
    for line in io.split(separator: "\n") where line.hasPrefix("write_bytes:") {
        return Int64(line.split(separator: " ").last ?? "")
    }
    return nil
}
let writesBefore = hubWriteBytes(hub.processIdentifier)
let treeBefore = hubTreeCPU(hub.processIdentifier)
let cpuBefore = (try? String(contentsOfFile: "/proc/\(hub.processIdentifier)/stat", encoding: .utf8)) ?? ""
let endpointsCPUBefore = cpuSeconds()
let start = Date()
try aliceSession.start()
// `--kill-every S`: SIGKILL the hub every S seconds while the run is on and start it again at
// once (the kill loop at this rate: nothing may be lost or delivered twice; checked below).
// `--kills N` bounds how many (default 5); after the last the run finishes undisturbed.
let killEvery = argument("--kill-every").flatMap(Double.init)
let maxKills = Int(argument("--kills") ?? "") ?? 5
if let every = killEvery {
    Thread.detachNewThread {
        while hubBox.lock.withLock({ hubBox.kills }) < maxKills {
            usleep(UInt32(every * 1e6))
            let victim: Process? = hubBox.lock.withLock { hubBox.stopped ? nil : hubBox.process }
            guard let victim else { return }
            kill(victim.processIdentifier, SIGKILL)
            victim.waitUntilExit()
            hubBox.lock.withLock {
                guard !hubBox.stopped, let next = try? startHub() else { return }
                hubBox.process = next
                hubBox.kills += 1
            }
        }
    }
}
var offeredElapsed = 0.0
if let r = pacedRate {
    let interval = 1.0 / Double(r)
    for i in 0..<count {
        let wait = start.addingTimeInterval(Double(i) * interval).timeIntervalSinceNow
        if wait > 0 { usleep(UInt32(wait * 1e6)) }
        composedIDs.append(try a.compose(to: bobContact, text: text).messageID)
        aliceSession.flush()
    }
    offeredElapsed = Date().timeIntervalSince(start)
}
while latencies.lock.withLock({ latencies.values.count }) < count && Date().timeIntervalSince(start) < 600 { usleep(20_000) }
let elapsed = Date().timeIntervalSince(start)
if killEvery != nil {
    let kills = hubBox.lock.withLock { hubBox.stopped = true; return hubBox.kills }
    let inbox = try b.store.inbox().map(\.messageID)
    let lost = Set(composedIDs).subtracting(inbox).count
    let twice = inbox.count - Set(inbox).count
    print(String(format: "kill loop: %d messages%@, hub SIGKILLed %d times (every %.1f s): %.0f msg/s end to end; lost %d, delivered twice %d",
                 count, pacedRate.map { " offered at \($0) msg/s" } ?? " (a backlog)", kills, killEvery!,
                 Double(inbox.count) / elapsed, lost, twice))
    aliceSession.stop()
    bobSession.stop()
    hubBox.current.terminate()
    hubBox.current.waitUntilExit()
    try? FileManager.default.removeItem(atPath: work)
    exit(lost == 0 && twice == 0 && inbox.count == count ? 0 : 1)
}
let endpointsCPU = cpuSeconds() - endpointsCPUBefore
let cpuAfter = (try? String(contentsOfFile: "/proc/\(hub.processIdentifier)/stat", encoding: .utf8)) ?? ""
let treeCPU = hubTreeCPU(hub.processIdentifier) - treeBefore
let writesAfter = hubWriteBytes(hub.processIdentifier)
func cpuTicks(_ stat: String) -> Double {
    let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
    return fields.count > 13 ? (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0) : 0
}
let hubCPU = (cpuTicks(cpuAfter) - cpuTicks(cpuBefore)) / Double(sysconf(Int32(_SC_CLK_TCK)))
let delivered = latencies.lock.withLock { latencies.values.count }
let sorted = latencies.lock.withLock { latencies.values.sorted() }
func percentile(_ p: Double) -> Int64 { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
print("end to end, A → hub → B, 200 B messages".padding(toLength: 56, withPad: " ", startingAt: 0)
      + String(format: "%10.0f msg/s   (%d of %d delivered in %.1f s)", Double(delivered) / elapsed, delivered, count, elapsed))
if let r = pacedRate {
    print(String(format: "offered %d msg/s (%.0f achieved by the composer); latency created → stored at B (ms, 1 ms resolution): p50 %d  p99 %d  max %d",
                 r, Double(count) / max(offeredElapsed, 1e-9), percentile(0.5), percentile(0.99), sorted.last ?? 0))
} else {
    print("latency created → stored at B (ms): p50 \(percentile(0.5))  p99 \(percentile(0.99))  (includes queueing behind the backlog)")
}
print(String(format: "hub CPU time %.2f s (%.2f ms per message), with its plugin processes %.2f s (%.2f ms per message), hub peak RSS %d KiB",
             hubCPU, hubCPU * 1000 / Double(max(1, delivered)), treeCPU, treeCPU * 1000 / Double(max(1, delivered)),
             peakRSSKiB(pid: hub.processIdentifier) ?? -1))
print(String(format: "endpoints A and B (this process) CPU time %.2f s (%.2f ms per message) over %.1f s on %d cores",
             endpointsCPU, endpointsCPU * 1000 / Double(max(1, delivered)), elapsed, sysconf(Int32(_SC_NPROCESSORS_ONLN))))
if let before = writesBefore, let after = writesAfter {
    // Each message crosses the hub once and its delivery receipt once: two bundles per message.
    print(String(format: "hub disk writes %.1f MB (%.0f bytes per message, receipt included; /proc/PID/io write_bytes)",
                 Double(after - before) / 1e6, Double(after - before) / Double(max(1, delivered))))
}
// How the endpoints grouped theirs (HubSession group commit).
for (name, session) in [("A", aliceSession), ("B", bobSession)] {
    let c = session.groupCommits
    print(String(format: "endpoint %@: %d group commits covering %d frames (%.1f per commit); a group open → committed: mean %.2f ms, longest %.2f ms",
                 name, c.groups, c.frames, Double(c.frames) / Double(max(1, c.groups)),
                 Double(c.totalOpenUs) / 1000 / Double(max(1, c.groups)), Double(c.longestOpenUs) / 1000))
}
// How the hub grouped its store changes (router counters, from `yaok-hub status --json`).
let statusRun = Process()
statusRun.executableURL = URL(fileURLWithPath: hubBinary.hasSuffix("yaok-hub") ? hubBinary : exeDir + "/yaok-hub")
statusRun.arguments = ["status", "--json", "--config", work + "/hub.yaml"]
let statusPipe = Pipe()
statusRun.standardOutput = statusPipe
if (try? statusRun.run()) != nil {
    let data = statusPipe.fileHandleForReading.readDataToEndOfFile()
    statusRun.waitUntilExit()
    if let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any], let router = json["router"] as? [String: Any],
       let counters = router["counters"] as? [String: Any], let commits = counters["groupCommits"] as? Int, let items = counters["groupCommitItems"] as? Int {
        print(String(format: "store: %d group commits covering %d router work items (%.1f per commit, %.2f commits per message)",
                     commits, items, Double(items) / Double(max(1, commits)), Double(commits) / Double(max(1, delivered))))
        // Two figures from the router's histograms (50 µs buckets below 100 ms): the bundle's
        // onward send does not wait for its commit; its custody ack to the sender does.
        for (name, label) in [("hopLatency", "hub's added latency per bundle (frame in → sent on)"),
                              ("custodyLatency", "custody ack latency (frame in → durable → ack sent)")] {
            if let n = counters[name + "Samples"] as? Int, let p50 = counters[name + "P50Us"] as? Int,
               let p99 = counters[name + "P99Us"] as? Int, let top = counters[name + "MaxUs"] as? Int {
                print(String(format: "%@: p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d bundles)",
                             label, Double(p50) / 1000, Double(p99) / 1000, Double(top) / 1000, n))
            }
        }
    }
}
aliceSession.stop()
bobSession.stop()
