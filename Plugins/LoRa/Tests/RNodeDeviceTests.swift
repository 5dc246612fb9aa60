import Foundation
import Glibc
import XCTest
import YaokLoRaPlugin
import YaokRNodeEmulator
import YaokTesting

/// RNodeDevice against yaok-rnode-sim: real pseudo-terminals, a real process, the device's own
/// thread. Every wait is for an event or a line the emulator prints, with a deadline.
final class RNodeDeviceTests: XCTestCase {
    static let settings = RNodeRadioSettings(frequencyHz: 868_500_000, bandwidthHz: 125_000, txPowerDBm: 14, spreadingFactor: 7,
                                             codingRate: 5, longTermAirtimeLimit: 100)

    /// One device's events, in order, waited for with a deadline.
    final class Recorder: @unchecked Sendable {
        private let condition = NSCondition()
        private var list: [RNodeDevice.Event] = []

        var events: [RNodeDevice.Event] { condition.withLock { list } }
        var count: Int { condition.withLock { list.count } }

        func add(_ e: RNodeDevice.Event) {
            condition.withLock {
                list.append(e)
                condition.broadcast()
            }
        }

        /// The first event at index `from` or later that `match` accepts, waiting up to `timeout` seconds.
        func wait(from: Int = 0, timeout: Double = 10, _ match: (RNodeDevice.Event) -> Bool) -> RNodeDevice.Event? {
            let deadline = Date().addingTimeInterval(timeout)
            condition.lock()
            defer { condition.unlock() }
            while true {
                if from < list.count, let e = list[from...].first(where: match) { return e }
                guard condition.wait(until: deadline) else { return list.count > from ? list[from...].first(where: match) : nil }
            }
        }

        func waitReady(from: Int = 0, timeout: Double = 10) -> String? {
            guard case .ready(let fw)? = wait(from: from, timeout: timeout, { if case .ready = $0 { return true } else { return false } }) else { return nil }
            return fw
        }

        func waitUnavailable(from: Int = 0, timeout: Double = 10) -> String? {
            guard case .unavailable(let why)? = wait(from: from, timeout: timeout, { if case .unavailable = $0 { return true } else { return false } })
            else { return nil }
            return why
        }

        func waitPacket(_ bytes: [UInt8], from: Int = 0, timeout: Double = 10) -> RNodeDevice.Event? {
            wait(from: from, timeout: timeout) { if case .packet(let got, _, _) = $0 { return got == bytes } else { return false } }
        }
    }

    func device(_ path: String, _ recorder: Recorder, settings: RNodeRadioSettings = RNodeDeviceTests.settings,
                retryInitialSeconds: Double = 0.2) -> RNodeDevice {
        RNodeDevice(path: path, settings: settings, events: { recorder.add($0) },
                    retryInitialSeconds: retryInitialSeconds, retryMaxSeconds: 1, answerTimeoutSeconds: 2)
    }

    func testBringsUpAGoodDeviceAndCarriesAPacketToAnotherInRange() throws {
        let sim = try RNodeSimulator(["--devices", "2"])
        defer { sim.finish() }
        let ra = Recorder(), rb = Recorder()
        let a = device(sim.path(0), ra), b = device(sim.path(1), rb)
        defer { a.stop(); b.stop() }
        XCTAssertThrowsError(try a.transmit([1])) { XCTAssertEqual($0 as? RNodeDevice.TransmitError, .notReady("not started")) }
        a.start()
        b.start()
        XCTAssertEqual(ra.waitReady(), "1.86", "the emulator reports firmware 0x01 0x56")
        XCTAssertEqual(rb.waitReady(), "1.86")
        XCTAssertTrue(a.isReady)
        XCTAssertEqual(a.firmware, "1.86")
        XCTAssertEqual(a.lastReason, "ready: RNode firmware 1.86 on \(sim.path(0))")

        let packet = Array("over the air".utf8)
        try a.transmit(packet)
        XCTAssertEqual(rb.waitPacket(packet), .packet(packet, rssiDBm: -100, snrDB: 5), "the signal figures come with the packet")
        XCTAssertTrue(sim.lines.wait(for: "rx 1 n=12"))
        XCTAssertEqual(a.counters.packetsOut, 1)
        XCTAssertEqual(a.counters.bytesOut, 12)
        XCTAssertEqual(b.counters.packetsIn, 1)
        XCTAssertEqual(b.counters.bytesIn, 12)
        XCTAssertEqual(a.counters.bringUps, 1)
        XCTAssertEqual(b.counters.lineNoise, 0, "signal figures and echoes are not noise")

        XCTAssertThrowsError(try a.transmit([])) { XCTAssertEqual($0 as? RNodeDevice.TransmitError, .badLength(0)) }
        XCTAssertThrowsError(try a.transmit([UInt8](repeating: 7, count: 255))) { XCTAssertEqual($0 as? RNodeDevice.TransmitError, .badLength(255)) }
        try a.transmit([UInt8](repeating: 0xC0, count: 254))   // the largest, every byte escaped
        XCTAssertNotNil(rb.waitPacket([UInt8](repeating: 0xC0, count: 254)))
        XCTAssertEqual(ra.events, [.ready(firmware: "1.86")], "nothing else happened to the sender")
    }

