import XCTest
@testable import YaokATT

final class ATTServerMTUTests: XCTestCase {
    func testExchangeMTUEdgeCases() throws {
        // (client Rx MTU, server Rx MTU, expected ATT_MTU)
        let cases: [(UInt16, UInt16, UInt16)] = [(23, 512, 23), (185, 512, 185), (517, 512, 512),
                                                  (10, 512, 23), (517, 23, 23), (247, 100, 100)]
        for (client, serverMTU, expected) in cases {
            let server = ATTServer(table: try Fixture.table(), options: ATTServer.Options(serverReceiveMTU: serverMTU))
            XCTAssertEqual(server.mtu, 23, "default before exchange")
            XCTAssertEqual(server.handle(pdu: [0x02] + le16(client)), [0x03] + le16(serverMTU))
            XCTAssertEqual(server.mtu, expected, "client \(client) server \(serverMTU)")
        }
    }

    func testMTUIsExchangedOnlyOnce() throws {
        let server = try Fixture.server(mtu: 185)
        XCTAssertEqual(server.handle(pdu: [0x02] + le16(517)), [0x03, 0x00, 0x02])
        XCTAssertEqual(server.mtu, 185)
    }

    func testServerMTUBelowDefaultIsClamped() throws {
        let server = ATTServer(table: try Fixture.table(), options: ATTServer.Options(serverReceiveMTU: 5))
        XCTAssertEqual(server.handle(pdu: [0x02] + le16(100)), [0x03] + le16(23))
    }

    func testMalformedExchangeMTU() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x02, 0x17]), errorPDU(0x02, 0, 0x04))
        XCTAssertEqual(server.handle(pdu: [0x02, 0x17, 0x00, 0x00]), errorPDU(0x02, 0, 0x04))
        XCTAssertFalse(server.mtuExchanged)
    }

    func testPDULongerThanServerMTUIsInvalid() throws {
        let server = ATTServer(table: try Fixture.table(), options: ATTServer.Options(serverReceiveMTU: 23))
        let long = [0x12] + le16(6) + [UInt8](repeating: 0x41, count: 21)
        XCTAssertEqual(server.handle(pdu: long), errorPDU(0x12, 0, 0x04))
        XCTAssertNil(server.handle(pdu: [0x52] + le16(6) + [UInt8](repeating: 0x41, count: 21)))
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8))
    }
}

