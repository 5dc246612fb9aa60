import XCTest
@testable import YaokReconcile
import YaokCrypto
import YaokTesting

/// Version 2 (coded symbols): exact results at every size, what a tampering peer gets, and the
/// rules each side holds the other to.
final class CodedExchangeTests: XCTestCase {
    func coded(_ a: [BundleID], _ b: [BundleID], salt: [UInt8]? = nil,
               tamper: ((inout [[UInt8]]) -> Void)? = nil) -> (Exchange, CodedInitiator) {
        var initiator = CodedInitiator(ids: a, salt: salt)
        var responder = CodedResponder(ids: b)
        let x = runExchange(&initiator, &responder, first: initiator.firstMessage, tamper: tamper)
        return (x, initiator)
    }

    func assertExact(_ x: Exchange, onlyA: [BundleID], onlyB: [BundleID], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNil(x.initiatorFellBack, file: file, line: line)
        XCTAssertNil(x.responderFellBack, file: file, line: line)
        XCTAssertEqual(x.initiatorResult?.peerLacks, onlyA.sorted(), "what the responder lacks", file: file, line: line)
        XCTAssertEqual(x.initiatorResult?.iLack, onlyB.sorted(), "what the initiator lacks", file: file, line: line)
        XCTAssertEqual(x.responderLacks, onlyB.sorted(), "the responder learns what the initiator lacks", file: file, line: line)
    }

    func testEverySizeOfDifferenceDecodesExactly() {
        var rng = SplitMix64(seed: 21)
        for (shared, d) in [(0, 0), (50, 0), (50, 1), (1000, 7), (5000, 60), (20_000, 600), (0, 300)] {
            let common = randomIDs(shared, &rng)
            let onlyA = randomIDs(d / 2 + d % 2, &rng), onlyB = randomIDs(d / 2, &rng)
            let (x, _) = coded(common + onlyA, common + onlyB)
            assertExact(x, onlyA: onlyA, onlyB: onlyB)
        }
        // One side empty: everything the other has is the difference.
        let all = randomIDs(900, &rng)
        assertExact(coded([], all).0, onlyA: [], onlyB: all)
        assertExact(coded(all, []).0, onlyA: all, onlyB: [])
    }

    /// The case: 100,000 IDs each, 1 % different. Bytes are a protocol property, not a
    /// speed: the bound is the 200 KB, and version 2 needs no estimate to meet it.
    func testHundredThousandOnePercentStaysUnder200KB() {
        var rng = SplitMix64(seed: 22)
        let common = randomIDs(99_000, &rng), onlyA = randomIDs(1000, &rng), onlyB = randomIDs(1000, &rng)
        let (x, initiator) = coded(common + onlyA, common + onlyB)
        assertExact(x, onlyA: onlyA, onlyB: onlyB)
        let total = x.bytesToResponder + x.bytesToInitiator
        print("100k/1 %: \(total) bytes, \(initiator.requested) cells asked for, \(x.rounds) rounds")
        XCTAssertLessThan(total, 200_000)
        XCTAssertLessThan(initiator.requested, 2 * 2000, "asked for at most twice the difference")
    }

    func testTamperedCellsNeverYieldAWrongDifference() {
        var rng = SplitMix64(seed: 23)
        let common = randomIDs(3000, &rng), onlyA = randomIDs(40, &rng), onlyB = randomIDs(40, &rng)
        for flip in [13, 100, 2000, 3000] {
            let (x, _) = coded(common + onlyA, common + onlyB) { messages in
                for i in messages.indices where messages[i][1] == 7 && messages[i].count > flip + 12 { messages[i][12 + flip] ^= 0x5A }
            }
            if let r = x.initiatorResult {
                XCTAssertEqual(r.peerLacks, onlyA.sorted())
                XCTAssertEqual(r.iLack, onlyB.sorted())
            } else {
                XCTAssertNotNil(x.initiatorFellBack)
            }
        }
        // Cells nobody asked for end the exchange.
        let (x, _) = coded(common + onlyA, common + onlyB) { messages in
            for i in messages.indices where messages[i][1] == 7 { messages[i][6] &+= 3 }
        }
        XCTAssertEqual(x.initiatorFellBack, .malformed)
        XCTAssertNil(x.initiatorResult)
    }

