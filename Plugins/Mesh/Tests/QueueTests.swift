import XCTest
import YaokPluginKit
@testable import YaokMeshPlugin

final class QueueTests: XCTestCase {
    func testFrameQueueIsBoundedByFramesAndBytes() {
        var q = FrameQueue(maxFrames: 3, maxBytes: 10)
        XCTAssertTrue(q.push([1, 2, 3]))
        XCTAssertTrue(q.push([4, 5, 6]))
        XCTAssertFalse(q.push([7, 8, 9, 10, 11]), "13 bytes would exceed 10")
        XCTAssertTrue(q.push([7]))
        XCTAssertFalse(q.push([8]), "a fourth frame exceeds 3")
        XCTAssertEqual(q.count, 3)
        XCTAssertEqual(q.byteCount, 7)
        XCTAssertEqual(q.pop(upTo: 4), [1, 2, 3], "whole frames only, within the budget")
        XCTAssertEqual(q.pop(upTo: 100), [4, 5, 6, 7])
        XCTAssertTrue(q.isEmpty)
        XCTAssertEqual(q.byteCount, 0)
        XCTAssertEqual(q.pop(upTo: 100), [])
    }

    func testOversizedFrameStillLeavesTheQueueOneAtATime() {
        var q = FrameQueue(maxFrames: 10, maxBytes: 1_000)
        XCTAssertTrue(q.push([UInt8](repeating: 1, count: 500)))
        XCTAssertTrue(q.push([2]))
        XCTAssertEqual(q.pop(upTo: 10).count, 500, "a frame larger than the budget is taken alone")
        XCTAssertEqual(q.pop(upTo: 10), [2])
    }

    func testOrderSurvivesCompaction() {
        var q = FrameQueue(maxFrames: 1_000, maxBytes: 1 << 20)
        var next: UInt8 = 0
        var expected: UInt8 = 0
        for round in 0..<50 {
            for _ in 0..<(round % 7 + 1) { XCTAssertTrue(q.push([next])); next &+= 1 }
            for b in q.pop(upTo: round % 3 + 1) { XCTAssertEqual(b, expected); expected &+= 1 }
        }
        for b in q.pop(upTo: 1 << 20) { XCTAssertEqual(b, expected); expected &+= 1 }
        XCTAssertEqual(expected, next)
    }

    func testTokenBucketRefillsWithTimeAndSaysHowLongToWait() {
        var r = TokenBucket(capacity: 10, nowMs: 0)
        for _ in 0..<10 { XCTAssertNil(r.take(capacity: 10, perMs: 0.01, nowMs: 0)) }
        XCTAssertEqual(r.take(capacity: 10, perMs: 0.01, nowMs: 0), 100, "empty: one token comes in 100 ms")
        XCTAssertEqual(r.take(capacity: 10, perMs: 0.01, nowMs: 50), 50, "half a token after 50 ms")
        XCTAssertNil(r.take(capacity: 10, perMs: 0.01, nowMs: 100), "one token after 100 ms")
        XCTAssertFalse(r.isFull(capacity: 10, perMs: 0.01, nowMs: 500))
        XCTAssertTrue(r.isFull(capacity: 10, perMs: 0.01, nowMs: 1_100))
        r.refill(capacity: 10, perMs: 0.01, nowMs: 60_000)
        XCTAssertEqual(r.tokens, 10, "never more than the capacity")
    }

    func testBackoffDoublesToItsCapWithJitter() {
        var b = Backoff(baseMs: 1_000, capMs: 8_000)
        let delays = (0..<6).map { _ in b.nextDelayMs() }
        for (d, nominal) in zip(delays, [1_000, 2_000, 4_000, 8_000, 8_000, 8_000] as [Int64]) {
            XCTAssertGreaterThanOrEqual(d, nominal * 75 / 100)
            XCTAssertLessThanOrEqual(d, nominal * 125 / 100)
        }
        b.reset()
        XCTAssertLessThanOrEqual(b.nextDelayMs(), 1_250)
    }

    func testTokenBucketOnANanosecondClock() {
        var r = TokenBucket(capacity: 4, nowNs: 1_000)
        for _ in 0..<4 {
            r.refill(capacity: 4, perSecond: 4, nowNs: 1_000)
            r.tokens -= 1
        }
        XCTAssertEqual(r.tokens, 0)
        r.refill(capacity: 4, perSecond: 4, nowNs: 1_000 + 500_000_000)
        XCTAssertEqual(r.tokens, 2, accuracy: 1e-9, "half a second at 4/s")
        r.refill(capacity: 4, perSecond: 4, nowNs: 1_000 + 400_000_000)
        XCTAssertEqual(r.tokens, 2, accuracy: 1e-9, "an older reading (a thread late to the lock) adds nothing")
        XCTAssertEqual(r.last, 1_000 + 500_000_000)
        r.refill(capacity: 4, perSecond: 4, nowNs: 60_000_000_000)
        XCTAssertEqual(r.tokens, 4, "never more than the capacity")
    }

    func testBackoffWithoutJitterGivesTheNominalSequence() {
        var b = Backoff(baseMs: 100, capMs: 5_000, jitter: false)
        XCTAssertEqual((0..<8).map { _ in b.nextDelayMs() }, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000])
        XCTAssertEqual(b.failures, 8)
        b.reset()
        XCTAssertEqual(b.nextDelayMs(), 100)
    }

    func testBackoffDelayForAFailureCount() {
        XCTAssertEqual((1...7).map { Backoff.delayMs(failures: $0, baseMs: 1_000, capMs: 60_000) },
                       [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000])
        XCTAssertEqual(Backoff.delayMs(failures: 0, baseMs: 1_000, capMs: 60_000), 1_000, "no failure yet counts as the first")
        XCTAssertEqual(Backoff.delayMs(failures: 1_000_000, baseMs: 1_000, capMs: 60_000), 60_000, "a long run stays at the cap")
        XCTAssertEqual(Backoff.delayMs(failures: 100, baseMs: 1, capMs: .max), .max, "doubling near the top does not overflow")
        XCTAssertEqual(Backoff.delayMs(failures: 3, baseMs: 1_000, capMs: 30_000), 4_000)
    }
}
