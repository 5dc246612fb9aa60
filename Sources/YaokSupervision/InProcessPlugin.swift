import CYaokPlugin
import Foundation
import YaokCrypto
import YaokPluginKit

/// What a plugin calls back into, seen from the process that drives its C ABI. In a plugin
/// process these become messages to the hub (``PluginProcessMain``).
protocol PluginCallbacks: AnyObject, Sendable {
    func log(level: Int32, _ message: String)
    /// The hub's Ed25519 signature of `message`, or nil when the hub refused.
    func sign(_ message: [UInt8]) -> [UInt8]?
    func metric(kind: Int32, name: String, value: Double)
    func linkUp(_ link: LinkInfo)
    func linkDown(_ link: LinkID, reason: String?)
    func frame(_ frame: [UInt8], link: LinkID)
    func statusChanged()
}

/// One plugin instance driven through the unchanged C ABI (`yaok_plugin.h`) in this process.
/// Verification, randomness and clocks are answered here (they need no secret); signing goes
/// to ``PluginCallbacks/sign(_:)``.
// @unchecked: `instance` only under `lock`; calls into the plugin follow the ABI's threading rules.
final class InProcessPlugin: @unchecked Sendable {
    let plugin: LoadedPlugin
    private weak var callbacks: PluginCallbacks?
    private var api: UnsafeMutablePointer<yaok_host_api>?
    private var cStrings: [UnsafeMutablePointer<CChar>] = []
    private var instance: OpaquePointer?
    private var unmanagedSelf: Unmanaged<InProcessPlugin>?
    private let lock = NSLock()

    init(plugin: LoadedPlugin, callbacks: PluginCallbacks) {
        self.plugin = plugin
        self.callbacks = callbacks
    }

    deinit {
        for s in cStrings { free(s) }
        api?.deallocate()
    }

    /// Only plugin processes drive plugins, and there the descriptor is always mapped.
    private var descriptor: yaok_plugin_descriptor { plugin.descriptor!.pointee }

    /// `create`: the plugin validates its config section here. Throws the plugin's reason.
    func create(instanceName: String, configJSON: String, signingKey: [UInt8], kxKey: [UInt8]) throws {
        let api = UnsafeMutablePointer<yaok_host_api>.allocate(capacity: 1)
        let name = strdup(instanceName)!
        let config = strdup(configJSON)!
        cStrings = [name, config]
        let me = Unmanaged.passRetained(self)
        unmanagedSelf = me
        var table = yaok_host_api()
        table.abi_version = YAOK_PLUGIN_ABI_VERSION
        table.struct_size = UInt32(MemoryLayout<yaok_host_api>.size)
        table.host_ctx = me.toOpaque()
        table.instance_name = UnsafePointer(name)
        table.config_json = UnsafePointer(config)
        withUnsafeMutableBytes(of: &table.hub_signing_key) { dst in for (i, b) in signingKey.prefix(32).enumerated() { dst[i] = b } }
        withUnsafeMutableBytes(of: &table.hub_kx_key) { dst in for (i, b) in kxKey.prefix(32).enumerated() { dst[i] = b } }
        table.log = Self.logThunk
        table.sign = Self.signThunk
        table.verify = Self.verifyThunk
        table.random_bytes = Self.randomThunk
        table.now_ms = Self.nowThunk
        table.monotonic_ns = Self.monotonicThunk
        table.metric = Self.metricThunk
        table.link_up = Self.linkUpThunk
        table.link_down = Self.linkDownThunk
        table.frame_received = Self.frameThunk
        table.status_changed = Self.statusChangedThunk
        api.initialize(to: table)
        self.api = api
        var error = [CChar](repeating: 0, count: 1024)
        let created = error.withUnsafeMutableBufferPointer { descriptor.create(api, $0.baseAddress, $0.count) }
        guard let created else {
            me.release()
            unmanagedSelf = nil
            throw TransportHostError.createFailed(transport: instanceName, reason: String(nulTerminated: error))
        }
        lock.withLock { instance = created }
    }

    /// `start`; throws the plugin's reason.
    func start() throws {
        guard let instance = lock.withLock({ instance }) else { throw TransportError.notRunning }
        var error = [CChar](repeating: 0, count: 1024)
        let rc = error.withUnsafeMutableBufferPointer { descriptor.start(instance, $0.baseAddress, $0.count) }
        guard rc == 0 else { throw TransportError.failed(String(nulTerminated: error)) }
    }

    func stop() {
        guard let instance = lock.withLock({ instance }) else { return }
        descriptor.stop(instance)
    }

    /// `destroy`; the instance is gone afterwards.
    func destroy() {
        guard let instance = lock.withLock({ () -> OpaquePointer? in defer { self.instance = nil }; return self.instance }) else { return }
        descriptor.destroy(instance)
        unmanagedSelf?.release()
        unmanagedSelf = nil
    }

    func send(_ frame: [UInt8], to link: LinkID) throws {
        guard let instance = lock.withLock({ instance }) else { throw TransportError.notRunning }
        var error = [CChar](repeating: 0, count: 512)
        let rc = frame.withUnsafeBufferPointer { f in
            error.withUnsafeMutableBufferPointer { e in descriptor.send(instance, link, f.baseAddress, f.count, e.baseAddress, e.count) }
        }
        guard rc == 0 else { throw SendRefusal(result: SendResult(code: rc) ?? .failed, reason: String(nulTerminated: error)) }
    }

