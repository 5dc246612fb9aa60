import Foundation
import Glibc
import XCTest
import YaokLoRaPlugin
import YaokRNodeEmulator
import YaokTesting

/// yaok-rnode-sim as a hub meets it: a process, pseudo-terminals, bytes on a serial line.
final class EmulatorProcessTests: XCTestCase {
    /// The host end of one emulated device.
    final class SerialPort {
        let fd: Int32
        var decoder = KISSDecoder()
        var reader = RNodeReader()
        /// The line ended (the device is gone).
        private(set) var closed = false

        init(_ path: String) throws {
            fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK)
            guard fd >= 0 else { throw NSError(domain: "serial", code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "cannot open \(path)"]) }
            var t = termios()
            tcgetattr(fd, &t)
            cfmakeraw(&t)
            tcsetattr(fd, TCSANOW, &t)
        }
        deinit { close(fd) }

        func send(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }

        /// Events until `done` says enough, or nil at the deadline (or when the line is gone).
        func read(timeout: Double = 10, until done: ([RNodeEvent]) -> Bool) -> [RNodeEvent]? {
            var got: [RNodeEvent] = []
            let deadline = Date().addingTimeInterval(timeout)
            var buffer = [UInt8](repeating: 0, count: 1024)
            while !done(got) {
                let left = Int32(deadline.timeIntervalSinceNow * 1000)
                guard left > 0 else { return nil }
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, left) > 0 else { continue }
                let n = Glibc.read(fd, &buffer, buffer.count)
                guard n > 0 else { closed = true; return nil }
                got += decoder.feed(Array(buffer[0..<n])).map { reader.event($0) }
            }
            return got
        }
    }

    func testDevicesDetectConfigureAndCarryPacketsOnlyToThoseInRangeAndSurviveAnUnplug() throws {
        let dir = NSTemporaryDirectory() + "rnode-sim-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sim = Process()
        sim.executableURL = URL(fileURLWithPath: BuildProducts.directory(containing: "yaok-rnode-sim") + "/yaok-rnode-sim")
        sim.arguments = ["--dir", dir, "--devices", "3", "--range", "0-1,1-2", "--silent", "2"]
        let input = Pipe(), output = Pipe()
        sim.standardInput = input
        sim.standardOutput = output
        try sim.run()
        defer { if sim.isRunning { sim.terminate() }; sim.waitUntilExit() }
        let lines = OutputLines(output.fileHandleForReading)
        XCTAssertTrue(lines.wait(for: "ready"), "the emulator never said it was ready")

        let settings = RNodeRadioSettings(frequencyHz: 868_500_000, bandwidthHz: 125_000, txPowerDBm: 14, spreadingFactor: 7,
                                          codingRate: 5, longTermAirtimeLimit: 100)
        let a = try SerialPort(dir + "/rnode0"), b = try SerialPort(dir + "/rnode1"), c = try SerialPort(dir + "/rnode2")
        for port in [a, b] {
            port.send(RNodeRequest.detect + RNodeRequest.configure(settings))
            let got = try XCTUnwrap(port.read { $0.contains(.radioState(on: true)) })
            XCTAssertTrue(got.contains(.detected))
            XCTAssertEqual(radioMismatches(asked: settings, applied: got), [])
        }
        c.send(RNodeRequest.detect)
        XCTAssertNil(c.read(timeout: 1) { $0.contains(.detected) }, "a device that never answers detect")

        a.send(RNodeRequest.data(Array("over the air".utf8))!)
        let heard = try XCTUnwrap(b.read { $0.contains { if case .packet = $0 { return true } else { return false } } })
        XCTAssertTrue(heard.contains(.packet(Array("over the air".utf8), rssiDBm: -100, snrDB: 5)), "\(heard)")

        // Unplugged: the host's line ends; plugged back: a new device at the same path says it booted.
        try input.fileHandleForWriting.write(contentsOf: Data("unplug 0\n".utf8))
        XCTAssertTrue(lines.wait(for: "unplugged 0"))
        _ = a.read(timeout: 5) { _ in false }
        XCTAssertTrue(a.closed, "the host's line ends when the device is gone")
        try input.fileHandleForWriting.write(contentsOf: Data("plug 0\n".utf8))
        XCTAssertTrue(lines.wait(for: "plugged 0"))
        let again = try SerialPort(dir + "/rnode0")
        XCTAssertNotNil(again.read { $0.contains(.booted) })

        try input.fileHandleForWriting.write(contentsOf: Data("quit\n".utf8))
        XCTAssertTrue(lines.wait(for: "stats tx=1 rx=1"), "one frame sent, heard once (radio 2 is out of range of 0)")
    }
}
