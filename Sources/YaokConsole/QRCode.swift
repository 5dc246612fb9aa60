/// A QR code encoder (ISO/IEC 18004, model 2): byte mode, versions 1–40, all four error
/// correction levels, the mask with the lowest penalty unless one is asked for. Used for the
/// hub's contact code on the identity page, drawn as SVG (no image library, no script).
public struct QRCode: Sendable, Equatable {
    public enum Level: Int, Sendable, CaseIterable {
        case low = 0, medium, quartile, high
        /// The two format-information bits of each level (L=01, M=00, Q=11, H=10).
        var formatBits: Int { [1, 0, 3, 2][rawValue] }
    }

    public enum EncodeError: Error, Sendable, CustomStringConvertible {
        case tooLong(Int)
        public var description: String {
            switch self { case .tooLong(let n): return "\(n) bytes do not fit a QR code at this error correction level" }
        }
    }

    /// Side length in modules (17 + 4 × version).
    public let size: Int
    public let version: Int
    public let mask: Int
    /// Row-major, `true` = dark.
    public let modules: [Bool]

    public func isDark(x: Int, y: Int) -> Bool { modules[y * size + x] }

    // Error-correction codewords per block and number of blocks, per level and version (index 0 unused).
    static let eccPerBlock: [[Int]] = [
        [0, 7, 10, 15, 20, 26, 18, 20, 24, 30, 18, 20, 24, 26, 30, 22, 24, 28, 30, 28, 28, 28, 28, 30, 30, 26, 28, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30],
        [0, 10, 16, 26, 18, 24, 16, 18, 22, 22, 26, 30, 22, 22, 24, 24, 28, 28, 26, 26, 26, 26, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28],
        [0, 13, 22, 18, 26, 18, 24, 18, 22, 20, 24, 28, 26, 24, 20, 30, 24, 28, 28, 26, 30, 28, 30, 30, 30, 30, 28, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30],
        [0, 17, 28, 22, 16, 22, 28, 26, 26, 24, 28, 24, 28, 22, 24, 24, 30, 28, 28, 26, 28, 30, 24, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30],
    ]
    static let blocks: [[Int]] = [
        [0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4, 4, 6, 6, 6, 6, 7, 8, 8, 9, 9, 10, 12, 12, 12, 13, 14, 15, 16, 17, 18, 19, 19, 20, 21, 22, 24, 25],
        [0, 1, 1, 1, 2, 2, 4, 4, 4, 5, 5, 5, 8, 9, 9, 10, 10, 11, 13, 14, 16, 17, 17, 18, 20, 21, 23, 25, 26, 28, 29, 31, 33, 35, 37, 38, 40, 43, 45, 47, 49],
        [0, 1, 1, 2, 2, 4, 4, 6, 6, 8, 8, 8, 10, 12, 16, 12, 17, 16, 18, 21, 20, 23, 23, 25, 27, 29, 34, 34, 35, 38, 40, 43, 45, 48, 51, 53, 56, 59, 62, 65, 68],
        [0, 1, 1, 2, 4, 4, 4, 5, 6, 8, 8, 11, 11, 16, 16, 18, 16, 19, 21, 25, 25, 25, 34, 30, 32, 35, 37, 40, 42, 45, 48, 51, 54, 57, 60, 63, 66, 70, 74, 77, 81],
    ]

    /// Modules left for data and error correction once the function patterns are placed.
    static func rawDataModules(_ v: Int) -> Int {
        var n = (16 * v + 128) * v + 64
        if v >= 2 {
            let a = v / 7 + 2
            n -= (25 * a - 10) * a - 55
            if v >= 7 { n -= 36 }
        }
        return n
    }

    static func dataCodewords(_ v: Int, _ level: Level) -> Int {
        rawDataModules(v) / 8 - eccPerBlock[level.rawValue][v] * blocks[level.rawValue][v]
    }

    /// Centre coordinates of the alignment patterns along one axis.
    static func alignmentPositions(_ v: Int) -> [Int] {
        guard v >= 2 else { return [] }
        let count = v / 7 + 2
        let size = 17 + 4 * v
        let step = (v * 8 + count * 3 + 5) / (count * 4 - 4) * 2
        var out = [6]
        var pos = size - 7
        var rest: [Int] = []
        for _ in 0..<(count - 1) { rest.append(pos); pos -= step }
        out += rest.reversed()
        return out
    }

