/// Discovery and read requests (Core Spec Vol 3 Part F 3.4.3 and 3.4.4).
extension ATTServer {
    func findInformation(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        guard request.count == 5 else { return errorResponse(opcode, 0, .invalidPDU) }
        let range = handleRange(request)
        if let error = range.error { return errorResponse(opcode, range.start, error) }
        let indices = table.indices(from: range.start, through: range.end)
        guard let first = indices.first else { return errorResponse(opcode, range.start, .attributeNotFound) }

        // Format 1 = 16-bit UUIDs, 2 = 128-bit; the first attribute decides and the
        // response stops at the first attribute of the other width.
        let short = table.attributes[first].type.uuid16 != nil
        let entryLength = short ? 4 : 18
        var out: [UInt8] = [ATTOpcode.findInformationResponse, short ? 0x01 : 0x02]
        for index in indices {
            let attribute = table.attributes[index]
            guard (attribute.type.uuid16 != nil) == short, out.count + entryLength <= Int(mtu) else { break }
            out.appendLE16(attribute.handle)
            out += attribute.type.littleEndianBytes
        }
        return out
    }

    func findByTypeValue(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        guard request.count >= 7, let rawType = PDUReader(bytes: request).uint16(at: 5) else {
            return errorResponse(opcode, 0, .invalidPDU)
        }
        let range = handleRange(request)
        if let error = range.error { return errorResponse(opcode, range.start, error) }
        let type = ATTUUID(rawType)
        let wanted = Array(request[7...])
        var out: [UInt8] = [ATTOpcode.findByTypeValueResponse]
        for index in table.indices(from: range.start, through: range.end) {
            let attribute = table.attributes[index]
            // Only values this link may read take part, and only stored values: read
            // providers are not consulted for matching (they may have side effects).
            guard attribute.type == type, readDenial(attribute) == nil,
                  valuesMatch(attribute.value, wanted, type: type) else { continue }
            guard out.count + 4 <= Int(mtu) else { break }
            out.appendLE16(attribute.handle)
            out.appendLE16(table.groupEndHandle(ofIndex: index))
        }
        guard out.count > 1 else { return errorResponse(opcode, range.start, .attributeNotFound) }
        return out
    }

    /// Service declarations hold UUIDs, so a 16-bit value matches its 128-bit spelling.
    private func valuesMatch(_ stored: [UInt8], _ wanted: [UInt8], type: ATTUUID) -> Bool {
        if stored == wanted { return true }
        guard AttributeTable.isGroupType(type),
              let storedUUID = ATTUUID(littleEndian: stored), let wantedUUID = ATTUUID(littleEndian: wanted) else {
            return false
        }
        return storedUUID == wantedUUID
    }

    func readByType(_ request: [UInt8]) -> [UInt8] {
        readByType(request, grouped: false)
    }

    func readByGroupType(_ request: [UInt8]) -> [UInt8] {
        readByType(request, grouped: true)
    }

    /// Read By Type, or Read By Group Type when `grouped`: the same request (a handle range and
    /// a 16- or 128-bit type); a grouped one asks for a group type and its entries also carry
    /// the group end handle.
    private func readByType(_ request: [UInt8], grouped: Bool) -> [UInt8] {
        let opcode = request[0]
        guard request.count == 7 || request.count == 21, let type = ATTUUID(littleEndian: request[5...]) else {
            return errorResponse(opcode, 0, .invalidPDU)
        }
        let range = handleRange(request)
        if let error = range.error { return errorResponse(opcode, range.start, error) }
        guard !grouped || AttributeTable.isGroupType(type) else { return errorResponse(opcode, range.start, .unsupportedGroupType) }
        // Each value is cut so the 1-octet length field holds the entry: to min(ATT_MTU-4, 253)
        // for handle+value, min(ATT_MTU-6, 251) with the group end handle as well.
        let maxValue = grouped ? min(Int(mtu) - 6, 251) : min(Int(mtu) - 4, 253)
        return collectReads(opcode: opcode, start: range.start, end: range.end, type: type,
                            responseOpcode: grouped ? ATTOpcode.readByGroupTypeResponse : ATTOpcode.readByTypeResponse,
                            maxValue: maxValue, withGroupEnd: grouped)
    }

