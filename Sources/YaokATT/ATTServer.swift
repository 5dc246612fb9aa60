/// Why a notification or indication PDU could not be produced.
public enum ATTNotifyError: Error, Equatable, CustomStringConvertible {
    /// No attribute has this handle.
    case noSuchHandle(UInt16)
    /// The attribute has no Client Characteristic Configuration descriptor.
    case noCCCD(UInt16)
    /// The client has not enabled notifications (or indications) in the CCCD.
    case notEnabled(UInt16)
    /// An indication is still waiting for its Handle Value Confirmation.
    case indicationOutstanding(UInt16)

    public var description: String {
        switch self {
        case .noSuchHandle(let handle): return "no attribute has handle \(handle)"
        case .noCCCD(let handle): return "attribute \(handle) has no client characteristic configuration descriptor"
        case .notEnabled(let handle): return "the client has not enabled this for attribute \(handle)"
        case .indicationOutstanding(let handle):
            return "cannot indicate attribute \(handle): an earlier indication is not yet confirmed"
        }
    }
}

/// The ATT server for ONE connection (Core Spec Vol 3 Part F): it owns that connection's
/// copy of the attribute table, its negotiated MTU, prepare-write queue, CCCD values
/// (ordinary attribute values in its table copy) and indication state.
///
/// Not thread-safe: confine each instance to one thread or serial queue. Callbacks run
/// synchronously inside `handle(pdu:)` and may call back into this server.
public final class ATTServer {
    /// Per-connection engine options.
    public struct Options: Hashable, Sendable {
        /// The Server Rx MTU announced in Exchange MTU (clamped to at least 23). PDUs longer
        /// than this are answered with Invalid PDU.
        public var serverReceiveMTU: UInt16
        /// Reject CCCD (0x2902) writes whose value is not exactly 2 octets.
        public var checkCCCDWrites: Bool
        /// The most Prepare Write requests queued before Prepare Queue Full.
        public var maxPreparedWrites: Int
        /// The most value octets queued by Prepare Write before Prepare Queue Full.
        public var maxPreparedBytes: Int

        public init(serverReceiveMTU: UInt16 = 512, checkCCCDWrites: Bool = true,
                    maxPreparedWrites: Int = 64, maxPreparedBytes: Int = 4096) {
            self.serverReceiveMTU = serverReceiveMTU
            self.checkCCCDWrites = checkCCCDWrites
            self.maxPreparedWrites = maxPreparedWrites
            self.maxPreparedBytes = maxPreparedBytes
        }
    }

    /// What a read provider is asked for.
    public struct ReadRequest: Hashable, Sendable {
        /// The attribute being read.
        public let handle: UInt16
        /// The request opcode (Read, Read Blob, Read Multiple, Read By Type, Read By Group Type).
        public let opcode: UInt8
        /// The Read Blob offset (0 otherwise). Return the WHOLE value: the engine slices it.
        public let offset: Int
    }

    /// Computes an attribute's value at read time (e.g. a fresh per-connection challenge).
    /// Called only after the permission checks passed. Return the whole value or an ATT error.
    public typealias ReadProvider = (ReadRequest) -> Result<[UInt8], ATTErrorCode>

    /// Told of every accepted write after the value is stored; returning an error code
    /// restores the old value and (for requests) sends that error. `isCommand` is true for
    /// Write Command. Executed prepared writes arrive one handle at a time with `isCommand` false;
    /// offsets and lengths of all of them are checked before any is stored, but a rejection by
    /// this handler keeps the handles already written before it.
    public typealias WriteHandler = (_ handle: UInt16, _ value: [UInt8], _ isCommand: Bool) -> ATTErrorCode?

    private struct PreparedWrite {
        let handle: UInt16
        let offset: Int
        let value: [UInt8]
    }

    /// This connection's copy of the table (values change with writes).
    public private(set) var table: AttributeTable
    /// The options this server was created with.
    public let options: Options
    /// The current ATT_MTU: 23 until Exchange MTU, then min(client, server) but at least 23.
    public private(set) var mtu: UInt16 = ATTLimits.defaultMTU
    /// Whether Exchange MTU already happened (it may change the MTU only once).
    public private(set) var mtuExchanged = false
    /// The link's security; the owner updates it when the link is encrypted or paired.
    public var security: ATTLinkSecurity
    /// Called for every accepted write; see `WriteHandler`.
    public var onWrite: WriteHandler?
    /// Called with the indicated handle when the client confirms an indication.
    public var onConfirmation: ((UInt16) -> Void)?
    /// The handle of the indication awaiting confirmation, if any.
    public private(set) var outstandingIndication: UInt16?

    private var readProviders: [UInt16: ReadProvider] = [:]
    private var prepareQueue: [PreparedWrite] = []
    private var preparedBytes = 0

