import XCTest
import YaokATT
import YaokPluginKit
@testable import YaokBLEPlugin
@testable import YaokBluetooth
@testable import YaokEndpoint

final class GATTAndAdvertisingTests: XCTestCase {
    let identity: [UInt8] = [2] + [UInt8](repeating: 0x11, count: 32) + [UInt8](repeating: 0x22, count: 32)

    func testAdvertisingDataCarriesTheServiceUUID() {
        let ad = AdvertisingPayload.advertisingData(serviceUUID: YaokGATT.uuidBytes(0x0001))
        XCTAssertEqual(ad.count, 21)
        XCTAssertEqual(Array(ad[0..<3]), [0x02, 0x01, 0x06])
        XCTAssertEqual(Array(ad[3..<5]), [17, 0x07])
        // Little-endian on air: the UUID's last byte (0x8a) first, its first (0x98) last.
        XCTAssertEqual(ad[5], 0x8a)
        XCTAssertEqual(ad[20], 0x98)
        XCTAssertEqual(YaokGATT.serviceUUID.description.lowercased(), "985e0001-a6d1-4b8d-91e4-1f4ec90c658a")
        let param = AdvertisingPayload.commandParameter(ad)
        XCTAssertEqual(param.count, 32)
        XCTAssertEqual(param[0], 21)
    }

    func testScanResponseCutsNameOnCharacterBoundary() {
        XCTAssertEqual(AdvertisingPayload.scanResponse(name: "hub"), [4, 0x09] + Array("hub".utf8))
        let long = String(repeating: "a", count: 28) + "é"   // 28 + 2 bytes > 29
        let sr = AdvertisingPayload.scanResponse(name: long)
        XCTAssertEqual(sr.count, 2 + 28)
        XCTAssertEqual(Int(sr[0]), 1 + 28)
    }

    /// The database served through the real ATT engine: primary service discovery and reads.
    func testDatabaseThroughTheATTEngine() throws {
        let db = try YaokGATT.database(name: "camp-hub", identity: identity)
        let server = ATTServer(table: db.table)
        // Read By Group Type (primary services) over the whole range.
        let groups = try XCTUnwrap(server.handle(pdu: [0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28]))
        XCTAssertEqual(groups.first, 0x11)
        // The 16-bit services come first (element length 6: start, end, uuid16).
        XCTAssertEqual(groups[1], 6)
        // Continue after them: the Ya OK service (element length 20).
        var lastEnd = 0
        var i = 2
        while i + 6 <= groups.count { lastEnd = Int(groups[i + 2]) | Int(groups[i + 3]) << 8; i += 6 }
        let next = UInt16(lastEnd + 1)
        let yaok = try XCTUnwrap(server.handle(pdu: [0x10, UInt8(next & 0xFF), UInt8(next >> 8), 0xFF, 0xFF, 0x00, 0x28]))
        XCTAssertEqual(yaok[0], 0x11)
        XCTAssertEqual(yaok[1], 20)
        XCTAssertEqual(Array(yaok[6..<22]), YaokGATT.serviceUUID.littleEndianBytes128)

        let name = try XCTUnwrap(server.handle(pdu: [0x0A, UInt8(db.deviceName & 0xFF), UInt8(db.deviceName >> 8)]))
        XCTAssertEqual(Array(name.dropFirst()), Array("camp-hub".utf8))
        // Identity is longer than MTU-3: a plain read returns the first 22 bytes, Read Blob the rest.
        let first = try XCTUnwrap(server.handle(pdu: [0x0A, UInt8(db.identity & 0xFF), UInt8(db.identity >> 8)]))
        XCTAssertEqual(Array(first.dropFirst()), Array(identity.prefix(22)))
        // TX notifications need the CCCD: before enabling, notifying fails.
        XCTAssertThrowsError(try server.notificationPDU(for: db.tx, value: [1]))
        XCTAssertEqual(server.handle(pdu: [0x12, UInt8(db.txCCCD & 0xFF), UInt8(db.txCCCD >> 8), 0x01, 0x00]), [0x13])
        XCTAssertEqual(try server.notificationPDU(for: db.tx, value: [7]), [0x1B, UInt8(db.tx & 0xFF), UInt8(db.tx >> 8), 7])
    }

