import Foundation
import YaokPluginKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The host side of one RNode on a serial port (Docs/protocol.md §10.1): opens the port,
/// brings the radio up with exactly the settings asked, passes on what it receives, and when
/// the device goes away or restarts brings it up again. The port is reopened by path each
/// time, so a replugged device (perhaps a new tty behind the same name) is found again.
///
/// One background thread per device does the reading and the bring-ups; events come on it,
/// one at a time, and none after ``stop()`` has returned. Nothing the device sends can stop
/// that thread: bytes are parsed with every length checked, and what makes no sense is counted.
// @unchecked: every `var` below `lock` is read and written only under it; the bytes read from
// the line (KISS decoder, reader) belong to the thread alone; writes to the port are
// serialised by `writeLock`, which the thread also holds to close it, so a `transmit` never
// writes to a closed (or reused) descriptor.
public final class RNodeDevice: @unchecked Sendable {
    /// What the device's owner hears.
    public enum Event: Sendable, Equatable {
        /// Bring-up done: the radio is on with exactly the settings asked. The firmware
        /// version as rnodeconf writes it ("1.86").
        case ready(firmware: String)
        /// The device cannot be used, and why, naming its path (also ``lastReason``). Sent when
        /// the device stops being ready and whenever the reason changes, not at every retry.
        case unavailable(String)
        /// A packet the radio received, with the signal figures the device sent before it.
        /// The bytes are as the air brought them: anyone's, unchecked.
        case packet([UInt8], rssiDBm: Int?, snrDB: Double?)
        /// The device's channel statistics (ESP32 and nRF52 RNodes).
        case channelStats(RNodeChannelStats)
    }

    /// What status and metrics show.
    public struct Counters: Sendable, Equatable {
        /// Packets (and their bytes) received from the air and handed to the device.
        public var packetsIn: UInt64 = 0, packetsOut: UInt64 = 0, bytesIn: UInt64 = 0, bytesOut: UInt64 = 0
        /// Frames the line spoiled: dropped by the KISS parser (oversized, a bad escape, a
        /// partial frame silent for 100 ms) or saying nothing this transport understands.
        public var lineNoise: UInt64 = 0
        /// Device errors that need no new bring-up (memory low, modem timeout).
        public var deviceErrors: UInt64 = 0
        /// Successful bring-ups, and the times the device went away (unplugged, or the line failed).
        public var bringUps: UInt64 = 0, unplugs: UInt64 = 0

        public init() {}
    }

    /// Why ``transmit(_:)`` did not hand a packet to the device.
    public enum TransmitError: Error, Equatable, CustomStringConvertible {
        /// The device is not ready; the reason is ``lastReason``.
        case notReady(String)
        /// Empty, or longer than ``RNodeRequest/maxPacket`` (254 bytes).
        case badLength(Int)
        /// The line would not take the packet (the device went away; it is brought up again).
        case wentAway(String)

        public var description: String {
            switch self {
            case .notReady(let why): return "the RNode is not ready: \(why)"
            case .badLength(let n): return "a packet of \(n) bytes: an RNode takes 1 to \(RNodeRequest.maxPacket)"
            case .wentAway(let why): return why
            }
        }
    }

    /// The serial port, e.g. /dev/ttyACM0 or a /dev/serial/by-id name.
    public let path: String
    public let settings: RNodeRadioSettings
    private let events: @Sendable (Event) -> Void
    private let retryInitialMs: Int64
    private let retryMaxMs: Int64
    private let answerTimeout: Double

    private let lock = NSLock()
    private var started = false
    private var running = false
    /// The open port, -1 when none; closed only by the thread, holding `writeLock`.
    private var fd: Int32 = -1
    private var ready = false
    /// A `transmit` could not write: the thread treats the line as gone.
    private var lineFailed = false
    private var firmwareText: String?
    private var reason = "not started"
    private var counts = Counters()
    private var thread: JoinableThread?
    /// Written once by `stop()` (under `lock`) to wake the thread; closed by the thread as it
    /// ends (under `lock`), so the write never meets a closed descriptor.
    private var wake: (read: Int32, write: Int32) = (-1, -1)

    private let writeLock = NSLock()
    /// Held while an event is delivered; `stop()` passes through it so no event is under way
    /// when it returns. Recursive: a callback may call `stop()`.
    private let emitLock = NSRecursiveLock()

