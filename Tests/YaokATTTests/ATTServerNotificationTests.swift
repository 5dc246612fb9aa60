import XCTest
@testable import YaokATT

final class ATTServerNotificationTests: XCTestCase {
    func testNotificationNeedsTheCCCDBit() throws {
        let server = try Fixture.server()
        XCTAssertThrowsError(try server.notificationPDU(for: 6)) { XCTAssertEqual($0 as? ATTNotifyError, .notEnabled(6)) }
        XCTAssertThrowsError(try server.notificationPDU(for: 10)) { XCTAssertEqual($0 as? ATTNotifyError, .noCCCD(10)) }
        XCTAssertThrowsError(try server.notificationPDU(for: 99)) { XCTAssertEqual($0 as? ATTNotifyError, .noSuchHandle(99)) }

        XCTAssertEqual(server.handle(pdu: [0x12] + le16(7) + [0x01, 0x00]), [0x13])
        XCTAssertEqual(try server.notificationPDU(for: 6), [0x1B] + le16(6) + Array("hello".utf8))
        XCTAssertEqual(try server.notificationPDU(for: 6, value: [1, 2]), [0x1B] + le16(6) + [1, 2])
        let long = [UInt8](repeating: 0x55, count: 30)
        XCTAssertEqual(try server.notificationPDU(for: 6, value: long), [0x1B] + le16(6) + Array(long.prefix(20)),
                       "truncated to ATT_MTU-3")
        XCTAssertThrowsError(try server.indicationPDU(for: 6)) { XCTAssertEqual($0 as? ATTNotifyError, .notEnabled(6)) }
        // The other characteristic's CCCD is separate.
        XCTAssertThrowsError(try server.notificationPDU(for: 20)) { XCTAssertEqual($0 as? ATTNotifyError, .notEnabled(20)) }

        XCTAssertEqual(server.handle(pdu: [0x12] + le16(7) + [0x00, 0x00]), [0x13])
        XCTAssertThrowsError(try server.notificationPDU(for: 6))
    }

    func testIndicationConfirmationFlow() throws {
        let server = try Fixture.server()
        var confirmed: [UInt16] = []
        server.onConfirmation = { confirmed.append($0) }
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(7) + [0x02, 0x00]), [0x13])
        XCTAssertThrowsError(try server.notificationPDU(for: 6), "only indications are enabled")

        XCTAssertEqual(try server.indicationPDU(for: 6), [0x1D] + le16(6) + Array("hello".utf8))
        XCTAssertEqual(server.outstandingIndication, 6)
        XCTAssertThrowsError(try server.indicationPDU(for: 6, value: [1])) {
            XCTAssertEqual($0 as? ATTNotifyError, .indicationOutstanding(6))
        }
        XCTAssertNil(server.handle(pdu: [0x1E]))
        XCTAssertEqual(confirmed, [6])
        XCTAssertNil(server.outstandingIndication)
        XCTAssertNil(server.handle(pdu: [0x1E]), "a stray confirmation is ignored")
        XCTAssertEqual(confirmed, [6])

        XCTAssertEqual(try server.indicationPDU(for: 6, value: [9]), [0x1D] + le16(6) + [9])
        server.cancelOutstandingIndication()
        XCTAssertNoThrow(try server.indicationPDU(for: 6, value: [8]))
    }

    func testOwnerCanNotifyFromTheCCCDWriteHandler() throws {
        let server = try Fixture.server()
        var sent: [[UInt8]] = []
        server.onWrite = { handle, _, _ in
            if handle == 7, let pdu = try? server.notificationPDU(for: 6) { sent.append(pdu) }
            return nil
        }
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(7) + [0x01, 0x00]), [0x13])
        XCTAssertEqual(sent, [[0x1B] + le16(6) + Array("hello".utf8)])
    }
}
