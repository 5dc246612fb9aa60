import XCTest
@testable import YaokATT

final class ATTServerReadTests: XCTestCase {
    func testReadAndTruncationToMTUMinus1() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(3)), [0x0B] + Array("YaOK".utf8))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(10)), [0x0B] + Array(Fixture.longValue.prefix(22)))
        let wide = try Fixture.server(mtu: 185)
        XCTAssertEqual(wide.handle(pdu: [0x0A] + le16(10)), [0x0B] + Fixture.longValue)
    }

    func testReadErrors() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(0)), errorPDU(0x0A, 0, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(99)), errorPDU(0x0A, 99, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(18)), errorPDU(0x0A, 18, 0x02))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(24)), errorPDU(0x0A, 24, 0x02))
        XCTAssertEqual(server.handle(pdu: [0x0A, 0x03]), errorPDU(0x0A, 0, 0x04))
        XCTAssertEqual(server.handle(pdu: [0x0A, 0x03, 0x00, 0x00]), errorPDU(0x0A, 0, 0x04))
    }

    func testSecurityRequirementsOnAnUnencryptedLink() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(12)), errorPDU(0x0A, 12, 0x0F))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(14)), errorPDU(0x0A, 14, 0x05))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(16)), errorPDU(0x0A, 16, 0x08))
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(12) + [1]), errorPDU(0x12, 12, 0x0F))
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(12) + le16(0) + [1]), errorPDU(0x16, 12, 0x0F))
        XCTAssertNil(server.handle(pdu: [0x52] + le16(12) + [1]))
        XCTAssertEqual(server.storedValue(for: 12), Array("secret".utf8), "a write command on a protected attribute changes nothing")

        server.security = ATTLinkSecurity(encrypted: true)
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(12)), [0x0B] + Array("secret".utf8))
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(14)), errorPDU(0x0A, 14, 0x05))
        server.security = ATTLinkSecurity(encrypted: true, authenticated: true)
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(14)), [0x0B, 0, 0])
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(16)), errorPDU(0x0A, 16, 0x08))
        server.security.authorized = true
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(16)), [0x0B, 0])
    }

    func testReadBlobOffsets() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(10) + le16(22)), [0x0D] + Array(Fixture.longValue[22..<44]))
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(10) + le16(88)), [0x0D] + Array(Fixture.longValue[88...]))
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(10) + le16(100)), [0x0D], "offset == length reads nothing")
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(10) + le16(101)), errorPDU(0x0C, 10, 0x07))
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(3) + le16(0)), [0x0D] + Array("YaOK".utf8))
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(50) + le16(0)), errorPDU(0x0C, 50, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(12) + le16(0)), errorPDU(0x0C, 12, 0x0F))
        XCTAssertEqual(server.handle(pdu: [0x0C] + le16(10)), errorPDU(0x0C, 0, 0x04))
    }

    func testLongReadViaReadBlobAtSeveralMTUs() throws {
        var builder = GATTDatabaseBuilder()
        let long = (0..<512).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try builder.add(type: ATTUUID(0x2AFF), permissions: .read, value: long)
        for mtu: UInt16 in [23, 185, 512] {
            let server = ATTServer(table: try builder.build())
            _ = server.handle(pdu: [0x02] + le16(mtu))
            XCTAssertEqual(readLong(server, handle: 1), long, "MTU \(mtu)")
        }
    }

    func testReadMultiple() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x0E] + le16(3) + le16(20)), [0x0F] + Array("YaOK".utf8) + [7])
        let truncated = try XCTUnwrap(server.handle(pdu: [0x0E] + le16(3) + le16(10)))
        XCTAssertEqual(truncated, [0x0F] + Array("YaOK".utf8) + Array(Fixture.longValue.prefix(18)))
        XCTAssertEqual(server.handle(pdu: [0x0E] + le16(3) + le16(12)), errorPDU(0x0E, 12, 0x0F))
        XCTAssertEqual(server.handle(pdu: [0x0E] + le16(3) + le16(77)), errorPDU(0x0E, 77, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x0E] + le16(18) + le16(3)), errorPDU(0x0E, 18, 0x02))
        XCTAssertEqual(server.handle(pdu: [0x0E] + le16(3)), errorPDU(0x0E, 0, 0x04), "one handle is too few")
        XCTAssertEqual(server.handle(pdu: [0x0E] + le16(3) + le16(20) + [0x01]), errorPDU(0x0E, 0, 0x04))
    }

    func testReadProviderComputesPerRequestValues() throws {
        let server = try Fixture.server()
        var calls: [ATTServer.ReadRequest] = []
        var challenge: [UInt8] = []
        server.setReadProvider(for: 10) { request in
            calls.append(request)
            if request.offset == 0 { challenge = (0..<40).map { _ in UInt8.random(in: 0...255) } }
            return .success(challenge)
        }
        let first = readLong(server, handle: 10)
        XCTAssertEqual(first, challenge)
        XCTAssertEqual(calls.map(\.opcode), [0x0A, 0x0C])
        XCTAssertEqual(calls.map(\.offset), [0, 22])
        // The provider can refuse with any ATT (or application) error.
        server.setReadProvider(for: 3) { _ in .failure(ATTErrorCode(rawValue: 0x80)) }
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(3)), errorPDU(0x0A, 3, 0x80))
        // Permission checks come first: a provider on a protected handle is never asked.
        var asked = false
        server.setReadProvider(for: 12) { _ in asked = true; return .success([1]) }
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(12)), errorPDU(0x0A, 12, 0x0F))
        XCTAssertFalse(asked)
        server.setReadProvider(for: 3, nil)
        XCTAssertEqual(server.handle(pdu: [0x0A] + le16(3)), [0x0B] + Array("YaOK".utf8))
    }
}