    /// A server for one connection over its own copy of `table`.
    public init(table: AttributeTable, options: Options = Options(), security: ATTLinkSecurity = .none) {
        self.table = table
        var options = options
        options.serverReceiveMTU = max(options.serverReceiveMTU, ATTLimits.defaultMTU)
        options.maxPreparedWrites = max(options.maxPreparedWrites, 0)
        options.maxPreparedBytes = max(options.maxPreparedBytes, 0)
        self.options = options
        self.security = security
    }

    // MARK: Owner API

    /// Registers (or with nil removes) a read provider for `handle`.
    public func setReadProvider(for handle: UInt16, _ provider: ReadProvider?) {
        readProviders[handle] = provider
    }

    /// Replaces the stored value of `handle` (within its max length).
    public func setValue(_ value: [UInt8], for handle: UInt16) throws {
        try table.setValue(value, for: handle)
    }

    /// The stored value of `handle` (not consulting read providers).
    public func storedValue(for handle: UInt16) -> [UInt8]? {
        table[handle: handle]?.value
    }

    /// The CCCD bits the client set for the characteristic value at `handle`:
    /// bit 0 notifications, bit 1 indications. 0 when there is no CCCD.
    public func clientConfiguration(for handle: UInt16) -> UInt16 {
        guard let cccd = table.cccdHandle(forValueHandle: handle),
              let value = table[handle: cccd]?.value, value.count >= 2 else { return 0 }
        return UInt16(value[0]) | UInt16(value[1]) << 8
    }

    /// A Handle Value Notification PDU for `handle`, if the client enabled notifications.
    /// `value` defaults to the stored value; it is truncated to ATT_MTU-3.
    public func notificationPDU(for handle: UInt16, value: [UInt8]? = nil) throws -> [UInt8] {
        let payload = try subscribedValue(handle: handle, bit: 0x0001, value: value)
        return pdu(ATTOpcode.handleValueNotification, handle: handle, value: payload)
    }

    /// A Handle Value Indication PDU for `handle`, if the client enabled indications and no
    /// other indication awaits confirmation; marks this one outstanding. Truncated to ATT_MTU-3.
    public func indicationPDU(for handle: UInt16, value: [UInt8]? = nil) throws -> [UInt8] {
        if let pending = outstandingIndication { throw ATTNotifyError.indicationOutstanding(pending) }
        let payload = try subscribedValue(handle: handle, bit: 0x0002, value: value)
        outstandingIndication = handle
        return pdu(ATTOpcode.handleValueIndication, handle: handle, value: payload)
    }

    /// Forgets the outstanding indication (e.g. after the owner's 30 s transaction timeout).
    public func cancelOutstandingIndication() {
        outstandingIndication = nil
    }

    private func subscribedValue(handle: UInt16, bit: UInt16, value: [UInt8]?) throws -> ArraySlice<UInt8> {
        guard let attribute = table[handle: handle] else { throw ATTNotifyError.noSuchHandle(handle) }
        guard table.cccdHandle(forValueHandle: handle) != nil else { throw ATTNotifyError.noCCCD(handle) }
        guard clientConfiguration(for: handle) & bit != 0 else { throw ATTNotifyError.notEnabled(handle) }
        return (value ?? attribute.value).prefix(Int(mtu) - 3)
    }

    // MARK: PDU dispatch

    /// Handles one received PDU and returns the PDU to send back, or nil when nothing is
    /// sent (commands, notifications, confirmations, stray responses, empty input).
    public func handle(pdu request: [UInt8]) -> [UInt8]? {
        guard let opcode = request.first else { return nil }
        let isCommand = opcode & ATTOpcode.commandFlag != 0
        if request.count > Int(options.serverReceiveMTU) {
            return isCommand ? nil : errorResponse(opcode, 0, .invalidPDU)
        }
        switch opcode {
        case ATTOpcode.exchangeMTURequest: return exchangeMTU(request)
        case ATTOpcode.findInformationRequest: return findInformation(request)
        case ATTOpcode.findByTypeValueRequest: return findByTypeValue(request)
        case ATTOpcode.readByTypeRequest: return readByType(request)
        case ATTOpcode.readRequest: return read(request)
        case ATTOpcode.readBlobRequest: return readBlob(request)
        case ATTOpcode.readMultipleRequest: return readMultiple(request)
        case ATTOpcode.readByGroupTypeRequest: return readByGroupType(request)
        case ATTOpcode.writeRequest: return write(request, isCommand: false)
        case ATTOpcode.writeCommand: _ = write(request, isCommand: true); return nil
        case ATTOpcode.prepareWriteRequest: return prepareWrite(request)
        case ATTOpcode.executeWriteRequest: return executeWrite(request)
        case ATTOpcode.handleValueConfirmation:
            if let handle = outstandingIndication {
                outstandingIndication = nil
                onConfirmation?(handle)
            }
            return nil
        case ATTOpcode.handleValueIndication:
            // We are no GATT client, but a peer that indicates still needs its confirmation
            // or its ATT bearer stalls.
            return [ATTOpcode.handleValueConfirmation]
        case ATTOpcode.errorResponse, ATTOpcode.exchangeMTUResponse, ATTOpcode.findInformationResponse,
             ATTOpcode.findByTypeValueResponse, ATTOpcode.readByTypeResponse, ATTOpcode.readResponse,
             ATTOpcode.readBlobResponse, ATTOpcode.readMultipleResponse, ATTOpcode.readByGroupTypeResponse,
             ATTOpcode.writeResponse, ATTOpcode.prepareWriteResponse, ATTOpcode.executeWriteResponse,
             ATTOpcode.readMultipleVariableResponse, ATTOpcode.handleValueNotification,
             ATTOpcode.multipleHandleValueNotification:
            return nil  // Responses and notifications are for a client; we never asked.
        default:
            // Signed Write Command and every unknown command are ignored (no response allowed);
            // an unknown request gets Request Not Supported.
            return isCommand ? nil : errorResponse(opcode, 0, .requestNotSupported)
        }
    }

