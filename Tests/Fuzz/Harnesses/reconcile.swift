// libFuzzer harness: set reconciliation between hubs (YaokReconcile, Docs/protocol.md "reconcile"):
// message parsing and encoding, the responders and initiators of both versions (IBLT + strata
// estimator, coded symbols) fed hostile messages, and honest exchanges between sets the input picks
// with messages dropped, changed or replaced on the way.
//
// Input: mode byte (mod 6: 0 one message; 1-4 hostile messages to a v1 responder, v1 initiator, v2
// responder, v2 initiator over `n` (next byte) IDs, then chunks (length(2, BE) + bytes); 5 an exchange).
import YaokReconcile
import YaokCrypto

/// The session and salt of the initiators under test (seeds answer them).
private let session: UInt32 = 0x0A0B_0C0D
private let salt = [UInt8](repeating: 0x5A, count: 16)

/// IDs to build sets from: a fixed pseudo-random sequence.
private let pool: [BundleID] = (0..<512).map { i in
    func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    return BundleID(hi: mix(UInt64(i)), lo: mix(UInt64(i) | 1 << 32))
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReconcile(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let all = input(data, size)
    guard let mode = all.first else { return 0 }
    var input = FuzzStream(Array(all.dropFirst()))
    switch mode % 6 {
    case 0:
        parse(Array(all.dropFirst()))
    case 5:
        exchange(&input)
    default:
        let ids = Array(pool.prefix(Int(input.byte() ?? 0)))
        switch mode % 6 {
        case 1: hostile(ReconcileResponder(ids: ids), ids: ids, initiator: false, &input)
        case 2: hostile(ReconcileInitiator(ids: ids, session: session, salt: salt), ids: ids, initiator: true, &input)
        case 3: hostile(CodedResponder(ids: ids), ids: ids, initiator: false, &input)
        default: hostile(CodedInitiator(ids: ids, session: session, salt: salt), ids: ids, initiator: true, &input)
        }
    }
    return 0
}

/// Parses; a message re-encodes to its bytes (an abort's version byte is not kept) and parses back.
private func parse(_ bytes: [UInt8]) {
    let header = ReconcileMessage.header(of: bytes)
    check((header == nil) == (bytes.count < 6), "header of \(bytes.count) bytes")
    do {
        let m = try ReconcileMessage(parsing: bytes)
        let encoded = m.encoded
        if m.kind == 5 {
            check(encoded.dropFirst() == bytes.dropFirst(), "abort does not round-trip")
        } else {
            check(encoded == bytes, "message does not round-trip")
        }
        check((try? ReconcileMessage(parsing: encoded)) == m, "encoded message does not parse back")
        check(m.session == header?.session && m.kind == header?.kind, "header disagrees with the message")
        check(bytes.count <= ReconcileLimits.maxMessageBytes, "parsed a message above the limit")
    } catch {
        guard let answer = ReconcileMessage.abortAnswering(bytes, error: error) else {
            check(header == nil || header!.kind == 5, "no answer to a message that names a session")
            return
        }
        check(answer.kind == 5 && answer.session == header?.session, "the abort answers another session")
        check((try? ReconcileMessage(parsing: answer.encoded)) == answer, "the answering abort does not parse")
    }
}

/// Checks one step of a side holding `ids`: what it sends is well-formed and within the limits;
/// what it reports as the difference is consistent with what it holds.
private func checkStep(_ step: ReconcileStep, ids: [BundleID], initiator: Bool) {
    func checkSent(_ m: ReconcileMessage) {
        let bytes = m.encoded
        check(bytes.count <= ReconcileLimits.maxMessageBytes, "sent a message above the limit")
        check((try? ReconcileMessage(parsing: bytes)) == m, "sent a message that does not parse back")
    }
    func sortedUnique(_ l: [BundleID]) -> Bool { zip(l, l.dropFirst()).allSatisfy { $0 < $1 } }
    let held = Set(ids)
    switch step {
    case .send(let messages):
        check(!messages.isEmpty, "an empty send")
        messages.forEach(checkSent)
    case .wait:
        break
    case .done(let peerLacks, let iLack, let lacksMessages):
        check(sortedUnique(peerLacks) && peerLacks.allSatisfy(held.contains), "the peer is said to lack an ID not held")
        if initiator {
            check(sortedUnique(iLack) && !iLack.contains(where: held.contains), "said to lack an ID held")
            lacksMessages.forEach(checkSent)
            let named = lacksMessages.flatMap { m -> [BundleID] in
                guard case .lacks(let l) = m else { check(false, "a lacks message of another kind"); return [] }
                return l.ids
            }
            check(named == iLack, "the lacks messages do not name what is lacked")
        } else {
            check(iLack.isEmpty && lacksMessages.isEmpty, "a responder reports what it lacks")
        }
    case .fallBack(_, let send, _):
        if let send {
            check(send.kind == 5, "a fallback sends something else than an abort")
            checkSent(send)
        }
    }
}

/// Modes 1-4: one side fed every chunk as a message; once finished it only waits.
private func hostile<E: ReconcileExchange>(_ side: E, ids: [BundleID], initiator: Bool, _ input: inout FuzzStream) {
    var side = side
    while let c = input.chunk() {
        let wasFinished = side.isFinished
        let step = side.receive(bytes: c)
        if wasFinished { check(step == .wait, "a finished exchange answered") }
        checkStep(step, ids: ids, initiator: initiator)
        if case .done = step { check(side.isFinished, "done but not finished") }
        if case .fallBack = step { check(side.isFinished, "fell back but not finished") }
    }
}

/// Mode 5: an honest exchange: version (byte: 1 + bit 0), initiator over `a` IDs from `offset`,
/// responder over `b` IDs from 0 (three bytes); each message then goes per an op byte: 0 as it is,
/// 1 dropped, 2 one byte changed (pos(2), xor), 3 replaced by a chunk. Untouched, it must find
/// the exact difference.
private func exchange(_ input: inout FuzzStream) {
    let coded = (input.byte() ?? 0) & 1 == 1
    let a = Int(input.byte() ?? 0), offset = Int(input.byte() ?? 0), b = Int(input.byte() ?? 0)
    let mine = Array(pool[offset..<offset + a]), theirs = Array(pool[0..<b])
    var initiator: any ReconcileExchange
    let first: ReconcileMessage
    if coded {
        let i = CodedInitiator(ids: mine, session: session, salt: salt)
        (initiator, first) = (i, i.firstMessage)
    } else {
        let i = ReconcileInitiator(ids: mine, session: session, salt: salt)
        (initiator, first) = (i, i.firstMessage)
    }
    var responder: any ReconcileExchange = coded ? CodedResponder(ids: theirs) : ReconcileResponder(ids: theirs)
    var queue: [(toResponder: Bool, bytes: [UInt8])] = [(true, first.encoded)]
    var tampered = false
    var found: (peerLacks: [BundleID], iLack: [BundleID])?
    var told: [BundleID]?
    var steps = 0
    while !queue.isEmpty && steps < 400 {
        steps += 1
        var (toResponder, bytes) = queue.removeFirst()
        switch (input.byte() ?? 0) % 4 {
        case 1:
            tampered = true
            continue
        case 2:
            guard let pos = input.u16(), let x = input.byte(), !bytes.isEmpty else { break }
            bytes[pos % bytes.count] ^= max(x, 1)
            tampered = true
        case 3:
            bytes = input.chunk() ?? []
            tampered = true
        default:
            break
        }
        let step = toResponder ? responder.receive(bytes: bytes) : initiator.receive(bytes: bytes)
        checkStep(step, ids: toResponder ? theirs : mine, initiator: !toResponder)
        switch step {
        case .send(let messages):
            queue += messages.map { (!toResponder, $0.encoded) }
        case .done(let peerLacks, let iLack, let lacksMessages):
            if toResponder {
                told = peerLacks
            } else {
                found = (peerLacks, iLack)
                queue += lacksMessages.map { (true, $0.encoded) }
            }
        case .fallBack(_, let send, _):
            if let send { queue.append((!toResponder, send.encoded)) }
        case .wait:
            break
        }
    }
    guard !tampered else { return }
    let mineSet = Set(mine), theirSet = Set(theirs)
    let theyLack = mine.filter { !theirSet.contains($0) }.sorted(), iLack = theirs.filter { !mineSet.contains($0) }.sorted()
    if let found {
        check(found.peerLacks == theyLack && found.iLack == iLack, "an honest exchange found another difference")
        check(told == nil || told! == iLack, "the responder was told another difference")
    }
    check(told == nil || found != nil, "the responder finished before the initiator")
}

@_cdecl("LLVMFuzzerInitialize")
public func initializeReconcile(_ argc: UnsafeMutablePointer<CInt>?, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>?) -> CInt {
    writeSeedsIfAsked {
        let small = ReconcileSizing(strata: 2, cellsPerStratum: 6, cellsPerDifference: 2, cellsPerExactDifference: 1.5, extraCells: 6)
        let ids = Array(pool.prefix(20))
        // A version 1 estimate (small shape), the table it brings, a tableRequest, lacks.
        let estimate = ReconcileInitiator(ids: Array(pool[2..<22]), session: session, salt: salt, sizing: small).firstMessage
        var responder = ReconcileResponder(ids: ids, sizing: small)
        guard case .send(let table) = responder.receive(estimate), case .table(let part)? = table.first else { fatalError("no table") }
        // Larger than twice any first table the harness's responder sends for 20 IDs.
        let request = ReconcileMessage.tableRequest(.init(session: session, salt: [UInt8](repeating: 1, count: 16), totalCells: 20 * part.totalCells))
        let lacks = ReconcileMessage.lacksParts(session: session, ids: [pool[0], pool[1]])
        // Version 2: start, the cells it brings, more, lacks.
        let start = CodedInitiator(ids: Array(pool[2..<22]), session: session, salt: salt).firstMessage
        var coded = CodedResponder(ids: ids)
        guard case .send(let cells) = coded.receive(ReconcileMessage.start(.init(session: session, salt: salt, setSize: 20, cellCount: 12)))
        else { fatalError("no cells") }
        let more = ReconcileMessage.more(.init(session: session, firstCell: UInt32(CodedInitiator.firstCells), cellCount: 8))
        let abort = ReconcileMessage.abort(.init(session: session, reason: .unsupportedVersion, versions: [1]))
        let lacks2 = ReconcileMessage.lacksParts(session: session, ids: [pool[0]], version: 2)
        return [
            ("message-estimate", [0] + estimate.encoded),
            ("message-table", [0] + table[0].encoded),
            ("message-lacks", [0] + lacks[0].encoded),
            ("message-cells", [0] + cells[0].encoded),
            ("message-abort", [0] + abort.encoded),
            ("v1-responder", [1, 20] + chunk(estimate.encoded) + chunk(request.encoded) + chunk(lacks[0].encoded)),
            ("v1-initiator", [2, 22] + chunk(table[0].encoded) + chunk(abort.encoded)),
            ("v2-responder", [3, 20] + chunk(start.encoded) + chunk(more.encoded) + chunk(lacks2[0].encoded)),
            // Cells it did not ask for (a whole answer to its 128-cell start is above a seed's size).
            ("v2-initiator", [4, 22] + chunk(cells[0].encoded) + chunk(abort.encoded)),
            ("exchange-v1", [5, 0, 30, 10, 30]),
            ("exchange-v2", [5, 1, 30, 10, 30]),
            ("exchange-v1-changed", [5, 0, 30, 10, 30, 0, 2, 0, 40, 1]),
            ("exchange-v2-replaced", [5, 1, 30, 10, 30, 0, 3] + chunk(abort.encoded)),
        ]
    }
    return 0
}