    func testResponderHoldsRequestsToTheRules() {
        var rng = SplitMix64(seed: 24)
        let ids = randomIDs(500, &rng)
        let salt = [UInt8](repeating: 3, count: 16)
        var r = CodedResponder(ids: ids)
        guard case .send(let first) = r.receive(.start(.init(session: 9, salt: salt, setSize: 1, cellCount: 100))),
              case .cells(let c)? = first.first else { return XCTFail() }
        XCTAssertEqual(c.firstCell, 0)
        XCTAssertEqual(c.cellCount, 100)
        XCTAssertEqual(c.cellBytes.count, 100 * 28)
        guard case .send = r.receive(.more(.init(session: 9, firstCell: 100, cellCount: 50))) else { return XCTFail() }
        XCTAssertEqual(r.cellsSent, 150)
        // A gap, a repeat, a second start: each ends the exchange.
        for wrong: ReconcileMessage in [.more(.init(session: 9, firstCell: 200, cellCount: 5)),
                                        .more(.init(session: 9, firstCell: 100, cellCount: 5)),
                                        .start(.init(session: 9, salt: salt, setSize: 1, cellCount: 3)),
                                        .estimate(.init(session: 9, salt: salt, strata: 1, cellsPerStratum: 3, setSize: 0, cellBytes: []))] {
            var copy = r
            guard case .fallBack(.malformed, let abort?, _) = copy.receive(wrong) else { return XCTFail("\(wrong.kind)") }
            XCTAssertEqual(abort.session, 9)
        }
        // One cell at a time cannot make it pass over its set more than 128 times.
        var greedy = CodedResponder(ids: ids)
        _ = greedy.receive(.start(.init(session: 5, salt: salt, setSize: 1, cellCount: 1)))
        for n in 1..<ReconcileLimits.maxCodedRequests {
            guard case .send = greedy.receive(.more(.init(session: 5, firstCell: UInt32(n), cellCount: 1))) else { return XCTFail("request \(n)") }
        }
        guard case .fallBack(.malformed, _, let tooMany) = greedy.receive(.more(.init(session: 5, firstCell: 128, cellCount: 1))) else {
            return XCTFail()
        }
        XCTAssertTrue(tooMany.contains("128 requests"), tooMany)
        // Lacks may name only what it holds.
        var copy = r
        guard case .fallBack(.malformed, _, let why) = copy.receive(.lacks(.init(session: 9, part: 1, parts: 1,
                                                                                 ids: [BundleID(hi: 1, lo: 2)], version: 2))) else { return XCTFail() }
        XCTAssertTrue(why.contains("did not hold"), why)
        guard case .done(let lacked, _, _) = r.receive(.lacks(.init(session: 9, part: 1, parts: 1, ids: [ids.sorted()[3]], version: 2))) else {
            return XCTFail()
        }
        XCTAssertEqual(lacked, [ids.sorted()[3]])
        // Messages of another session are not this exchange's.
        var other = CodedResponder(ids: ids)
        _ = other.receive(.start(.init(session: 9, salt: salt, setSize: 1, cellCount: 3)))
        XCTAssertEqual(other.receive(.more(.init(session: 10, firstCell: 3, cellCount: 3))), .wait)
    }

    /// An older hub (version 1 only) answers a version 2 `start` with `abort(unsupported
    /// version, [1])`; the initiator falls back and the router starts version 1 (ReconcileTests).
    func testAnOlderHubsAbortEndsTheExchange() {
        var rng = SplitMix64(seed: 25)
        var initiator = CodedInitiator(ids: randomIDs(10, &rng), session: 0x0403_0201)
        XCTAssertEqual(Array(initiator.firstMessage.encoded.prefix(6)), [2, 1, 1, 2, 3, 4])
        let fromOld: [UInt8] = [1, 5, 1, 2, 3, 4, 1, 1, 1]
        guard case .fallBack(.unsupportedVersion, nil, let detail) = initiator.receive(bytes: fromOld) else { return XCTFail() }
        XCTAssertTrue(detail.contains("[1]"), detail)
        XCTAssertEqual(initiator.responderVersions, [1], "what the router starts again in")
    }

    func testNextRequestFollowsTheEmptyCells() {
        // No empty cell yet: at least double.
        XCTAssertGreaterThanOrEqual(CodedInitiator.plan(received: 128, emptyCells: 0, peeled: 0).total, 256)
        // Many empty cells early on: a small difference, a small step.
        let small = CodedInitiator.plan(received: 128, emptyCells: 108, peeled: 0).total
        XCTAssertLessThan(small, 200)
        XCTAssertGreaterThanOrEqual(small, 128 + 32)
    }
}
