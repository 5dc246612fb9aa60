import XCTest
@testable import YaokReconcile
import YaokCrypto
import YaokTesting

final class ParsingTests: XCTestCase {
    func parse(_ bytes: [UInt8]) -> ReconcileError? {
        do { _ = try ReconcileMessage(parsing: bytes); return nil } catch { return error }
    }

    func samples() -> [ReconcileMessage] {
        var rng = SplitMix64(seed: 20)
        let ids = randomIDs(50, &rng)
        let initiator = ReconcileInitiator(ids: ids, session: 7, salt: [UInt8](repeating: 1, count: 16))
        var responder = ReconcileResponder(ids: randomIDs(3000, &rng))
        guard case .send(let table) = responder.receive(initiator.firstMessage) else { fatalError() }
        return [initiator.firstMessage] + table
            + [.tableRequest(.init(session: 7, salt: [UInt8](repeating: 2, count: 16), totalCells: 300))]
            + ReconcileMessage.lacksParts(session: 7, ids: ids)
            + [.abort(.init(session: 7, reason: .busy)), .abort(.init(session: 7, reason: .unsupportedVersion, versions: [1, 2]))]
            + codedSamples(ids)
    }

    /// Version 2's messages: start, more, cells (from a real responder), lacks.
    func codedSamples(_ ids: [BundleID]) -> [ReconcileMessage] {
        let start = ReconcileMessage.start(.init(session: 8, salt: [UInt8](repeating: 4, count: 16), setSize: 50, cellCount: 40))
        var responder = CodedResponder(ids: ids)
        guard case .send(let cells) = responder.receive(start) else { fatalError() }
        return [start, .more(.init(session: 8, firstCell: 40, cellCount: 2142))] + cells
            + ReconcileMessage.lacksParts(session: 8, ids: ids, version: 2)
    }

    func testRoundTrip() throws {
        for m in samples() {
            XCTAssertEqual(try ReconcileMessage(parsing: m.encoded), m)
        }
    }

    func testTruncatedAtEveryLength() {
        for m in samples() {
            let bytes = m.encoded
            for n in 0..<bytes.count {
                guard let error = parse(Array(bytes[0..<n])) else { return XCTFail("kind \(m.kind) cut at \(n) parsed") }
                switch error {
                case .truncated, .lengthMismatch: break
                case .noVersionsListed where n == 8 && m.kind == 5: break
                default: XCTFail("kind \(m.kind) cut at \(n): \(error)")
                }
            }
            // One byte too many.
            guard let error = parse(bytes + [0]), case .lengthMismatch = error else { return XCTFail("kind \(m.kind) with a trailing byte") }
        }
    }