final class ATTServerDiscoveryTests: XCTestCase {
    func testFindInformation16BitFormat() throws {
        let server = try Fixture.server()
        // MTU 23: (23-2)/4 = 5 entries fit.
        // Built in steps: Swift 6.2's type checker gives up on the one-expression form.
        var expected: [UInt8] = [0x05, 0x01]
        expected += le16(1) + [0x00, 0x28]
        expected += le16(2) + [0x03, 0x28]
        expected += le16(3) + [0x00, 0x2A]
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(1) + le16(3)), expected)
        // Handles 1-5 fit (2 + 5*4 = 22 <= 23); handle 6 has a 128-bit type and is left out.
        let five = try XCTUnwrap(server.handle(pdu: [0x04] + le16(1) + le16(0xFFFF)))
        XCTAssertEqual(five.count, 2 + 5 * 4)
        XCTAssertEqual(Array(five[18...19]), le16(5))
        // With a larger MTU it still stops at the format change.
        let wide = try Fixture.server(mtu: 200)
        XCTAssertEqual(wide.handle(pdu: [0x04] + le16(1) + le16(0xFFFF))?.count, 2 + 5 * 4)
        // Handles 7.. are 16-bit again: 7, 8, 9, 10, 11 fit at MTU 23.
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(7) + le16(0xFFFF))?.count, 22)
    }

    func testFindInformation128BitFormatNeverMixed() throws {
        let server = try Fixture.server(mtu: 100)
        let response = try XCTUnwrap(server.handle(pdu: [0x04] + le16(6) + le16(8)))
        XCTAssertEqual(response, [0x05, 0x02] + le16(6) + FixtureUUID.status.littleEndianBytes)
        // Starting at 5 (a 16-bit type) the response stops before the 128-bit handle 6.
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(5) + le16(8)), [0x05, 0x01] + le16(5) + [0x03, 0x28])
        // At MTU 23 exactly one 128-bit entry fits (2 + 18 = 20; two would need 38).
        let small = try Fixture.server()
        XCTAssertEqual(small.handle(pdu: [0x04] + le16(6) + le16(6))?.count, 20)
    }

    func testFindInformationErrors() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(0) + le16(5)), errorPDU(0x04, 0, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(9) + le16(5)), errorPDU(0x04, 9, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(25) + le16(0xFFFF)), errorPDU(0x04, 25, 0x0A))
        XCTAssertEqual(server.handle(pdu: [0x04] + le16(1)), errorPDU(0x04, 0, 0x04))
    }

    func testFindByTypeValueFindsServicesWithGroupEnds() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x00, 0x28, 0x00, 0x18]),
                       [0x07] + le16(1) + le16(3))
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x00, 0x28] + FixtureUUID.service.littleEndianBytes),
                       [0x07] + le16(4) + le16(21))
        // A 16-bit service UUID searched in its 128-bit spelling still matches.
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x00, 0x28] + ATTUUID(0x1800).littleEndianBytes128),
                       [0x07] + le16(1) + le16(3))
        // Non-grouping attributes: the group end is the handle itself.
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x00, 0x2A] + Array("YaOK".utf8)),
                       [0x07] + le16(3) + le16(3))
    }

    func testFindByTypeValueErrors() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(2) + le16(0xFFFF) + [0x00, 0x28, 0x00, 0x18]), errorPDU(0x06, 2, 0x0A))
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(0) + le16(0xFFFF) + [0x00, 0x28]), errorPDU(0x06, 0, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x00]), errorPDU(0x06, 0, 0x04))
        // Values the link may not read never match (handle 14 needs authentication).
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x01, 0x2A, 0x00, 0x00]),
                       errorPDU(0x06, 1, 0x0A))
        server.security = ATTLinkSecurity(encrypted: true, authenticated: true)
        XCTAssertEqual(server.handle(pdu: [0x06] + le16(1) + le16(0xFFFF) + [0x01, 0x2A, 0x00, 0x00]),
                       [0x07] + le16(14) + le16(14))
    }

    func testReadByGroupTypeDiscoversPrimaryServices() throws {
        let server = try Fixture.server()
        // Entries of one length only: the 16-bit service first, then the 128-bit one alone.
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(1) + le16(0xFFFF) + [0x00, 0x28]),
                       [0x11, 0x06] + le16(1) + le16(3) + [0x00, 0x18])
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(4) + le16(0xFFFF) + [0x00, 0x28]),
                       [0x11, 0x14] + le16(4) + le16(21) + FixtureUUID.service.littleEndianBytes)
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(22) + le16(0xFFFF) + [0x00, 0x28]), errorPDU(0x10, 22, 0x0A))
        // Secondary services, asked with the 128-bit spelling of 0x2801.
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(1) + le16(0xFFFF) + ATTUUID.secondaryService.littleEndianBytes128),
                       [0x11, 0x06] + le16(22) + le16(24) + [0x0F, 0x18])
    }

    func testReadByGroupTypeTruncatesToMTUMinus6() throws {
        var builder = GATTDatabaseBuilder()
        try builder.add(type: .primaryService, permissions: .read, value: [UInt8](repeating: 0xAB, count: 40))
        let server = ATTServer(table: try builder.build())
        let response = try XCTUnwrap(server.handle(pdu: [0x10] + le16(1) + le16(0xFFFF) + [0x00, 0x28]))
        XCTAssertEqual(response.count, 23)
        XCTAssertEqual(response[1], 4 + 17, "value cut to ATT_MTU-6 = 17")
    }

    func testReadByGroupTypeErrors() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(1) + le16(0xFFFF) + [0x03, 0x28]), errorPDU(0x10, 1, 0x10))
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(5) + le16(1) + [0x00, 0x28]), errorPDU(0x10, 5, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(1) + le16(0xFFFF) + [0x00, 0x28, 0x00]), errorPDU(0x10, 0, 0x04))
    }

    func testReadByTypeDiscoversCharacteristics() throws {
        let server = try Fixture.server()
        // 0x2803 values are 5 octets (16-bit UUID) or 19 (128-bit). Entry length 7: (23-2)/7 = 3 fit.
        let first = try XCTUnwrap(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0x03, 0x28]))
        XCTAssertEqual(first, [0x09, 0x07] + le16(2) + [0x02, 0x03, 0x00, 0x00, 0x2A])
        // From handle 5: a 128-bit declaration (length 21) alone.
        let second = try XCTUnwrap(server.handle(pdu: [0x08] + le16(5) + le16(0xFFFF) + [0x03, 0x28]))
        XCTAssertEqual(second[1], 21)
        XCTAssertEqual(second.count, 2 + 21)
        // From 9: 9 (16-bit) then 11 is 128-bit: only one entry.
        let third = try XCTUnwrap(server.handle(pdu: [0x08] + le16(9) + le16(0xFFFF) + [0x03, 0x28]))
        XCTAssertEqual(third, [0x09, 0x07] + le16(9) + [0x02, 0x0A, 0x00, 0x19, 0x2A])
        // From 13: 13, 15, 17 are all 16-bit declarations: three fit in MTU 23.
        let fourth = try XCTUnwrap(server.handle(pdu: [0x08] + le16(13) + le16(0xFFFF) + [0x03, 0x28]))
        XCTAssertEqual(fourth.count, 2 + 3 * 7)
        XCTAssertEqual(Array(fourth[16...17]), le16(17))
    }

    func testReadByTypeTruncation() throws {
        // Read By Type cuts values to min(ATT_MTU-4, 253).
        let at23 = try Fixture.server()
        let response = try XCTUnwrap(at23.handle(pdu: [0x08] + le16(10) + le16(10) + [0x19, 0x2A]))
        XCTAssertEqual(response, [0x09, 21] + le16(10) + Array(Fixture.longValue.prefix(19)))

        var builder = GATTDatabaseBuilder()
        try builder.add(type: ATTUUID(0x2A19), permissions: .read, value: [UInt8](repeating: 7, count: 400))
        let at512 = ATTServer(table: try builder.build())
        _ = at512.handle(pdu: [0x02] + le16(517))
        let big = try XCTUnwrap(at512.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0x19, 0x2A]))
        XCTAssertEqual(big[1], 255, "253 value octets + 2 handle octets")
        XCTAssertEqual(big.count, 2 + 255)
    }

    func testReadByTypeWith128BitType() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + FixtureUUID.status.littleEndianBytes),
                       [0x09, 0x07] + le16(6) + Array("hello".utf8))
    }

    func testReadByTypePermissionErrors() throws {
        let server = try Fixture.server()
        // The first match unreadable: the error names its handle.
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + FixtureUUID.secret.littleEndianBytes),
                       errorPDU(0x08, 12, 0x0F))
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0x01, 0x2A]), errorPDU(0x08, 14, 0x05))
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0x02, 0x2A]), errorPDU(0x08, 16, 0x08))
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0x05, 0x2A]), errorPDU(0x08, 24, 0x02))
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0x99, 0x2A]), errorPDU(0x08, 1, 0x0A))
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(3) + le16(2) + [0x03, 0x28]), errorPDU(0x08, 3, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(2) + [0x03]), errorPDU(0x08, 0, 0x04))
    }

    func testReadByTypeStopsBeforeALaterUnreadableMatch() throws {
        let type = ATTUUID(0x2AAA)
        let table = try AttributeTable([
            Attribute(handle: 1, type: type, permissions: .read, value: [1]),
            Attribute(handle: 2, type: type, permissions: [.read, .readEncrypted], value: [2]),
            Attribute(handle: 3, type: type, permissions: .read, value: [3]),
        ])
        let server = ATTServer(table: table)
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0xAA, 0x2A]), [0x09, 3] + le16(1) + [1])
        server.security = ATTLinkSecurity(encrypted: true)
        var all: [UInt8] = [0x09, 3] + le16(1) + [1]
        all += le16(2) + [2]
        all += le16(3) + [3]
        XCTAssertEqual(server.handle(pdu: [0x08] + le16(1) + le16(0xFFFF) + [0xAA, 0x2A]), all)
    }
}