    /// Encodes `data` in byte mode in the smallest version that fits; `mask` forces a mask (0–7).
    public static func encode(_ data: [UInt8], level: Level, version forcedVersion: Int? = nil, mask forcedMask: Int? = nil) throws -> QRCode {
        var version = 0
        for v in (forcedVersion.map { $0...$0 } ?? 1...40) {
            let countBits = v <= 9 ? 8 : 16
            if data.count < (1 << countBits) && 4 + countBits + 8 * data.count <= dataCodewords(v, level) * 8 { version = v; break }
        }
        guard version > 0 else { throw EncodeError.tooLong(data.count) }
        let capacity = dataCodewords(version, level)

        // Mode 0100 (byte), count, data, terminator, pad to a byte, then the pad codewords.
        var bits: [Bool] = []
        func put(_ value: Int, _ n: Int) { for i in stride(from: n - 1, through: 0, by: -1) { bits.append((value >> i) & 1 == 1) } }
        put(0b0100, 4)
        put(data.count, version <= 9 ? 8 : 16)
        for b in data { put(Int(b), 8) }
        put(0, min(4, capacity * 8 - bits.count))
        if bits.count % 8 != 0 { put(0, 8 - bits.count % 8) }
        var codewords: [UInt8] = stride(from: 0, to: bits.count, by: 8).map { i in
            (0..<8).reduce(UInt8(0)) { $0 << 1 | (bits[i + $1] ? 1 : 0) }
        }
        var pad: UInt8 = 0xEC
        while codewords.count < capacity { codewords.append(pad); pad = pad == 0xEC ? 0x11 : 0xEC }

        let all = interleave(codewords, version: version, level: level)
        var m = Matrix(version: version)
        m.drawFunctionPatterns()
        m.placeData(all)
        let chosen: Int
        if let forcedMask {
            chosen = forcedMask
        } else {
            var best = 0, bestPenalty = Int.max
            for candidate in 0..<8 {
                var trial = m
                trial.applyMask(candidate)
                trial.drawFormat(level: level, mask: candidate)
                let p = trial.penalty()
                if p < bestPenalty { best = candidate; bestPenalty = p }
            }
            chosen = best
        }
        m.applyMask(chosen)
        m.drawFormat(level: level, mask: chosen)
        return QRCode(size: m.size, version: version, mask: chosen, modules: m.dark)
    }

    /// Splits the data into blocks, adds each block's Reed–Solomon codewords, and interleaves.
    static func interleave(_ data: [UInt8], version: Int, level: Level) -> [UInt8] {
        let nBlocks = blocks[level.rawValue][version]
        let ecc = eccPerBlock[level.rawValue][version]
        let raw = rawDataModules(version) / 8
        let shortBlocks = nBlocks - raw % nBlocks
        let shortData = raw / nBlocks - ecc
        let generator = ReedSolomon.generator(degree: ecc)
        var dataBlocks: [[UInt8]] = [], eccBlocks: [[UInt8]] = []
        var k = 0
        for i in 0..<nBlocks {
            let len = shortData + (i < shortBlocks ? 0 : 1)
            let block = Array(data[k..<(k + len)])
            k += len
            dataBlocks.append(block)
            eccBlocks.append(ReedSolomon.remainder(block, generator: generator))
        }
        var out: [UInt8] = []
        for i in 0...shortData {
            for b in dataBlocks where i < b.count { out.append(b[i]) }
        }
        for i in 0..<ecc { for b in eccBlocks { out.append(b[i]) } }
        return out
    }