    /// The plugin's `status_json`, or nil before `create`.
    func statusJSON() -> String? {
        guard let instance = lock.withLock({ instance }), let json = descriptor.status_json(instance) else { return nil }
        defer { descriptor.free_string(json) }
        return String(cString: json)
    }

    // MARK: C callbacks. host_ctx is an Unmanaged<InProcessPlugin> kept alive until destroy returns.

    private static func driver(_ ctx: UnsafeMutableRawPointer?) -> InProcessPlugin? {
        guard let ctx else { return nil }
        return Unmanaged<InProcessPlugin>.fromOpaque(ctx).takeUnretainedValue()
    }

    static let logThunk: @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?) -> Void = { ctx, level, message in
        guard let d = driver(ctx), let message else { return }
        d.callbacks?.log(level: level, String(cString: message))
    }

    static let signThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt8>?) -> Int32 = { ctx, message, len, out in
        guard let d = driver(ctx), let out else { return 1 }
        let m = message.map { Array(UnsafeBufferPointer(start: $0, count: len)) } ?? []
        guard let sig = d.callbacks?.sign(m), sig.count == 64 else { return 2 }
        for i in 0..<64 { out[i] = sig[i] }
        return 0
    }

    static let verifyThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?) -> Int32 = { _, key, message, len, sig in
        guard let key, let sig else { return 0 }
        let k = Array(UnsafeBufferPointer(start: key, count: 32))
        let m = message.map { Array(UnsafeBufferPointer(start: $0, count: len)) } ?? []
        let s = Array(UnsafeBufferPointer(start: sig, count: 64))
        return SigningKeyPair.verify(signature: s, message: m, publicKey: k) ? 1 : 0
    }

    static let randomThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<UInt8>?, Int) -> Void = { _, out, len in
        guard let out else { return }
        let r = Random.bytes(len)
        for i in 0..<len { out[i] = r[i] }
    }

    static let nowThunk: @convention(c) (UnsafeMutableRawPointer?) -> Int64 = { _ in WallClock.nowMilliseconds() }

    static let monotonicThunk: @convention(c) (UnsafeMutableRawPointer?) -> UInt64 = { _ in DispatchTime.now().uptimeNanoseconds }

    static let metricThunk: @convention(c) (UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?, Double) -> Void = { ctx, kind, name, value in
        guard let d = driver(ctx), let name else { return }
        d.callbacks?.metric(kind: kind, name: String(cString: name), value: value)
    }

    static let linkUpThunk: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<yaok_link_info>?) -> Void = { ctx, info in
        guard let d = driver(ctx), let info else { return }
        // A plugin built before the proof was appended passes a shorter struct: copy only what
        // it has (the proof then reads as absent, and the hub refuses the link).
        let size = Int(UnsafeRawPointer(info).load(fromByteOffset: 4, as: UInt32.self))
        var i = yaok_link_info()
        withUnsafeMutableBytes(of: &i) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: info, count: min(max(size, 0), dst.count)))
        }
        guard size >= linkInfoSizeWithoutProof, let role = PeerRole(rawValue: i.peer_role) else {
            d.callbacks?.log(level: Int32(YAOK_LOG_ERROR.rawValue), "plugin reported a malformed link (size \(size), role \(i.peer_role)); ignored")
            return
        }
        let proofEnd = MemoryLayout<yaok_link_info>.offset(of: \yaok_link_info.proof)! + Int(YAOK_LINK_PROOF_LENGTH)
        let proof = size >= proofEnd && i.proof_length == YAOK_LINK_PROOF_LENGTH
            ? withUnsafeBytes(of: i.proof) { try? LinkProof(parsing: Array($0)) } : nil
        d.callbacks?.linkUp(LinkInfo(
            id: i.link_id,
            peerSigningKey: withUnsafeBytes(of: i.peer_signing_key) { Array($0) },
            peerKXKey: withUnsafeBytes(of: i.peer_kx_key) { Array($0) },
            peerRole: role, mtu: Int(i.mtu), cost: Int(i.cost),
            kind: i.link_kind.map { String(cString: $0) } ?? d.plugin.kind,
            remote: i.remote.map { String(cString: $0) }, proof: proof))
    }

    /// `struct_size` of a `yaok_link_info` from before `proof_length` was appended.
    static let linkInfoSizeWithoutProof = MemoryLayout<yaok_link_info>.offset(of: \yaok_link_info.proof_length)!

    static let linkDownThunk: @convention(c) (UnsafeMutableRawPointer?, UInt64, UnsafePointer<CChar>?) -> Void = { ctx, link, reason in
        driver(ctx)?.callbacks?.linkDown(link, reason: reason.map { String(cString: $0) })
    }

    static let frameThunk: @convention(c) (UnsafeMutableRawPointer?, UInt64, UnsafePointer<UInt8>?, Int) -> Void = { ctx, link, bytes, len in
        guard let d = driver(ctx), let bytes else { return }
        d.callbacks?.frame(Array(UnsafeBufferPointer(start: bytes, count: len)), link: link)
    }

    static let statusChangedThunk: @convention(c) (UnsafeMutableRawPointer?) -> Void = { ctx in
        driver(ctx)?.callbacks?.statusChanged()
    }
}
