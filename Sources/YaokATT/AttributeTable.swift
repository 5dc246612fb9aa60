/// Why a set of attributes is not a valid table.
public enum AttributeTableError: Error, Equatable, CustomStringConvertible {
    /// Handle 0x0000 is reserved.
    case zeroHandle(index: Int)
    /// Handles must strictly increase; `index` has a handle not above its predecessor's.
    case handlesNotIncreasing(index: Int, handle: UInt16, previous: UInt16)
    /// `maxLength` outside 0...512.
    case invalidMaxLength(index: Int, maxLength: Int)
    /// The value is longer than the attribute's `maxLength`.
    case valueTooLong(index: Int, length: Int, maxLength: Int)
    /// No attribute has this handle.
    case noSuchHandle(UInt16)

    public var description: String {
        switch self {
        case .zeroHandle(let index):
            return "attribute \(index): handle 0 is reserved"
        case .handlesNotIncreasing(let index, let handle, let previous):
            return "attribute \(index): handle \(handle) is not greater than the previous handle \(previous)"
        case .invalidMaxLength(let index, let maxLength):
            return "attribute \(index): maxLength \(maxLength) is outside 0...\(ATTLimits.maxValueLength)"
        case .valueTooLong(let index, let length, let maxLength):
            return "attribute \(index): value is \(length) bytes, longer than maxLength \(maxLength)"
        case .noSuchHandle(let handle):
            return "no attribute has handle \(handle)"
        }
    }
}

/// An ordered, validated set of attributes: handles non-zero and strictly increasing,
/// values within their max length. A value type: copying it gives an independent table,
/// which is how every connection gets a fresh copy.
public struct AttributeTable: Hashable, Sendable {
    /// The attributes in handle order.
    public private(set) var attributes: [Attribute]

    /// Validates and wraps `attributes` (which must already be in handle order).
    public init(_ attributes: [Attribute]) throws {
        var previous: UInt16 = 0
        for (index, attribute) in attributes.enumerated() {
            if attribute.handle == 0 { throw AttributeTableError.zeroHandle(index: index) }
            if index > 0, attribute.handle <= previous {
                throw AttributeTableError.handlesNotIncreasing(index: index, handle: attribute.handle, previous: previous)
            }
            guard (0...ATTLimits.maxValueLength).contains(attribute.maxLength) else {
                throw AttributeTableError.invalidMaxLength(index: index, maxLength: attribute.maxLength)
            }
            if attribute.value.count > attribute.maxLength {
                throw AttributeTableError.valueTooLong(index: index, length: attribute.value.count, maxLength: attribute.maxLength)
            }
            previous = attribute.handle
        }
        self.attributes = attributes
    }

    /// The number of attributes.
    public var count: Int { attributes.count }

    /// The index of the attribute with `handle`, by binary search.
    public func index(of handle: UInt16) -> Int? {
        var low = 0
        var high = attributes.count - 1
        while low <= high {
            let mid = (low + high) / 2
            let midHandle = attributes[mid].handle
            if midHandle == handle { return mid }
            if midHandle < handle { low = mid + 1 } else { high = mid - 1 }
        }
        return nil
    }

    /// The attribute with `handle`, if any.
    public subscript(handle handle: UInt16) -> Attribute? {
        index(of: handle).map { attributes[$0] }
    }

    /// The index of the first attribute with a handle >= `handle`.
    func firstIndex(atOrAfter handle: UInt16) -> Int {
        var low = 0
        var high = attributes.count
        while low < high {
            let mid = (low + high) / 2
            if attributes[mid].handle < handle { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The indices of attributes with handles in `start...end` (empty if start > end).
    func indices(from start: UInt16, through end: UInt16) -> Range<Int> {
        guard start <= end else { return 0..<0 }
        let first = firstIndex(atOrAfter: start)
        let past = end == UInt16.max ? attributes.count : firstIndex(atOrAfter: end + 1)
        return first..<max(first, past)
    }

    /// Replaces the stored value of `handle`; the value must fit the attribute's max length.
    public mutating func setValue(_ value: [UInt8], for handle: UInt16) throws {
        guard let index = index(of: handle) else { throw AttributeTableError.noSuchHandle(handle) }
        guard value.count <= attributes[index].maxLength else {
            throw AttributeTableError.valueTooLong(index: index, length: value.count, maxLength: attributes[index].maxLength)
        }
        attributes[index].value = value
    }

    /// Whether `type` is a GATT grouping type (primary or secondary service declaration).
    static func isGroupType(_ type: ATTUUID) -> Bool {
        type == .primaryService || type == .secondaryService
    }

    /// The last handle of the group the attribute at `index` starts: for a service
    /// declaration, the handle just before the next service declaration (or the table's
    /// last handle); for any other attribute, its own handle.
    func groupEndHandle(ofIndex index: Int) -> UInt16 {
        guard AttributeTable.isGroupType(attributes[index].type) else { return attributes[index].handle }
        var last = index
        var next = index + 1
        while next < attributes.count, !AttributeTable.isGroupType(attributes[next].type) {
            last = next
            next += 1
        }
        return attributes[last].handle
    }

    /// The CCCD belonging to the characteristic value at `valueHandle`: the first 0x2902
    /// attribute after it and before the next declaration (service, include, characteristic).
    public func cccdHandle(forValueHandle valueHandle: UInt16) -> UInt16? {
        guard let index = index(of: valueHandle) else { return nil }
        let boundaries: Set<ATTUUID> = [.primaryService, .secondaryService, .include, .characteristic]
        var next = index + 1
        while next < attributes.count, !boundaries.contains(attributes[next].type) {
            if attributes[next].type == .clientCharacteristicConfiguration { return attributes[next].handle }
            next += 1
        }
        return nil
    }
}
