import XCTest
@testable import YaokConsole

/// The QR encoder against matrices made by an independent encoder (python3-qrcode 7.3, Debian
/// bookworm: `QRCode(version=V, error_correction=…, mask_pattern=M, border=0)` with the data as
/// one 8-bit-byte segment); `#` is dark. Version 1 checks format bits and one block; version 7
/// checks the version information, alignment patterns and interleaving of several blocks.
final class QRCodeTests: XCTestCase {
    static let v1M: [String] = [
        "#######...##..#######",
        "#.....#.....#.#.....#",
        "#.###.#.#...#.#.###.#",
        "#.###.#.####..#.###.#",
        "#.###.#.#.#.#.#.###.#",
        "#.....#.####..#.....#",
        "#######.#.#.#.#######",
        "........###..........",
        "#.#####...##..#####..",
        "#.#....#...###..#.#.#",
        "###.#.#.###.##...###.",
        "##..##..#..###.#..##.",
        "###.####.#..#.###...#",
        "........#...#..##.##.",
        "#######...##..#...##.",
        "#.....#.###....#.###.",
        "#.###.#.####...#..#.#",
        "#.###.#.#..#######...",
        "#.###.#.#...#.##.#...",
        "#.....#..######.###..",
        "#######.#.#.#..##.##.",
    ]
    static let v7Q: [String] = [
        "#######.##...#.#.##.###.#.###.#.....#.#######",
        "#.....#.##....######..###.#....##..#..#.....#",
        "#.###.#..#.#..##.##.####......#..#.#..#.###.#",
        "#.###.#.....##.###..#..#.######.##.##.#.###.#",
        "#.###.#..####..##########.....#######.#.###.#",
        "#.....#...#...##...##...##...#..#.....#.....#",
        "#######.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#.#######",
        ".........#..#..##..##...#....#.#..#..........",
        ".#....####....#.....#######..#.#...#.#.....##",
        "..##...###.##.#.##....##.##..##.###.####.###.",
        ".....####...#..#.....###...#..###..#..#.###..",
        "#.#..#..####...###.#...##..###....#..##.###.#",
        ".####.#.#...##.##........#.###..####..#.###.#",
        ".#.###..#.##.#.#.#.###...#...###.#.##..#.####",
        "#.##.##.#.#..##.#.##.##..#....#####..##...#..",
        "....##.........###..###...#..#.#.#.##..####.#",
        "###...#.##.#.####..####.##...##...#..#...###.",
        "##.###..#.##..##...#.#.###.#.##.#...#...#.###",
        "#####.#.#...#######..#..##.##.#..#.#....#...#",
        "............#......#.##.###..#.###....#..###.",
        "###.#####....#..#...#####.#.#....#..#####....",
        "#.###...#..####...###...##...#..#.###...#....",
        "##..#.#.#.##.#..#...#.#.#...#.#...###.#.####.",
        "#.#.#...##......###.#...##..##..###.#...###.#",
        "##.######..######.#########.##..###.######.##",
        ".#...#....##..#...#.#.#..#.######..#...#.#.#.",
        "##.##.#..#...##.##..###.#...##....#..#..##.#.",
        ".#.###.##.......##..###..#.##.#.......######.",
        "#.###.#..#####.#####....#......#..#.##..##...",
        "...##...#.###......#.##.#.....#.##..###..##..",
        ".....##.....#..#.#.##.#.#####..#.##.#.###...#",
        ".#.#.#.##..####..###..#.##....##..#..#..#.#..",
        ".#...###...#.#.####.#..###....##.##..#..##.#.",
        "##.#...##.##..##.##.....#..#####.##.#...####.",
        "....#.#.##.##.##..#.##.#####..#.#..#.#.##....",
        ".####..#.#...##.#######.##.###....###.##.###.",
        "#..##.#.#.#...#.....#########...#.#########.#",
        "........#...###..#..#...#######..#..#...#####",
        "#######.##..##...#..#.#.####.########.#.####.",
        "#.....#..#.#.....#.##...###..#.#.#..#...####.",
        "#.###.#..##.###.#########.#.......#########..",
        "#.###.#...#.#.....##.#..##...###.#....#.####.",
        "#.###.#..#..#.##..##......#.#.#..#.##...###.#",
        "#.....#.#.##.##....##.##.###..#######..#.##..",
        "#######..###.###.###..###.##.##.....####...#.",
    ]

    func render(_ q: QRCode) -> [String] {
        (0..<q.size).map { y in String((0..<q.size).map { q.isDark(x: $0, y: y) ? "#" : "." }) }
    }

    func testVersion1MediumMask2MatchesIndependentEncoder() throws {
        let q = try QRCode.encode(Array("Ya OK hub".utf8), level: .medium, version: 1, mask: 2)
        XCTAssertEqual(render(q), Self.v1M)
    }

    func testVersion7QuartileMask5MatchesIndependentEncoder() throws {
        let data = Array("yaok://contact?v=1&d=".utf8) + (48..<108).map { UInt8($0) }
        let q = try QRCode.encode(data, level: .quartile, version: 7, mask: 5)
        XCTAssertEqual(q.size, 45)
        XCTAssertEqual(render(q), Self.v7Q)
    }

    func testPicksSmallestVersionAndRefusesTooLong() throws {
        // A hub contact code is about 250 bytes: version 11 at level M (251 bytes of data).
        XCTAssertEqual(try QRCode.encode([UInt8](repeating: 0x41, count: 250), level: .medium).version, 11)
        XCTAssertEqual(try QRCode.encode([UInt8](repeating: 0x41, count: 14), level: .medium).version, 1)
        XCTAssertEqual(try QRCode.encode([UInt8](repeating: 0x41, count: 15), level: .medium).version, 2)
        XCTAssertThrowsError(try QRCode.encode([UInt8](repeating: 0, count: 3000), level: .high))
    }

    func testDataCapacityTableAgreesWithTheStandardsTotals() {
        // Byte-mode capacities from the standard's table 7 (version 40: L 2953, M 2331, Q 1663, H 1273).
        XCTAssertEqual(QRCode.dataCodewords(40, .low) - 3, 2953)
        XCTAssertEqual(QRCode.dataCodewords(40, .medium) - 3, 2331)
        XCTAssertEqual(QRCode.dataCodewords(40, .quartile) - 3, 1663)
        XCTAssertEqual(QRCode.dataCodewords(40, .high) - 3, 1273)
        XCTAssertEqual(QRCode.rawDataModules(1), 208)
    }

    func testSVGIsOnePathWithQuietZone() throws {
        let svg = try QRCode.encode(Array("x".utf8), level: .low).svg(title: "a <b>")
        XCTAssertTrue(svg.contains("viewBox=\"0 0 29 29\""), svg)
        XCTAssertTrue(svg.contains("aria-label=\"a &lt;b&gt;\""))
        XCTAssertFalse(svg.contains("<script"))
    }
}
