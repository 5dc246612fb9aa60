import Foundation
import YaokReconcile
import YaokCrypto

// `yaok-bench --reconcile`: set reconciliation (Sources/YaokReconcile) between two sets of
// random bundle IDs, through encoded messages, several trials per shape.

private func processCPUSeconds() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
}

private struct ReconcileTrial {
    var bytesToResponder = 0, bytesToInitiator = 0, messages = 0, roundTrips = 0
    var cpuInitiator = 0.0, cpuResponder = 0.0
    var firstTry = false, correct = false, fellBack = false
    var estimate = 0, difference = 0, tableCells = 0
}

private func runTrial(shared: Int, unique: Int, sizing: ReconcileSizing, version: UInt8) -> ReconcileTrial {
    var rng = SystemRandomNumberGenerator()
    func id() -> BundleID { BundleID(hi: rng.next(), lo: rng.next()) }
    let common = (0..<shared).map { _ in id() }
    let onlyA = (0..<unique).map { _ in id() }, onlyB = (0..<unique).map { _ in id() }
    let a = common + onlyA, b = common + onlyB
    var trial = ReconcileTrial()
    trial.difference = 2 * unique
    if version == ReconcileLimits.codedVersion {
        var t0 = processCPUSeconds()
        var initiator = CodedInitiator(ids: a)
        trial.cpuInitiator += processCPUSeconds() - t0
        t0 = processCPUSeconds()
        var responder = CodedResponder(ids: b)
        trial.cpuResponder += processCPUSeconds() - t0
        run(&initiator, &responder, first: initiator.firstMessage, onlyA: onlyA, onlyB: onlyB, into: &trial)
        trial.firstTry = trial.correct
        trial.tableCells = responder.cellsSent
        return trial
    }
    let t0 = processCPUSeconds()
    var initiator = ReconcileInitiator(ids: a, sizing: sizing)
    trial.cpuInitiator += processCPUSeconds() - t0
    let t1 = processCPUSeconds()
    var responder = ReconcileResponder(ids: b, sizing: sizing)
    trial.cpuResponder += processCPUSeconds() - t1
    var estimate = 0, tableCells = 0
    run(&initiator, &responder, first: initiator.firstMessage, onlyA: onlyA, onlyB: onlyB, into: &trial) {
        if estimate == 0, let e = $0.estimate { estimate = e.difference }
        tableCells = $0.lastTableCells
    }
    trial.estimate = estimate
    trial.tableCells = tableCells
    trial.firstTry = trial.correct && initiator.retries == 0
    return trial
}

/// Carries an exchange of either version through encoded messages, timing each side.
private func run<I: ReconcileExchange, R: ReconcileExchange>(
    _ initiator: inout I, _ responder: inout R, first: ReconcileMessage, onlyA: [BundleID], onlyB: [BundleID],
    into trial: inout ReconcileTrial, afterResponder: (R) -> Void = { _ in }
) {
    var toResponder = [first.encoded]
    var t0 = 0.0
    var result: (peerLacks: [BundleID], iLack: [BundleID])?
    var responderLacks: [BundleID]?
    loop: while !toResponder.isEmpty {
        trial.roundTrips += 1
        var toInitiator: [[UInt8]] = []
        t0 = processCPUSeconds()
        for bytes in toResponder {
            trial.bytesToResponder += bytes.count
            trial.messages += 1
            switch responder.receive(bytes: bytes) {
            case .send(let m): toInitiator += m.map(\.encoded)
            case .done(let lacked, _, _): responderLacks = lacked
            case .fallBack(_, let abort, _):
                if let abort { toInitiator.append(abort.encoded) }
                trial.fellBack = true
            case .wait: break
            }
        }
        trial.cpuResponder += processCPUSeconds() - t0
        afterResponder(responder)
        if responderLacks != nil { trial.roundTrips -= 1; break }  // lacks is one way
        toResponder = []
        t0 = processCPUSeconds()
        for bytes in toInitiator {
            trial.bytesToInitiator += bytes.count
            trial.messages += 1
            switch initiator.receive(bytes: bytes) {
            case .send(let m): toResponder += m.map(\.encoded)
            case .done(let peerLacks, let iLack, let lacksMessages):
                result = (peerLacks, iLack)
                toResponder += lacksMessages.map(\.encoded)
            case .fallBack(_, let abort, _):
                if let abort { toResponder.append(abort.encoded) }
                trial.fellBack = true
            case .wait: break
            }
        }
        trial.cpuInitiator += processCPUSeconds() - t0
        if trial.fellBack && result == nil && toResponder.isEmpty { break loop }
    }
    if let result, let responderLacks {
        trial.correct = result.peerLacks == onlyA.sorted() && result.iLack == onlyB.sorted() && responderLacks == onlyB.sorted()
    }
}

