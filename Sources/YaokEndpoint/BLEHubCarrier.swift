import Foundation
#if canImport(Glibc)
import Glibc
#endif
import YaokPluginKit
import YaokBluetooth

/// A BLE link to a hub: connects as an LE central (``BLEHubClient``), runs the endpoint
/// handshake, then serves sends and receives from one thread, because the ATT channel allows
/// one outstanding request and the client is blocking. Other threads queue frames and wake
/// the loop through a pipe. Reconnects with backoff until stopped.
// @unchecked: flags, queue and pipe under `lock`; the client only on the run thread; callbacks set before start.
final class BLEHubCarrier: @unchecked Sendable {
    let target: BLEHubTarget
    let identity: LinkIdentity
    private let lock = NSLock()
    private var running = false
    private var connected = false
    private var outgoing: [[UInt8]] = []
    private var client: BLEHubClient?
    /// The last failed attempt's reason, reported once.
    private var lastFailure: String?
    /// Written to wake the loop; [read end, write end].
    private var wakePipe: [Int32] = [-1, -1]
    var onUp: (@Sendable (LinkInfo) -> Void)?
    var onDown: (@Sendable (String) -> Void)?
    var onFrame: (@Sendable ([UInt8]) -> Void)?
    /// Frames waiting to be written, at most: the session's window is far below this.
    static let maxQueuedFrames = 1_000
    /// Silence after which the carrier pings the hub.
    static let pingAfterSeconds = 15

    init(target: BLEHubTarget, identity: LinkIdentity) {
        self.target = target
        self.identity = identity
    }

    deinit {
        for fd in wakePipe where fd >= 0 { close(fd) }
    }

    func start() throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw TransportError.failed("pipe: \(Errno(errno))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        lock.withLock {
            wakePipe = fds
            running = true
        }
        Thread.detachNewThread { [self] in run() }
    }

    func stop() {
        let c: BLEHubClient? = lock.withLock {
            running = false
            return client
        }
        wake()
        c?.shutdownConnection()
    }

    func send(_ frame: [UInt8]) throws {
        try lock.withLock {
            guard connected else { throw TransportError.notRunning }
            guard outgoing.count < Self.maxQueuedFrames else { throw TransportError.failed("\(outgoing.count) frames already queued") }
            // The session retransmits after a few seconds; at a small ATT MTU the first copy
            // may still be waiting here. Queue each frame once.
            if !outgoing.contains(frame) { outgoing.append(frame) }
        }
        wake()
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(lock.withLock { wakePipe[1] }, &byte, 1)
    }

    private func drainWake() {
        var sink = [UInt8](repeating: 0, count: 64)
        let fd = lock.withLock { wakePipe[0] }
        while read(fd, &sink, sink.count) > 0 {}
    }

    private func run() {
        var backoff = Backoff(baseMs: 1_000, capMs: 30_000, jitter: false)
        while lock.withLock({ running }) {
            do {
                let c = try BLEHubClient(adapter: target.adapter, hub: target.address, randomAddress: target.randomAddress,
                                         mtu: target.mtu, timeoutSeconds: 10)
                let keep: Bool = lock.withLock {
                    guard running else { return false }
                    client = c
                    return true
                }
                guard keep else { return }
                let hub = try c.handshake(identity: identity, role: .endpoint)
                lock.withLock {
                    connected = true
                    outgoing.removeAll()
                }
                backoff.reset()
                onUp?(LinkInfo(id: 1, peerSigningKey: hub.signingKey, peerKXKey: hub.kxKey, peerRole: hub.role,
                               mtu: ChunkReassembler.defaultMaxFrameSize, cost: 20, kind: "ble",
                               remote: "\(target) (ATT MTU \(c.mtu))"))
                try serve(c)
                finish(nil)
            } catch {
                finish("\(error)")
            }
            if lock.withLock({ running }) {
                Thread.sleep(forTimeInterval: Double(backoff.nextDelayMs()) / 1_000)
            }
        }
    }

    /// Until stopped: write queued frames, then wait (bounded) for a frame or a wake-up.
    private func serve(_ c: BLEHubClient) throws {
        let wakeFD = lock.withLock { wakePipe[0] }
        var quietSince = Date()
        // When each frame finished sending on this connection. At a small ATT MTU a 10 KB
        // frame takes hundreds of write round trips, longer than the session's retransmit
        // interval: a copy queued while the first was still going out is dropped unless a
        // whole interval has passed since the first copy was written.
        var sentAt: [[UInt8]: Date] = [:]
        let resendAfter = Double(HubSession.retransmitMs) / 1000
        while true {
            let (frames, live): ([[UInt8]], Bool) = lock.withLock {
                defer { outgoing.removeAll() }
                return (outgoing, running)
            }
            guard live else { return }
            let now = Date()
            sentAt = sentAt.filter { now.timeIntervalSince($0.value) < resendAfter }
            for frame in frames where sentAt[frame] == nil {
                try c.send(frame)
                sentAt[frame] = Date()
            }
            if !frames.isEmpty { quietSince = Date() }
            if let frame = try c.receive(timeoutMs: 1000, wake: wakeFD) {
                quietSince = Date()
                onFrame?(frame)
            } else {
                drainWake()
            }
            // Keep the link known to be alive, and find out when the hub is gone.
            if Date().timeIntervalSince(quietSince) >= Double(Self.pingAfterSeconds) {
                try c.send(TLVRecord(.ping, value: []).encoded)
                quietSince = Date()
            }
        }
    }

    /// Forgets the connection; reports the link down (with `error`) if it was up, and a failed
    /// attempt when its reason is new (so "no adapter" or "connect timed out" is said once, not
    /// on every retry).
    private func finish(_ error: String?) {
        let report: String? = lock.withLock {
            let up = connected
            connected = false
            client = nil
            outgoing.removeAll()
            guard running else { return nil }
            if up { lastFailure = nil; return error ?? "stopped" }
            guard let error, error != lastFailure else { return nil }
            lastFailure = error
            return error
        }
        if let report { onDown?(report) }
    }
}
