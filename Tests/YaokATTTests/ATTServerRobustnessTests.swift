import Foundation
import XCTest
@testable import YaokATT
import YaokTesting

final class ATTServerRobustnessTests: XCTestCase {
    /// Random PDUs (mostly well-formed opcodes with random parameters) never crash the engine;
    /// every request gets exactly its response or an Error Response naming it; nothing sent
    /// back is longer than the ATT_MTU; commands and confirmations get nothing.
    func testRandomPDUsKeepTheProtocolInvariants() throws {
        var random = SplitMix64(seed: 0x5EED)
        let requests: [UInt8] = [0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20]
        let silent: [UInt8] = [0x52, 0xD2, 0x1E, 0x1B, 0x13, 0x7F]
        for mtu: UInt16 in [23, 48, 185, 512] {
            let server = try Fixture.server(mtu: mtu)
            server.security = ATTLinkSecurity(encrypted: Bool.random(using: &random))
            for _ in 0..<4000 {
                let pickSilent = Int.random(in: 0..<10, using: &random) == 0
                let opcode = pickSilent ? silent.randomElement(using: &random)! : requests.randomElement(using: &random)!
                var pdu: [UInt8] = [opcode]
                // Handles mostly inside the table so the deeper paths run.
                for _ in 0..<Int.random(in: 0...24, using: &random) {
                    pdu.append(Int.random(in: 0..<3, using: &random) == 0
                               ? UInt8.random(in: 0...255, using: &random)
                               : UInt8.random(in: 0...26, using: &random))
                }
                let response = server.handle(pdu: pdu)
                if silent.contains(opcode) {
                    XCTAssertNil(response, "opcode \(opcode) got \(hex(response))")
                    continue
                }
                guard let response else { return XCTFail("no response to \(hex(pdu))") }
                XCTAssertLessThanOrEqual(response.count, Int(server.mtu), "response to \(hex(pdu)) exceeds MTU")
                if response.first == 0x01 {
                    XCTAssertEqual(response.count, 5)
                    XCTAssertEqual(response[1], opcode)
                } else {
                    XCTAssertEqual(response.first, opcode + 1, "response to \(hex(pdu)): \(hex(response))")
                }
            }
            // After the storm the table is still valid and readable.
            XCTAssertEqual(server.handle(pdu: [0x0A] + le16(3)), [0x0B] + Array("YaOK".utf8))
            _ = server.handle(pdu: [0x18, 0x00])
        }
    }

    func testRandomTableFilesNeverCrashTheLoader() {
        var random = SplitMix64(seed: 0xF11E)
        let pieces = ["{", "}", "[", "]", ",", ":", "\"attributes\"", "\"handle\"", "\"type\"", "\"value\"",
                      "\"permissions\"", "\"read\"", "true", "false", "1", "65536", "-1", "\"2800\"", "\"zz\"",
                      "\"00\"", "null", "1e3", "\"maxLength\""]
        for _ in 0..<3000 {
            let text = (0..<Int.random(in: 0...30, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
            do {
                _ = try AttributeTableFile.parse(Data(text.utf8))
            } catch {
                XCTAssertTrue(error is AttributeTableFileError, "untyped error \(error) for \(text)")
            }
        }
        XCTAssertNotNil(try? AttributeTableFile.parse(Data("{\"attributes\":[]}".utf8)))
        // Deep nesting is refused by the JSON parser with an error, not a stack overflow.
        let deep = "{\"attributes\":" + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}"
        XCTAssertThrowsError(try AttributeTableFile.parse(Data(deep.utf8))) { XCTAssertTrue($0 is AttributeTableFileError) }
    }
}
