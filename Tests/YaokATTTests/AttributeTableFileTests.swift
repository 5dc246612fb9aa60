import Foundation
import XCTest
@testable import YaokATT

final class AttributeTableFileTests: XCTestCase {
    private func parse(_ json: String) throws -> AttributeTable {
        try AttributeTableFile.parse(Data(json.utf8))
    }

    private func assertError(_ json: String, _ expected: AttributeTableFileError,
                             file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try parse(json), file: file, line: line) { error in
            XCTAssertEqual(error as? AttributeTableFileError, expected, "\(error)", file: file, line: line)
        }
    }

    func testParsesAllFields() throws {
        let table = try parse("""
            {"description": "test", "attributes": [
              {"handle": 1, "type": "2800", "permissions": {"read": true}, "value": "0018", "name": "GAP"},
              {"handle": 2, "type": "2803", "permissions": {"read": true, "write": false}, "value": "020300002A"},
              {"handle": 3, "type": "0x2a00", "permissions": {"read": true, "write": true, "encryption": true}, "value": "", "maxLength": 20},
              {"handle": 16, "type": "6e400002-b5a3-f393-e0a9-e50e24dcca9e",
               "permissions": {"read": true, "readAuthentication": true, "writeAuthorization": true}}
            ]}
            """)
        XCTAssertEqual(table.count, 4)
        XCTAssertEqual(table[handle: 1]?.value, [0x00, 0x18])
        XCTAssertEqual(table[handle: 2]?.value, [0x02, 0x03, 0x00, 0x00, 0x2A])
        XCTAssertEqual(table[handle: 3]?.permissions, [.read, .write, .readEncrypted, .writeEncrypted])
        XCTAssertEqual(table[handle: 3]?.maxLength, 20)
        XCTAssertEqual(table[handle: 3]?.type, ATTUUID(0x2A00))
        XCTAssertEqual(table[handle: 16]?.type, FixtureUUID.status)
        XCTAssertEqual(table[handle: 16]?.permissions, [.read, .readAuthenticated, .writeAuthorized])
        XCTAssertEqual(table[handle: 16]?.value, [])
        XCTAssertEqual(table[handle: 16]?.maxLength, 512)
    }

    func testRenderRoundTrips() throws {
        let table = try Fixture.table()
        XCTAssertEqual(try parse(AttributeTableFile.render(table)), table)
    }

    func testDocumentedExampleLoads() throws {
        // The example in Docs/att-table-format.md, kept in sync by this test.
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Docs/att-table-format.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        let start = try XCTUnwrap(text.range(of: "```json\n"))
        let end = try XCTUnwrap(text.range(of: "\n```", range: start.upperBound..<text.endIndex))
        let table = try parse(String(text[start.upperBound..<end.lowerBound]))
        XCTAssertGreaterThan(table.count, 5)
        let server = ATTServer(table: table)
        XCTAssertEqual(server.handle(pdu: [0x10] + le16(1) + le16(0xFFFF) + [0x00, 0x28])?.first, 0x11)
    }

    func testTopLevelErrors() {
        assertError("[]", .topLevel(field: "", problem: "must be a JSON object with an \"attributes\" array"))
        assertError("{}", .topLevel(field: "attributes", problem: "missing"))
        assertError("{\"attributes\": {}}", .topLevel(field: "attributes", problem: "must be an array"))
        assertError("{\"attributes\": [], \"extra\": 1}",
                    .topLevel(field: "extra", problem: "unknown key (allowed: attributes, description)"))
        XCTAssertThrowsError(try parse("{\"attributes\": [")) { error in
            guard case .invalidJSON = error as? AttributeTableFileError else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(try parse("{\"attributes\": []}").count, 0)
    }

    func testAttributeErrorsNameIndexAndField() {
        let ok = "{\"handle\": 1, \"type\": \"2800\", \"permissions\": {\"read\": true}, \"value\": \"0018\"}"
        func table(_ second: String) -> String { "{\"attributes\": [\(ok), \(second)]}" }

        let cases: [(String, String, String)] = [
            ("{\"type\": \"2a00\", \"permissions\": {}}", "handle", "missing"),
            ("{\"handle\": 0, \"type\": \"2a00\", \"permissions\": {}}", "handle", "must be an integer in 1...65535"),
            ("{\"handle\": 70000, \"type\": \"2a00\", \"permissions\": {}}", "handle", "must be an integer in 1...65535"),
            ("{\"handle\": 2.5, \"type\": \"2a00\", \"permissions\": {}}", "handle", "must be an integer in 1...65535"),
            ("{\"handle\": \"2\", \"type\": \"2a00\", \"permissions\": {}}", "handle", "must be an integer in 1...65535"),
            ("{\"handle\": 2, \"permissions\": {}}", "type", "missing"),
            ("{\"handle\": 2, \"type\": \"2a0\", \"permissions\": {}}", "type",
             "must be a UUID string: 4 hex digits (\"2800\"), 8 hex digits, or \"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\""),
            ("{\"handle\": 2, \"type\": \"2a00\"}", "permissions", "missing"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": true}", "permissions", "must be an object of booleans"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {\"read\": 1}}", "permissions.read", "must be true or false"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"value\": \"abc\"}", "value",
             "must be an even number of hex digits (0-9, a-f), no separators"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"value\": \"zz\"}", "value",
             "must be an even number of hex digits (0-9, a-f), no separators"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"value\": 12}", "value", "must be a hex string"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"value\": \"010203\", \"maxLength\": 2}", "value",
             "is 3 bytes, longer than maxLength 2"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"maxLength\": 513}", "maxLength",
             "must be an integer in 0...512"),
            ("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"name\": 5}", "name", "must be a string"),
            ("{\"handle\": 1, \"type\": \"2a00\", \"permissions\": {}}", "handle",
             "1 is not greater than the previous handle 1; handles must strictly increase"),
        ]
        for (json, field, problem) in cases {
            assertError(table(json), .attribute(index: 1, field: field, problem: problem))
        }
        XCTAssertThrowsError(try parse(table("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {\"raed\": true}}"))) { error in
            guard case .attribute(1, "permissions.raed", let problem) = error as? AttributeTableFileError else {
                return XCTFail("\(error)")
            }
            XCTAssertTrue(problem.hasPrefix("unknown permission"), problem)
        }
        XCTAssertThrowsError(try parse(table("{\"handle\": 2, \"type\": \"2a00\", \"permissions\": {}, \"vaule\": \"00\"}"))) { error in
            guard case .attribute(1, "vaule", _) = error as? AttributeTableFileError else { return XCTFail("\(error)") }
            XCTAssertTrue("\(error)".hasPrefix("attribute 1 field \"vaule\": unknown key"), "\(error)")
        }
        assertError("{\"attributes\": [5]}", .attribute(index: 0, field: "", problem: "each attribute must be a JSON object"))
    }

    func testValueOfMaximumLength() throws {
        let hex = String(repeating: "ab", count: 512)
        let table = try parse("{\"attributes\": [{\"handle\": 1, \"type\": \"2a00\", \"permissions\": {\"read\": true}, \"value\": \"\(hex)\"}]}")
        XCTAssertEqual(table[handle: 1]?.value.count, 512)
        assertError("{\"attributes\": [{\"handle\": 1, \"type\": \"2a00\", \"permissions\": {}, \"value\": \"\(hex)ab\"}]}",
                    .attribute(index: 0, field: "value", problem: "longer than 512 bytes"))
    }

    func testLoadFromFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("att-table-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("table.json").path
        try AttributeTableFile.render(try Fixture.table()).write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertEqual(try AttributeTableFile.load(path: path), try Fixture.table())

        XCTAssertThrowsError(try AttributeTableFile.load(path: directory.appendingPathComponent("missing.json").path)) {
            guard case .unreadable(_, "no such file") = $0 as? AttributeTableFileError else { return XCTFail("\($0)") }
        }
        XCTAssertThrowsError(try AttributeTableFile.load(path: directory.path)) {
            guard case .unreadable(_, "is a directory") = $0 as? AttributeTableFileError else { return XCTFail("\($0)") }
        }
        let big = directory.appendingPathComponent("big.json").path
        XCTAssertTrue(FileManager.default.createFile(atPath: big, contents: Data(count: AttributeTableFile.maxFileSize + 10)))
        XCTAssertThrowsError(try AttributeTableFile.load(path: big)) {
            guard case .tooLarge = $0 as? AttributeTableFileError else { return XCTFail("\($0)") }
        }
    }
}
