import XCTest
@testable import YaokLoRaPlugin

final class KISSTests: XCTestCase {
    func testEscapingIsExactAndRoundTrips() {
        XCTAssertEqual(KISS.frame(command: 0x00, payload: [0xC0, 0xDB, 0x01]), [0xC0, 0x00, 0xDB, 0xDC, 0xDB, 0xDD, 0x01, 0xC0])
        var decoder = KISSDecoder()
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let payload = (0..<Int.random(in: 1...508, using: &rng)).map { _ in [0xC0, 0xDB, 0xDC, 0xDD, UInt8.random(in: 0...255)].randomElement()! }
            let command = UInt8.random(in: 0...0xBF)
            XCTAssertEqual(decoder.feed(KISS.frame(command: command, payload: payload)), [KISSFrame(command: command, payload: payload)])
        }
        XCTAssertEqual(decoder.dropped, 0)
    }

    func testNoiseRepeatedFendsAndSplitReadsStillGiveEachFrame() {
        var decoder = KISSDecoder()
        let a = KISS.frame(command: 0x08, payload: [0x46]), b = KISS.frame(command: 0x50, payload: [0x01, 0x56])
        let line = [0x12, 0x34, 0xDB] + a + [0xC0, 0xC0] + b
        var frames: [KISSFrame] = []
        for byte in line { frames += decoder.feed([byte]) }   // one byte per read
        XCTAssertEqual(frames, [KISSFrame(command: 0x08, payload: [0x46]), KISSFrame(command: 0x50, payload: [0x01, 0x56])])
    }

    func testABadEscapeOrAnOversizedFrameIsDroppedAndTheNextOneStillArrives() {
        var decoder = KISSDecoder(maxPayload: 8)
        XCTAssertEqual(decoder.feed([0xC0, 0x00, 0x01, 0xDB, 0x55, 0x02, 0xC0]), [], "an escape that means nothing")
        XCTAssertEqual(decoder.feed([0xC0, 0x00] + [UInt8](repeating: 7, count: 9) + [0xC0]), [], "one byte over the limit")
        XCTAssertEqual(decoder.dropped, 2)
        XCTAssertEqual(decoder.feed(KISS.frame(command: 0x00, payload: [1, 2, 3])), [KISSFrame(command: 0x00, payload: [1, 2, 3])])
        _ = decoder.feed([0xC0, 0x00, 0x09])
        XCTAssertTrue(decoder.hasPartialFrame)
        decoder.dropPartialFrame()
        XCTAssertEqual(decoder.feed([0x0A, 0xC0]), [], "the rest of a dropped frame is not a frame")
        XCTAssertEqual(decoder.dropped, 3)
    }

    func testGarbageNeverYieldsMoreThanTheLimitAndNeverTraps() {
        var decoder = KISSDecoder()
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let chunk = (0..<Int.random(in: 0...700, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for f in decoder.feed(chunk) { XCTAssertLessThanOrEqual(f.payload.count, 508) }
        }
    }
}

final class RNodeProtocolTests: XCTestCase {
    let settings = RNodeRadioSettings(frequencyHz: 868_500_000, bandwidthHz: 125_000, txPowerDBm: 14, spreadingFactor: 10,
                                      codingRate: 5, longTermAirtimeLimit: 100)

    func testRequestsAreTheDocumentedBytes() {
        XCTAssertEqual(Array(RNodeRequest.detect.prefix(4)), [0xC0, 0x08, 0x73, 0xC0])
        let configure = RNodeRequest.configure(settings)
        XCTAssertTrue(configure.starts(with: [0xC0, 0x01, 0x33, 0xC4, 0x42, 0x20, 0xC0]), "868.5 MHz, big-endian Hz")
        XCTAssertTrue(configure.suffix(4).elementsEqual([0xC0, 0x06, 0x01, 0xC0]), "radio on last")
        XCTAssertNotNil(RNodeRequest.data([UInt8](repeating: 1, count: 254)))
        XCTAssertNil(RNodeRequest.data([UInt8](repeating: 1, count: 255)), "never a packet the device would split over two LoRa frames")
        XCTAssertNil(RNodeRequest.data([]))
    }

    func testSignalFiguresBelongToTheNextPacketOnly() {
        var reader = RNodeReader()
        XCTAssertEqual(reader.event(KISSFrame(command: 0x23, payload: [50])), .ignored(command: 0x23))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x24, payload: [0xF0])), .ignored(command: 0x24))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x00, payload: [9, 9])), .packet([9, 9], rssiDBm: -107, snrDB: -4))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x00, payload: [8])), .packet([8], rssiDBm: nil, snrDB: nil))
    }

    func testEveryReplyIsReadAndEveryShortOneIgnored() {
        var reader = RNodeReader()
        XCTAssertEqual(reader.event(KISSFrame(command: 0x08, payload: [0x46])), .detected)
        XCTAssertEqual(reader.event(KISSFrame(command: 0x08, payload: [0x47])), .ignored(command: 0x08))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x50, payload: [1, 0x56])), .firmwareVersion(major: 1, minor: 86))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x01, payload: [0x33, 0xC4, 0x42, 0x20])), .frequency(868_500_000))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x01, payload: [0x33, 0xC4])), .ignored(command: 0x01))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x55, payload: [0xF8])), .booted)
        XCTAssertEqual(reader.event(KISSFrame(command: 0x90, payload: [0x02])), .error(.transmitFailed))
        XCTAssertTrue(RNodeError.transmitFailed.needsBringUp)
        XCTAssertFalse(RNodeError.memoryLow.needsBringUp)
        XCTAssertEqual(reader.event(KISSFrame(command: 0x25, payload: [0, 100, 0, 50, 0x0F, 0xA0, 0, 200, 50, 40, 0xFF])),
                       .channelStats(RNodeChannelStats(airtimeShort: 0.01, airtimeLong: 0.005, channelLoadShort: 0.4, channelLoadLong: 0.02,
                                                       rssiDBm: -107, noiseFloorDBm: -117, interferenceDBm: nil)))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x25, payload: [0, 1])), .ignored(command: 0x25))
        XCTAssertEqual(reader.event(KISSFrame(command: 0x77, payload: [1])), .ignored(command: 0x77))
    }

    func testTheAppliedSettingsAreComparedKeyByKey() {
        let echoes: [RNodeEvent] = [.frequency(868_500_061), .bandwidth(125_000), .txPower(14), .spreadingFactor(10), .codingRate(5), .radioState(on: true)]
        XCTAssertEqual(radioMismatches(asked: settings, applied: echoes), [], "a frequency within 100 Hz is the one asked")
        var asked = settings
        asked.txPowerDBm = 20
        XCTAssertEqual(radioMismatches(asked: asked, applied: echoes.map { $0 == .txPower(14) ? .txPower(17) : $0 }),
                       ["tx_power_dbm: asked 20 dBm, the device applies 17 dBm"])
        XCTAssertEqual(radioMismatches(asked: settings, applied: [.frequency(868_500_200), .bandwidth(125_000), .txPower(14), .spreadingFactor(10), .codingRate(5)]),
                       ["frequency_hz: asked 868500000 Hz, the device applies 868500200 Hz",
                        "the radio did not start (parameters rejected, or the device is not provisioned)"])
        XCTAssertEqual(radioMismatches(asked: settings, applied: []).first, "frequency_hz: the device did not confirm 868500000 Hz")
    }
}