    func testVersionsAndKinds() {
        XCTAssertEqual(parse([3, 1, 0, 0, 0, 0]), .unsupportedVersion(3))
        // Version 2 reads its own kinds only; version 1 does not read them.
        XCTAssertEqual(parse([2, 1, 0, 0, 0, 0]), .truncated(needed: 28, got: 6))
        for kind: UInt8 in [2, 3, 8] { XCTAssertEqual(parse([2, kind, 0, 0, 0, 0, 0, 0]), .unknownKind(kind)) }
        XCTAssertEqual(parse([1, 7, 0, 0, 0, 0, 0, 0]), .unknownKind(7))
        XCTAssertEqual(parse([2, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), .codedCountInvalid(0))
        XCTAssertEqual(parse([2, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x5F, 0x08]), .codedCountInvalid(2143))
        XCTAssertEqual(parse([2, 6, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 1, 0]), .codedRangeAboveCap(first: 65_535, count: 1))
        XCTAssertEqual(parse([2, 6, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]), .lengthMismatch(expected: 12, got: 13))
        XCTAssertEqual(parse([2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0] + [UInt8](repeating: 0, count: 28)), .lengthMismatch(expected: 68, got: 40))
        XCTAssertEqual(parse([0, 4, 0, 0, 0, 0, 1, 1, 0, 0]), .unsupportedVersion(0))
        for kind: UInt8 in [0, 6, 0x0a, 255] { XCTAssertEqual(parse([1, kind, 0, 0, 0, 0, 0, 0]), .unknownKind(kind)) }
        XCTAssertEqual(parse([1, 5, 0, 0, 0, 0, 0]), .unknownAbortReason(0))
        XCTAssertEqual(parse([1, 5, 0, 0, 0, 0, 6]), .unknownAbortReason(6))
        XCTAssertEqual(parse([1, 5, 0, 0, 0, 0, 1, 0]), .noVersionsListed)
        XCTAssertEqual(parse([1, 5, 0, 0, 0, 0, 1, 3, 1]), .lengthMismatch(expected: 11, got: 9))
        XCTAssertEqual(parse([1, 5, 0, 0, 0, 0, 2, 0]), .lengthMismatch(expected: 7, got: 8))
        XCTAssertEqual(parse([UInt8](repeating: 1, count: 65_536)), .tooLong(65_536))
    }

    func testEstimateLimits() {
        func estimate(strata: UInt8, cells: UInt16, body: Int) -> [UInt8] {
            [1, 1, 0, 0, 0, 0] + [UInt8](repeating: 0, count: 16) + [strata, UInt8(cells & 0xff), UInt8(cells >> 8), 0, 0, 0, 0]
                + [UInt8](repeating: 0, count: body)
        }
        XCTAssertEqual(parse(estimate(strata: 0, cells: 3, body: 0)), .strataOutOfRange(0))
        XCTAssertEqual(parse(estimate(strata: 33, cells: 3, body: 0)), .strataOutOfRange(33))
        XCTAssertEqual(parse(estimate(strata: 2, cells: 40, body: 0)), .cellsPerStratumInvalid(strata: 2, cells: 40))
        XCTAssertEqual(parse(estimate(strata: 2, cells: 0, body: 0)), .cellsPerStratumInvalid(strata: 2, cells: 0))
        XCTAssertEqual(parse(estimate(strata: 32, cells: 999, body: 0)), .cellsPerStratumInvalid(strata: 32, cells: 999))
        // Counts larger than the bytes.
        XCTAssertEqual(parse(estimate(strata: 16, cells: 42, body: 28)), .lengthMismatch(expected: 29 + 16 * 42 * 28, got: 29 + 28))
        XCTAssertNil(parse(estimate(strata: 1, cells: 3, body: 84)))
    }

    func testTableLimits() {
        func table(part: UInt8, parts: UInt8, total: UInt32, first: UInt32, count: UInt16, body: Int? = nil) -> [UInt8] {
            var out: [UInt8] = [1, 2, 0, 0, 0, 0, part, parts]
            ReconcileMessage.put32(&out, total)
            ReconcileMessage.put32(&out, first)
            ReconcileMessage.put16(&out, count)
            return out + [UInt8](repeating: 0, count: body ?? Int(count) * 28)
        }
        XCTAssertNil(parse(table(part: 1, parts: 1, total: 30, first: 0, count: 30)))
        XCTAssertNil(parse(table(part: 31, parts: 31, total: 65_535, first: 30 * 2142, count: UInt16(65_535 - 30 * 2142))))
        XCTAssertEqual(parse(table(part: 1, parts: 30, total: 65_535, first: 0, count: 2142)), .partsMismatch(parts: 30, expected: 31))
        XCTAssertEqual(parse(table(part: 0, parts: 0, total: 30, first: 0, count: 30)), .zeroParts)
        XCTAssertEqual(parse(table(part: 0, parts: 1, total: 30, first: 0, count: 30)), .partOutOfRange(part: 0, parts: 1))
        XCTAssertEqual(parse(table(part: 2, parts: 1, total: 30, first: 0, count: 30)), .partOutOfRange(part: 2, parts: 1))
        XCTAssertEqual(parse(table(part: 1, parts: 31, total: 65_538, first: 0, count: 2142)), .totalCellsAboveCap(65_538))
        XCTAssertEqual(parse(table(part: 1, parts: 1, total: 0xffff_ffff, first: 0, count: 2142, body: 0)), .totalCellsAboveCap(0xffff_ffff))
        XCTAssertEqual(parse(table(part: 1, parts: 1, total: 31, first: 0, count: 31)), .totalCellsInvalid(31))
        XCTAssertEqual(parse(table(part: 1, parts: 1, total: 0, first: 0, count: 0)), .totalCellsInvalid(0))
        XCTAssertEqual(parse(table(part: 1, parts: 2, total: 30, first: 0, count: 30)), .partsMismatch(parts: 2, expected: 1))
        XCTAssertEqual(parse(table(part: 1, parts: 1, total: 30, first: 3, count: 27)), .cellRangeMismatch(part: 1, first: 3, count: 27))
        XCTAssertEqual(parse(table(part: 1, parts: 2, total: 3000, first: 0, count: 2000)), .cellRangeMismatch(part: 1, first: 0, count: 2000))
        XCTAssertEqual(parse(table(part: 1, parts: 1, total: 30, first: 0, count: 30, body: 28)), .lengthMismatch(expected: 18 + 840, got: 18 + 28))
        // tableRequest
        var request: [UInt8] = [1, 3, 0, 0, 0, 0] + [UInt8](repeating: 0, count: 16)
        ReconcileMessage.put32(&request, 70_000)
        XCTAssertEqual(parse(request), .totalCellsAboveCap(70_000))
        request[22...] = [4, 0, 0, 0]
        XCTAssertEqual(parse(request), .totalCellsInvalid(4))
    }

    func testLacksLimits() {
        func lacks(part: UInt8, parts: UInt8, count: UInt16, ids: [BundleID]) -> [UInt8] {
            var out: [UInt8] = [1, 4, 0, 0, 0, 0, part, parts]
            ReconcileMessage.put16(&out, count)
            return out + ids.flatMap(\.bytes)
        }
        let a = BundleID(hi: 1, lo: 2), b = BundleID(hi: 1, lo: 3)
        XCTAssertNil(parse(lacks(part: 1, parts: 1, count: 2, ids: [a, b])))
        XCTAssertEqual(parse(lacks(part: 1, parts: 1, count: 2, ids: [b, a])), .notSortedUnique)
        XCTAssertEqual(parse(lacks(part: 1, parts: 1, count: 2, ids: [a, a])), .notSortedUnique)
        XCTAssertEqual(parse(lacks(part: 1, parts: 1, count: 3, ids: [a, b])), .lengthMismatch(expected: 58, got: 42))
        XCTAssertEqual(parse(lacks(part: 1, parts: 1, count: 4001, ids: [a])), .countAboveCap(4001))
        XCTAssertEqual(parse(lacks(part: 1, parts: 1, count: 0xffff, ids: [])), .countAboveCap(0xffff))
        XCTAssertEqual(parse(lacks(part: 1, parts: 0, count: 0, ids: [])), .zeroParts)
        XCTAssertEqual(parse(lacks(part: 3, parts: 2, count: 0, ids: [])), .partOutOfRange(part: 3, parts: 2))
        XCTAssertEqual(parse(lacks(part: 1, parts: 2, count: 2, ids: [a, b])), .partNotFull(part: 1, count: 2))
        XCTAssertEqual(parse(lacks(part: 2, parts: 2, count: 0, ids: [])), .partNotFull(part: 2, count: 0))
    }

    func testErrorsDescribeThemselves() {
        XCTAssertTrue(ReconcileError.totalCellsAboveCap(70_000).description.contains("70000"))
        XCTAssertTrue(ReconcileError.notSortedUnique.description.contains("sorted"))
    }

    /// Random bytes and mutated valid messages: parsing never crashes, and whatever parses is
    /// handled by both sides without crashing.
    func testFuzz() {
        var rng = SplitMix64(seed: 0xF022)
        let valid = samples().map(\.encoded)
        var parsed = 0
        var ids = randomIDs(200, &rng)
        let initiator = ReconcileInitiator(ids: ids, session: 7)
        ids += randomIDs(20, &rng)
        var responder = ReconcileResponder(ids: ids)
        _ = responder.receive(initiator.firstMessage)
        for round in 0..<30_000 {
            var bytes: [UInt8]
            if round % 3 == 0 {
                bytes = (0..<Int(rng.next() % 80)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                if bytes.count >= 2 && rng.next() % 2 == 0 { bytes[0] = 1; bytes[1] = UInt8(1 + rng.next() % 5) }
            } else {
                bytes = valid[Int(rng.next() % UInt64(valid.count))]
                if bytes.count > 6000 { bytes = Array(bytes.prefix(6000 + Int(rng.next() % 100))) }
                for _ in 0..<(1 + rng.next() % 4) {
                    let i = Int(rng.next() % UInt64(bytes.count))
                    bytes[i] = UInt8(truncatingIfNeeded: rng.next())
                }
                if rng.next() % 4 == 0 { bytes.removeLast(Int(rng.next() % UInt64(bytes.count))) }
            }
            if (try? ReconcileMessage(parsing: bytes)) != nil { parsed += 1 }
            var i = initiator, r = responder
            _ = i.receive(bytes: bytes)
            _ = r.receive(bytes: bytes)
        }
        XCTAssertGreaterThan(parsed, 100)
    }
}
