import CYaokPlugin
import Foundation
import XCTest
import YaokCrypto
import YaokPluginKit

/// A host for one instance of a built transport plugin (`libyaok-plugin-<kind>.so`, loaded
/// with dlopen like the hub does), speaking the real C ABI (`yaok_host_api`) with an identity
/// of its own, and recording what the plugin reports (links up and down, frames), with waits
/// that have timeouts. Loading the real library tests what the hub loads: the exported
/// entry, the descriptor and the C thunks. For plugin authors: Docs/plugin-guide.md.
// @unchecked: `events` under `condition`; the instance and C strings are set in `create`, freed in deinit.
public final class PluginTestHost: @unchecked Sendable {
    /// What the plugin reported to the host.
    public enum Event: Sendable {
        case linkUp(id: UInt64, role: UInt32, peerKey: [UInt8], mtu: UInt32)
        case linkDown(id: UInt64, reason: String)
        case frame(link: UInt64, bytes: [UInt8])
    }

    public let identity: Identity
    public let descriptor: UnsafePointer<yaok_plugin_descriptor>
    /// The plugin kind and the section name it is created under (`transports.<name>`).
    public let kind: String
    public let name: String
    private let condition = NSCondition()
    private var events: [Event] = []
    /// The ABI's rule on stopping (under `condition`): once `stop` has returned, the plugin
    /// calls the host no more, since `destroy` follows and the host's table goes with it.
    private var callbacksRunning = 0
    private var stopReturned = false
    private var lateCallbacks = 0
    private var heldFrame: (seconds: TimeInterval, began: DispatchSemaphore)?
    private var api: UnsafeMutablePointer<yaok_host_api>?
    private var strings: [UnsafeMutablePointer<CChar>] = []
    public private(set) var instance: OpaquePointer?

    /// The build products directory: where the test bundle, the executables and the plugin
    /// libraries are.
    public static let productsDirectory = BuildProducts.directory(containing: "libyaok-plugin-udp.so")

