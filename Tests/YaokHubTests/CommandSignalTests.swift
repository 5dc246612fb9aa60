import Foundation
import XCTest
import YaokProcess
import YaokTesting

/// Ctrl-C and SIGTERM stop the short `yaok-hub` commands. The daemon's signal handlers (a
/// pipe read by `run`'s signal thread) must not be installed for them: a command waiting for
/// input or for the hub would swallow both and have to be killed.
final class CommandSignalTests: XCTestCase {
    func testAWaitingCommandStopsOnSIGINTAndSIGTERM() throws {
        let hubExe = try TestSupport.product("yaok-hub")
        let dir = try TestSupport.temporaryDirectory(self)
        let config = dir + "/hub.yaml"
        try "hub:\n  data_dir: \(dir)/data\n".write(toFile: config, atomically: true, encoding: .utf8)
        for sig in [SIGINT, SIGTERM] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: hubExe)
            p.arguments = ["console-password", "--config", config, "--stdin"]
            let input = Pipe()   // held open and never written: the command waits for its line
            p.standardInput = input
            p.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            defer { p.terminateWithin(seconds: 1) }
            // Until it has read its way to the password prompt (its stdin is then being read).
            try Wait.until(timeout: 20, "console-password reading standard input") {
                (try? String(contentsOfFile: "/proc/\(p.processIdentifier)/wchan", encoding: .utf8)).map { $0.contains("pipe") } ?? false
            }
            kill(p.processIdentifier, sig)
            XCTAssertTrue(Wait.poll(timeout: 10) { !p.isRunning }, "signal \(sig) did not stop the command")
            if !p.isRunning {
                XCTAssertEqual(p.terminationReason, .uncaughtSignal)
                XCTAssertEqual(p.terminationStatus, sig)
            }
            try? input.fileHandleForWriting.close()
        }
    }
}