/// Prints the figures of `yaok-bench --reconcile`. `shapes` (from `--shape N:FRACTION`, e.g.
/// `100000:0.01`) replaces the standard shapes; `sizing` (from `--sizing S,C,F,FE,X`) lets a
/// sizing rule be tried before it becomes the protocol's. With many trials each shape also
/// prints how the total bytes spread, so a rare large exchange is not hidden by the average.
func runReconcileBench(trials: Int = 10, shapes: [(n: Int, fraction: Double)]? = nil, sizing: ReconcileSizing = .standard,
                       versions: [UInt8] = ReconcileLimits.supportedVersions) {
    for version in versions { runReconcileBench(trials: trials, shapes: shapes, sizing: sizing, version: version) }
}

private func runReconcileBench(trials: Int, shapes: [(n: Int, fraction: Double)]?, sizing: ReconcileSizing, version: UInt8) {
    if version == ReconcileLimits.codedVersion {
        print("== set reconciliation, version 2 (YaokReconcile: rateless coded cells, asked for until the difference peels); \(trials) trials per shape")
    } else {
        print("== set reconciliation, version 1 (YaokReconcile: IBLT + strata estimator, \(sizing.strata) strata × \(sizing.cellsPerStratum) cells, "
              + "tables of \(sizing.cellsPerDifference)·d̂ + \(sizing.extraCells) cells); \(trials) trials per shape")
    }
    print("   bytes are message bytes (TLV values); each message adds a 3-byte TLV header")
    let shapes = shapes ?? [(10_000, 0.01), (100_000, 0.001), (100_000, 0.01), (100_000, 0.05)]
    for shape in shapes {
        let unique = Int(Double(shape.n) * shape.fraction)
        var trialsRun: [ReconcileTrial] = []
        for _ in 0..<trials { trialsRun.append(runTrial(shared: shape.n - unique, unique: unique, sizing: sizing, version: version)) }
        func avg(_ f: (ReconcileTrial) -> Double) -> Double { trialsRun.map(f).reduce(0, +) / Double(trials) }
        func mx(_ f: (ReconcileTrial) -> Double) -> Double { trialsRun.map(f).max() ?? 0 }
        let listing = shape.n * 16 + (shape.n + 3999) / 4000 * 5
        print(String(format: "%@ IDs each, %.1f%% unique each side (d = %d):", "\(shape.n)", shape.fraction * 100, 2 * unique))
        print(String(format: "   bytes → responder %.0f, → initiator %.0f, total %.0f (max %.0f); messages %.1f; round trips %.2f (+ one-way lacks)",
                     avg { Double($0.bytesToResponder) }, avg { Double($0.bytesToInitiator) },
                     avg { Double($0.bytesToResponder + $0.bytesToInitiator) }, mx { Double($0.bytesToResponder + $0.bytesToInitiator) },
                     avg { Double($0.messages) }, avg { Double($0.roundTrips) }))
        print(String(format: "   CPU initiator %.1f ms (max %.1f), responder %.1f ms (max %.1f)",
                     avg { $0.cpuInitiator * 1000 }, mx { $0.cpuInitiator * 1000 }, avg { $0.cpuResponder * 1000 }, mx { $0.cpuResponder * 1000 }))
        if version == ReconcileLimits.codedVersion {
            print(String(format: "   correct %d/%d, fell back %d; coded cells sent per difference %.2f avg, %.2f max",
                         trialsRun.filter(\.correct).count, trials, trialsRun.filter(\.fellBack).count,
                         avg { Double($0.tableCells) / Double(max(1, $0.difference)) }, mx { Double($0.tableCells) / Double(max(1, $0.difference)) }))
        } else {
            print(String(format: "   first-try success %d/%d, correct %d/%d, fell back %d; estimate/d %.2f…%.2f; first table %.0f cells avg",
                         trialsRun.filter(\.firstTry).count, trials, trialsRun.filter(\.correct).count, trials, trialsRun.filter(\.fellBack).count,
                         trialsRun.map { Double($0.estimate) / Double($0.difference) }.min() ?? 0,
                         trialsRun.map { Double($0.estimate) / Double($0.difference) }.max() ?? 0,
                         avg { Double($0.tableCells) }))
        }
        let totals = trialsRun.map { $0.bytesToResponder + $0.bytesToInitiator }.sorted()
        func quantile(_ q: Double) -> Int { totals[min(totals.count - 1, Int(Double(totals.count) * q))] }
        print(String(format: "   total bytes p50 %d, p90 %d, p99 %d, max %d; over 200 KB: %d of %d; retried %d",
                     quantile(0.5), quantile(0.9), quantile(0.99), totals.last ?? 0,
                     totals.filter { $0 > 200_000 }.count, trials, trialsRun.filter { !$0.firstTry && !$0.fellBack }.count))
        print("   listing every ID instead: \(listing) bytes one way (offer frames of 4000), \(2 * listing) both ways")
    }
}