    /// A device at `path`, to be brought up with `settings`; nothing happens before ``start()``.
    /// `events` is called on the device's thread. Retries after a failure wait
    /// `retryInitialSeconds`, doubling to `retryMaxSeconds`; each answer the device owes in a
    /// bring-up is awaited `answerTimeoutSeconds`.
    public init(path: String, settings: RNodeRadioSettings, events: @escaping @Sendable (Event) -> Void,
                retryInitialSeconds: Double = 5, retryMaxSeconds: Double = 60, answerTimeoutSeconds: Double = 2) {
        self.path = path
        self.settings = settings
        self.events = events
        retryInitialMs = max(1, Int64((retryInitialSeconds * 1000).rounded()))
        retryMaxMs = max(retryInitialMs, Int64((retryMaxSeconds * 1000).rounded()))
        answerTimeout = answerTimeoutSeconds
    }

    /// Starts the device's thread: open, bring up, read; on any failure, report it and try
    /// again later. Once per device: a second call, or one after ``stop()``, does nothing.
    public func start() {
        let thread = JoinableThread(name: "yaok-rnode") { [self] in run() }
        let go: Bool = lock.withLock {
            guard !started else { return false }
            started = true
            running = true
            reason = "starting"
            var p: [Int32] = [-1, -1]
            if pipe(&p) == 0 {
                for d in p { _ = fcntl(d, F_SETFD, FD_CLOEXEC); _ = fcntl(d, F_SETFL, fcntl(d, F_GETFL) | O_NONBLOCK) }
                wake = (p[0], p[1])
            }   // without it the thread still sees `stop()` within 250 ms: no wait of its is longer
            self.thread = thread
            return true
        }
        if go { thread.start() }
    }

    /// Turns the radio off (if the port is open), closes the port and waits for the thread:
    /// returns within 2 s, and no event comes after it has returned. Idempotent. Called from
    /// an event callback, it returns at once and the thread ends when the callback has.
    public func stop() {
        let thread: JoinableThread? = lock.withLock {
            guard running else { return nil }
            running = false
            ready = false
            reason = "stopped"
            if wake.write >= 0 { var b: UInt8 = 1; _ = write(wake.write, &b, 1) }
            return self.thread
        }
        guard let thread else { return }
        thread.join(timeout: 1.5)
        // An event being delivered has finished once this passes (bounded: a callback stuck
        // for seconds cannot hold stop() for ever; none starts after `running` went false).
        if emitLock.lock(before: Date().addingTimeInterval(0.4)) { emitLock.unlock() }
    }

    /// Hands one packet (1...254 bytes) to the device to transmit. Throws when the device is
    /// not ready, the packet is empty or too long, or the line does not take it within about
    /// 100 ms (then the device is treated as gone and brought up again). Never blocks longer.
    public func transmit(_ packet: [UInt8]) throws {
        guard let frame = RNodeRequest.data(packet) else { throw TransmitError.badLength(packet.count) }
        try writeLock.withLock {
            let (fd, why): (Int32, String) = lock.withLock { (ready && running && !lineFailed ? self.fd : -1, reason) }
            guard fd >= 0 else { throw TransmitError.notReady(why) }
            guard Self.writeAll(frame, to: fd) else {
                lock.withLock { lineFailed = true; ready = false }
                throw TransmitError.wentAway(wentAwayReason)
            }
            lock.withLock {
                counts.packetsOut += 1
                counts.bytesOut += UInt64(packet.count)
            }
        }
    }

    /// Whether the radio is on with the asked settings, taking packets.
    public var isReady: Bool { lock.withLock { ready } }
    /// The firmware version the device last reported ("1.86"), kept while it is away.
    public var firmware: String? { lock.withLock { firmwareText } }
    /// What status shows: "ready: RNode firmware 1.86 on PATH", the reason it is unavailable,
    /// "not started", "starting" or "stopped".
    public var lastReason: String { lock.withLock { reason } }
    public var counters: Counters { lock.withLock { counts } }

    // MARK: - The thread

    private var wentAwayReason: String { "the RNode on \(path) went away" }
    private var isRunning: Bool { lock.withLock { running } }

    /// How a session on one opening of the port ended.
    private enum Ending {
        case stopped
        case wentAway
        /// `slow`: the device will not change by itself (old firmware, settings it cannot
        /// apply), so the next try waits the longest delay. `missing`: the path does not exist.
        case failed(String, slow: Bool, missing: Bool)
    }