final class ATTServerWriteTests: XCTestCase {
    func testWriteRequestAndCommand() throws {
        let server = try Fixture.server()
        var seen: [(UInt16, [UInt8], Bool)] = []
        server.onWrite = { handle, value, isCommand in
            seen.append((handle, value, isCommand))
            return nil
        }
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(6) + Array("world".utf8)), [0x13])
        XCTAssertEqual(server.storedValue(for: 6), Array("world".utf8))
        XCTAssertNil(server.handle(pdu: [0x52] + le16(18) + [1, 2, 3]))
        XCTAssertEqual(server.storedValue(for: 18), [1, 2, 3])
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(6)), [0x13], "an empty value is a valid write")
        XCTAssertEqual(server.storedValue(for: 6), [])
        XCTAssertEqual(seen.map(\.0), [6, 18, 6])
        XCTAssertEqual(seen.map(\.2), [false, true, false])
        XCTAssertEqual(seen[1].1, [1, 2, 3])
    }

    func testWriteErrors() throws {
        let server = try Fixture.server()
        var writes = 0
        server.onWrite = { _, _, _ in writes += 1; return nil }
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(0) + [1]), errorPDU(0x12, 0, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(200) + [1]), errorPDU(0x12, 200, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(3) + [1]), errorPDU(0x12, 3, 0x03))
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(18) + [UInt8](repeating: 1, count: 9)), errorPDU(0x12, 18, 0x0D))
        XCTAssertEqual(server.handle(pdu: [0x12, 0x06]), errorPDU(0x12, 0, 0x04))
        XCTAssertNil(server.handle(pdu: [0x52] + le16(3) + [1]))
        XCTAssertNil(server.handle(pdu: [0x52, 0x06]))
        XCTAssertEqual(writes, 0)
        XCTAssertEqual(server.storedValue(for: 3), Array("YaOK".utf8))
    }

    func testOwnerCanRejectAWrite() throws {
        let server = try Fixture.server()
        server.onWrite = { handle, value, _ in
            // The handler sees the new value already stored.
            XCTAssertEqual(server.storedValue(for: handle), value)
            return value == [0xFF] ? ATTErrorCode(rawValue: 0x80) : nil
        }
        XCTAssertEqual(server.handle(pdu: [0x12] + le16(6) + [0xFF]), errorPDU(0x12, 6, 0x80))
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8), "a rejected write is rolled back")
        XCTAssertNil(server.handle(pdu: [0x52] + le16(6) + [0xFF]))
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8))
    }

    func testCCCDWritesAreTwoOctets() throws {
        let checked = try Fixture.server()
        XCTAssertEqual(checked.handle(pdu: [0x12] + le16(7) + [0x01]), errorPDU(0x12, 7, 0x0D))
        XCTAssertEqual(checked.handle(pdu: [0x12] + le16(7) + [0x01, 0x00, 0x00]), errorPDU(0x12, 7, 0x0D))
        XCTAssertEqual(checked.handle(pdu: [0x12] + le16(7) + [0x01, 0x00]), [0x13])
        XCTAssertEqual(checked.clientConfiguration(for: 6), 0x0001)

        // The fixture's CCCD has maxLength 2, so an unchecked server is given a roomier one.
        let table = try AttributeTable([
            Attribute(handle: 1, type: ATTUUID(0x2AAA), permissions: .read, value: [1]),
            Attribute(handle: 2, type: .clientCharacteristicConfiguration, permissions: .readWrite, value: [0, 0]),
        ])
        let unchecked = ATTServer(table: table, options: ATTServer.Options(checkCCCDWrites: false))
        XCTAssertEqual(unchecked.handle(pdu: [0x12] + le16(2) + [0x01]), [0x13])
        let strict = ATTServer(table: table)
        XCTAssertEqual(strict.handle(pdu: [0x12] + le16(2) + [0x01]), errorPDU(0x12, 2, 0x0D))
    }

    func testPrepareAndExecuteLongWrite() throws {
        let server = try Fixture.server()
        var seen: [[UInt8]] = []
        server.onWrite = { handle, value, isCommand in
            XCTAssertEqual(handle, 6)
            XCTAssertFalse(isCommand)
            seen.append(value)
            return nil
        }
        let text = Array("a long status value that spans several prepared writes".utf8)
        var offset = 0
        while offset < text.count {
            let part = Array(text[offset..<min(offset + 18, text.count)])
            let request = [0x16] + le16(6) + le16(UInt16(offset)) + part
            XCTAssertEqual(server.handle(pdu: request), [0x17] + Array(request.dropFirst()), "echoes the request")
            offset += part.count
        }
        XCTAssertEqual(server.preparedWriteCount, 3, "54 octets in parts of 18")
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8), "nothing changes before execute")
        XCTAssertEqual(server.handle(pdu: [0x18, 0x01]), [0x19])
        XCTAssertEqual(server.storedValue(for: 6), text)
        XCTAssertEqual(seen, [text], "one write callback per handle")
        XCTAssertEqual(server.preparedWriteCount, 0)
    }

    func testExecuteWriteCancel() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(0) + [1, 2]), [0x17] + le16(6) + le16(0) + [1, 2])
        XCTAssertEqual(server.handle(pdu: [0x18, 0x00]), [0x19])
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8))
        XCTAssertEqual(server.handle(pdu: [0x18, 0x01]), [0x19], "executing an empty queue succeeds")
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8))
    }

    func testExecuteWriteChecksOffsetsAndLengthsAtExecuteTime() throws {
        let server = try Fixture.server()
        // Offset 6 is beyond "hello" (5 octets): accepted at prepare time, refused at execute.
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(6) + [1])?.first, 0x17)
        XCTAssertEqual(server.handle(pdu: [0x18, 0x01]), errorPDU(0x18, 6, 0x07))
        XCTAssertEqual(server.preparedWriteCount, 0, "the queue is cleared after a failed execute")

        // 4 x 18 = 72 octets exceed maxLength 64.
        _ = server.handle(pdu: [0x16] + le16(6) + le16(0) + [UInt8](repeating: 1, count: 18))
        _ = server.handle(pdu: [0x16] + le16(6) + le16(18) + [UInt8](repeating: 2, count: 18))
        _ = server.handle(pdu: [0x16] + le16(6) + le16(36) + [UInt8](repeating: 3, count: 18))
        _ = server.handle(pdu: [0x16] + le16(6) + le16(54) + [UInt8](repeating: 4, count: 18))
        XCTAssertEqual(server.handle(pdu: [0x18, 0x01]), errorPDU(0x18, 6, 0x0D))
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8))

        // An error on the second handle means the first is not written either.
        _ = server.handle(pdu: [0x16] + le16(18) + le16(0) + [9])
        _ = server.handle(pdu: [0x16] + le16(7) + le16(0) + [1])
        XCTAssertEqual(server.handle(pdu: [0x18, 0x01]), errorPDU(0x18, 7, 0x0D), "CCCD must end up 2 octets")
        XCTAssertEqual(server.storedValue(for: 18), [])

        // Offset writes on the existing value: "hello" -> "help!".
        _ = server.handle(pdu: [0x16] + le16(6) + le16(3) + Array("p!".utf8))
        XCTAssertEqual(server.handle(pdu: [0x18, 0x01]), [0x19])
        XCTAssertEqual(server.storedValue(for: 6), Array("help!".utf8))
    }

    func testPrepareWriteErrors() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(99) + le16(0) + [1]), errorPDU(0x16, 99, 0x01))
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(3) + le16(0) + [1]), errorPDU(0x16, 3, 0x03))
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + [0]), errorPDU(0x16, 0, 0x04))
        XCTAssertEqual(server.handle(pdu: [0x18]), errorPDU(0x18, 0, 0x04))
        XCTAssertEqual(server.handle(pdu: [0x18, 0x02]), errorPDU(0x18, 0, 0x04))
        XCTAssertEqual(server.preparedWriteCount, 0)
    }

    func testPrepareQueueIsBounded() throws {
        let server = ATTServer(table: try Fixture.table(),
                               options: ATTServer.Options(maxPreparedWrites: 3, maxPreparedBytes: 40))
        for index in 0..<3 {
            XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(UInt16(index)) + [1])?.first, 0x17)
        }
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(3) + [1]), errorPDU(0x16, 6, 0x09))
        XCTAssertEqual(server.handle(pdu: [0x18, 0x00]), [0x19])
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(0) + [UInt8](repeating: 1, count: 18))?.first, 0x17)
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(18) + [UInt8](repeating: 1, count: 18))?.first, 0x17)
        XCTAssertEqual(server.handle(pdu: [0x16] + le16(6) + le16(36) + [UInt8](repeating: 1, count: 5)),
                       errorPDU(0x16, 6, 0x09), "byte budget 40 exceeded")
    }
}

