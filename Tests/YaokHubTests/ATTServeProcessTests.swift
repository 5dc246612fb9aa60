import Foundation
import XCTest
import YaokProcess
import YaokTesting

/// `yaok-hub att-serve` as a real process, driven PDU by PDU over SOCK_SEQPACKET.
final class ATTServeProcessTests: XCTestCase {
    func connectSeqpacket(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { dst in for (i, b) in Array(path.utf8).enumerated() { dst[i] = b } }
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        guard rc == 0 else { close(fd); throw NSError(domain: "connect", code: Int(errno)) }
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    func exchange(_ fd: Int32, _ pdu: [UInt8]) -> [UInt8] {
        _ = pdu.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        var buf = [UInt8](repeating: 0, count: 600)
        let n = recv(fd, &buf, buf.count, 0)
        return n > 0 ? Array(buf[0..<n]) : []
    }

    func testATTServeServesAFreshTableToEachConnection() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let dir = try TestSupport.temporaryDirectory(self)
        let table = dir + "/table.json"
        try """
        {"attributes": [
          {"handle": 1, "type": "2800", "permissions": {"read": true}, "value": "0018"},
          {"handle": 2, "type": "2803", "permissions": {"read": true}, "value": "0a03002a00"},
          {"handle": 3, "type": "2a00", "permissions": {"read": true, "write": true}, "value": "4869", "maxLength": 32},
          {"handle": 4, "type": "2a01", "permissions": {"read": true, "encryption": true}, "value": "0000"}
        ]}
        """.write(toFile: table, atomically: true, encoding: .utf8)
        let socketPath = dir + "/att.sock"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: hubExe)
        p.arguments = ["att-serve", "--table", table, "--socket", socketPath, "--mtu", "185"]
        p.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        defer { XCTAssertTrue(p.terminateWithin(seconds: 10), "att-serve did not stop on SIGTERM") }
        // The socket file appears at bind(), before listen(): wait for a connection, not the file.
        var first: Int32 = -1
        try Wait.until(timeout: 20, "att-serve accepting connections") { first = (try? connectSeqpacket(socketPath)) ?? -1; return first >= 0 }
        let a = first
        defer { close(a) }
        // Exchange MTU: client 517, server 185 -> response carries 185 (0xB9 0x00).
        XCTAssertEqual(exchange(a, [0x02, 0x05, 0x02]), [0x03, 0xB9, 0x00])
        // Read handle 3 -> "Hi".
        XCTAssertEqual(exchange(a, [0x0A, 0x03, 0x00]), [0x0B, 0x48, 0x69])
        // Write handle 3 = "Yo" on this connection.
        XCTAssertEqual(exchange(a, [0x12, 0x03, 0x00, 0x59, 0x6F]), [0x13])
        XCTAssertEqual(exchange(a, [0x0A, 0x03, 0x00]), [0x0B, 0x59, 0x6F])
        // Invalid handle -> Error Response (request 0x0A, handle 0x0009, error 0x01).
        XCTAssertEqual(exchange(a, [0x0A, 0x09, 0x00]), [0x01, 0x0A, 0x09, 0x00, 0x01])
        // Encrypted attribute on an unencrypted link -> insufficient encryption (0x0F).
        XCTAssertEqual(exchange(a, [0x0A, 0x04, 0x00]), [0x01, 0x0A, 0x04, 0x00, 0x0F])
        // Read By Group Type (primary services) -> one 16-bit service, handles 1-4.
        XCTAssertEqual(exchange(a, [0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28]), [0x11, 0x06, 0x01, 0x00, 0x04, 0x00, 0x00, 0x18])

        // A second connection gets a fresh copy: the write above is not visible.
        let b = try connectSeqpacket(socketPath)
        defer { close(b) }
        XCTAssertEqual(exchange(b, [0x0A, 0x03, 0x00]), [0x0B, 0x48, 0x69])
    }

    /// A SIGTERM at any moment of start-up stops att-serve: right after launch, as soon as
    /// SIGTERM is caught, and once it serves. The danger is a gap in start-up: SIGTERM caught
    /// into SignalWaiter's pipe that att-serve does not read, or set to "ignore" before
    /// att-serve arms a handler of its own. A SIGTERM in that gap is lost, and the suite hangs
    /// waiting for the process; the second kind of round sends into it.
    func testSIGTERMDuringStartUpIsNeverLost() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let dir = try TestSupport.temporaryDirectory(self)
        let table = dir + "/table.json"
        try #"{"attributes": [{"handle": 1, "type": "2800", "permissions": {"read": true}, "value": "0018"}]}"#
            .write(toFile: table, atomically: true, encoding: .utf8)
        for round in 0..<30 {
            let socketPath = dir + "/att\(round).sock"
            let p = Process()
            p.executableURL = URL(fileURLWithPath: hubExe)
            p.arguments = ["att-serve", "--table", table, "--socket", socketPath]
            p.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            if round % 3 == 2 {
                try Wait.until(timeout: 20, "att-serve socket") { FileManager.default.fileExists(atPath: socketPath) }
            } else if round % 3 == 1 {
                // While start-up sets its signal handling up: as soon as SIGTERM is caught or
                // ignored (an "ignore" before a handler is armed is such a gap too), or it serves.
                _ = Wait.poll(timeout: 10, interval: 0.0005) {
                    FileManager.default.fileExists(atPath: socketPath) || Self.sigtermIsCaughtOrIgnored(p.processIdentifier)
                }
            }
            XCTAssertTrue(p.terminateWithin(seconds: 10), "round \(round): att-serve did not stop on SIGTERM")
        }
    }

    /// Whether /proc says `pid` catches or ignores SIGTERM.
    static func sigtermIsCaughtOrIgnored(_ pid: Int32) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
        let bit: UInt64 = 1 << (UInt64(SIGTERM) - 1)
        return status.split(separator: "\n").contains { line in
            guard line.hasPrefix("SigIgn:") || line.hasPrefix("SigCgt:"),
                  let mask = UInt64(line.split(separator: "\t").last ?? "", radix: 16) else { return false }
            return mask & bit != 0
        }
    }
}