    private func run() {
        var backoff = Backoff(baseMs: retryInitialMs, capMs: retryMaxMs, jitter: false)
        while isRunning {
            let delayMs: Int64
            switch session(&backoff) {
            case .stopped:
                delayMs = 0
            case .wentAway:
                lock.withLock { counts.unplugs += 1 }
                report(wentAwayReason)
                delayMs = backoff.nextDelayMs()
            case .failed(let why, let slow, let missing):
                // A device that went away and is not back yet: status keeps saying it went away.
                if !(missing && lastReason == wentAwayReason) { report(why) }
                delayMs = slow ? retryMaxMs : backoff.nextDelayMs()
            }
            guard pause(Double(delayMs) / 1000) else { break }
        }
        lock.withLock {
            for d in [wake.read, wake.write] where d >= 0 { close(d) }
            wake = (-1, -1)
        }
    }

    /// One opening of the port: bring-up, then reading, bring-up again after a restart, until
    /// the line ends, a bring-up fails or `stop()`. Closes the port (radio off first, if it was
    /// asked on and the line still works).
    private func session(_ backoff: inout Backoff) -> Ending {
        let fd: Int32
        switch openPort() {
        case .failure(let f): return .failed(f.reason, slow: false, missing: f.missing)
        case .success(let d): fd = d
        }
        lock.withLock {
            self.fd = fd
            lineFailed = false
        }
        var line = Line(fd: fd, wake: lock.withLock { wake.read })
        var radioAsked = false
        defer { closePort(line, radioOff: radioAsked) }
        var quickRestarts = 0
        var readySince = 0.0
        while true {
            switch bringUp(&line, radioAsked: &radioAsked) {
            case .ended:
                return line.end == .gone ? .wentAway : .stopped
            case .failed(let why, let slow):
                return .failed(why, slow: slow, missing: false)
            case .ready(let fw):
                backoff.reset()
                readySince = Self.now()
                let up: Bool = lock.withLock {
                    guard running else { return false }
                    ready = true
                    reason = "ready: RNode firmware \(fw) on \(path)"
                    counts.bringUps += 1
                    return true
                }
                if up { emit(.ready(firmware: fw)) }
            }
            switch serve(&line) {
            case .ended:
                return line.end == .gone ? .wentAway : .stopped
            case .restart(let why):
                report(why)
                // The first restart in a while is served at once; a device that keeps
                // restarting is given the retry delays, so it cannot keep this thread spinning.
                if Self.now() - readySince >= Double(retryMaxMs) / 1000 { quickRestarts = 0 }
                quickRestarts += 1
                if quickRestarts > 1 {
                    let ms = Backoff.delayMs(failures: quickRestarts - 1, baseMs: retryInitialMs, capMs: retryMaxMs)
                    guard pause(Double(ms) / 1000) else { return .stopped }
                }
            }
        }
    }

    private enum BringUp {
        case ready(String)
        case failed(String, slow: Bool)
        /// The line ended or `stop()` was called (`Line.end` says which).
        case ended
    }

    /// Detect (sent again every 250 ms: a device still booting ignores the first), the
    /// firmware version, the settings and the radio on, each echo compared with what was asked.
    private func bringUp(_ line: inout Line, radioAsked: inout Bool) -> BringUp {
        var detected = false
        var version: (major: UInt8, minor: UInt8)?
        func note(_ events: [RNodeEvent]) {
            for e in events {
                if e == .detected { detected = true }
                if case .firmwareVersion(let major, let minor) = e { version = (major, minor) }
            }
        }
        let start = Self.now()
        var nextDetect = start
        while !detected {
            let t = Self.now()
            guard t < start + answerTimeout else {
                return .failed("no RNode answers on \(path) (is it an RNode? is the firmware installed?)", slow: false)
            }
            if t >= nextDetect {
                guard send(RNodeRequest.detect, on: &line) else { return .ended }
                nextDetect = t + 0.25
            }
            note(pump(&line, for: min(nextDetect, start + answerTimeout) - Self.now()))
            if line.end != nil { return .ended }
        }
        if version == nil {   // asked with detect; once more, then wait for it
            guard send(KISS.frame(command: RNodeCommand.firmwareVersion.rawValue, payload: [0x00]), on: &line) else { return .ended }
            let deadline = Self.now() + answerTimeout
            while version == nil && Self.now() < deadline {
                note(pump(&line, for: deadline - Self.now()))
                if line.end != nil { return .ended }
            }
        }
        guard let version else { return .failed("the RNode on \(path) does not say which firmware it runs", slow: false) }
        let fw = Self.versionText(version.major, version.minor)
        lock.withLock { firmwareText = fw }
        let oldest = RNodeRequest.minimumFirmware
        guard (version.major, version.minor) >= (oldest.major, oldest.minor) else {
            return .failed("RNode firmware \(fw) on \(path) is older than \(Self.versionText(oldest.major, oldest.minor)); update it with rnodeconf",
                           slow: true)
        }

        radioAsked = true
        guard send(RNodeRequest.configure(settings), on: &line) else { return .ended }
        var applied: [RNodeEvent] = []
        let deadline = Self.now() + answerTimeout
        while Self.now() < deadline && !applied.contains(where: { if case .radioState = $0 { return true } else { return false } }) {
            applied += pump(&line, for: deadline - Self.now())
            if line.end != nil { return .ended }
        }
        let wrong = radioMismatches(asked: settings, applied: applied)
        guard wrong.isEmpty else { return .failed(wrong.joined(separator: "; "), slow: true) }
        return .ready(fw)
    }

