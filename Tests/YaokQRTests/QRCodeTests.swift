import Foundation
import XCTest
import YaokQR
import YaokTesting

/// libqrencode's symbols, checked the way a phone checks them: a standard decoder (`zbarimg`,
/// Debian's zbar-tools) reads each image back to the same bytes.
final class QRCodeTests: XCTestCase {
    /// Decodes a PBM image with zbarimg; nil if it found no code.
    static func decode(_ image: [UInt8], _ test: XCTestCase) throws -> String? {
        try RequiredTool.require("/usr/bin/zbarimg", package: "zbar-tools")
        let path = NSTemporaryDirectory() + "qr-\(UUID().uuidString).pbm"
        try Data(image).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        // Its stdout only: ImageMagick underneath may complain on stderr (no D-Bus here).
        let r = try Command.run("/bin/sh", ["-c", "exec /usr/bin/zbarimg -q --raw \"$1\" 2>/dev/null", "sh", path], timeout: 30)
        let text = r.output.trimmingCharacters(in: .newlines)
        return r.status == 0 && !text.isEmpty ? text : nil
    }

    /// A contact code's shape: `yaok://contact?v=1&d=` and base64url, from short to long.
    static func contactLike(_ n: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var g = SystemRandomNumberGenerator()
        return "yaok://contact?v=1&d=" + String((0..<n).map { _ in alphabet.randomElement(using: &g)! })
    }

    func testEveryLevelAndSizeDecodesToTheSameText() throws {
        for level in QRCode.Level.allCases {
            for n in [1, 40, 160, 300] {
                let text = Self.contactLike(n)
                let qr = try QRCode.encode(Array(text.utf8), level: level)
                XCTAssertEqual(qr.size, 17 + 4 * qr.version)
                XCTAssertEqual(try Self.decode(qr.pbm(), self), text, "\(level), \(text.utf8.count) bytes, version \(qr.version)")
            }
        }
    }

    /// What `yaok qr` prints, read back as a camera would, decodes too (with and without the
    /// terminal colours).
    func testTheTerminalDrawingIsTheSameSymbol() throws {
        let text = Self.contactLike(150)
        let qr = try QRCode.encode(Array(text.utf8), level: .medium)
        for colours in [false, true] {
            let drawn = qr.terminalText(colours: colours)
            let read = try XCTUnwrap(QRCode.fromTerminalText(drawn), "colours \(colours)")
            XCTAssertEqual(read, qr, "colours \(colours)")
            XCTAssertEqual(try Self.decode(read.pbm(), self), text)
        }
        // Two module rows per line; a line per row pair of the quiet zone and symbol.
        XCTAssertEqual(qr.terminalText(colours: false).split(separator: "\n").count, (qr.size + 2 * QRCode.quietZone + 1) / 2)
    }

    func testWhatDoesNotFitIsRefusedWithTheReason() {
        // Version 40 holds 2,953 bytes at level L and 1,273 at level H.
        XCTAssertThrowsError(try QRCode.encode([UInt8](repeating: 0x41, count: 1_274), level: .high)) { error in
            XCTAssertEqual(error as? QRCode.EncodeError, .tooLong(bytes: 1_274, level: .high))
            XCTAssertEqual("\(error)", "1274 bytes do not fit a QR code at error correction level high")
        }
        XCTAssertNoThrow(try QRCode.encode([UInt8](repeating: 0x41, count: 1_273), level: .high))
        XCTAssertThrowsError(try QRCode.encode([], level: .low)) { XCTAssertEqual($0 as? QRCode.EncodeError, .empty) }
    }
}
