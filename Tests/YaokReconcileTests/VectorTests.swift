import Foundation
import XCTest
import YaokCrypto
@testable import YaokReconcile
import enum YaokPluginKit.Hex

/// The test vectors of Docs/protocol.md, `reconcile (0x0A)`.
enum ReconcileVectors {
    static let salt: [UInt8] = Array(0..<16)
    static let ids: [BundleID] = [0x11, 0x22, 0x33].map { BundleID([UInt8](repeating: $0, count: 16))! }
    static let session: UInt32 = 0x0403_0201

    /// An estimate of the three IDs: 2 strata × 3 cells.
    static var estimate: ReconcileMessage {
        let sizing = ReconcileSizing(strata: 2, cellsPerStratum: 3, cellsPerDifference: 2, cellsPerExactDifference: 1.5, extraCells: 36)
        return ReconcileInitiator(ids: ids, session: session, salt: salt, sizing: sizing).firstMessage
    }

    /// A table of the three IDs, 6 cells, one part.
    static var table: ReconcileMessage {
        var cells = Cells(cells: 6)
        cells.insert(ids, ReconcileHash.digests(ids, salt: salt), size: 6)
        return .table(.init(session: session, part: 1, parts: 1, totalCells: 6, firstCell: 0, cellCount: 6, cellBytes: cells.encode(0..<6)))
    }

    static var lacks: ReconcileMessage { ReconcileMessage.lacksParts(session: session, ids: [ids[1], ids[0]])[0] }
    static var tableRequest: ReconcileMessage { .tableRequest(.init(session: session, salt: salt, totalCells: 12)) }

    /// Version 2: the cells each ID goes into below 40.
    static func walks() -> [[Int]] {
        ids.map { SymbolWalk.cells(seed: ReconcileHash.digest($0, salt: salt).stratumWord, below: 40).cells }
    }

    /// Version 2: a start asking for 6 cells, the responder's cells 0..<6 of the three IDs, and a `more` for 6 more.
    static var start: ReconcileMessage { .start(.init(session: session, salt: salt, setSize: 2, cellCount: 6)) }
    static var codedCells: ReconcileMessage {
        var responder = CodedResponder(ids: ids)
        guard case .send(let m) = responder.receive(start) else { fatalError("the responder did not answer") }
        return m[0]
    }
    static var more: ReconcileMessage { .more(.init(session: session, firstCell: 6, cellCount: 6)) }

    static func lines(_ hex: String) -> [String] {
        stride(from: 0, to: hex.count, by: 64).map { i in
            let s = hex.index(hex.startIndex, offsetBy: i)
            return String(hex[s..<(hex.index(s, offsetBy: 64, limitedBy: hex.endIndex) ?? hex.endIndex)])
        }
    }

    /// Every value the docs show, as (label, value) pairs.
    static func values() -> [(String, String)] {
        var out: [(String, String)] = []
        for (n, id) in ids.enumerated() {
            let d = ReconcileHash.digest(id, salt: salt)
            let idx = d.cellIndexes(cells: 30)
            out.append(("H(ID \(n + 1))", Hex.encode(ReconcileHash.rawHash(id, salt: salt))))
            out.append(("ID \(n + 1)", "check \(String(format: "%016llx", d.check)), stratum of 16: \(d.stratum(of: 16)), cells of 30: \(idx.0), \(idx.1), \(idx.2)"))
        }
        out.append(("estimate", Hex.encode(estimate.encoded)))
        out.append(("table", Hex.encode(table.encoded)))
        out.append(("tableRequest", Hex.encode(tableRequest.encoded)))
        out.append(("lacks", Hex.encode(lacks.encoded)))
        return out
    }
}

final class VectorTests: XCTestCase {
    /// (H, check, stratum of 16, cells in a table of 30) of IDs 16 × 11, 16 × 22, 16 × 33.
    static let expectedIDs: [(String, String, Int, (Int, Int, Int))] = [
        ("9f0eb4fd1f16c6c78effb69c2bfee1c93574141fd93c39162089999ed6762cc2", "c7c6161ffdb40e9f", 1, (5, 11, 20)),
        ("90ac462a8929305fad7d7aad68248f98bd032707e68e4530397e387a2c1e74c2", "5f3029892a46ac90", 0, (3, 14, 21)),
        ("4477756d9977afc0ae27c55c58912867f4d9b2406a86c62452c898934b30b014", "c0af77996d757744", 1, (8, 14, 26)),
    ]
    static let expectedMessages: [(String, String)] = [
        ("estimate", "010101020304000102030405060708090a0b0c0d0e0f02030003000000010000002222222222222222222222222222222290ac462a8929305f010000002222222222222222222222222222222290ac462a8929305f010000002222222222222222222222222222222290ac462a8929305f0200000022222222222222222222222222222222db79c190866169070200000022222222222222222222222222222222db79c190866169070200000022222222222222222222222222222222db79c19086616907"),
        ("table", "01020102030401010600000000000000060001000000333333333333333333333333333333334477756d9977afc002000000333333333333333333333333333333330fa2f2d7963ff6980200000011111111111111111111111111111111d4db3347105e9f9f01000000111111111111111111111111111111119f0eb4fd1f16c6c70200000022222222222222222222222222222222db79c19086616907010000002222222222222222222222222222222290ac462a8929305f"),
        ("tableRequest", "010301020304000102030405060708090a0b0c0d0e0f0c000000"),
        ("lacks", "010401020304010102001111111111111111111111111111111122222222222222222222222222222222"),
    ]
    /// Version 2: each ID's cells below 40, then start, cells and more.
    static let expectedWalks = [[0, 1, 2, 3, 4, 6, 18, 30], [0, 1, 2, 23], [0, 4, 8, 10, 22, 35]]
    static let expectedCoded: [(String, String)] = [
        ("start", "020101020304000102030405060708090a0b0c0d0e0f020000000600"),
        ("cells", "02070102030400000000060003000000000000000000000000000000000000004bd587ba0f48595802000000333333333333333333333333333333330fa2f2d7963ff69802000000333333333333333333333333333333330fa2f2d7963ff69801000000111111111111111111111111111111119f0eb4fd1f16c6c70200000022222222222222222222222222222222db79c1908661690700000000000000000000000000000000000000000000000000000000"),
        ("more", "020601020304060000000600"),
    ]

