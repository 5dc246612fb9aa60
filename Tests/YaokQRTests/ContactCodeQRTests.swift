import Foundation
import XCTest
import YaokQR
import YaokTesting

/// `yaok qr` as a user and a script meet it: on a terminal the QR code (black on white) and the
/// code; piped, the code alone; `--picture` draws it anyway. Each drawing is read back as a
/// camera would and decoded by zbarimg to the very code printed below it.
final class ContactCodeQRTests: XCTestCase {
    var yaok: String { BuildProducts.directory(containing: "yaok") + "/yaok" }

    func home() throws -> String {
        let home = NSTemporaryDirectory() + "yaok-qr-\(UUID().uuidString)"
        addTeardownBlock { try? FileManager.default.removeItem(atPath: home) }
        let made = try Command.run(yaok, ["init", "--home", home, "--name", "Alice"], timeout: 60)
        XCTAssertEqual(made.status, 0, made.output)
        return home
    }

    func testPipedItPrintsTheCodeAloneAndWithPictureADrawingThatDecodesToIt() throws {
        let home = try home()
        let piped = try Command.run(yaok, ["qr", "--home", home], timeout: 60)
        XCTAssertEqual(piped.status, 0, piped.output)
        let code = piped.output.trimmingCharacters(in: .newlines)
        XCTAssertTrue(code.hasPrefix("yaok://contact?v=1&d="), code)
        XCTAssertFalse(code.contains("\n"), "piped: the code alone, for $(yaok qr)")

        let drawn = try Command.run(yaok, ["qr", "--home", home, "--picture"], timeout: 60)
        var lines = drawn.output.trimmingCharacters(in: .newlines).components(separatedBy: "\n")
        XCTAssertEqual(lines.removeLast(), code, "the code is the last line")
        XCTAssertFalse(drawn.output.contains("\u{1B}["), "no terminal colours in a pipe")
        let qr = try XCTUnwrap(QRCode.fromTerminalText(lines.joined(separator: "\n")), drawn.output)
        XCTAssertEqual(try QRCodeTests.decode(qr.pbm(), self), code)
    }

    /// On a terminal (a pseudo-terminal from util-linux `script`), black on white.
    func testOnATerminalItDrawsTheCodeBlackOnWhite() throws {
        try RequiredTool.require("/usr/bin/script", package: "bsdutils")
        let home = try home()
        let shown = try Command.run("/usr/bin/script", ["-q", "-e", "-c", "\(yaok) qr --home \(home)", "/dev/null"], timeout: 60)
        XCTAssertEqual(shown.status, 0, shown.output)
        var lines = shown.output.replacingOccurrences(of: "\r\n", with: "\n").trimmingCharacters(in: .newlines).components(separatedBy: "\n")
        let code = lines.removeLast()
        XCTAssertTrue(code.hasPrefix("yaok://contact?v=1&d="), code)
        XCTAssertTrue(lines.allSatisfy { $0.hasPrefix("\u{1B}[30;107m") && $0.hasSuffix("\u{1B}[0m") }, "every line black on bright white")
        let qr = try XCTUnwrap(QRCode.fromTerminalText(lines.joined(separator: "\n")))
        XCTAssertEqual(try QRCodeTests.decode(qr.pbm(), self), code)
    }
}
