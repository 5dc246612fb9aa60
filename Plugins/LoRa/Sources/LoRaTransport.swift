import Foundation
import Glibc
import YaokPluginKit

/// Hub to hub over LoRa through an RNode on a serial port (Plugins/LoRa/README.md,
/// Docs/protocol.md §10): the device (``RNodeDevice``) below, the links (``LoRaLinkEngine``)
/// above, and one thread that runs the engine's timers and hands the device its frames.
// @unchecked: the engine, state and reason only under `lock`.
public final class LoRaTransport: Transport, @unchecked Sendable {
    private let context: TransportContext
    private let devicePath: String
    private let radio: RNodeRadioSettings
    private let lock = NSLock()
    private let engine: LoRaLinkEngine
    private var device: RNodeDevice?
    private var worker: JoinableThread?
    private var gauges: JoinableThread?
    private var running = false
    private var state: TransportState = .stopped
    private var reason = "not started"
    private var channelStats: RNodeChannelStats?
    private let startedAt = DispatchTime.now().uptimeNanoseconds

    /// Seconds on the monotonic clock since the transport was made.
    private func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds - startedAt) / 1e9 }

    public init(context: TransportContext) throws {
        self.context = context
        let config = context.config
        try config.rejectUnknownKeys(allowed: ["device", "frequency_hz", "bandwidth_hz", "spreading_factor", "coding_rate", "tx_power_dbm",
                                               "duty_cycle_percent", "dwell_limit_ms", "beacon_interval_s", "keepalive_s", "idle_timeout_s",
                                               "max_neighbours", "peers", "queue_limit_bytes"])
        devicePath = try config.requiredString("device")
        let frequency = try config.int("frequency_hz", default: 869_525_000, range: 137_000_000...1_020_000_000)
        let bandwidth = try config.int("bandwidth_hz", default: 125_000)
        let bandwidths = [7_800, 10_400, 15_600, 20_800, 31_250, 41_700, 62_500, 125_000, 250_000, 500_000]
        guard bandwidths.contains(bandwidth) else {
            throw config.error("bandwidth_hz", "\(bandwidth) is not a LoRa bandwidth; one of \(bandwidths.map(String.init).joined(separator: ", "))")
        }
        let sf = try config.int("spreading_factor", default: 9, range: 7...12)
        let cr = try config.int("coding_rate", default: 5, range: 5...8)
        let power = try config.int("tx_power_dbm", default: 14, range: 0...22)
        let duty = try config.double("duty_cycle_percent", default: 1, range: 0.01...100)
        let dwell = try config.int("dwell_limit_ms", default: 0, range: 0...10_000)
        radio = RNodeRadioSettings(frequencyHz: UInt32(frequency), bandwidthHz: UInt32(bandwidth), txPowerDBm: UInt8(power),
                                   spreadingFactor: UInt8(sf), codingRate: UInt8(cr), longTermAirtimeLimit: UInt16(min(10_000, duty * 100)))
        var settings = LoRaLinkSettings(modulation: LoRaModulation(spreadingFactor: sf, bandwidthHz: bandwidth, codingRate: cr),
                                        dutyCycle: duty / 100)
        settings.beaconInterval = Double(try config.int("beacon_interval_s", default: 600, range: 1...86_400))
        settings.keepalive = Double(try config.int("keepalive_s", default: 300, range: 1...86_400))
        settings.idleTimeout = Double(try config.int("idle_timeout_s", default: 900, range: 3...86_400))
        settings.maxNeighbours = try config.int("max_neighbours", default: 16, range: 1...256)
        settings.queueLimitBytes = try config.int("queue_limit_bytes", default: 64 * 1024, range: 1024...16 * 1024 * 1024)
        settings.dwellLimit = dwell == 0 ? nil : Double(dwell) / 1000
        var peers: Set<[UInt8]> = []
        for text in try config.strings("peers", default: []) {
            guard let key = Hex.decode(text), key.count == 32 else { throw config.error("peers", "\(text) is not a hub key (64 hex digits)") }
            peers.insert(key)
        }
        settings.peers = peers
        if let dwellLimit = settings.dwellLimit, settings.airtime(AirFrame.maxLength) > dwellLimit {
            throw config.error("dwell_limit_ms", String(format: "SF%d/%d kHz frames of %d bytes take %.0f ms on the air, over the %d ms dwell limit",
                                                        sf, bandwidth / 1000, AirFrame.maxLength, settings.airtime(AirFrame.maxLength) * 1000, dwell))
        }
        let clock = context.clock
        engine = LoRaLinkEngine(identity: context.identity, settings: settings, cookieClock: { Int64(clock.monotonicNanoseconds() / 1_000_000) })
    }

    public func start() throws {
        let device = RNodeDevice(path: devicePath, settings: radio, events: { [weak self] in self?.deviceEvent($0) })
        let worker = JoinableThread(name: "yaok-lora") { [weak self] in self?.run() }
        let gauges = JoinableThread(name: "yaok-lora-gauges") { [weak self] in self?.publishGaugesUntilStopped() }
        lock.withLock {
            self.device = device
            self.worker = worker
            self.gauges = gauges
            running = true
            state = .starting
            reason = "opening \(devicePath)"
        }
        device.start()
        worker.start()
        gauges.start()
        context.events.statusChanged()
    }

    public func stop() {
        let (stoppedDevice, threads, effects): (RNodeDevice?, [JoinableThread], [LoRaLinkEngine.Effect]) = lock.withLock {
            guard running else { return (nil, [], []) }
            running = false
            state = .stopped
            reason = "stopped"
            return (device, [worker, gauges].compactMap { $0 }, engine.forgetAll(reason: "transport stopped"))
        }
        for thread in threads { _ = thread.join(timeout: 0.5) }
        stoppedDevice?.stop()
        apply(effects)
    }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        try lock.withLock {
            guard running else { throw TransportError.notRunning }
            try engine.send(frame, to: link)
        }
    }

    /// The engine's clock: timers and the next frame for the air.
    private func run() {
        while true {
            let (effects, wait): ([LoRaLinkEngine.Effect], Double) = lock.withLock {
                guard running else { return ([], -1) }
                let t = now()
                guard device?.isReady == true else { return ([], 0.05) }
                let e = engine.tick(now: t)
                return (e, min(0.05, max(0.002, engine.nextWake(now: t) - t)))
            }
            if wait < 0 { return }
            apply(effects)
            usleep(UInt32(wait * 1_000_000))
        }
    }

    /// The gauges every 5 s, on a thread of their own: a host call that waits (the hub busy
    /// reading its other plugins) must never hold up the radio's clock.
    private func publishGaugesUntilStopped() {
        while lock.withLock({ running }) {
            publishGauges()
            for _ in 0..<50 where lock.withLock({ running }) { usleep(100_000) }
        }
    }

    /// `yaok_transport_lora_*{transport="NAME"}` on the hub's metrics page (Plugins/LoRa/README.md).
    private func publishGauges() {
        let t = now()
        let (used, headroom, frames, bytes, neighbours) = lock.withLock {
            (engine.airtimeUsed(now: t), engine.headroom(now: t), engine.queuedFrames, engine.queuedByteCount, engine.neighbours)
        }
        let weakest = neighbours.compactMap(\.rssiDBm).min()
        let m = context.metrics
        m.gauge("lora_airtime_last_hour_seconds", used)
        m.gauge("lora_duty_cycle_headroom_seconds", headroom)
        m.gauge("lora_queue_frames", Double(frames))
        m.gauge("lora_queue_bytes", Double(bytes))
        m.gauge("lora_neighbours", Double(neighbours.count))
        if let weakest { m.gauge("lora_weakest_neighbour_rssi_dbm", Double(weakest)) }
    }

    private func deviceEvent(_ event: RNodeDevice.Event) {
        switch event {
        case .ready(let firmware):
            lock.withLock {
                guard running else { return }
                state = .running
                reason = "RNode firmware \(firmware) on \(devicePath)"
            }
            context.logger.info("LoRa: RNode firmware \(firmware) on \(devicePath) is up")
            context.events.statusChanged()
        case .unavailable(let why):
            let effects: [LoRaLinkEngine.Effect] = lock.withLock {
                guard running else { return [] }
                state = .unavailable
                reason = why
                return engine.forgetAll(reason: "the LoRa device went away")
            }
            context.logger.warning("LoRa: \(why)")
            apply(effects)
            context.events.statusChanged()
        case .packet(let bytes, let rssi, let snr):
            let effects: [LoRaLinkEngine.Effect] = lock.withLock {
                guard running else { return [] }
                return engine.received(bytes, rssiDBm: rssi, snrDB: snr, now: now())
            }
            apply(effects)
        case .channelStats(let stats):
            lock.withLock { channelStats = stats }
        }
    }

    /// Carries out the engine's effects, outside the lock.
    private func apply(_ effects: [LoRaLinkEngine.Effect]) {
        for effect in effects {
            switch effect {
            case .transmit(let bytes):
                do {
                    try lock.withLock { device }?.transmit(bytes)
                } catch {
                    context.logger.debug("LoRa: a frame did not reach the device: \(error)")
                }
            case .linkUp(let info):
                context.logger.info("LoRa: link \(info.id) up with a hub at \(info.remote ?? "?")")
                context.metrics.increment("links_up_total")
                context.events.linkUp(info)
            case .linkDown(let id, let why):
                context.logger.info("LoRa: link \(id) down: \(why)")
                context.events.linkDown(id, reason: why)
            case .frame(let frame, let link):
                context.events.frameReceived(frame, on: link)
            case .log(let level, let message):
                context.events.log(level, message)
            }
        }
    }

    public var status: TransportStatus {
        let t = now()
        return lock.withLock {
            let c = engine.counters
            let neighbours = engine.neighbours
            let d = device?.counters
            var details: [String: String] = [
                "device": devicePath,
                "firmware": device?.firmware ?? "",
                "short_id": engine.shortID.description,
                "airtime_last_hour_s": String(format: "%.1f", engine.airtimeUsed(now: t)),
                "duty_cycle_headroom_s": String(format: "%.1f", engine.headroom(now: t)),
                "duty_cycle_percent": String(format: "%.2f", engine.settings.dutyCycle * 100),
                "queue_frames": String(engine.queuedFrames),
                "queue_bytes": String(engine.queuedByteCount),
                "foreign_frames": String(c.foreign),
                "sealed_refused": String(c.sealedRefused),
                "cookies_sent": String(c.cookiesSent),
                "handshake_failures": String(c.handshakeFailures),
                "slots_refused": String(c.slotsRefused),
                "budget_refused": String(c.budgetRefused),
                "fragments_dropped": String(c.fragmentsDropped),
                "line_noise": String(d?.lineNoise ?? 0),
                "neighbours": neighbours.map { n in
                    "\(n.shortID) rssi=\(n.rssiDBm.map(String.init) ?? "?") snr=\(n.snrDB.map { String(format: "%.1f", $0) } ?? "?")\(n.linked ? " linked" : "")"
                }.joined(separator: "; "),
            ]
            if let s = channelStats {
                details["channel_load_percent"] = String(format: "%.1f", s.channelLoadShort * 100)
                details["noise_floor_dbm"] = String(s.noiseFloorDBm)
            }
            return TransportStatus(state: state, reason: reason, links: engine.linkCount, peers: neighbours.count,
                                   framesIn: c.framesIn, framesOut: c.framesOut, bytesIn: c.bytesIn, bytesOut: c.bytesOut,
                                   lastError: state == .unavailable ? reason : nil, details: details)
        }
    }
}
