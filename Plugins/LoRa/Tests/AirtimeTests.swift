import XCTest
@testable import YaokLoRaPlugin

final class AirtimeTests: XCTestCase {
    /// The worked examples of the Semtech formula: 255 bytes, 125 kHz, CR 4/5, an 8-symbol preamble.
    func testTimeOnAirMatchesTheFormulasWorkedExamples() {
        let expected: [(Int, Double)] = [(7, 0.3996), (8, 0.7071), (9, 1.2503), (10, 2.2958), (11, 5.0012), (12, 9.0194)]
        for (sf, seconds) in expected {
            let m = LoRaModulation(spreadingFactor: sf, bandwidthHz: 125_000, codingRate: 5, preambleSymbols: 8)
            XCTAssertEqual(m.timeOnAir(payloadBytes: 255), seconds, accuracy: 0.0005, "SF\(sf)")
            XCTAssertEqual(m.lowDataRateOptimisation, sf >= 11, "SF\(sf): symbols over 16 ms")
        }
        // A longer preamble or a higher coding rate costs more; a smaller frame less.
        let sf7 = LoRaModulation(spreadingFactor: 7, bandwidthHz: 125_000, codingRate: 5, preambleSymbols: 8)
        XCTAssertLessThan(sf7.timeOnAir(payloadBytes: 20), sf7.timeOnAir(payloadBytes: 255))
        XCTAssertGreaterThan(LoRaModulation(spreadingFactor: 7, bandwidthHz: 125_000, codingRate: 8, preambleSymbols: 8).timeOnAir(payloadBytes: 255), 0.3996)
    }

    func testTheRNodesPreambleIsAbout24MillisecondsAndAtLeast18Symbols() {
        XCTAssertEqual(LoRaModulation.rnodePreambleSymbols(spreadingFactor: 7, bandwidthHz: 125_000), 24)
        XCTAssertEqual(LoRaModulation.rnodePreambleSymbols(spreadingFactor: 10, bandwidthHz: 125_000), 18)
        XCTAssertEqual(LoRaModulation(spreadingFactor: 7, bandwidthHz: 125_000, codingRate: 5).preambleSymbols, 24)
    }

    /// A sender that always has something to say never takes more than the duty cycle of any
    /// hour, and is not held back further than that.
    func testABackloggedSenderNeverExceedsTheDutyCycleOverAnyHour() {
        var ledger = AirtimeLedger(dutyCycle: 0.01)   // 36 s per hour
        let m = LoRaModulation(spreadingFactor: 10, bandwidthHz: 125_000, codingRate: 5)
        var rng = SystemRandomNumberGenerator()
        var now = 0.0, sends: [(Double, Double)] = []
        while now < 4 * 3600 {
            let airtime = m.timeOnAir(payloadBytes: Int.random(in: 20...255, using: &rng))
            guard let start = ledger.earliestStart(of: airtime, from: now) else { return XCTFail("a frame within the budget is never allowed") }
            XCTAssertTrue(ledger.allows(airtime, at: start))
            if start - 0.002 > now { XCTAssertFalse(ledger.allows(airtime, at: start - 0.002), "held back longer than needed") }
            ledger.record(start: start, airtime: airtime)
            sends.append((start, airtime))
            now = start + airtime
        }
        // The fullest hours end where a transmission ends.
        var worst = 0.0
        for (start, airtime) in sends {
            let end = start + airtime
            let spent = sends.reduce(0.0) { $0 + max(0, min($1.0 + $1.1, end) - max($1.0, end - 3600)) }
            worst = max(worst, spent)
        }
        XCTAssertLessThanOrEqual(worst, 36.0 + 1e-6)
        XCTAssertGreaterThan(worst, 36.0 - 2.5, "the budget is used, not wasted")
        XCTAssertLessThan(ledger.remembered, 40, "only the last hour's transmissions are kept")
        XCTAssertEqual(ledger.headroom(now: now + 3600), 36, accuracy: 1e-9, "an idle hour gives the whole budget back")
        XCTAssertNil(ledger.earliestStart(of: 37, from: now), "a frame longer than the budget is never allowed")
    }
}