    /// The symbol as SVG: one path of unit squares with a four-module quiet zone.
    public func svg(title: String) -> String {
        let full = size + 8
        var d = ""
        for y in 0..<size {
            var x = 0
            while x < size {
                if isDark(x: x, y: y) {
                    var run = 1
                    while x + run < size && isDark(x: x + run, y: y) { run += 1 }
                    d += "M\(x + 4) \(y + 4)h\(run)v1h-\(run)z"
                    x += run
                } else { x += 1 }
            }
        }
        return "<svg class=\"qrcode\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(full) \(full)\" role=\"img\" aria-label=\"\(HTML.esc(title))\" shape-rendering=\"crispEdges\">"
            + "<rect width=\"\(full)\" height=\"\(full)\" fill=\"#fff\"/><path fill=\"#000\" d=\"\(d)\"/></svg>"
    }
}

/// GF(256) with the QR polynomial x⁸+x⁴+x³+x²+1 (0x11D), and Reed–Solomon remainders.
enum ReedSolomon {
    static func multiply(_ a: UInt8, _ b: UInt8) -> UInt8 {
        var x = Int(a), y = Int(b), r = 0
        while y > 0 {
            if y & 1 == 1 { r ^= x }
            x <<= 1
            if x & 0x100 != 0 { x ^= 0x11D }
            y >>= 1
        }
        return UInt8(r)
    }

    /// Coefficients of (x − α⁰)(x − α¹)…(x − α^(degree−1)), highest power first, the leading 1 left out.
    static func generator(degree: Int) -> [UInt8] {
        var poly: [UInt8] = [1]
        var root: UInt8 = 1
        for _ in 0..<degree {
            // poly × (x + root): in GF(2⁸) minus is plus.
            var next = [UInt8](repeating: 0, count: poly.count + 1)
            for (i, c) in poly.enumerated() {
                next[i] ^= c
                next[i + 1] ^= multiply(c, root)
            }
            poly = next
            root = multiply(root, 2)
        }
        return Array(poly.dropFirst())
    }

    /// The remainder of data(x)·x^degree divided by the generator: the error-correction codewords.
    static func remainder(_ data: [UInt8], generator: [UInt8]) -> [UInt8] {
        var r = [UInt8](repeating: 0, count: generator.count)
        for byte in data {
            let factor = byte ^ r[0]
            r.removeFirst()
            r.append(0)
            for i in 0..<r.count { r[i] ^= multiply(generator[i], factor) }
        }
        return r
    }
}

/// The module grid while it is being built: which modules are dark, and which belong to
/// function patterns (finders, timing, alignment, format and version areas) that data skips.
struct Matrix {
    let version: Int
    let size: Int
    var dark: [Bool]
    var function: [Bool]

    init(version: Int) {
        self.version = version
        size = 17 + 4 * version
        dark = Array(repeating: false, count: size * size)
        function = Array(repeating: false, count: size * size)
    }

    mutating func set(_ x: Int, _ y: Int, _ on: Bool) {
        dark[y * size + x] = on
        function[y * size + x] = true
    }

    mutating func drawFunctionPatterns() {
        for i in 0..<size {
            set(6, i, i % 2 == 0)
            set(i, 6, i % 2 == 0)
        }
        for (cx, cy) in [(3, 3), (size - 4, 3), (3, size - 4)] {
            for dy in -4...4 {
                for dx in -4...4 {
                    let x = cx + dx, y = cy + dy
                    guard x >= 0, x < size, y >= 0, y < size else { continue }
                    let dist = max(abs(dx), abs(dy))
                    set(x, y, dist != 2 && dist != 4)
                }
            }
        }
        let pos = QRCode.alignmentPositions(version)
        for (i, ay) in pos.enumerated() {
            for (j, ax) in pos.enumerated() {
                // Not over the three finder patterns.
                if (i == 0 && j == 0) || (i == 0 && j == pos.count - 1) || (i == pos.count - 1 && j == 0) { continue }
                for dy in -2...2 { for dx in -2...2 { set(ax + dx, ay + dy, max(abs(dx), abs(dy)) != 1) } }
            }
        }
        // Reserve the format areas (drawn for real once the mask is known) and the dark module.
        drawFormat(bits: 0)
        if version >= 7 {
            var rem = version
            for _ in 0..<12 { rem = (rem << 1) ^ ((rem >> 11) * 0x1F25) }
            let bits = version << 12 | rem
            for i in 0..<18 {
                let on = (bits >> i) & 1 == 1
                let a = size - 11 + i % 3, b = i / 3
                set(a, b, on)
                set(b, a, on)
            }
        }
    }