    func testSaysWhyADeviceCannotBeUsed() throws {
        let missing = NSTemporaryDirectory() + "no-such-dir-\(getpid())/ttyACM9"
        let rm = Recorder()
        let m = device(missing, rm)
        defer { m.stop() }
        m.start()
        XCTAssertEqual(rm.waitUnavailable(), "\(missing) does not exist")

        let sim = try RNodeSimulator(["--devices", "3", "--silent", "0", "--firmware", "1=1.40"])
        defer { sim.finish() }
        var louder = Self.settings
        louder.txPowerDBm = 20
        let rs = Recorder(), rf = Recorder(), rp = Recorder()
        let silent = device(sim.path(0), rs), old = device(sim.path(1), rf), loud = device(sim.path(2), rp, settings: louder)
        defer { silent.stop(); old.stop(); loud.stop() }
        let started = Date()
        for d in [silent, old, loud] { d.start() }

        XCTAssertEqual(rf.waitUnavailable(), "RNode firmware 1.40 on \(sim.path(1)) is older than 1.52; update it with rnodeconf")
        XCTAssertEqual(old.firmware, "1.40")
        XCTAssertEqual(rp.waitUnavailable(), "tx_power_dbm: asked 20 dBm, the device applies 17 dBm")
        XCTAssertEqual(rs.waitUnavailable(timeout: 4), "no RNode answers on \(sim.path(0)) (is it an RNode? is the firmware installed?)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 3.5, "detect is given 2 s")
        XCTAssertEqual(silent.lastReason, "no RNode answers on \(sim.path(0)) (is it an RNode? is the firmware installed?)")
        XCTAssertThrowsError(try loud.transmit([1, 2, 3])) {
            XCTAssertEqual($0 as? RNodeDevice.TransmitError, .notReady("tx_power_dbm: asked 20 dBm, the device applies 17 dBm"))
        }
        for (d, r) in [(silent, rs), (old, rf), (loud, rp), (m, rm)] {
            XCTAssertFalse(d.isReady)
            XCTAssertFalse(r.events.contains { if case .ready = $0 { return true } else { return false } }, "\(r.events)")
        }
    }

    func testComesBackAfterAnUnplugAndShrugsOffGarbage() throws {
        let sim = try RNodeSimulator(["--devices", "2"])
        defer { sim.finish() }
        let ra = Recorder(), rb = Recorder()
        let a = device(sim.path(0), ra), b = device(sim.path(1), rb)
        defer { a.stop(); b.stop() }
        a.start()
        b.start()
        XCTAssertNotNil(ra.waitReady())
        XCTAssertNotNil(rb.waitReady())

        // Unplugged: the line ends; the device says so, and keeps saying so while the path is gone.
        var mark = ra.count
        try sim.command("unplug 0")
        XCTAssertEqual(ra.waitUnavailable(from: mark, timeout: 5), "the RNode on \(sim.path(0)) went away")
        XCTAssertFalse(a.isReady)
        XCTAssertEqual(a.counters.unplugs, 1)
        XCTAssertThrowsError(try a.transmit([1])) { XCTAssertEqual($0 as? RNodeDevice.TransmitError, .notReady("the RNode on \(sim.path(0)) went away")) }

        // Plugged back: a new pty behind the same name, found by the retries and brought up.
        mark = ra.count
        try sim.command("plug 0")
        XCTAssertEqual(ra.waitReady(from: mark, timeout: 5), "1.86")
        XCTAssertEqual(Array(ra.events[(mark - 1)...]), [.unavailable("the RNode on \(sim.path(0)) went away"), .ready(firmware: "1.86")],
                       "one event for the whole absence")
        XCTAssertEqual(a.counters.bringUps, 2)
        mark = rb.count
        try a.transmit(Array("back again".utf8))
        XCTAssertNotNil(rb.waitPacket(Array("back again".utf8), from: mark))
        mark = ra.count
        try b.transmit(Array("welcome back".utf8))
        XCTAssertNotNil(ra.waitPacket(Array("welcome back".utf8), from: mark))

        // Garbage on the line: counted, nothing else.
        mark = ra.count
        try sim.command("garbage 0")
        let deadline = Date().addingTimeInterval(5)
        while a.counters.lineNoise == 0 && Date() < deadline { usleep(10_000) }
        XCTAssertGreaterThan(a.counters.lineNoise, 0)
        XCTAssertTrue(a.isReady)
        try b.transmit(Array("through the noise".utf8))
        XCTAssertNotNil(ra.waitPacket(Array("through the noise".utf8), from: mark))
        XCTAssertFalse(ra.events[mark...].contains { if case .unavailable = $0 { return true } else { return false } }, "\(ra.events[mark...])")
        XCTAssertEqual(rb.events.filter { if case .ready = $0 { return false } else { return true } }.count, 1, "b heard one packet: \(rb.events)")
    }

    func testStopIsPromptTurnsTheRadioOffAndEndsTheEvents() throws {
        let sim = try RNodeSimulator(["--devices", "4", "--silent", "2"])
        defer { sim.finish() }
        let ra = Recorder(), rb = Recorder(), rc = Recorder(), rd = Recorder(), rm = Recorder()
        let a = device(sim.path(0), ra), b = device(sim.path(1), rb), d = device(sim.path(3), rd)
        let c = device(sim.path(2), rc)   // never answers: stopped in the middle of its bring-up
        let m = device(NSTemporaryDirectory() + "no-such-dir-\(getpid())/ttyUSB7", rm, retryInitialSeconds: 5)   // stopped in its retry wait
        defer { b.stop(); d.stop() }
        for x in [a, b, c, d, m] { x.start() }
        XCTAssertNotNil(ra.waitReady())
        XCTAssertNotNil(rb.waitReady())
        XCTAssertNotNil(rd.waitReady())
        XCTAssertNotNil(rm.waitUnavailable())
        try b.transmit([1, 2, 3])
        XCTAssertNotNil(ra.waitPacket([1, 2, 3]))
        XCTAssertNotNil(rd.waitPacket([1, 2, 3]))

        for (x, r) in [(a, ra), (c, rc), (m, rm)] {
            let t0 = Date()
            x.stop()
            let took = Date().timeIntervalSince(t0)
            XCTAssertLessThan(took, 2, "stop() on \(x.path)")
            let seen = r.count
            XCTAssertEqual(x.lastReason, "stopped")
            XCTAssertFalse(x.isReady)
            XCTAssertThrowsError(try x.transmit([1])) { XCTAssertEqual($0 as? RNodeDevice.TransmitError, .notReady("stopped")) }
            x.stop()   // again: nothing
            XCTAssertNil(r.wait(from: seen, timeout: 0.5) { _ in true }, "no event after stop(): \(r.events)")
            print("stop() of \(x.path) took \(String(format: "%.3f", took)) s")
        }
        // Device 0's radio was turned off before its port closed: b's next packet reaches d only.
        try b.transmit([4, 5, 6, 7])
        XCTAssertNotNil(rd.waitPacket([4, 5, 6, 7]))
        sim.finish()
        XCTAssertTrue(sim.lines.wait(for: "stats tx=2 rx=3", timeout: 0), "the first packet heard by 0 and 3, the second by 3 alone")
        XCTAssertFalse(sim.lines.wait(for: "rx 0 n=4", timeout: 0))
    }

    /// What yaok-rnode-sim cannot do on command, done by hand on a pseudo-terminal of the
    /// test's own: a device that ignores the first detect, reboots, reports errors, leaves a
    /// frame half sent, and stops reading.
    func testRebootsErrorsHalfFramesAndAStuckLine() throws {
        let hand = try HandDevice()
        defer { hand.close() }
        let r = Recorder()
        let dev = device(hand.path, r)
        defer { dev.stop() }
        dev.start()
        XCTAssertEqual(r.waitReady(), "1.86", "detect is sent again when the first goes unanswered")
        XCTAssertGreaterThanOrEqual(hand.detects, 2)

        // The device rebooted: configured again, at once.
        var mark = r.count
        hand.inject(EmulatedRNode.bootFrame)
        XCTAssertEqual(r.waitUnavailable(from: mark), "the RNode on \(hand.path) restarted; configuring it again")
        XCTAssertEqual(r.waitReady(from: mark), "1.86")
        XCTAssertEqual(dev.counters.bringUps, 2)

        // An error that needs no bring-up is counted; one that does (soon after the last: after a retry delay) brings it up again.
        mark = r.count
        hand.inject(KISS.frame(command: RNodeCommand.error.rawValue, payload: [0x05]))
        XCTAssertTrue(waitUntil { dev.counters.deviceErrors == 1 })
        XCTAssertEqual(r.count, mark)
        hand.inject(KISS.frame(command: RNodeCommand.error.rawValue, payload: [0x02]))
        XCTAssertEqual(r.waitUnavailable(from: mark), "the RNode on \(hand.path) reported an error (a transmission failed); configuring it again")
        XCTAssertEqual(r.waitReady(from: mark), "1.86")

        // Half a DATA frame, then silence: dropped after 100 ms, so the next frame's FEND does not complete it.
        mark = r.count
        let noise = dev.counters.lineNoise
        hand.inject([KISS.fend, RNodeCommand.data.rawValue, 0x01, 0x02])
        XCTAssertTrue(waitUntil { dev.counters.lineNoise == noise + 1 })
        hand.inject(KISS.frame(command: RNodeCommand.statRSSI.rawValue, payload: [57]) + KISS.frame(command: RNodeCommand.data.rawValue, payload: [0xC0, 0x42]))
        XCTAssertEqual(r.wait(from: mark) { if case .packet = $0 { return true } else { return false } }, .packet([0xC0, 0x42], rssiDBm: -100, snrDB: nil))
        XCTAssertEqual(r.count, mark + 1, "\(r.events[mark...])")

        // The device stops reading: transmit gives up within about 100 ms, and the device is
        // treated as gone, then found again (the pty is still there) once it reads again.
        mark = r.count
        hand.reading = false
        var thrown: RNodeDevice.TransmitError?
        for _ in 0..<10_000 {
            let t0 = Date()
            do { try dev.transmit([UInt8](repeating: 0x55, count: 254)) } catch { thrown = error as? RNodeDevice.TransmitError }
            XCTAssertLessThan(Date().timeIntervalSince(t0), 0.5, "transmit never blocks for long")
            if thrown != nil { break }
        }
        XCTAssertEqual(thrown, .wentAway("the RNode on \(hand.path) went away"))
        XCTAssertEqual(r.waitUnavailable(from: mark), "the RNode on \(hand.path) went away")
        hand.reading = true
        XCTAssertEqual(r.waitReady(from: mark), "1.86")
        XCTAssertEqual(dev.counters.unplugs, 1)
    }

    /// Polls `condition` (a counter, which has no event) every 10 ms for up to `timeout` seconds.
    func waitUntil(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition() {
            guard Date() < deadline else { return false }
            usleep(10_000)
        }
        return true
    }

    /// An ``EmulatedRNode`` behind a pseudo-terminal the test owns, served by a thread of its own.
    // @unchecked: `node` and `decoder` are the serving thread's alone; the flags are under `lock`.
    final class HandDevice: @unchecked Sendable {
        let master: Int32
        let slave: Int32
        let path: String
        private let node = EmulatedRNode(index: 0)
        private var decoder = KISSDecoder()
        private let lock = NSLock()
        private var running = true
        private var reads = true
        private var detectsSeen = 0
        private let done = DispatchSemaphore(value: 0)

        init() throws {
            // posix_openpt, unlockpt, ptsname as yaok-rnode-sim does them (TIOCSPTLCK, TIOCGPTN).
            master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_NONBLOCK)
            var unlock: Int32 = 0, number: UInt32 = 0
            guard master >= 0, ioctl(master, 0x4004_5431, &unlock) == 0, ioctl(master, 0x8004_5430, &number) == 0 else {
                throw NSError(domain: "pty", code: Int(errno))
            }
            path = "/dev/pts/\(number)"
            slave = open(path, O_RDWR | O_NOCTTY)   // kept open, raw, as the emulator does
            guard slave >= 0 else { throw NSError(domain: "pty", code: Int(errno)) }
            var t = termios()
            tcgetattr(slave, &t)
            cfmakeraw(&t)
            tcsetattr(slave, TCSANOW, &t)
            Thread { [self] in serve() }.start()
        }

        /// Detect frames the host has sent.
        var detects: Int { lock.withLock { detectsSeen } }
        /// Whether the device reads what the host writes (false: the line fills up).
        var reading: Bool {
            get { lock.withLock { reads } }
            set { lock.withLock { reads = newValue } }
        }

        /// Bytes from the device to the host, as they are.
        func inject(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) } }

        func close() {
            lock.withLock { running = false }
            _ = done.wait(timeout: .now() + 2)
            Glibc.close(master)
            Glibc.close(slave)
        }

        private func serve() {
            defer { done.signal() }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while lock.withLock({ running }) {
                guard reading else { usleep(10_000); continue }
                var p = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 50) > 0 else { continue }
                let n = read(master, &buffer, buffer.count)
                guard n > 0 else { continue }
                let bytes = Array(buffer[0..<n])
                let detect = decoder.feed(bytes).filter { $0.command == RNodeCommand.detect.rawValue }.count
                let first = lock.withLock { defer { detectsSeen += detect }; return detectsSeen == 0 && detect > 0 }
                if first { continue }   // still booting: the first detect (and what came with it) goes unanswered
                let reply = node.fromHost(bytes).reply
                if !reply.isEmpty { inject(reply) }
            }
        }
    }
}