    /// Loads `library` (default: the built `libyaok-plugin-<kind>.so`); skips the test when it
    /// is not built (fails it in CI, where everything is built).
    public init(plugin kind: String, name: String? = nil, library: String? = nil, identity: Identity = .generate()) throws {
        self.identity = identity
        self.kind = kind
        self.name = name ?? kind
        let path = library ?? Self.productsDirectory + "/libyaok-plugin-\(kind).so"
        if !FileManager.default.fileExists(atPath: path) {
            if RequiredTool.inCI { throw RequiredTool.Missing(path: path, package: "(swift build)") }
            throw XCTSkip("\(path) is not built")
        }
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            throw NSError(domain: "FakeHost", code: 2, userInfo: [NSLocalizedDescriptionKey: String(cString: dlerror())])
        }
        guard let sym = dlsym(handle, "yaok_plugin_entry") else { throw NSError(domain: "FakeHost", code: 3) }
        typealias Entry = @convention(c) () -> UnsafeRawPointer
        descriptor = unsafeBitCast(sym, to: Entry.self)().assumingMemoryBound(to: yaok_plugin_descriptor.self)
        XCTAssertEqual(descriptor.pointee.abi_version, YAOK_PLUGIN_ABI_VERSION)
        XCTAssertEqual(String(cString: descriptor.pointee.kind), kind)
    }

    deinit {
        if let instance {
            descriptor.pointee.stop(instance)
            descriptor.pointee.destroy(instance)
        }
        api?.deallocate()
        for s in strings { free(s) }
    }

    /// The config JSON the hub would pass: `{"path":...,"values":{key:{"line":n,"value":v}}}`.
    public func configJSON(_ values: [String: Any]) -> String {
        var wrapped: [String: Any] = [:]
        for (i, (k, v)) in values.sorted(by: { $0.key < $1.key }).enumerated() { wrapped[k] = ["line": i + 2, "value": v] }
        let data = try! JSONSerialization.data(withJSONObject: ["path": "transports.\(name)", "values": wrapped], options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    /// Creates the instance from a config section (each key on its own line from 2, as the
    /// hub passes them); returns the plugin's error text on failure.
    public func create(config: [String: Any]) -> String? {
        let name = strdup(self.name)!
        let json = strdup(configJSON(config))!
        strings += [name, json]
        var t = yaok_host_api()
        t.abi_version = YAOK_PLUGIN_ABI_VERSION
        t.struct_size = UInt32(MemoryLayout<yaok_host_api>.size)
        t.host_ctx = Unmanaged.passUnretained(self).toOpaque()
        // The host's own calls: each record what the plugin said.
        t.instance_name = UnsafePointer(name)
        t.config_json = UnsafePointer(json)
        withUnsafeMutableBytes(of: &t.hub_signing_key) { d in for (i, b) in identity.signingKey.enumerated() { d[i] = b } }
        withUnsafeMutableBytes(of: &t.hub_kx_key) { d in for (i, b) in identity.kxKey.enumerated() { d[i] = b } }
        t.log = { _, _, _ in }
        t.sign = { ctx, msg, len, sig in
            let host = Unmanaged<PluginTestHost>.fromOpaque(ctx!).takeUnretainedValue()
            let s = host.identity.sign(Array(UnsafeBufferPointer(start: msg, count: len)))
            for i in 0..<64 { sig![i] = s[i] }
            return 0
        }
        t.verify = { _, key, msg, len, sig in
            SigningKeyPair.verify(signature: Array(UnsafeBufferPointer(start: sig, count: 64)),
                                  message: Array(UnsafeBufferPointer(start: msg, count: len)),
                                  publicKey: Array(UnsafeBufferPointer(start: key, count: 32))) ? 1 : 0
        }
        t.random_bytes = { _, out, len in
            let r = Random.bytes(len)
            for i in 0..<len { out![i] = r[i] }
        }
        t.now_ms = { _ in Int64(Date().timeIntervalSince1970 * 1000) }
        t.monotonic_ns = { _ in DispatchTime.now().uptimeNanoseconds }
        t.metric = { _, _, _, _ in }
        t.link_up = { ctx, info in
            let host = Unmanaged<PluginTestHost>.fromOpaque(ctx!).takeUnretainedValue()
            host.callbackBegins()
            defer { host.callbackEnds() }
            let i = info!.pointee
            let key = withUnsafeBytes(of: i.peer_signing_key) { Array($0) }
            host.record(.linkUp(id: i.link_id, role: i.peer_role, peerKey: key, mtu: i.mtu))
        }
        t.link_down = { ctx, id, reason in
            let host = Unmanaged<PluginTestHost>.fromOpaque(ctx!).takeUnretainedValue()
            host.callbackBegins()
            defer { host.callbackEnds() }
            host.record(.linkDown(id: id, reason: reason.map { String(cString: $0) } ?? ""))
        }
        t.frame_received = { ctx, id, bytes, len in
            let host = Unmanaged<PluginTestHost>.fromOpaque(ctx!).takeUnretainedValue()
            host.callbackBegins()
            defer { host.callbackEnds() }
            if let hold = host.takeHeldFrame() {
                hold.began.signal()
                Thread.sleep(forTimeInterval: hold.seconds)   // a slow host, on purpose
            }
            host.record(.frame(link: id, bytes: Array(UnsafeBufferPointer(start: bytes, count: len))))
        }
        t.status_changed = { ctx in
            let host = Unmanaged<PluginTestHost>.fromOpaque(ctx!).takeUnretainedValue()
            host.callbackBegins()
            host.callbackEnds()
        }
        let api = UnsafeMutablePointer<yaok_host_api>.allocate(capacity: 1)
        api.initialize(to: t)
        self.api = api
        var error = [CChar](repeating: 0, count: 1024)
        instance = error.withUnsafeMutableBufferPointer { descriptor.pointee.create(api, $0.baseAddress, $0.count) }
        return instance == nil ? String(nulTerminated: error) : nil
    }

    public func start() throws {
        condition.withLock { stopReturned = false }
        var error = [CChar](repeating: 0, count: 1024)
        let rc = error.withUnsafeMutableBufferPointer { descriptor.pointee.start(instance, $0.baseAddress, $0.count) }
        if rc != 0 { throw NSError(domain: "plugin", code: Int(rc), userInfo: [NSLocalizedDescriptionKey: String(nulTerminated: error)]) }
    }

    /// Sends a frame to the plugin; returns its error text on failure.
    @discardableResult
    public func send(_ frame: [UInt8], link: UInt64) -> String? {
        let r = sendWithResult(frame, link: link)
        return r.code == 0 ? nil : r.error
    }

    /// Sends a frame to the plugin; its `yaok_send_result` code (0: taken) and error text.
    public func sendWithResult(_ frame: [UInt8], link: UInt64) -> (code: Int32, error: String) {
        var error = [CChar](repeating: 0, count: 1024)
        let rc = frame.withUnsafeBufferPointer { f in
            error.withUnsafeMutableBufferPointer { descriptor.pointee.send(instance, link, f.baseAddress, f.count, $0.baseAddress, $0.count) }
        }
        return (rc, rc == 0 ? "" : String(nulTerminated: error))
    }

    /// Stops the instance (the hub's `stop`); `deinit` destroys it.
    public func stop() {
        if let instance { descriptor.pointee.stop(instance) }
        condition.withLock {
            stopReturned = true
            lateCallbacks += callbacksRunning
        }
    }

    /// Callbacks from the plugin still running when ``stop()`` returned, or made after it:
    /// each breaks the ABI (the hub destroys the instance and frees the table they use next).
    public var callbacksAfterStop: Int { condition.withLock { lateCallbacks } }

    /// Makes the next `frame_received` callback take `seconds` before it returns, as a slow
    /// host would, so a test can call ``stop()`` while the plugin is inside it. The returned
    /// semaphore is signalled when that callback begins.
    public func holdNextFrame(for seconds: TimeInterval) -> DispatchSemaphore {
        let began = DispatchSemaphore(value: 0)
        condition.withLock { heldFrame = (seconds, began) }
        return began
    }

    private func takeHeldFrame() -> (seconds: TimeInterval, began: DispatchSemaphore)? {
        condition.withLock {
            defer { heldFrame = nil }
            return heldFrame
        }
    }

    private func callbackBegins() {
        condition.withLock {
            if stopReturned { lateCallbacks += 1 }
            callbacksRunning += 1
        }
    }

    private func callbackEnds() { condition.withLock { callbacksRunning -= 1 } }

    /// The plugin's status as JSON (`status_json`).
    public func statusJSON() -> [String: Any] {
        guard let s = descriptor.pointee.status_json(instance) else { return [:] }
        defer { descriptor.pointee.free_string(s) }
        let data = Data(String(cString: s).utf8)
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
    }

    private func record(_ e: Event) {
        condition.withLock {
            events.append(e)
            condition.broadcast()
        }
    }

    /// The number of events so far: pass it to ``wait(_:after:timeout:_:)`` to wait for a later one.
    public var mark: Int { condition.withLock { events.count } }

    /// Waits for an event after `mark` that `match` accepts; throws after `timeout` seconds.
    public func wait<T>(_ what: String, after mark: Int, timeout: TimeInterval = 15, _ match: (Event) -> T?) throws -> T {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        var next = mark
        while true {
            while next < events.count {
                if let v = match(events[next]) { return v }
                next += 1
            }
            if !condition.wait(until: deadline) && next >= events.count {
                throw NSError(domain: "FakeHost", code: 1, userInfo: [NSLocalizedDescriptionKey: "timed out waiting for \(what)"])
            }
        }
    }
}

