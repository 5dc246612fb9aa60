import XCTest
import YaokWire
@testable import YaokHubCore
@testable import YaokSupervision

/// The hub ↔ plugin-process messages (Docs/plugin-protocol.md): what a burst answer looks like
/// on the socket, and that a malformed one is refused, not trusted.
final class PluginMessageTests: XCTestCase {
    func testSentListsRequestIDsAndRoundTrips() throws {
        let m = PluginMessage.sent(requests: [1, 2, 0xDEAD_BEEF])
        XCTAssertEqual(m.encoded, [0x8B, 0, 0, 0, 1, 0, 0, 0, 2, 0xDE, 0xAD, 0xBE, 0xEF])
        XCTAssertEqual(try PluginMessage(parsing: m.encoded), m)
        XCTAssertEqual(try PluginMessage(parsing: [0x8B]), .sent(requests: []))
    }

    func testSendsCarryEachRequestLinkAndFrameAndRoundTrip() throws {
        let m = PluginMessage.sends([PluginSend(request: 1, link: 2, frame: [0xAA]), PluginSend(request: 3, link: 4, frame: [])])
        XCTAssertEqual(m.encoded, [0x09, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0xAA,
                                   0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0])
        XCTAssertEqual(try PluginMessage(parsing: m.encoded), m)
    }

    func testSendsThatAreEmptyOrClaimMoreBytesThanTheyHaveAreRefused() {
        XCTAssertThrowsError(try PluginMessage(parsing: [0x09]), "no send at all")
        XCTAssertThrowsError(try PluginMessage(parsing: [0x09, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 5, 0xAA])) { error in
            XCTAssertTrue("\(error)".contains("a frame of 5 bytes, 1 left"), "\(error)")
        }
        // A whole send, then a short one.
        XCTAssertThrowsError(try PluginMessage(parsing: [0x09, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0]))
    }

    func testASentWithAPartialIDIsRefused() {
        XCTAssertThrowsError(try PluginMessage(parsing: [0x8B, 0, 0, 0, 1, 0, 0])) { error in
            XCTAssertTrue("\(error)".contains("not a whole number of request IDs"), "\(error)")
        }
    }
}