    func testHashVectors() {
        for (id, expected) in zip(ReconcileVectors.ids, Self.expectedIDs) {
            XCTAssertEqual(Hex.encode(ReconcileHash.rawHash(id, salt: ReconcileVectors.salt)), expected.0)
            let d = ReconcileHash.digest(id, salt: ReconcileVectors.salt)
            XCTAssertEqual(String(format: "%016llx", d.check), expected.1)
            XCTAssertEqual(d.stratum(of: 16), expected.2)
            let cells = d.cellIndexes(cells: 30)
            XCTAssertEqual([cells.0, cells.1, cells.2], [expected.3.0, expected.3.1, expected.3.2])
        }
    }

    func testMessageVectors() throws {
        let messages = [ReconcileVectors.estimate, ReconcileVectors.table, ReconcileVectors.tableRequest, ReconcileVectors.lacks]
        for (m, expected) in zip(messages, Self.expectedMessages) {
            XCTAssertEqual(Hex.encode(m.encoded), expected.1, expected.0)
            XCTAssertEqual(try ReconcileMessage(parsing: m.encoded), m)
        }
    }

    /// Version 2's vectors; an independent implementation of the walk from the text of
    /// Docs/protocol.md (Python, `hashlib.blake2b` and floats) gave the same cells.
    func testCodedVectors() throws {
        XCTAssertEqual(ReconcileVectors.walks(), Self.expectedWalks)
        let messages = [ReconcileVectors.start, ReconcileVectors.codedCells, ReconcileVectors.more]
        for (m, expected) in zip(messages, Self.expectedCoded) {
            XCTAssertEqual(Hex.encode(m.encoded), expected.1, expected.0)
            XCTAssertEqual(try ReconcileMessage(parsing: m.encoded), m)
        }
        // The cells vector decodes: minus the first two IDs' cells it peels to the third.
        guard case .cells(let c) = ReconcileVectors.codedCells else { return XCTFail() }
        var theirs = Cells(cells: 6)
        theirs.decode(c.cellBytes, first: 0)
        let two = Array(ReconcileVectors.ids.prefix(2))
        var decoder = CodedSymbolDecoder(ids: two, digests: ReconcileHash.digests(two, salt: ReconcileVectors.salt), salt: ReconcileVectors.salt)
        XCTAssertTrue(decoder.add(theirs))
        XCTAssertEqual(decoder.plus, [ReconcileVectors.ids[2]])
        XCTAssertEqual(decoder.minus, [])
    }

    /// The table vector decodes: subtracting a table of the first two IDs leaves the third.
    func testTableVectorPeels() {
        guard case .table(let t) = ReconcileVectors.table else { return XCTFail() }
        var theirs = Cells(cells: 6)
        theirs.decode(t.cellBytes, first: 0)
        var mine = Cells(cells: 6)
        let two = Array(ReconcileVectors.ids.prefix(2))
        mine.insert(two, ReconcileHash.digests(two, salt: ReconcileVectors.salt), size: 6)
        theirs.subtract(mine)
        let peeled = theirs.peel(base: 0, size: 6, salt: ReconcileVectors.salt)
        XCTAssertTrue(peeled.complete)
        XCTAssertEqual(peeled.plus, [ReconcileVectors.ids[2]])
    }

    /// Docs/protocol.md shows every vector (hex wrapped at 64 characters).
    func testDocsShowTheVectors() throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Docs/protocol.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        guard let start = text.range(of: "### reconcile (0x0A)") else { return XCTFail("no reconcile section") }
        let section = String(text[start.lowerBound...])
        for (h, check, stratum, cells) in Self.expectedIDs {
            XCTAssertTrue(section.contains("`\(h)`"), h)
            XCTAssertTrue(section.contains("| `\(check)` | \(stratum) | \(cells.0), \(cells.1), \(cells.2) |"), check)
        }
        for (label, value) in Self.expectedMessages + Self.expectedCoded {
            for line in ReconcileVectors.lines(value) { XCTAssertTrue(section.contains(line + "\n"), "\(label): \(line)") }
        }
        for (n, walk) in Self.expectedWalks.enumerated() {
            let id = String(repeating: ["11", "22", "33"][n], count: 1)
            XCTAssertTrue(section.contains("| 16 × `\(id)` | \(walk.map(String.init).joined(separator: ", ")) |"), "walk of ID \(n + 1)")
        }
    }
}
