import Foundation
import enum YaokPluginKit.Hex

/// Why an attribute-table file could not be loaded. Every content error names the
/// attribute index (0-based, in file order) and the field.
public enum AttributeTableFileError: Error, Equatable, CustomStringConvertible {
    /// The file could not be read.
    case unreadable(path: String, reason: String)
    /// The file is larger than `AttributeTableFile.maxFileSize`.
    case tooLarge(path: String, size: Int, limit: Int)
    /// The text is not JSON.
    case invalidJSON(reason: String)
    /// A problem at the top level of the document (`field` is the key, or "" for the root).
    case topLevel(field: String, problem: String)
    /// A problem with one field of one attribute.
    case attribute(index: Int, field: String, problem: String)

    public var description: String {
        switch self {
        case .unreadable(let path, let reason): return "cannot read attribute table \(path): \(reason)"
        case .tooLarge(let path, let size, let limit):
            return "attribute table \(path) is larger than the \(limit)-byte limit (read \(size) bytes)"
        case .invalidJSON(let reason): return "attribute table is not valid JSON: \(reason)"
        case .topLevel(let field, let problem):
            return field.isEmpty ? "attribute table: \(problem)" : "attribute table field \"\(field)\": \(problem)"
        case .attribute(let index, let field, let problem):
            return "attribute \(index) field \"\(field)\": \(problem)"
        }
    }
}

/// The JSON attribute-table file format (see Docs/att-table-format.md).
public enum AttributeTableFile {
    /// Files above this size are refused before parsing.
    public static let maxFileSize = 4 << 20

    static let permissionKeys: [String: ATTPermissions] = [
        "read": .read, "write": .write,
        "encryption": [.readEncrypted, .writeEncrypted],
        "authentication": [.readAuthenticated, .writeAuthenticated],
        "authorization": [.readAuthorized, .writeAuthorized],
        "readEncryption": .readEncrypted, "readAuthentication": .readAuthenticated,
        "readAuthorization": .readAuthorized,
        "writeEncryption": .writeEncrypted, "writeAuthentication": .writeAuthenticated,
        "writeAuthorization": .writeAuthorized,
    ]
    static let attributeKeys: Set<String> = ["handle", "type", "permissions", "value", "maxLength", "name"]

