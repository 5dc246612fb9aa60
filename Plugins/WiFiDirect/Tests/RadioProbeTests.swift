import Foundation
import XCTest
@testable import YaokWiFiDirectPlugin

/// The nl80211 attribute parser on hand-built bytes, and the probe against this machine's kernel.
final class RadioProbeTests: XCTestCase {
    typealias A = NetlinkAttribute

    static func u32(_ v: UInt32) -> [UInt8] { [UInt8(v & 0xff), UInt8(v >> 8 & 0xff), UInt8(v >> 16 & 0xff), UInt8(v >> 24)] }
    static func nested(_ type: UInt16, _ children: [A]) -> A { A(type: type | 0x8000, payload: A.encode(children)) }

    /// A message like a split dump's: wiphy index, name, iftypes; bands in a second message.
    func testSplitDumpMessagesFoldIntoOneWiphyWithP2PTypesAndChannels() throws {
        let first = A.encode([
            A(type: NL80211.attrWiphy, payload: Self.u32(3)),
            A(type: NL80211.attrWiphyName, payload: Array("phy3".utf8) + [0]),
            Self.nested(NL80211.attrSupportedIftypes, [A(type: 2, payload: []), A(type: 9, payload: []), A(type: 8, payload: []), A(type: 10, payload: [])]),
        ])
        func freq(_ mhz: UInt32, _ flags: [UInt16] = []) -> A {
            Self.nested(0, [A(type: NL80211.frequencyAttrFreq, payload: Self.u32(mhz))] + flags.map { A(type: $0, payload: []) })
        }
        let second = A.encode([
            A(type: NL80211.attrWiphy, payload: Self.u32(3)),
            Self.nested(NL80211.attrWiphyBands, [
                Self.nested(0, [Self.nested(NL80211.bandAttrFreqs, [
                    freq(2412), freq(2437), freq(2462, [NL80211.frequencyAttrNoIR]), freq(2484, [NL80211.frequencyAttrDisabled]),
                ])]),
            ]),
        ])
        var parser = WiphyDumpParser()
        try parser.add(messageAttributes: first)
        try parser.add(messageAttributes: second)
        XCTAssertEqual(parser.wiphys.count, 1)
        let w = try XCTUnwrap(parser.wiphys.first)
        XCTAssertEqual(w.index, 3)
        XCTAssertEqual(w.name, "phy3")
        XCTAssertEqual(w.interfaceTypes, [.station, .p2pGO, .p2pClient, .p2pDevice])
        XCTAssertTrue(w.supportsP2PGO)
        XCTAssertEqual(w.frequencies, [2412, 2437, 2462], "the disabled channel is left out")
        XCTAssertEqual(w.noIRFrequencies, [2462])
        XCTAssertEqual(w.socialFrequencies, [2412, 2437])
        XCTAssertEqual(w.summary, "phy3: p2p-client,p2p-device,p2p-go; 2412-2462 MHz (3 channels)")
    }

    func testBadAttributeLengthsAreTypedErrorsNotCrashes() {
        XCTAssertThrowsError(try A.parse([2, 0, 1, 0])) { XCTAssertEqual($0 as? NetlinkParseError, .badLength(offset: 0, length: 2)) }
        XCTAssertThrowsError(try A.parse([200, 0, 1, 0, 9, 9])) {
            XCTAssertEqual($0 as? NetlinkParseError, .truncated(offset: 0, length: 200, available: 6))
        }
        XCTAssertEqual(try A.parse([1, 2, 3]), [], "a tail shorter than a header is ignored")
        // Random input: typed error or a result, never a trap.
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            var parser = WiphyDumpParser()
            _ = try? parser.add(messageAttributes: bytes)
        }
    }

    /// This machine's kernel, read for real. On a host without cfg80211 the probe must name
    /// the missing nl80211 family in plain words.
    func testProbeOnThisMachineReportsWhatTheKernelHas() throws {
        let cfg80211Loaded = FileManager.default.fileExists(atPath: "/sys/module/cfg80211")
        let radios = (try? FileManager.default.contentsOfDirectory(atPath: "/sys/class/ieee80211")) ?? []
        do {
            let result = try NL80211Probe.probe()
            XCTAssertTrue(cfg80211Loaded)
            XCTAssertEqual(result.wiphys.count, radios.count, "one wiphy per /sys/class/ieee80211 entry")
            XCTAssertFalse(result.p2pCapable.isEmpty)
        } catch let error as RadioProbeError {
            if !cfg80211Loaded {
                XCTAssertEqual(error, .noNL80211Family)
                XCTAssertEqual(error.description, "no Wi-Fi: the kernel has no nl80211 family (no wireless driver loaded)")
            } else if radios.isEmpty {
                XCTAssertEqual(error, .noWiphy)
            } else {
                guard case .noP2PGroupOwner(let w) = error else { return XCTFail("unexpected \(error)") }
                XCTAssertEqual(w.count, radios.count)
            }
        }
    }
}
