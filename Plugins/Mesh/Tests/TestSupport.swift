import Foundation
import XCTest
import YaokPluginKit
@testable import YaokMeshPlugin
import YaokTesting

/// An attacker's identity: presents `claimed`'s keys but can only sign as `signer`.
struct ClaimedIdentity: LinkIdentity {
    let claimed: TestLinkIdentity, signer: TestLinkIdentity
    var signingKey: [UInt8] { claimed.signingKey }
    var kxKey: [UInt8] { claimed.kxKey }
    func sign(_ message: [UInt8]) throws -> [UInt8] { try signer.sign(message) }
    func verify(signature: [UInt8], of message: [UInt8], by publicKey: [UInt8]) -> Bool { signer.verify(signature: signature, of: message, by: publicKey) }
    func randomBytes(_ count: Int) -> [UInt8] { signer.randomBytes(count) }
}

enum MeshTestSupport {
    /// A mesh config section from key/value pairs.
    /// A mesh config section from key/value pairs, with the trusted hub keys the host would add
    /// (passed through the config JSON, as across the ABI).
    static func settings(_ values: [String: ConfigValue], trustedHubs: [[UInt8]] = []) throws -> MeshSettings {
        var entries: [String: ConfigSection.Entry] = [:]
        for (i, (k, v)) in values.sorted(by: { $0.key < $1.key }).enumerated() { entries[k] = .init(line: 10 + i, value: v) }
        let section = ConfigSection(path: "transports.mesh", line: 9, entries: entries, trustedHubKeys: trustedHubs)
        return try MeshSettings(config: ConfigSection(json: section.json()))
    }

    /// Settings for a loopback engine: no discovery, fast timers.
    static func loopback(port: UInt16 = 0, peers: [UInt16] = [], extra: [String: ConfigValue] = [:]) throws -> MeshSettings {
        var values: [String: ConfigValue] = [
            "listen": .string("127.0.0.1:\(port)"),
            "peers": .list(peers.map { .string("127.0.0.1:\($0)") }),
            "discovery": .bool(false),
        ]
        for (k, v) in extra { values[k] = v }
        return try settings(values)
    }

    static func engine(_ identity: TestLinkIdentity, _ settings: MeshSettings, _ recorder: LinkEventRecorder) -> MeshEngine {
        let engine = MeshEngine(identity: identity, settings: settings,
                                wallClockMs: { Int64(Date().timeIntervalSince1970 * 1000) },
                                monotonicNs: { DispatchTime.now().uptimeNanoseconds }, events: recorder)
        return engine
    }

    /// Sends `bytes` from a fresh UDP socket of `host`'s family to `host:port` (a beacon by
    /// unicast: the engine's beacon sockets take any datagram on their port).
    static func sendDatagram(_ bytes: [UInt8], to host: String, port: UInt16, file: StaticString = #filePath, line: UInt = #line) {
        let to = IPEndpoint(host: host, port: port)
        let fd = socket(to.family, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        let n = to.withSockaddr { sa, len in bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, sa, len) } }
        XCTAssertEqual(n, bytes.count, "sendto \(to)", file: file, line: line)
    }

    /// A TCP port that was free a moment ago.
    static func freePort() -> UInt16 { Loopback.freePort() }
}

/// A hand-driven TCP peer: connects to an engine and speaks raw TLV, to play a
/// well-behaved or a misbehaving hub.
// @unchecked: each test drives a peer from one thread at a time (a flood thread, then the test).
final class RawPeer: @unchecked Sendable {
    let fd: Int32
    var decoder = TLVStreamDecoder()
    var pending: [[UInt8]] = []
    var link: SecureLink?

    /// - Parameter source: the local address to connect from (any of 127.0.0.0/8 on loopback),
    ///   to play many machines.
    init(port: UInt16, host: String = "127.0.0.1", source: String? = nil) throws {
        let address = IPEndpoint(host: host, port: port)
        fd = socket(address.family, Int32(SOCK_STREAM.rawValue), 0)
        if let source {
            let rc = IPEndpoint(host: source, port: 0).withSockaddr { bind(fd, $0, $1) }
            guard rc == 0 else { throw TransportError.system(call: "bind", errno: errno) }
        }
        let rc = address.withSockaddr { connect(fd, $0, $1) }
        guard rc == 0 else { throw TransportError.system(call: "connect", errno: errno) }
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func write(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// The next record (opened, once the secure session is up), or nil on EOF / error / 5 s timeout.
    /// The engine's answer to the handshake (accepted) is taken on the way, not returned.
    func readRecord() -> TLVRecord? {
        var buf = [UInt8](repeating: 0, count: 65_536)
        while true {
            while pending.isEmpty {
                let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                guard n > 0, let frames = try? decoder.feed(buf[0..<n]) else { return nil }
                pending += frames
            }
            guard let record = try? TLVRecord(parsing: pending.removeFirst()) else { return nil }
            guard let link, link.isEstablished else { return record }
            guard let outputs = try? link.receive(record) else { return nil }
            if outputs.isEmpty { continue }
            guard case .frame(let inner)? = outputs.first else { return nil }
            return try? TLVRecord(parsing: inner)
        }
    }

    /// Seals a frame for the engine (after ``handshake(as:role:)``).
    func send(_ frame: [UInt8]) -> Bool {
        guard let sealed = try? link?.seal(frame) else { return false }
        return write(sealed)
    }

    /// Runs the secure link handshake as initiator with `identity` and `role`; true when it completed.
    func handshake(as identity: LinkIdentity, role: PeerRole) -> Bool {
        let hs = SecureLink(identity: identity, role: role, isInitiator: true, channel: .stream)
        guard let hello = try? hs.hello(), write(hello) else { return false }
        while !hs.isEstablished {
            guard let record = readRecord() else { return false }
            do {
                for case .send(let reply) in try hs.receive(record) where !write(reply) { return false }
            } catch {
                return false
            }
        }
        link = hs
        return true
    }

    /// Reads until EOF (the engine closed us) or the timeout; true on EOF.
    func waitForClose(timeout: TimeInterval = 10) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        var buf = [UInt8](repeating: 0, count: 65_536)
        while Date() < deadline {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return true }
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return true }
        }
        return false
    }
}