    // MARK: Helpers shared by the handlers

    func errorResponse(_ requestOpcode: UInt8, _ handle: UInt16, _ code: ATTErrorCode) -> [UInt8] {
        var out: [UInt8] = [ATTOpcode.errorResponse, requestOpcode]
        out.appendLE16(handle)
        out.append(code.rawValue)
        return out
    }

    private func pdu(_ opcode: UInt8, handle: UInt16, value: ArraySlice<UInt8>) -> [UInt8] {
        var out: [UInt8] = [opcode]
        out.reserveCapacity(3 + value.count)
        out.appendLE16(handle)
        out += value
        return out
    }

    /// Why reading this attribute is refused on this link, or nil.
    func readDenial(_ attribute: Attribute) -> ATTErrorCode? {
        denial(attribute, .read, notPermitted: .readNotPermitted,
               authenticated: .readAuthenticated, encrypted: .readEncrypted, authorized: .readAuthorized)
    }

    /// Why writing this attribute is refused on this link, or nil.
    func writeDenial(_ attribute: Attribute) -> ATTErrorCode? {
        denial(attribute, .write, notPermitted: .writeNotPermitted,
               authenticated: .writeAuthenticated, encrypted: .writeEncrypted, authorized: .writeAuthorized)
    }

    /// The rule for either direction: the operation must exist, then the link must meet each
    /// requirement the attribute sets for it, in this order.
    private func denial(_ attribute: Attribute, _ operation: ATTPermissions, notPermitted: ATTErrorCode,
                        authenticated: ATTPermissions, encrypted: ATTPermissions, authorized: ATTPermissions) -> ATTErrorCode? {
        let permissions = attribute.permissions
        guard permissions.contains(operation) else { return notPermitted }
        if permissions.contains(authenticated), !security.authenticated { return .insufficientAuthentication }
        if permissions.contains(encrypted), !security.encrypted { return .insufficientEncryption }
        if permissions.contains(authorized), !security.authorized { return .insufficientAuthorization }
        return nil
    }

    /// The value a client reads at `index`: permission-checked, from a provider if registered.
    func readValue(atIndex index: Int, opcode: UInt8, offset: Int = 0) -> Result<[UInt8], ATTErrorCode> {
        let attribute = table.attributes[index]
        if let denial = readDenial(attribute) { return .failure(denial) }
        if let provider = readProviders[attribute.handle] {
            return provider(ReadRequest(handle: attribute.handle, opcode: opcode, offset: offset))
        }
        return .success(attribute.value)
    }

    /// The start/end handle pair at offset 1 of a range request, validated per Vol 3 Part F 3.4.3.1.
    func handleRange(_ request: [UInt8]) -> (start: UInt16, end: UInt16, error: ATTErrorCode?) {
        let reader = PDUReader(bytes: request)
        let start = reader.uint16(at: 1) ?? 0
        let end = reader.uint16(at: 3) ?? 0
        if start == 0 || start > end { return (start, end, .invalidHandle) }
        return (start, end, nil)
    }

    // MARK: Exchange MTU

    private func exchangeMTU(_ request: [UInt8]) -> [UInt8] {
        guard request.count == 3, let clientMTU = PDUReader(bytes: request).uint16(at: 1) else {
            return errorResponse(request[0], 0, .invalidPDU)
        }
        // The MTU is fixed by the first exchange; a repeated request is answered but changes nothing.
        if !mtuExchanged {
            mtu = max(ATTLimits.defaultMTU, min(clientMTU, options.serverReceiveMTU))
            mtuExchanged = true
        }
        var out: [UInt8] = [ATTOpcode.exchangeMTUResponse]
        out.appendLE16(options.serverReceiveMTU)
        return out
    }