    /// The shared body of Read By Type and Read By Group Type: entries of equal length only,
    /// as many as fit the MTU; an unreadable FIRST match is an error naming its handle, a
    /// later one ends the list.
    private func collectReads(opcode: UInt8, start: UInt16, end: UInt16, type: ATTUUID,
                              responseOpcode: UInt8, maxValue: Int, withGroupEnd: Bool) -> [UInt8] {
        var out: [UInt8] = [responseOpcode, 0]
        var entryLength: Int?
        let headerLength = withGroupEnd ? 4 : 2
        for index in table.indices(from: start, through: end) where table.attributes[index].type == type {
            let handle = table.attributes[index].handle
            if let length = entryLength, out.count + length > Int(mtu) { break }
            let value: [UInt8]
            switch readValue(atIndex: index, opcode: opcode) {
            case .success(let bytes): value = bytes
            case .failure(let code):
                if entryLength == nil { return errorResponse(opcode, handle, code) }
                return finish(out, entryLength)
            }
            let slice = value.prefix(maxValue)
            let length = headerLength + slice.count
            if let expected = entryLength, expected != length { break }
            entryLength = length
            out.appendLE16(handle)
            if withGroupEnd { out.appendLE16(table.groupEndHandle(ofIndex: index)) }
            out += slice
        }
        guard entryLength != nil else { return errorResponse(opcode, start, .attributeNotFound) }
        return finish(out, entryLength)
    }

    private func finish(_ response: [UInt8], _ entryLength: Int?) -> [UInt8] {
        var out = response
        out[1] = UInt8(entryLength ?? 0)
        return out
    }

    func read(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        guard request.count == 3, let handle = PDUReader(bytes: request).uint16(at: 1) else {
            return errorResponse(opcode, 0, .invalidPDU)
        }
        guard let index = table.index(of: handle) else { return errorResponse(opcode, handle, .invalidHandle) }
        switch readValue(atIndex: index, opcode: opcode) {
        case .failure(let code): return errorResponse(opcode, handle, code)
        case .success(let value): return [ATTOpcode.readResponse] + value.prefix(Int(mtu) - 1)
        }
    }

    func readBlob(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        let reader = PDUReader(bytes: request)
        guard request.count == 5, let handle = reader.uint16(at: 1), let rawOffset = reader.uint16(at: 3) else {
            return errorResponse(opcode, 0, .invalidPDU)
        }
        guard let index = table.index(of: handle) else { return errorResponse(opcode, handle, .invalidHandle) }
        let offset = Int(rawOffset)
        switch readValue(atIndex: index, opcode: opcode, offset: offset) {
        case .failure(let code): return errorResponse(opcode, handle, code)
        case .success(let value):
            // offset == length reads nothing (the client's end-of-value probe); beyond is an error.
            guard offset <= value.count else { return errorResponse(opcode, handle, .invalidOffset) }
            return [ATTOpcode.readBlobResponse] + value[offset...].prefix(Int(mtu) - 1)
        }
    }

    func readMultiple(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        guard request.count >= 5, (request.count - 1) % 2 == 0 else { return errorResponse(opcode, 0, .invalidPDU) }
        let reader = PDUReader(bytes: request)
        var out: [UInt8] = [ATTOpcode.readMultipleResponse]
        let limit = Int(mtu)
        for position in stride(from: 1, to: request.count, by: 2) {
            guard let handle = reader.uint16(at: position) else { return errorResponse(opcode, 0, .invalidPDU) }
            guard let index = table.index(of: handle) else { return errorResponse(opcode, handle, .invalidHandle) }
            switch readValue(atIndex: index, opcode: opcode) {
            case .failure(let code): return errorResponse(opcode, handle, code)
            case .success(let value):
                // Every handle is still checked, but only ATT_MTU-1 value octets are sent.
                if out.count < limit { out += value.prefix(limit - out.count) }
            }
        }
        return out
    }
}