    private enum Served {
        case restart(String)
        /// The line ended or `stop()` was called (`Line.end` says which).
        case ended
    }

    /// Reads while the radio is up, until the device restarts, the line ends or `stop()`.
    private func serve(_ line: inout Line) -> Served {
        while true {
            for e in pump(&line, for: 0.25) {
                switch e {
                case .packet(let bytes, let rssi, let snr):
                    lock.withLock {
                        counts.packetsIn += 1
                        counts.bytesIn += UInt64(bytes.count)
                    }
                    emit(.packet(bytes, rssiDBm: rssi, snrDB: snr))
                case .channelStats(let stats):
                    emit(.channelStats(stats))
                case .booted:
                    return .restart("the RNode on \(path) restarted; configuring it again")
                case .error(let error) where error.needsBringUp:
                    return .restart("the RNode on \(path) reported an error (\(error)); configuring it again")
                case .error:
                    lock.withLock { counts.deviceErrors += 1 }
                default:
                    break   // echoes and answers nobody asked for now: harmless
                }
            }
            if line.end != nil { return .ended }
        }
    }

    /// The device is not usable: status says why; the owner hears it when the device was
    /// ready or the reason is new. Nothing after `stop()`.
    private func report(_ why: String) {
        let tell: Bool = lock.withLock {
            guard running else { return false }
            let was = ready
            ready = false
            guard was || reason != why else { return false }
            reason = why
            return true
        }
        if tell { emit(.unavailable(why)) }
    }

    private func emit(_ event: Event) {
        emitLock.lock()
        defer { emitLock.unlock() }
        guard isRunning else { return }
        events(event)
    }