final class ATTServerDispatchTests: XCTestCase {
    func testUnknownRequestsAndCommands() throws {
        let server = try Fixture.server()
        XCTAssertEqual(server.handle(pdu: [0x20] + le16(3) + le16(6)), errorPDU(0x20, 0, 0x06), "Read Multiple Variable")
        XCTAssertEqual(server.handle(pdu: [0x3F]), errorPDU(0x3F, 0, 0x06))
        XCTAssertEqual(server.handle(pdu: [0x99]), errorPDU(0x99, 0, 0x06))
        XCTAssertNil(server.handle(pdu: [0x7F, 1, 2]), "unknown command")
        XCTAssertNil(server.handle(pdu: [0x40]))
        XCTAssertNil(server.handle(pdu: []))
    }

    func testSignedWriteCommandIsIgnored() throws {
        let server = try Fixture.server()
        XCTAssertNil(server.handle(pdu: [0xD2] + le16(6) + [1] + [UInt8](repeating: 0, count: 12)))
        XCTAssertEqual(server.storedValue(for: 6), Array("hello".utf8))
    }

    func testStrayResponsesAndNotificationsAreIgnored() throws {
        let server = try Fixture.server()
        for opcode: UInt8 in [0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x1B, 0x1E] {
            XCTAssertNil(server.handle(pdu: [opcode, 0, 0, 0]), "opcode \(opcode)")
        }
        XCTAssertEqual(server.handle(pdu: [0x1D] + le16(1) + [1]), [0x1E], "a peer's indication is confirmed")
    }
}

final class ATTErrorCodeTests: XCTestCase {
    func testDescriptionsNameTheCode() {
        XCTAssertEqual(ATTErrorCode.insufficientEncryption.description, "insufficient encryption (0x0f)")
        XCTAssertEqual(ATTErrorCode(rawValue: 0x85).description, "application error (0x85)")
        XCTAssertEqual(ATTErrorCode(rawValue: 0x42).description, "ATT error 0x42")
        XCTAssertEqual(ATTNotifyError.notEnabled(6).description, "the client has not enabled this for attribute 6")
    }
}
