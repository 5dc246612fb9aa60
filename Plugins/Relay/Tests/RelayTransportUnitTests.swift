import XCTest
import YaokPluginKit
import YaokRelayProtocol
@testable import YaokRelayPlugin
import YaokWire

/// Unit tests of the plugin's pure parts. The end-to-end tests beside this file drive the built
/// .so (through the C ABI, and inside a real `yaok-hub`) against real `yaok-relay` processes.
final class RelayTransportUnitTests: XCTestCase {
    func testRelayErrorsMapToCustodyRefusalsTheRouterUnderstands() {
        XCTAssertEqual(RelayTransport.refusalReason(.rateLimited), .rateLimited)
        // Temporary conditions: the router retries with backoff.
        for code in [RelayErrorCode.recipientQueueFull, .relayFull, .internalError, .notRegistered] {
            XCTAssertEqual(RelayTransport.refusalReason(code), .storeFull, "\(code)")
        }
        XCTAssertEqual(RelayTransport.refusalReason(.badSignature), .badSignature)
        XCTAssertEqual(RelayTransport.refusalReason(.expired), .expired)
        XCTAssertEqual(RelayTransport.refusalReason(.malformed), .malformed)
        XCTAssertEqual(RelayTransport.refusalReason(.tooLarge), .malformed)
        // Permanent refusals of this bundle: the router must not offer it to the relay again.
        XCTAssertEqual(RelayTransport.refusalReason(.createdInFuture), .badLifetime)
        XCTAssertEqual(RelayTransport.refusalReason(.lifetimeTooLong), .badLifetime)
        XCTAssertEqual(RelayTransport.refusalReason(.conflict), .conflict)
    }

    func testLinkCarriesTheLargestBundle() {
        XCTAssertGreaterThanOrEqual(RelayTransport.linkMTU, TLVRecord.headerLength + YaokWire.Bundle.maxEncodedLength)
        XCTAssertLessThanOrEqual(YaokWire.Bundle.maxEncodedLength, Fragment.maxMessageLength, "a bundle fits one reassembled relay message")
    }
}