    /// Waits `seconds`; false when `stop()` was called.
    private func pause(_ seconds: Double) -> Bool {
        let end = Self.now() + seconds
        let wakeFD = lock.withLock { wake.read }
        while isRunning {
            let left = end - Self.now()
            if left <= 0 { return true }
            var p = pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, Self.milliseconds(min(left, 0.25)))
        }
        return false
    }

    // MARK: - The line

    /// The thread's view of one opening of the port.
    private struct Line {
        enum End { case gone, stopped }
        let fd: Int32
        let wake: Int32
        var decoder = KISSDecoder()
        var reader = RNodeReader()
        var lastByte = 0.0
        /// `decoder.dropped` already added to the counters.
        var droppedCounted = 0
        var end: End?

        init(fd: Int32, wake: Int32) {
            self.fd = fd
            self.wake = wake
        }
    }

    /// Waits up to `seconds` (at most 250 ms) for bytes; the events they complete. Sets
    /// `line.end` when the line has ended (end of file, an error, a hang-up, a failed
    /// transmit) or `stop()` was called; the events read before are still returned.
    private func pump(_ line: inout Line, for seconds: Double) -> [RNodeEvent] {
        let (run, failed) = lock.withLock { (running, lineFailed) }
        guard run else { line.end = .stopped; return [] }
        guard !failed else { line.end = .gone; return [] }
        var wait = min(max(0, seconds), 0.25)
        if line.decoder.hasPartialFrame { wait = min(wait, max(0, line.lastByte + 0.1 - Self.now())) }
        var fds = [pollfd(fd: line.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: line.wake, events: Int16(POLLIN), revents: 0)]
        let ready = poll(&fds, 2, Self.milliseconds(wait))
        if ready < 0 && errno != EINTR { line.end = .gone; return [] }
        var events: [RNodeEvent] = []
        var noise: UInt64 = 0
        if ready > 0 && fds[0].revents != 0 {
            var buffer = [UInt8](repeating: 0, count: 1024)
            reading: while true {
                let n = read(line.fd, &buffer, buffer.count)
                if n > 0 {
                    line.lastByte = Self.now()
                    for frame in line.decoder.feed(Array(buffer[0..<n])) {
                        let e = line.reader.event(frame)
                        if Self.isNoise(frame, e) { noise += 1 } else { events.append(e) }
                    }
                    continue
                }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { break reading }
                line.end = .gone   // end of file, or EIO: the device (or the pty's other end) is gone
                break reading
            }
            if fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { line.end = .gone }
        }
        if line.decoder.hasPartialFrame && Self.now() - line.lastByte >= 0.1 { line.decoder.dropPartialFrame() }
        noise += UInt64(line.decoder.dropped - line.droppedCounted)
        line.droppedCounted = line.decoder.dropped
        if noise > 0 { lock.withLock { counts.lineNoise += noise } }
        if line.end == nil && !isRunning { line.end = .stopped }
        return events
    }

    /// Whether a frame is one a device in good order does not send us: an unknown command, or
    /// a known one with a payload that does not fit it. (The reader reports signal figures
    /// and PHY parameters as ignored too; those are not noise.)
    private static func isNoise(_ frame: KISSFrame, _ event: RNodeEvent) -> Bool {
        guard case .ignored = event else { return false }
        switch RNodeCommand(rawValue: frame.command) {
        case .statRSSI?, .statSNR?: return frame.payload.count != 1
        case .statPhyParams?, .shortTermAirtimeLimit?, .leave?: return false
        default: return true
        }
    }

    /// Writes a request from the thread; false (and `line.end`) when the line will not take it.
    private func send(_ bytes: [UInt8], on line: inout Line) -> Bool {
        guard writeLock.withLock({ Self.writeAll(bytes, to: line.fd) }) else {
            line.end = .gone
            return false
        }
        return true
    }

    private func closePort(_ line: Line, radioOff: Bool) {
        writeLock.withLock {
            if radioOff && line.end != .gone { _ = Self.writeAll(RNodeRequest.leave, to: line.fd) }
            lock.withLock {
                fd = -1
                ready = false
            }
            close(line.fd)
        }
    }

    private struct OpenFailure: Error {
        var reason: String
        var missing = false
    }

    /// Opens the port raw at 115200 baud, 8N1, no flow control, and drops whatever waited in it.
    private func openPort() -> Result<Int32, OpenFailure> {
        let fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            if e == ENOENT { return .failure(OpenFailure(reason: "\(path) does not exist", missing: true)) }
            return .failure(OpenFailure(reason: "cannot open \(path): \(Self.errorText(e))"))
        }
        var t = termios()
        guard tcgetattr(fd, &t) == 0 else {
            let e = errno
            close(fd)
            return .failure(OpenFailure(reason: "\(path) is not a serial port (\(Self.errorText(e)))"))
        }
        cfmakeraw(&t)
        _ = cfsetispeed(&t, speed_t(B115200))
        _ = cfsetospeed(&t, speed_t(B115200))
        t.c_cflag |= tcflag_t(CLOCAL | CREAD | CS8)
        t.c_cflag &= ~(tcflag_t(CSTOPB | PARENB) | tcflag_t(CRTSCTS))
        t.c_iflag &= ~tcflag_t(IXON | IXOFF | IXANY)
        guard tcsetattr(fd, TCSANOW, &t) == 0 else {
            let e = errno
            close(fd)
            return .failure(OpenFailure(reason: "cannot set up \(path) as a serial line: \(Self.errorText(e))"))
        }
        _ = tcflush(fd, TCIOFLUSH)
        return .success(fd)
    }

    /// Writes all of `bytes` to a non-blocking descriptor, waiting at most 100 ms for the line
    /// to take them; false on an error or when it would not.
    private static func writeAll(_ bytes: [UInt8], to fd: Int32) -> Bool {
        let deadline = now() + 0.1
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n > 0 { offset += n; continue }
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return false }
            let left = deadline - now()
            guard left > 0 else { return false }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            if poll(&p, 1, milliseconds(left)) > 0 && p.revents & Int16(POLLERR | POLLHUP | POLLNVAL) != 0 { return false }
        }
        return true
    }

    /// "1.86": major, then the minor number in two digits, as rnodeconf writes it.
    static func versionText(_ major: UInt8, _ minor: UInt8) -> String {
        "\(major)." + (minor < 10 ? "0" : "") + "\(minor)"
    }

    private static func errorText(_ e: Int32) -> String { String(cString: strerror(e)) }

    private static func milliseconds(_ seconds: Double) -> Int32 { Int32(max(0, (seconds * 1000).rounded(.up))) }

    /// Monotonic seconds.
    private static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
