import XCTest
@testable import YaokATT

/// Byte helpers for hand-written PDUs.
func le16(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

/// An Error Response PDU.
func errorPDU(_ request: UInt8, _ handle: UInt16, _ code: UInt8) -> [UInt8] {
    [0x01, request] + le16(handle) + [code]
}

/// Hex for assertion messages.
func hex(_ bytes: [UInt8]?) -> String {
    guard let bytes else { return "nil" }
    return bytes.map { String(format: "%02x", $0) }.joined()
}

/// The custom 128-bit UUIDs used by the fixture table.
enum FixtureUUID {
    static let service = ATTUUID(string: "6e400001-b5a3-f393-e0a9-e50e24dcca9e")!
    static let status = ATTUUID(string: "6e400002-b5a3-f393-e0a9-e50e24dcca9e")!
    static let secret = ATTUUID(string: "6e400003-b5a3-f393-e0a9-e50e24dcca9e")!
}

/// A GATT database with known handles, built by the builder:
///  1 primary service 0x1800          2 char decl (read) -> 3      3 device name "YaOK" (0x2A00)
///  4 primary service 128-bit         5 char decl (r/w/n/i) -> 6   6 status "hello" (rw, max 64)
///  7 CCCD of 6                       8 user description "Status"
///  9 char decl (read) -> 10         10 long value 0...99 (0x2A19)
/// 11 char decl (r/w) -> 12          12 secret: read/write need encryption (128-bit type)
/// 13 char decl (read) -> 14         14 0x2A01, read needs authentication
/// 15 char decl (read) -> 16         16 0x2A02, read needs authorization
/// 17 char decl (write) -> 18        18 0x2A03, write only, max 8
/// 19 char decl (notify) -> 20       20 0x2A04, read, notify     21 CCCD of 20
/// 22 secondary service 0x180F
/// 23 char decl (read) -> 24         24 0x2A05 not readable (no permissions)
enum Fixture {
    static let longValue: [UInt8] = (0..<100).map { UInt8($0) }

    static func table() throws -> AttributeTable {
        var builder = GATTDatabaseBuilder()
        try builder.addService(ATTUUID(0x1800))
        _ = try builder.addCharacteristic(ATTUUID(0x2A00), properties: .read, permissions: .read, value: Array("YaOK".utf8))
        try builder.addService(FixtureUUID.service)
        _ = try builder.addCharacteristic(FixtureUUID.status, properties: [.read, .write, .notify, .indicate],
                                          permissions: .readWrite, value: Array("hello".utf8), maxLength: 64,
                                          userDescription: "Status")
        _ = try builder.addCharacteristic(ATTUUID(0x2A19), properties: .read, permissions: .read, value: longValue)
        _ = try builder.addCharacteristic(FixtureUUID.secret, properties: [.read, .write],
                                          permissions: [.read, .write, .readEncrypted, .writeEncrypted],
                                          value: Array("secret".utf8))
        _ = try builder.addCharacteristic(ATTUUID(0x2A01), properties: .read,
                                          permissions: [.read, .readAuthenticated], value: [0, 0])
        _ = try builder.addCharacteristic(ATTUUID(0x2A02), properties: .read,
                                          permissions: [.read, .readAuthorized], value: [0])
        _ = try builder.addCharacteristic(ATTUUID(0x2A03), properties: .write, permissions: .write, maxLength: 8)
        _ = try builder.addCharacteristic(ATTUUID(0x2A04), properties: [.read, .notify], permissions: .read, value: [7])
        try builder.addService(ATTUUID(0x180F), primary: false)
        _ = try builder.addCharacteristic(ATTUUID(0x2A05), properties: .read, permissions: [], value: [1])
        return try builder.build()
    }

    static func server(mtu: UInt16? = nil, options: ATTServer.Options = ATTServer.Options(),
                       security: ATTLinkSecurity = .none) throws -> ATTServer {
        let server = ATTServer(table: try table(), options: options, security: security)
        if let mtu {
            XCTAssertNotNil(server.handle(pdu: [0x02] + le16(mtu)))
        }
        return server
    }
}

/// Reads a whole value the way a GATT client does: Read, then Read Blob while the
/// response was full (ATT_MTU-1 octets).
func readLong(_ server: ATTServer, handle: UInt16, file: StaticString = #filePath, line: UInt = #line) -> [UInt8]? {
    guard let first = server.handle(pdu: [0x0A] + le16(handle)), first.first == 0x0B else {
        XCTFail("read failed", file: file, line: line)
        return nil
    }
    var value = Array(first.dropFirst())
    var chunk = value.count
    var rounds = 0
    while chunk == Int(server.mtu) - 1 {
        rounds += 1
        guard rounds < 100, let next = server.handle(pdu: [0x0C] + le16(handle) + le16(UInt16(value.count))),
              next.first == 0x0D else {
            XCTFail("read blob failed", file: file, line: line)
            return nil
        }
        chunk = next.count - 1
        value += next.dropFirst()
    }
    return value
}
