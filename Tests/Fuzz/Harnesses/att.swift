// libFuzzer harness: the ATT server engine (YaokATT) of one BLE connection, in memory: request PDUs
// from a hostile central against the hub's real GATT database (YaokGATT.database, with the BLE
// transport's control read provider and write rule) or a richer table (security requirements,
// 128-bit and 16-bit types mixed, long values, a secondary service, an include, a read provider),
// and the notifications and indications the hub then sends.
//
// Input: options (table, CCCD check, link security), server MTU, prepare-queue limits (4 bytes),
// then PDUs as chunks (length(2, BE) + bytes).
import YaokATT
import YaokBLEGATT

private struct Table {
    let table: AttributeTable
    /// Handles the hub notifies or indicates, and the control characteristic (BLE transport rules).
    let notify: UInt16
    let indicate: UInt16?
    let control: UInt16?
    let provided: UInt16?

    static let hub: Table = {
        let identity = [2] + [UInt8](repeating: 0xAA, count: 32) + [UInt8](repeating: 0xBB, count: 32)
        let db = try! YaokGATT.database(name: "yaok-hub-fuzz", identity: identity)
        return Table(table: db.table, notify: db.tx, indicate: nil, control: db.control, provided: db.control)
    }()

    static let rich: Table = {
        var b = GATTDatabaseBuilder()
        try! b.addService(ATTUUID(0x1800))
        _ = try! b.addCharacteristic(ATTUUID(0x2A00), properties: .read, permissions: .read, value: Array("rich".utf8))
        let secondary = try! b.addService(ATTUUID(0x180F), primary: false)
        _ = try! b.addCharacteristic(ATTUUID(0x2A19), properties: [.read, .notify], permissions: [.read, .readEncrypted], value: [99])
        try! b.addService(ATTUUID(bigEndianBytes: [UInt8](0..<16))!)
        try! b.addInclude(serviceHandle: secondary, endGroupHandle: secondary + 2, uuid: ATTUUID(0x180F))
        let long = try! b.addCharacteristic(ATTUUID(bigEndianBytes: [UInt8](16..<32))!, properties: [.read, .write, .notify, .indicate],
                                            permissions: [.read, .write, .writeAuthenticated], value: (0..<300).map { UInt8($0 & 0xFF) },
                                            userDescription: "long")
        let provided = try! b.addCharacteristic(ATTUUID(0x2A37), properties: [.read], permissions: [.read, .readAuthorized])
        _ = try! b.addCharacteristic(ATTUUID(0x2A38), properties: [.write], permissions: [.write, .writeEncrypted, .writeAuthorized], maxLength: 8)
        _ = try! b.add(type: ATTUUID(0x2900), permissions: .read, value: [1, 0])
        return Table(table: try! b.build(), notify: long.value, indicate: long.value, control: nil, provided: provided.value)
    }()
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzATT(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzStream(input(data, size))
    guard let flags = input.byte(), let mtuByte = input.byte(), let writes = input.byte(), let bytes = input.byte() else { return 0 }
    let t = flags & 1 == 0 ? Table.hub : Table.rich
    let options = ATTServer.Options(serverReceiveMTU: 23 + UInt16(mtuByte) * 2, checkCCCDWrites: flags & 2 == 0,
                                    maxPreparedWrites: Int(writes % 80), maxPreparedBytes: Int(bytes) * 24)
    let security = ATTLinkSecurity(encrypted: flags & 4 != 0, authenticated: flags & 8 != 0, authorized: flags & 16 != 0)
    let server = ATTServer(table: t.table, options: options, security: security)
    if let provided = t.provided {
        // As the BLE transport's control characteristic: version, link state; the rich table's is long.
        let value: [UInt8] = t.control != nil ? [1, 0] : (0..<200).map { UInt8($0) }
        server.setReadProvider(for: provided) { request in
            check(request.handle == provided, "provider asked for another handle")
            return flags & 32 == 0 ? .success(value) : .failure(ATTErrorCode(rawValue: 0x80))
        }
    }
    server.onWrite = { [unowned server] handle, value, _ in
        check(server.storedValue(for: handle) == value, "the write handler does not see the new value")
        if handle == t.control && value != [1] { return .valueNotAllowed }  // as the BLE transport
        return value.first == 0xEE ? ATTErrorCode(rawValue: 0x81) : nil
    }
    server.onConfirmation = { handle in check(handle == t.indicate, "confirmed an indication never sent") }
    let original = t.table.attributes

    var exchanged: UInt16?
    while let pdu = input.chunk() {
        let response = server.handle(pdu: pdu)
        checkResponse(response, to: pdu, server: server)
        if let first = pdu.first, first == ATTOpcode.exchangeMTURequest, pdu.count == 3, pdu.count <= Int(options.serverReceiveMTU) {
            if exchanged == nil { exchanged = server.mtu }
        }
        check(server.mtu == (exchanged ?? ATTLimits.defaultMTU), "the MTU changed after its exchange")
        check(server.mtu >= ATTLimits.defaultMTU && server.mtu <= max(options.serverReceiveMTU, ATTLimits.defaultMTU), "MTU out of bounds")
        check(server.preparedWriteCount <= options.maxPreparedWrites, "prepare queue above its limit")

        // The table keeps its shape; only writable values change, within their limits.
        let now = server.table.attributes
        check(now.count == original.count && (try? AttributeTable(now)) != nil, "the table is no longer valid")
        for (a, b) in zip(original, now) {
            check(a.handle == b.handle && a.type == b.type && a.permissions == b.permissions && a.maxLength == b.maxLength, "an attribute changed shape")
            if a.value != b.value {
                check(a.permissions.contains(.write), "a value changed that is not writable")
                if options.checkCCCDWrites && b.type == .clientCharacteristicConfiguration { check(b.value.count == 2, "a CCCD of another length") }
            }
        }

        // What the hub sends on its own: notifications and indications within the MTU.
        if let n = try? server.notificationPDU(for: t.notify) {
            check(server.clientConfiguration(for: t.notify) & 1 != 0 && n.count <= Int(server.mtu), "notification")
        }
        if let i = t.indicate, let pdu = try? server.indicationPDU(for: i) {
            check(server.clientConfiguration(for: i) & 2 != 0 && pdu.count <= Int(server.mtu) && server.outstandingIndication == i, "indication")
        }
    }
    return 0
}

/// Whether the attribute at the PDU's handle (bytes 1-2) exists and may be read (or written) on the link.
private func permits(_ server: ATTServer, handle pdu: [UInt8], write: Bool) -> Bool {
    guard pdu.count >= 3, let a = server.table[handle: UInt16(pdu[1]) | UInt16(pdu[2]) << 8] else { return false }
    let p = a.permissions, s = server.security
    if write {
        return p.contains(.write) && (!p.contains(.writeEncrypted) || s.encrypted) && (!p.contains(.writeAuthenticated) || s.authenticated)
            && (!p.contains(.writeAuthorized) || s.authorized)
    }
    return p.contains(.read) && (!p.contains(.readEncrypted) || s.encrypted) && (!p.contains(.readAuthenticated) || s.authenticated)
        && (!p.contains(.readAuthorized) || s.authorized)
}

/// Every request gets its response or an error naming it; commands, confirmations and stray
/// responses get nothing; nothing is longer than the MTU (but a Prepare Write echo of its request).
private func checkResponse(_ response: [UInt8]?, to pdu: [UInt8], server: ATTServer) {
    guard let opcode = pdu.first else { check(response == nil, "answered an empty PDU"); return }
    let clientSide: Set<UInt8> = [0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x1B, 0x1E, 0x21, 0x23]
    if pdu.count > Int(server.options.serverReceiveMTU) && opcode & ATTOpcode.commandFlag == 0 {
        // Longer than the server takes: Invalid PDU, whatever the opcode (stray responses too).
        check(response == [ATTOpcode.errorResponse, opcode, 0, 0, ATTErrorCode.invalidPDU.rawValue], "an oversized PDU not refused")
        return
    }
    if opcode & ATTOpcode.commandFlag != 0 || clientSide.contains(opcode) {
        check(response == nil, "answered a command, a confirmation or a response")
        return
    }
    guard let r = response, let code = r.first else { check(false, "no answer to request 0x\(String(opcode, radix: 16))"); return }
    if code == ATTOpcode.errorResponse {
        check(r.count == 5 && r[1] == opcode, "malformed error response")
        return
    }
    if opcode == ATTOpcode.handleValueIndication {
        check(r == [ATTOpcode.handleValueConfirmation], "an indication not confirmed")
        return
    }
    check(code == opcode + 1, "response 0x\(String(code, radix: 16)) to request 0x\(String(opcode, radix: 16))")
    switch opcode {
    case ATTOpcode.exchangeMTURequest:
        check(r.count == 3 && Int(r[1]) | Int(r[2]) << 8 == Int(server.options.serverReceiveMTU), "Exchange MTU response")
    case ATTOpcode.prepareWriteRequest:
        check(r.dropFirst() == pdu.dropFirst(), "Prepare Write response is not the request's echo")
        check(permits(server, handle: pdu, write: true), "prepared a write the link may not make")
    case ATTOpcode.readRequest, ATTOpcode.readBlobRequest, ATTOpcode.writeRequest:
        check(permits(server, handle: pdu, write: opcode == ATTOpcode.writeRequest), "request 0x\(String(opcode, radix: 16)) allowed on a protected attribute")
        check(r.count <= Int(server.mtu), "response longer than the MTU")
    default:
        check(r.count <= Int(server.mtu), "response 0x\(String(code, radix: 16)) of \(r.count) bytes above the MTU \(server.mtu)")
    }
}

@_cdecl("LLVMFuzzerInitialize")
public func initializeATT(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        func le(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
        let hub = try YaokGATT.database(name: "yaok-hub-fuzz", identity: [2] + [UInt8](repeating: 0xAA, count: 64))
        let primary = le(0x2800), characteristic = le(0x2803)
        // A central's discovery: MTU, services, characteristics, descriptors, then reads and writes.
        let discovery = [0x02] + le(185)
        let services = [0x10] + le(1) + le(0xFFFF) + primary
        let chars = [0x08] + le(1) + le(0xFFFF) + characteristic
        let info = [0x04] + le(1) + le(0xFFFF)
        let byValue = [0x06] + le(1) + le(0xFFFF) + primary + YaokGATT.serviceUUID.littleEndianBytes
        let readIdentity = [0x0A] + le(hub.identity)
        let blob = [0x0C] + le(hub.identity) + le(22)
        let multiple = [0x0E] + le(hub.identity) + le(hub.control)
        let subscribe = [0x12] + le(hub.txCCCD) + [1, 0]
        let write = [0x52] + le(hub.rx) + [UInt8](repeating: 0x23, count: 20)
        let control = [0x12] + le(hub.control) + [1]
        let badControl = [0x12] + le(hub.control) + [2]
        let prepare = [0x16] + le(hub.rx) + le(0) + [1, 2, 3]
        let prepare2 = [0x16] + le(hub.rx) + le(3) + [4, 5]
        let execute: [UInt8] = [0x18, 0x01]
        let pdus = [discovery, services, chars, info, byValue, readIdentity, blob, multiple, subscribe, write, control, badControl,
                    prepare, prepare2, execute]
        return [
            ("hub-discovery", [0, 81, 64, 255] + pdus.flatMap(chunk)),
            ("hub-default-mtu", [2, 0, 2, 4] + [readIdentity, blob, prepare, prepare2, prepare, execute, [0x1D] + le(9) + [1], [0x1E], [0x7F]]
                .flatMap(chunk)),
            // The rich table's handles: 3 name, 6 battery (encrypted), 7 its CCCD, 11 long value
            // (write authenticated), 12 its CCCD, 15 provided (authorized), 17 write-protected.
            ("rich-secure", [1 | 4 | 8 | 16, 255, 64, 255] + [discovery, services, [0x10] + le(1) + le(0xFFFF) + le(0x2801), chars, info,
                [0x0A] + le(11), [0x0C] + le(11) + le(100), [0x12] + le(12) + [3, 0], [0x0A] + le(15), [0x08] + le(1) + le(0xFFFF) + le(0x2A37),
                [0x12] + le(11) + [1, 2, 3], [0x1E], [0x12] + le(17) + [1], [0x0E] + le(6) + le(15)].flatMap(chunk)),
            ("rich-insecure", [1 | 2 | 32, 10, 3, 1] + [[0x0A] + le(6), [0x12] + le(11) + [0xEE], [0x12] + le(12) + [1, 0, 0],
                [0x16] + le(11) + le(0) + [UInt8](repeating: 1, count: 30), [0x18, 0x00], [0x0E] + le(15) + le(15), [0x0A] + le(15)]
                .flatMap(chunk)),
        ]
    }
    return 0
}
