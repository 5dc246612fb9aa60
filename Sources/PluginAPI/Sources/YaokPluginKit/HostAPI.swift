import CYaokPlugin

/// A Swift face on the C `yaok_host_api` table. Internal: plugin authors see
/// ``TransportContext``.
///
/// The table stays valid from `create` until `destroy` returns (ABI rule), so
/// holding the raw pointer is safe for the instance's lifetime.
// @unchecked: a pointer to the host's table, immutable and valid from create until destroy (ABI rule).
struct HostAPI: @unchecked Sendable {
    let api: UnsafePointer<yaok_host_api>

    var ctx: UnsafeMutableRawPointer? { api.pointee.host_ctx }
    var instanceName: String { api.pointee.instance_name.map { String(cString: $0) } ?? "" }
    var configJSON: String { api.pointee.config_json.map { String(cString: $0) } ?? "{}" }
    var hubSigningKey: [UInt8] { withUnsafeBytes(of: api.pointee.hub_signing_key) { Array($0) } }
    var hubKXKey: [UInt8] { withUnsafeBytes(of: api.pointee.hub_kx_key) { Array($0) } }

    func log(_ level: yaok_log_level, _ message: String) {
        message.withCString { api.pointee.log(ctx, Int32(level.rawValue), $0) }
    }

    func sign(_ message: [UInt8]) throws -> [UInt8] {
        var signature = [UInt8](repeating: 0, count: 64)
        let rc = message.withUnsafeBufferPointer { m in
            signature.withUnsafeMutableBufferPointer { s in
                api.pointee.sign(ctx, m.baseAddress, m.count, s.baseAddress)
            }
        }
        guard rc == 0 else { throw TransportError.failed("the host refused to sign (code \(rc))") }
        return signature
    }

    func verify(publicKey: [UInt8], message: [UInt8], signature: [UInt8]) -> Bool {
        guard publicKey.count == 32, signature.count == 64 else { return false }
        return publicKey.withUnsafeBufferPointer { k in
            message.withUnsafeBufferPointer { m in
                signature.withUnsafeBufferPointer { s in
                    api.pointee.verify(ctx, k.baseAddress, m.baseAddress, m.count, s.baseAddress) == 1
                }
            }
        }
    }

    func randomBytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBufferPointer { api.pointee.random_bytes(ctx, $0.baseAddress, $0.count) }
        return out
    }

    func nowMilliseconds() -> Int64 { api.pointee.now_ms(ctx) }
    func monotonicNanoseconds() -> UInt64 { api.pointee.monotonic_ns(ctx) }

    func metric(kind: yaok_metric_kind, name: String, value: Double) {
        name.withCString { api.pointee.metric(ctx, Int32(kind.rawValue), $0, value) }
    }

    func linkUp(_ link: LinkInfo) {
        var info = yaok_link_info()
        info.abi_version = YAOK_PLUGIN_ABI_VERSION
        info.struct_size = UInt32(MemoryLayout<yaok_link_info>.size)
        info.link_id = link.id
        withUnsafeMutableBytes(of: &info.peer_signing_key) { dst in
            for (i, b) in link.peerSigningKey.prefix(32).enumerated() { dst[i] = b }
        }
        withUnsafeMutableBytes(of: &info.peer_kx_key) { dst in
            for (i, b) in link.peerKXKey.prefix(32).enumerated() { dst[i] = b }
        }
        info.peer_role = link.peerRole.rawValue
        info.mtu = UInt32(clamping: link.mtu)
        info.cost = UInt32(clamping: link.cost)
        if let proof = link.proof?.encoded, proof.count == Int(YAOK_LINK_PROOF_LENGTH) {
            info.proof_length = YAOK_LINK_PROOF_LENGTH
            withUnsafeMutableBytes(of: &info.proof) { dst in
                for (i, b) in proof.enumerated() { dst[i] = b }
            }
        }
        link.kind.withCString { kind in
            (link.remote ?? "").withCString { remote in
                info.link_kind = kind
                info.remote = link.remote == nil ? nil : remote
                api.pointee.link_up(ctx, &info)
            }
        }
    }

    func linkDown(_ id: LinkID, reason: String?) {
        if let reason {
            reason.withCString { api.pointee.link_down(ctx, id, $0) }
        } else {
            api.pointee.link_down(ctx, id, nil)
        }
    }

    func frameReceived(_ frame: [UInt8], link: LinkID) {
        frame.withUnsafeBufferPointer { api.pointee.frame_received(ctx, link, $0.baseAddress, $0.count) }
    }

    func statusChanged() { api.pointee.status_changed(ctx) }
}
