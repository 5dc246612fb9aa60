import XCTest
import YaokLoRaPlugin
@testable import YaokRNodeEmulator

final class SimulatedAirTests: XCTestCase {
    let channel = SimulatedAir.Channel(frequencyHz: 868_500_000, bandwidthHz: 125_000, spreadingFactor: 7, codingRate: 5)

    func testAFrameReachesWhoIsInRangeWhenItHasEnded() {
        var air = SimulatedAir(inRange: [0: [1], 1: [0, 2], 2: [1]])
        let end = air.transmit(from: 1, bytes: [1, 2, 3], channel: channel, at: 10)
        XCTAssertEqual(end - 10, channel.airtime(3), accuracy: 1e-12)
        XCTAssertEqual(air.receptions(until: end - 0.001), [], "still on the air")
        XCTAssertEqual(air.receptions(until: end).map(\.receiver).sorted(), [0, 2])
        air.transmit(from: 0, bytes: [4], channel: channel, at: 20)
        XCTAssertEqual(air.receptions(until: 30).map(\.receiver), [1], "radio 2 does not hear radio 0")
    }

    func testOverlappingFramesDestroyEachOtherWhereBothArriveAndASenderHearsNothing() {
        var air = SimulatedAir(inRange: [0: [1], 1: [0, 2], 2: [1]])
        air.transmit(from: 0, bytes: [UInt8](repeating: 0, count: 50), channel: channel, at: 0)
        air.transmit(from: 2, bytes: [UInt8](repeating: 0, count: 50), channel: channel, at: 0.01)
        XCTAssertEqual(air.receptions(until: 5), [], "radio 1 hears both at once: neither; 0 and 2 hear neither (hidden terminals)")
        XCTAssertEqual(air.collisions, 2)
        // Radio 1 sends while radio 0's frame arrives: half duplex.
        air.transmit(from: 0, bytes: [1], channel: channel, at: 10)
        air.transmit(from: 1, bytes: [2], channel: channel, at: 10.001)
        XCTAssertEqual(air.receptions(until: 20).map(\.receiver).sorted(), [2], "only radio 2, which hears 1 alone")
        // Another channel does not interfere.
        var other = channel
        other.spreadingFactor = 10
        air.transmit(from: 0, bytes: [3], channel: channel, at: 30)
        air.transmit(from: 2, bytes: [4], channel: other, at: 30)
        XCTAssertEqual(air.receptions(until: 40).count, 2)
    }

    func testLossIsTheShareAskedAndReplaysWithItsSeed() {
        func run(seed: UInt64) -> (Int, [Double]) {
            var air = SimulatedAir(inRange: [0: [1], 1: [0]], loss: 0.05, seed: seed)
            var times: [Double] = []
            for i in 0..<2_000 {
                air.transmit(from: 0, bytes: [UInt8(i & 0xFF)], channel: channel, at: Double(i))
                times += air.receptions(until: Double(i) + 0.5).map(\.at)
            }
            return (air.lost, times)
        }
        let (lost, times) = run(seed: 7)
        XCTAssertEqual(Double(lost) / 2_000, 0.05, accuracy: 0.02)
        XCTAssertEqual(lost + times.count, 2_000)
        XCTAssertEqual(run(seed: 7).1, times, "the same seed loses the same frames")
    }
}

final class EmulatedRNodeTests: XCTestCase {
    let settings = RNodeRadioSettings(frequencyHz: 868_500_000, bandwidthHz: 125_000, txPowerDBm: 20, spreadingFactor: 7,
                                      codingRate: 5, longTermAirtimeLimit: 100)

    private func events(_ bytes: [UInt8]) -> [RNodeEvent] {
        var decoder = KISSDecoder(), reader = RNodeReader()
        return decoder.feed(bytes).map { reader.event($0) }
    }

    func testItAnswersLikeTheFirmwareClampingWhatItCannotDo() {
        let device = EmulatedRNode(index: 0)
        XCTAssertEqual(events(device.fromHost(RNodeRequest.detect).reply), [.detected, .firmwareVersion(major: 1, minor: 0x56)])
        let echoes = events(device.fromHost(RNodeRequest.configure(settings)).reply)
        XCTAssertEqual(radioMismatches(asked: settings, applied: echoes), ["tx_power_dbm: asked 20 dBm, the device applies 17 dBm"])
        XCTAssertTrue(device.radioOn)
        XCTAssertEqual(device.fromHost(RNodeRequest.data([1, 2, 3])!).transmit, [[1, 2, 3]])
    }

    func testFaultsAndARadioThatCannotStart() {
        XCTAssertEqual(EmulatedRNode(index: 0, fault: .silent).fromHost(RNodeRequest.detect).reply, [])
        XCTAssertEqual(events(EmulatedRNode(index: 0, fault: .firmware(major: 1, minor: 40)).fromHost(RNodeRequest.detect).reply),
                       [.detected, .firmwareVersion(major: 1, minor: 40)])
        let device = EmulatedRNode(index: 0)
        XCTAssertEqual(events(device.fromHost(KISS.frame(command: 0x06, payload: [0x01])).reply), [.radioState(on: false)], "no settings yet")
        XCTAssertEqual(events(device.fromHost(RNodeRequest.data([1])!).reply), [.error(.transmitFailed)])
    }
}