    mutating func drawFormat(level: QRCode.Level, mask: Int) {
        let data = level.formatBits << 3 | mask
        var rem = data
        for _ in 0..<10 { rem = (rem << 1) ^ ((rem >> 9) * 0x537) }
        drawFormat(bits: (data << 10 | rem) ^ 0x5412)
    }

    mutating func drawFormat(bits: Int) {
        func bit(_ i: Int) -> Bool { (bits >> i) & 1 == 1 }
        for i in 0...5 { set(8, i, bit(i)) }
        set(8, 7, bit(6))
        set(8, 8, bit(7))
        set(7, 8, bit(8))
        for i in 9..<15 { set(14 - i, 8, bit(i)) }
        for i in 0..<8 { set(size - 1 - i, 8, bit(i)) }
        for i in 8..<15 { set(8, size - 15 + i, bit(i)) }
        set(8, size - 8, true)
    }

    /// Places the codewords in the two-column zigzag from the bottom right, skipping function modules.
    mutating func placeData(_ codewords: [UInt8]) {
        var i = 0
        let total = codewords.count * 8
        var right = size - 1
        while right >= 1 {
            if right == 6 { right = 5 }
            let upward = ((right + 1) & 2) == 0
            for vert in 0..<size {
                let y = upward ? size - 1 - vert : vert
                for j in 0..<2 {
                    let x = right - j
                    guard !function[y * size + x] else { continue }
                    if i < total {
                        dark[y * size + x] = (codewords[i >> 3] >> (7 - UInt8(i & 7))) & 1 == 1
                        i += 1
                    }
                }
            }
            right -= 2
        }
    }

    static func maskBit(_ mask: Int, _ x: Int, _ y: Int) -> Bool {
        switch mask {
        case 0: return (x + y) % 2 == 0
        case 1: return y % 2 == 0
        case 2: return x % 3 == 0
        case 3: return (x + y) % 3 == 0
        case 4: return (x / 3 + y / 2) % 2 == 0
        case 5: return x * y % 2 + x * y % 3 == 0
        case 6: return (x * y % 2 + x * y % 3) % 2 == 0
        default: return ((x + y) % 2 + x * y % 3) % 2 == 0
        }
    }

    mutating func applyMask(_ mask: Int) {
        for y in 0..<size {
            for x in 0..<size where !function[y * size + x] && Self.maskBit(mask, x, y) {
                dark[y * size + x].toggle()
            }
        }
    }

    /// The standard's penalty score (runs, 2×2 blocks, finder-like patterns, dark balance).
    func penalty() -> Int {
        var p = 0
        func at(_ x: Int, _ y: Int) -> Bool { dark[y * size + x] }
        for horizontal in [true, false] {
            for a in 0..<size {
                var run = 0
                var last = false
                var line: [Bool] = []
                for b in 0..<size {
                    let v = horizontal ? at(b, a) : at(a, b)
                    line.append(v)
                    if b > 0 && v == last { run += 1 } else {
                        if run >= 5 { p += run - 2 }
                        run = 1
                    }
                    last = v
                }
                if run >= 5 { p += run - 2 }
                // 1:1:3:1:1 with four light modules on either side.
                let pattern: [Bool] = [true, false, true, true, true, false, true]
                for s in 0..<size where s + 7 <= size {
                    guard Array(line[s..<(s + 7)]) == pattern else { continue }
                    let before = (max(0, s - 4)..<s).allSatisfy { !line[$0] } && s >= 4
                    let after = (s + 7..<min(size, s + 11)).allSatisfy { !line[$0] } && s + 11 <= size
                    if before || after { p += 40 }
                }
            }
        }
        for y in 0..<(size - 1) {
            for x in 0..<(size - 1) {
                let c = at(x, y)
                if c == at(x + 1, y) && c == at(x, y + 1) && c == at(x + 1, y + 1) { p += 3 }
            }
        }
        let darkCount = dark.filter { $0 }.count
        let percent = darkCount * 100 / (size * size)
        p += (abs(percent - 50) / 5) * 10
        return p
    }
}
