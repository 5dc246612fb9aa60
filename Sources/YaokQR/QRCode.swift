import CQRencode
import Glibc

/// A QR code symbol (ISO/IEC 18004, byte mode) made by libqrencode, Debian's maintained
/// encoder: the smallest version that holds the data at the asked error correction level, and
/// the mask libqrencode chose. The console draws it as SVG; `yaok qr` as text in a terminal.
public struct QRCode: Sendable, Equatable {
    /// Error correction: about 7 %, 15 %, 25 % or 30 % of the symbol may be damaged.
    public enum Level: Sendable, CaseIterable {
        case low, medium, quartile, high

        var libqrencode: QRecLevel {
            switch self {
            case .low: return QR_ECLEVEL_L
            case .medium: return QR_ECLEVEL_M
            case .quartile: return QR_ECLEVEL_Q
            case .high: return QR_ECLEVEL_H
            }
        }
    }

    public enum EncodeError: Error, Sendable, Equatable, CustomStringConvertible {
        /// More bytes than the largest symbol (version 40) holds at this level.
        case tooLong(bytes: Int, level: Level)
        case empty
        /// libqrencode failed for another reason (its `errno`).
        case failed(errno: Int32)

        public var description: String {
            switch self {
            case .tooLong(let n, let level): return "\(n) bytes do not fit a QR code at error correction level \(level)"
            case .empty: return "nothing to encode"
            case .failed(let e): return "libqrencode could not encode it: \(String(cString: strerror(e)))"
            }
        }
    }

    /// Side length in modules (17 + 4 × version), without the quiet zone.
    public let size: Int
    public let version: Int
    /// Row-major, `true` = dark.
    public let modules: [Bool]

    public func isDark(x: Int, y: Int) -> Bool { modules[y * size + x] }

    public init(size: Int, version: Int, modules: [Bool]) {
        precondition(modules.count == size * size, "a QR symbol is square")
        (self.size, self.version, self.modules) = (size, version, modules)
    }

    /// Encodes `data` as one 8-bit byte segment.
    public static func encode(_ data: [UInt8], level: Level) throws(EncodeError) -> QRCode {
        guard !data.isEmpty else { throw .empty }
        errno = 0
        let made = data.withUnsafeBufferPointer { QRcode_encodeData(Int32(data.count), $0.baseAddress, 0, level.libqrencode) }
        guard let made else {
            let e = errno
            throw e == ERANGE ? .tooLong(bytes: data.count, level: level) : .failed(errno: e)
        }
        defer { QRcode_free(made) }
        let width = Int(made.pointee.width)
        // Bit 0 of each byte is the module's colour; the other bits say what part it is.
        let modules = (0..<width * width).map { made.pointee.data[$0] & 1 == 1 }
        return QRCode(size: width, version: Int(made.pointee.version), modules: modules)
    }

    /// Modules of quiet zone around the symbol; the standard asks for four.
    public static let quietZone = 4

    /// The symbol as text for a terminal: two module rows per line in half blocks (`▀ ▄ █`,
    /// dark modules drawn), inside the quiet zone. With `colours`, each line is drawn black on
    /// bright white (ANSI SGR 30;107), so it scans on dark and light terminal themes alike;
    /// without, the blocks are dark only where the text is darker than the page.
    public func terminalText(colours: Bool) -> String {
        let q = Self.quietZone
        let full = size + 2 * q
        func dark(_ x: Int, _ y: Int) -> Bool {
            let (mx, my) = (x - q, y - q)
            return mx >= 0 && my >= 0 && mx < size && my < size && isDark(x: mx, y: my)
        }
        var lines: [String] = []
        for y in stride(from: 0, to: full, by: 2) {
            var line = colours ? "\u{1B}[30;107m" : ""
            for x in 0..<full {
                switch (dark(x, y), dark(x, y + 1)) {
                case (true, true): line += "█"
                case (true, false): line += "▀"
                case (false, true): line += "▄"
                case (false, false): line += " "
                }
            }
            lines.append(colours ? line + "\u{1B}[0m" : line)
        }
        return lines.joined(separator: "\n")
    }

    /// Reads ``terminalText(colours:)`` back into modules: what a camera sees, for tests and
    /// for anyone checking a printed code.
    public static func fromTerminalText(_ text: String) -> QRCode? {
        let rows = text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> [Character] in
            var s = String(line)
            if s.hasPrefix("\u{1B}[30;107m") { s.removeFirst("\u{1B}[30;107m".count) }
            if s.hasSuffix("\u{1B}[0m") { s.removeLast("\u{1B}[0m".count) }
            return Array(s)
        }
        guard let full = rows.first?.count, full > 2 * quietZone, rows.allSatisfy({ $0.count == full }) else { return nil }
        var grid = [[Bool]](repeating: [Bool](repeating: false, count: full), count: rows.count * 2)
        for (r, row) in rows.enumerated() {
            for (x, c) in row.enumerated() {
                grid[2 * r][x] = c == "█" || c == "▀"
                grid[2 * r + 1][x] = c == "█" || c == "▄"
            }
        }
        let size = full - 2 * quietZone
        guard grid.count >= size + quietZone, (size - 17) % 4 == 0 else { return nil }
        let modules = (0..<size).flatMap { y in (0..<size).map { x in grid[y + quietZone][x + quietZone] } }
        return QRCode(size: size, version: (size - 17) / 4, modules: modules)
    }

    /// The symbol with its quiet zone as a binary PBM image, `scale` pixels per module: a
    /// format every image tool and QR decoder (`zbarimg`) reads.
    public func pbm(scale: Int = 4) -> [UInt8] {
        let q = Self.quietZone
        let side = (size + 2 * q) * scale
        var out = Array("P1\n\(side) \(side)\n".utf8)
        for py in 0..<side {
            for px in 0..<side {
                let (mx, my) = (px / scale - q, py / scale - q)
                let dark = mx >= 0 && my >= 0 && mx < size && my < size && isDark(x: mx, y: my)
                out.append(dark ? UInt8(ascii: "1") : UInt8(ascii: "0"))
            }
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }
}
