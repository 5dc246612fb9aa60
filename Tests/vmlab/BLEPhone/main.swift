// ble-phone — a test "phone" for ble-test.sh: connects to a hub as an LE central with
// the endpoint's BLEHubClient (YaokEndpoint), runs the link handshake with a fresh libsodium identity,
// prints what it proved, sends a ping of PING_BYTES random bytes and checks the hub's pong
// (both cross the link chunked at the ATT MTU), holds the link for a while, then disconnects.
// With a ping it also prints a BENCH line: the ATT traffic (PDUs, bytes, request round trips,
// notifications; from BLEHubClient.traffic) and the time the ping and its pong took, and the
// time from connect() to the end of the handshake.
// The `ble-phone` target of Package.swift (built with the rest; ble-test.sh runs $BUILD/debug/ble-phone).
//   usage: ble-phone ADAPTER HUB_ADDRESS HOLD_SECONDS [MTU [PING_BYTES]]
//          ble-phone ADAPTER scan SECONDS        (lists Ya OK hubs heard, with BLEScanner)
// PHONE_STALL_MS: stop reading that long after sending the ping (a busy phone) while the hub
// streams the pong; PHONE_RECEIVE_QUEUE: the ATT socket's receive queue in bytes.
import CSodium
import Foundation
import Glibc
import YaokPluginKit
import YaokBluetooth
import YaokEndpoint

struct SodiumIdentity: LinkIdentity {
    let signingKey: [UInt8]
    let kxKey: [UInt8]
    private let secret: [UInt8]

    init() {
        var pk = [UInt8](repeating: 0, count: 32), sk = [UInt8](repeating: 0, count: 64)
        _ = crypto_sign_keypair(&pk, &sk)
        var kpk = [UInt8](repeating: 0, count: 32), ksk = [UInt8](repeating: 0, count: 32)
        _ = crypto_kx_keypair(&kpk, &ksk)
        signingKey = pk; kxKey = kpk; secret = sk
    }
    func sign(_ message: [UInt8]) throws -> [UInt8] {
        var sig = [UInt8](repeating: 0, count: 64)
        _ = crypto_sign_detached(&sig, nil, message, UInt64(message.count), secret)
        return sig
    }
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool {
        signature.count == 64 && publicKey.count == 32 &&
            crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }
    func randomBytes(_ count: Int) -> [UInt8] {
        var b = [UInt8](repeating: 0, count: count)
        randombytes_buf(&b, count)
        return b
    }
}

func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }

setlinebuf(stdout)   // the test script waits for lines while this process is still running
let args = CommandLine.arguments
if args.count == 4, args[2] == "scan", let seconds = Int(args[3]) {
    do {
        for hub in try BLEScanner.scan(adapter: args[1], seconds: seconds) {
            print("HUB \(hub.address) name=\(hub.name ?? "-") rssi=\(hub.rssi.map { String($0) } ?? "-") random=\(hub.randomAddress)")
        }
        exit(0)
    } catch {
        print("PHONE_ERROR: \(error)"); exit(1)
    }
}
guard (4...6).contains(args.count), let hub = BluetoothAddress(string: args[2]), let hold = UInt32(args[3]),
      let mtu = Int(args.count > 4 ? args[4] : "517"), let pingBytes = Int(args.count > 5 ? args[5] : "0") else {
    print("usage: ble-phone ADAPTER HUB_ADDRESS HOLD_SECONDS [MTU [PING_BYTES]]"); exit(2)
}
guard sodium_init() >= 0 else { print("sodium_init failed"); exit(1) }
func nowMs() -> Double {
    var ts = timespec(); clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) * 1000 + Double(ts.tv_nsec) / 1_000_000
}
do {
    let t0 = nowMs()
    let env = ProcessInfo.processInfo.environment
    let stallMs = env["PHONE_STALL_MS"].flatMap { UInt32($0) } ?? 0
    let queue = env["PHONE_RECEIVE_QUEUE"].flatMap { Int($0) } ?? BLEHubClient.defaultReceiveQueueBytes
    let client = try BLEHubClient(adapter: args[1], hub: hub, mtu: mtu, receiveQueueBytes: queue)
    let tConnected = nowMs()
    print("connected: ATT MTU \(client.mtu), handles \(client.handles)")
    print("identity characteristic: \(hex(client.advertisedIdentity))")
    let me = SodiumIdentity()
    print("phone signing key: \(hex(me.signingKey))")
    let peer = try client.handshake(identity: me, role: .endpoint)
    print("HANDSHAKE_OK hub=\(hex(peer.signingKey)) role=\(peer.role)")
    let tUp = nowMs()
    print(String(format: "BENCH link: connect+MTU+discovery+Identity %.0f ms, subscribe+handshake %.0f ms, %d ATT round trips",
                 tConnected - t0, tUp - tConnected, client.traffic.roundTrips))
    if pingBytes > 0 {
        let payload = me.randomBytes(pingBytes)
        let before = client.traffic
        let tPing = nowMs()
        let frame = TLVRecord(.ping, value: payload).encoded
        try client.send(frame)
        let sent = client.traffic
        let tSent = nowMs()
        if stallMs > 0 { usleep(stallMs * 1000) }
        // The hub may send other frames first (e.g. attachment announcements); skip them.
        var answered = false
        for _ in 0..<20 {
            let record = try TLVRecord(parsing: try client.receive())
            print("received frame type 0x\(String(record.type, radix: 16)), \(record.value.count) bytes")
            if record.type == FrameType.pong.rawValue {
                answered = true
                print(record.value == payload ? "PING_OK \(pingBytes) bytes at ATT MTU \(client.mtu)" : "PING_MISMATCH")
                let after = client.traffic
                print(String(format: "BENCH frame %d B at ATT MTU %d: up %d Write Requests = %d ATT bytes + %d responses = %d ATT bytes, "
                             + "%d round trips, %.0f ms; down %d notifications = %d ATT bytes, %.0f ms",
                             frame.count, client.mtu, sent.pdusSent - before.pdusSent, sent.bytesSent - before.bytesSent,
                             sent.pdusReceived - before.pdusReceived, sent.bytesReceived - before.bytesReceived,
                             sent.roundTrips - before.roundTrips, tSent - tPing,
                             after.notifications - sent.notifications, after.bytesReceived - sent.bytesReceived,
                             nowMs() - tSent))
                break
            }
        }
        if !answered { print("PING_NO_PONG") }
    }
    sleep(hold)
    print("disconnecting")
} catch {
    print("PHONE_ERROR: \(error)")
    exit(1)
}
