import XCTest
@testable import YaokATT

final class ATTUUIDTests: XCTestCase {
    func testShortAndLongFormsAreEqual() {
        let long = ATTUUID(string: "00002800-0000-1000-8000-00805F9B34FB")
        XCTAssertEqual(long, ATTUUID(0x2800))
        XCTAssertEqual(long?.uuid16, 0x2800)
        XCTAssertEqual(ATTUUID(0x2800).littleEndianBytes, [0x00, 0x28])
        XCTAssertEqual(ATTUUID(string: "0x2A00"), ATTUUID(0x2A00))
        XCTAssertEqual(ATTUUID(string: "0000180a"), ATTUUID(0x180A))
        XCTAssertEqual(ATTUUID(0x2a00).description, "2a00")
    }

    func testCustom128BitUUID() throws {
        let uuid = try XCTUnwrap(ATTUUID(string: "6e400001-b5a3-f393-e0a9-e50e24dcca9e"))
        XCTAssertNil(uuid.uuid16)
        XCTAssertEqual(uuid.littleEndianBytes.count, 16)
        XCTAssertEqual(uuid.littleEndianBytes.first, 0x9E)
        XCTAssertEqual(uuid.littleEndianBytes.last, 0x6E)
        XCTAssertEqual(ATTUUID(littleEndian: uuid.littleEndianBytes), uuid)
        XCTAssertEqual(uuid.description, "6e400001-b5a3-f393-e0a9-e50e24dcca9e")
    }

    func testRejectsMalformedText() {
        for text in ["", "280", "28000", "zzzz", "6e400001b5a3-f393-e0a9-e50e24dcca9e-",
                     "6e400001-b5a3-f393-e0a9-e50e24dcca9g", "6e4000-01b5a3-f393-e0a9-e50e24dcca9e"] {
            XCTAssertNil(ATTUUID(string: text), text)
        }
        XCTAssertNil(ATTUUID(littleEndian: [1, 2, 3]))
    }
}

final class AttributeTableTests: XCTestCase {
    func testValidatesHandlesAndLengths() {
        let type = ATTUUID(0x2A00)
        XCTAssertThrowsError(try AttributeTable([Attribute(handle: 0, type: type, permissions: .read)])) {
            XCTAssertEqual($0 as? AttributeTableError, .zeroHandle(index: 0))
        }
        XCTAssertThrowsError(try AttributeTable([Attribute(handle: 5, type: type, permissions: .read),
                                                 Attribute(handle: 5, type: type, permissions: .read)])) {
            XCTAssertEqual($0 as? AttributeTableError, .handlesNotIncreasing(index: 1, handle: 5, previous: 5))
        }
        XCTAssertThrowsError(try AttributeTable([Attribute(handle: 1, type: type, permissions: .read, value: [1, 2, 3], maxLength: 2)])) {
            XCTAssertEqual($0 as? AttributeTableError, .valueTooLong(index: 0, length: 3, maxLength: 2))
        }
        XCTAssertThrowsError(try AttributeTable([Attribute(handle: 1, type: type, permissions: .read, maxLength: 513)])) {
            XCTAssertEqual($0 as? AttributeTableError, .invalidMaxLength(index: 0, maxLength: 513))
        }
    }

    func testLookupAndRangesWithGaps() throws {
        let type = ATTUUID(0x2A00)
        let table = try AttributeTable([2, 5, 9, 0xFFFF].map { Attribute(handle: $0, type: type, permissions: .read) })
        XCTAssertEqual(table.index(of: 9), 2)
        XCTAssertNil(table.index(of: 3))
        XCTAssertEqual(table.indices(from: 3, through: 9), 1..<3)
        XCTAssertEqual(table.indices(from: 6, through: 8), 2..<2)
        XCTAssertEqual(table.indices(from: 1, through: 0xFFFF), 0..<4)
        XCTAssertEqual(table.indices(from: 10, through: 2), 0..<0)
    }

    func testBuilderLayoutAndGrouping() throws {
        let table = try Fixture.table()
        XCTAssertEqual(table.count, 24)
        XCTAssertEqual(table[handle: 2]?.value, [0x02, 0x03, 0x00, 0x00, 0x2A])
        XCTAssertEqual(table[handle: 5]?.value, [0x3A, 0x06, 0x00] + FixtureUUID.status.littleEndianBytes)
        XCTAssertEqual(table[handle: 7]?.type, .clientCharacteristicConfiguration)
        XCTAssertEqual(table[handle: 8]?.value, Array("Status".utf8))
        XCTAssertEqual(table[handle: 22]?.type, .secondaryService)
        XCTAssertEqual(table.groupEndHandle(ofIndex: 0), 3)
        XCTAssertEqual(table.groupEndHandle(ofIndex: 3), 21)
        XCTAssertEqual(table.groupEndHandle(ofIndex: 21), 24)
        XCTAssertEqual(table.groupEndHandle(ofIndex: 5), 6, "non-group attributes end at themselves")
        XCTAssertEqual(table.cccdHandle(forValueHandle: 6), 7)
        XCTAssertEqual(table.cccdHandle(forValueHandle: 20), 21)
        XCTAssertNil(table.cccdHandle(forValueHandle: 10), "the CCCD search stops at the next declaration")
    }

    func testIncludeDeclarationValue() throws {
        var builder = GATTDatabaseBuilder(firstHandle: 0x10)
        let handle = try builder.addInclude(serviceHandle: 0x20, endGroupHandle: 0x2F, uuid: ATTUUID(0x180F))
        try builder.addInclude(serviceHandle: 0x30, endGroupHandle: 0x3F, uuid: FixtureUUID.service)
        let table = try builder.build()
        XCTAssertEqual(handle, 0x10)
        XCTAssertEqual(table[handle: 0x10]?.value, [0x20, 0x00, 0x2F, 0x00, 0x0F, 0x18])
        XCTAssertEqual(table[handle: 0x11]?.value, [0x30, 0x00, 0x3F, 0x00], "128-bit UUIDs are left out of includes")
    }

    func testBuilderRunsOutOfHandles() throws {
        var builder = GATTDatabaseBuilder(firstHandle: 0xFFFF)
        try builder.add(type: ATTUUID(0x2A00), permissions: .read, value: [])
        XCTAssertThrowsError(try builder.add(type: ATTUUID(0x2A00), permissions: .read, value: [])) {
            XCTAssertEqual($0 as? GATTBuilderError, .outOfHandles)
        }
    }
}