    func testChunksFollowTheATTMTU() throws {
        let frame = [UInt8](repeating: 9, count: 100)
        let chunks = try BLELinkSession.chunks(of: frame, attMTU: 23)
        XCTAssertTrue(chunks.allSatisfy { $0.count <= 20 })
        XCTAssertEqual(chunks.count, 7)   // 16 payload bytes each
        // At MTU 517 a write could carry 514 bytes, but an attribute value holds at most 512.
        XCTAssertEqual(BLELinkSession.chunkSize(attMTU: 517), 512)
        XCTAssertEqual(BLELinkSession.chunkSize(attMTU: 515), 512)
        XCTAssertEqual(BLELinkSession.chunkSize(attMTU: 100), 97)
        XCTAssertTrue(try BLELinkSession.chunks(of: [UInt8](repeating: 1, count: 2000), attMTU: 517).allSatisfy { $0.count <= 512 })
        var reassembler = ChunkReassembler()
        var out: [UInt8]?
        for c in chunks { out = try reassembler.add(c, now: 0) }
        XCTAssertEqual(out, frame)
    }
}

final class AdvertisingReportTests: XCTestCase {
    /// An LE Advertising Report event holding one report.
    private func event(address: [UInt8], type: UInt8, data: [UInt8], rssi: Int8) -> [UInt8] {
        let report: [UInt8] = [type, 0x00] + address.reversed() + [UInt8(data.count)] + data + [UInt8(bitPattern: rssi)]
        return [0x04, 0x3E, UInt8(2 + report.count), 0x02, 1] + report
    }

    func testHubIsFoundAndItsScanResponseNameMerged() throws {
        let hub: [UInt8] = [0x00, 0xAA, 0x01, 0x00, 0x00, 0x00]
        var c = AdvertisingReportCollector()
        c.add(hciEvent: event(address: hub, type: 0x00, data: AdvertisingPayload.advertisingData(serviceUUID: YaokGATT.uuidBytes(1)), rssi: -60))
        c.add(hciEvent: event(address: hub, type: 0x04, data: AdvertisingPayload.scanResponse(name: "camp-hub"), rssi: -50))
        // Another device without the service is ignored.
        c.add(hciEvent: event(address: [1, 2, 3, 4, 5, 6], type: 0x00, data: [0x02, 0x01, 0x06], rssi: -40))
        XCTAssertEqual(c.hubs.count, 1)
        XCTAssertEqual(c.hubs.first?.address.description, "00:AA:01:00:00:00")
        XCTAssertEqual(c.hubs.first?.name, "camp-hub")
        XCTAssertEqual(c.hubs.first?.rssi, -50)
        XCTAssertEqual(c.hubs.first?.randomAddress, false)
    }

    func testRSSI127MeansNotMeasured() {
        var c = AdvertisingReportCollector()
        c.add(hciEvent: event(address: [9, 9, 9, 9, 9, 9], type: 0x00, data: AdvertisingPayload.advertisingData(serviceUUID: YaokGATT.uuidBytes(1)), rssi: 127))
        XCTAssertEqual(c.hubs.count, 1)
        XCTAssertNil(c.hubs.first?.rssi)
    }

    func testTruncatedAndLyingEventsAreIgnored() {
        var c = AdvertisingReportCollector()
        c.add(hciEvent: [])
        c.add(hciEvent: [0x04, 0x3E, 0x05, 0x02, 3, 0x00])   // announces 3 reports, holds none
        c.add(hciEvent: [0x04, 0x3E, 0x0C, 0x02, 1, 0x00, 0x00, 1, 2, 3, 4, 5, 6, 200, 1])   // data length beyond the packet
        // AD structure whose length runs past the data.
        let bad: [UInt8] = [0x04, 0x3E, 0, 0x02, 1, 0x00, 0x00, 1, 2, 3, 4, 5, 6, 3, 0x10, 0x07, 0x01, 0xC0]
        c.add(hciEvent: bad)
        XCTAssertTrue(c.hubs.isEmpty)
    }
}