    // MARK: Writes

    private func write(_ request: [UInt8], isCommand: Bool) -> [UInt8] {
        let opcode = request[0]
        guard let handle = PDUReader(bytes: request).uint16(at: 1) else {
            return errorResponse(opcode, 0, .invalidPDU)
        }
        guard let index = table.index(of: handle) else { return errorResponse(opcode, handle, .invalidHandle) }
        let attribute = table.attributes[index]
        if let denial = writeDenial(attribute) { return errorResponse(opcode, handle, denial) }
        let value = Array(request[3...])
        if let lengthError = lengthProblem(attribute, newLength: value.count) {
            return errorResponse(opcode, handle, lengthError)
        }
        if let rejection = store(value, atIndex: index, isCommand: isCommand) {
            return errorResponse(opcode, handle, rejection)
        }
        return [ATTOpcode.writeResponse]
    }

    private func lengthProblem(_ attribute: Attribute, newLength: Int) -> ATTErrorCode? {
        if newLength > attribute.maxLength { return .invalidAttributeValueLength }
        if options.checkCCCDWrites, attribute.type == .clientCharacteristicConfiguration, newLength != 2 {
            return .invalidAttributeValueLength
        }
        return nil
    }

    /// Stores first so the owner's handler sees the new state (e.g. it may notify right
    /// after a CCCD write); a rejection restores the old value.
    private func store(_ value: [UInt8], atIndex index: Int, isCommand: Bool) -> ATTErrorCode? {
        let handle = table.attributes[index].handle
        let old = table.attributes[index].value
        do { try table.setValue(value, for: handle) } catch { return .unlikelyError }
        if let rejection = onWrite?(handle, value, isCommand) {
            try? table.setValue(old, for: handle)
            return rejection
        }
        return nil
    }

    private func prepareWrite(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        let reader = PDUReader(bytes: request)
        guard let handle = reader.uint16(at: 1), let offset = reader.uint16(at: 3) else {
            return errorResponse(opcode, 0, .invalidPDU)
        }
        guard let index = table.index(of: handle) else { return errorResponse(opcode, handle, .invalidHandle) }
        if let denial = writeDenial(table.attributes[index]) { return errorResponse(opcode, handle, denial) }
        let part = Array(request[5...])
        guard prepareQueue.count < options.maxPreparedWrites,
              preparedBytes + part.count <= options.maxPreparedBytes else {
            return errorResponse(opcode, handle, .prepareQueueFull)
        }
        prepareQueue.append(PreparedWrite(handle: handle, offset: Int(offset), value: part))
        preparedBytes += part.count
        var out = request
        out[0] = ATTOpcode.prepareWriteResponse
        return out
    }

    private func executeWrite(_ request: [UInt8]) -> [UInt8] {
        let opcode = request[0]
        guard request.count == 2, request[1] <= 0x01 else { return errorResponse(opcode, 0, .invalidPDU) }
        let queue = prepareQueue
        prepareQueue = []
        preparedBytes = 0
        if request[1] == 0x00 { return [ATTOpcode.executeWriteResponse] }  // cancel all

        // Assemble every new value first; any offset or length error writes nothing.
        var assembled: [UInt16: [UInt8]] = [:]
        var order: [UInt16] = []
        for entry in queue {
            guard let index = table.index(of: entry.handle) else { return errorResponse(opcode, entry.handle, .invalidHandle) }
            let current = assembled[entry.handle] ?? table.attributes[index].value
            guard entry.offset <= current.count else { return errorResponse(opcode, entry.handle, .invalidOffset) }
            let updated = Array(current.prefix(entry.offset)) + entry.value
            guard updated.count <= table.attributes[index].maxLength else {
                return errorResponse(opcode, entry.handle, .invalidAttributeValueLength)
            }
            if assembled[entry.handle] == nil { order.append(entry.handle) }
            assembled[entry.handle] = updated
        }
        for handle in order {
            guard let index = table.index(of: handle), let value = assembled[handle] else { continue }
            if let lengthError = lengthProblem(table.attributes[index], newLength: value.count) {
                return errorResponse(opcode, handle, lengthError)
            }
        }
        for handle in order {
            guard let index = table.index(of: handle), let value = assembled[handle] else { continue }
            if let rejection = store(value, atIndex: index, isCommand: false) {
                return errorResponse(opcode, handle, rejection)
            }
        }
        return [ATTOpcode.executeWriteResponse]
    }

    /// The number of Prepare Write requests queued and not yet executed.
    public var preparedWriteCount: Int { prepareQueue.count }
}