    /// Reads and validates the table at `path`.
    public static func load(path: String) throws -> AttributeTable {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw AttributeTableFileError.unreadable(path: path, reason: "no such file")
        }
        guard !isDirectory.boolValue else {
            throw AttributeTableFileError.unreadable(path: path, reason: "is a directory")
        }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw AttributeTableFileError.unreadable(path: path, reason: "cannot open for reading")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            // Read one byte past the limit so an oversized file is detected without reading it all.
            data = try handle.read(upToCount: maxFileSize + 1) ?? Data()
        } catch {
            throw AttributeTableFileError.unreadable(path: path, reason: "\(error)")
        }
        if data.count > maxFileSize {
            throw AttributeTableFileError.tooLarge(path: path, size: data.count, limit: maxFileSize)
        }
        return try parse(data)
    }

    /// Parses and validates table JSON.
    public static func parse(_ data: Data) throws -> AttributeTable {
        guard data.count <= maxFileSize else {
            throw AttributeTableFileError.tooLarge(path: "<data>", size: data.count, limit: maxFileSize)
        }
        let root: JSONValue
        do {
            root = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch let error as DecodingError {
            throw AttributeTableFileError.invalidJSON(reason: describe(error))
        } catch {
            throw AttributeTableFileError.invalidJSON(reason: "\(error)")
        }
        guard case .object(let top) = root else {
            throw AttributeTableFileError.topLevel(field: "", problem: "must be a JSON object with an \"attributes\" array")
        }
        for key in top.keys where key != "attributes" && key != "description" {
            throw AttributeTableFileError.topLevel(field: key, problem: "unknown key (allowed: attributes, description)")
        }
        if let description = top["description"], case .string = description {} else if top["description"] != nil {
            throw AttributeTableFileError.topLevel(field: "description", problem: "must be a string")
        }
        guard let list = top["attributes"] else {
            throw AttributeTableFileError.topLevel(field: "attributes", problem: "missing")
        }
        guard case .array(let items) = list else {
            throw AttributeTableFileError.topLevel(field: "attributes", problem: "must be an array")
        }
        var result: [Attribute] = []
        result.reserveCapacity(min(items.count, 65535))
        var previousHandle: UInt16 = 0
        for (index, item) in items.enumerated() {
            let attribute = try parseAttribute(item, index: index)
            if index > 0, attribute.handle <= previousHandle {
                throw AttributeTableFileError.attribute(index: index, field: "handle",
                    problem: "\(attribute.handle) is not greater than the previous handle \(previousHandle); handles must strictly increase")
            }
            previousHandle = attribute.handle
            result.append(attribute)
        }
        do {
            return try AttributeTable(result)
        } catch let error as AttributeTableError {
            // parseAttribute already checks everything AttributeTable does; keep a clear message anyway.
            throw AttributeTableFileError.topLevel(field: "attributes", problem: error.description)
        }
    }

    private static func parseAttribute(_ item: JSONValue, index: Int) throws -> Attribute {
        func fail(_ field: String, _ problem: String) -> AttributeTableFileError {
            .attribute(index: index, field: field, problem: problem)
        }
        guard case .object(let fields) = item else {
            throw fail("", "each attribute must be a JSON object")
        }
        for key in fields.keys.sorted() where !attributeKeys.contains(key) {
            throw fail(key, "unknown key (allowed: \(attributeKeys.sorted().joined(separator: ", ")))")
        }
        if let name = fields["name"], case .string = name {} else if fields["name"] != nil {
            throw fail("name", "must be a string")
        }

        guard let handleValue = fields["handle"] else { throw fail("handle", "missing") }
        guard case .integer(let handleNumber) = handleValue, (1...0xFFFF).contains(handleNumber) else {
            throw fail("handle", "must be an integer in 1...65535")
        }

        guard let typeValue = fields["type"] else { throw fail("type", "missing") }
        guard case .string(let typeText) = typeValue, let type = ATTUUID(string: typeText) else {
            throw fail("type", "must be a UUID string: 4 hex digits (\"2800\"), 8 hex digits, or \"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\"")
        }

        guard let permissionsValue = fields["permissions"] else { throw fail("permissions", "missing") }
        guard case .object(let permissionFields) = permissionsValue else {
            throw fail("permissions", "must be an object of booleans")
        }
        var permissions: ATTPermissions = []
        for (key, flag) in permissionFields.sorted(by: { $0.key < $1.key }) {
            guard let bits = permissionKeys[key] else {
                throw fail("permissions.\(key)", "unknown permission (allowed: \(permissionKeys.keys.sorted().joined(separator: ", ")))")
            }
            guard case .bool(let enabled) = flag else { throw fail("permissions.\(key)", "must be true or false") }
            if enabled { permissions.formUnion(bits) }
        }

        var maxLength = ATTLimits.maxValueLength
        if let maxValue = fields["maxLength"] {
            guard case .integer(let number) = maxValue, (0...Int64(ATTLimits.maxValueLength)).contains(number) else {
                throw fail("maxLength", "must be an integer in 0...\(ATTLimits.maxValueLength)")
            }
            maxLength = Int(number)
        }

        var value: [UInt8] = []
        if let valueField = fields["value"] {
            guard case .string(let hex) = valueField else { throw fail("value", "must be a hex string") }
            guard hex.utf8.count <= 2 * ATTLimits.maxValueLength else {
                throw fail("value", "longer than \(ATTLimits.maxValueLength) bytes")
            }
            guard let bytes = Hex.decode(hex) else {
                throw fail("value", "must be an even number of hex digits (0-9, a-f), no separators")
            }
            value = bytes
        }
        guard value.count <= maxLength else {
            throw fail("value", "is \(value.count) bytes, longer than maxLength \(maxLength)")
        }
        return Attribute(handle: UInt16(handleNumber), type: type, permissions: permissions,
                         value: value, maxLength: maxLength)
    }

    /// Renders `table` in the file format (one attribute per line, stable key order).
    public static func render(_ table: AttributeTable) -> String {
        let lines = table.attributes.map { attribute -> String in
            var flags: [String] = []
            for key in ["read", "write", "readEncryption", "readAuthentication", "readAuthorization",
                        "writeEncryption", "writeAuthentication", "writeAuthorization"] {
                if let bits = permissionKeys[key] { flags.append("\"\(key)\":\(attribute.permissions.isSuperset(of: bits))") }
            }
            var line = "{\"handle\":\(attribute.handle),\"type\":\"\(attribute.type)\",\"permissions\":{\(flags.joined(separator: ","))},\"value\":\"\(Hex.encode(attribute.value))\""
            if attribute.maxLength != ATTLimits.maxValueLength { line += ",\"maxLength\":\(attribute.maxLength)" }
            return line + "}"
        }
        return "{\"attributes\":[\n  " + lines.joined(separator: ",\n  ") + "\n]}\n"
    }

    private static func describe(_ error: DecodingError) -> String {
        switch error {
        case .dataCorrupted(let context): return context.underlyingError.map { "\($0)" } ?? context.debugDescription
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context):
            return context.debugDescription
        @unknown default: return "\(error)"
        }
    }
}

/// A parsed JSON value, so validation can name exact fields and reject unknown keys.
enum JSONValue: Decodable, Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null; return }
        if let value = try? container.decode(Bool.self) { self = .bool(value); return }
        if let value = try? container.decode(Int64.self) { self = .integer(value); return }
        if let value = try? container.decode(Double.self) { self = .number(value); return }
        if let value = try? container.decode(String.self) { self = .string(value); return }
        if let value = try? container.decode([JSONValue].self) { self = .array(value); return }
        if let value = try? container.decode([String: JSONValue].self) { self = .object(value); return }
        throw DecodingError.dataCorruptedError(in: container, debugDescription: "unsupported JSON value")
    }
}
