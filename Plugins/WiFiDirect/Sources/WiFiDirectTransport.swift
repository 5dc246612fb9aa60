#if canImport(Glibc)
import Glibc
#endif
import Foundation
import YaokPluginKit
import YaokWPA
import YaokProcess

/// Phones attach over Wi-Fi Direct: the hub is the group owner of a persistent P2P group
/// (through wpa_supplicant's control interface), hands out addresses with dnsmasq, and accepts
/// authenticated TCP links on its group address. Keys, states and metrics: Plugins/WiFiDirect/README.md.
// @unchecked: state under `lock`; `probe` set before start.
public final class WiFiDirectTransport: Transport, @unchecked Sendable {
    public let settings: WiFiDirectSettings
    private let identity: LinkIdentity
    /// Where the transport reports: the host, or a test's recorder.
    private let events: any LinkEvents
    /// Radio probe, replaceable in tests (this machine has no Wi-Fi).
    var probe: () throws -> RadioProbeResult = { try NL80211Probe.probe() }

    private let lock = NSLock()
    private var state: TransportState = .stopped
    private var reason = "stopped"
    private var lastError: String?
    private var radios: [Wiphy] = []
    private var supplicant: ChildProcess?
    private var dhcp: ChildProcess?
    private var control: WPAControlSocket?
    private var monitor: WPAControlSocket?
    private var controlPath = ""
    private var server: SecureStreamEngine?
    private var serverAddress: IPEndpoint?
    private var groupInterface: String?
    private var groupSSID: String?
    private var goDeviceAddress: String?
    private var devicesFound = Set<String>()
    private var stations = Set<String>()
    private var groupsFormed = 0
    private var groupRemovals = 0
    private var groupRequestedAt: Int64 = 0
    private var reformAt: Int64?
    private var nextLinkID: LinkID = 1
    /// Counters of the engines of earlier groups (each group gets a fresh one).
    private var retired = SecureStreamEngine.Counters()
    private var running = false
    /// The supervisor thread of the last start: entered before the thread starts, left when it ends.
    private var supervisor: DispatchGroup?
    /// Bumped by stop(). Each start's work (its supervisor thread included) carries the
    /// generation it began under; work of an older one (a supplicant restart, a group being set
    /// up) is abandoned and what it made is ended instead of installed.
    private var generation = 0
    /// Set by stop() until the next start(): late status changes from the supervisor are dropped.
    private var stopRequested = false
    private var serviceQueries = 0

    public convenience init(context: TransportContext) throws {
        let settings = try WiFiDirectSettings(config: context.config, instanceName: context.instanceName)
        self.init(settings: settings, identity: context.identity, events: context.events)
    }

    /// `events`: the host's sink, or a test's recorder (tests drive the transport without a host).
    init(settings: WiFiDirectSettings, identity: LinkIdentity, events: any LinkEvents) {
        self.settings = settings
        self.identity = identity
        self.events = events
    }

    private var nowMs: Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }

    /// With `generation`, dropped too when that start has been stopped since.
    private func set(_ s: TransportState, _ why: String, force: Bool = false, generation g: Int? = nil) {
        let dropped: Bool = lock.withLock {
            if stopRequested && !force { return true }
            if let g, g != generation { return true }
            state = s
            reason = why
            if s == .failed || s == .unavailable || s == .degraded { lastError = why }
            return false
        }
        if !dropped { events.statusChanged() }
    }

    // MARK: Lifecycle

    public func start() throws {
        let (isRunning, previous) = lock.withLock { (running, supervisor) }
        guard !isRunning else { return }
        // The last start's supervisor may still be in a step stop() does not wait for (ip, a
        // helper launch): it installs nothing, but give it a moment to end so the two do not overlap.
        _ = previous?.wait(timeout: .now() + 2)
        let g: Int = lock.withLock {
            stopRequested = false
            return generation
        }
        set(.starting, "probing radios")
        do {
            let found = try probe().wiphys
            lock.withLock { radios = found }
        } catch let error as RadioProbeError {
            set(.unavailable, error.description)
            throw TransportError.unavailable(error.description)
        }
        do {
            try connectSupplicant(generation: g)
            try advertiseService()
            try requestGroup(generation: g)
        } catch {
            let why = "\(error)"
            teardownSupplicant()
            set(.failed, why)
            throw TransportError.failed(why)
        }
        let run = DispatchGroup()
        run.enter()
        lock.withLock {
            running = true
            supervisor = run
        }
        let t = Thread { [self] in
            supervise(generation: g)
            run.leave()
        }
        t.name = "yaok-wifidirect"
        t.start()
    }

    /// Returns within about 2 s whatever the supervisor is doing, including restarting a lost
    /// supplicant or setting up a group: its control sockets are cancelled (blocking requests
    /// end within 0.1 s), so it usually ends at once; a step that cannot be cancelled (ip, a
    /// helper launch) is not waited for beyond 0.8 s, but what it makes after this is ended
    /// instead of installed (the generation moved on), and every helper process is ended.
    public func stop() {
        let (was, c, m, run) = lock.withLock { () -> (Bool, WPAControlSocket?, WPAControlSocket?, DispatchGroup?) in
            defer { running = false; stopRequested = true; generation += 1 }
            return (running, control, monitor, supervisor)
        }
        c?.cancel()
        m?.cancel()
        if was, let run { _ = run.wait(timeout: .now() + 0.8) }
        stopGroupServices(reason: "transport stopped")
        let (iface, path) = lock.withLock { (groupInterface, controlPath) }
        if let iface, !path.isEmpty, let g = try? WPAControlSocket(path: path, localDirectory: settings.runtimeDirectory) {
            _ = try? g.request("P2P_GROUP_REMOVE \(iface)", timeout: 0.3)
            g.close()
        }
        teardownSupplicant(grace: 0.4)
        lock.withLock { groupInterface = nil }
        set(.stopped, "stopped", force: true)
    }

    /// Waits up to `timeout` seconds for the last start's supervisor thread to end (tests: it
    /// may outlive stop()). True when it has ended, or never started.
    func waitForSupervisor(timeout: Double) -> Bool {
        guard let run = lock.withLock({ supervisor }) else { return true }
        return run.wait(timeout: .now() + timeout) == .success
    }

    /// Whether work begun under generation `g` is still wanted (no stop() since).
    private func isCurrent(_ g: Int) -> Bool { lock.withLock { generation == g } }

    /// Runs `install` under the lock if generation `g` is still current; false (nothing done) if not.
    private func install(_ g: Int, _ install: () -> Void) -> Bool {
        lock.withLock {
            guard generation == g else { return false }
            install()
            return true
        }
    }

    public func send(_ frame: [UInt8], to link: LinkID) throws {
        guard let server = lock.withLock({ server }) else { throw TransportError.unknownLink(link) }
        try server.send(frame, to: link)
    }

    // MARK: wpa_supplicant

    /// Starts our own supplicant, or finds the configured one; opens the command and event sockets.
    /// Installs them only while generation `myGeneration` is current.
    func connectSupplicant(generation myGeneration: Int) throws {
        let abandoned = { [self] in lock.withLock { generation != myGeneration } }
        var path = settings.ctrlInterface
        if settings.manageSupplicant {
            guard !abandoned() else { throw WPAControlError.cancelled }
            let (process, directory) = try SupplicantLauncher.launch(settings: settings)
            let installed: Bool = lock.withLock {
                guard generation == myGeneration else { return false }
                supplicant = process
                return true
            }
            guard installed else { process.stop(grace: 0.3); throw WPAControlError.cancelled }
            let p2pDevice = lock.withLock { radios.contains { $0.interfaceTypes.contains(.p2pDevice) } }
            path = try SupplicantLauncher.waitForControlSocket(process, directory: directory, interface: settings.interface,
                                                                expectP2PDevice: p2pDevice, cancelled: abandoned)
        }
        let local = settings.runtimeDirectory
        try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let c = try WPAControlSocket(path: path, localDirectory: local)
        let reply = try c.request("PING", timeout: 2)
        guard reply.hasPrefix("PONG") else { throw WPAControlError.refused(command: "PING", reply: reply) }
        let m = try WPAControlSocket(path: path, localDirectory: local)
        try m.attach()
        let installed: Bool = lock.withLock {
            guard generation == myGeneration else { return false }
            control = c
            monitor = m
            controlPath = path
            return true
        }
        guard installed else { c.close(); m.close(); throw WPAControlError.cancelled }
        events.log(.info, "wpa_supplicant control socket \(path) answers")
    }

    func advertiseService() throws {
        guard let c = lock.withLock({ control }) else { return }
        for command in [P2PService.ptrCommand(instance: settings.serviceName), P2PService.txtCommand(instance: settings.serviceName, port: settings.port)] {
            do { try c.expectOK(command) } catch {
                // Discovery by service is a convenience: phones also find the hub by its device name.
                events.log(.warning, "cannot advertise _yaok._tcp: \(error)")
            }
        }
    }

    func requestGroup(generation g: Int) throws {
        guard let c = lock.withLock({ control }) else { return }
        // Re-invoke the saved persistent group when there is one, so the SSID and passphrase
        // stay the same and phones that joined before rejoin without asking.
        let saved = (try? c.request("LIST_NETWORKS", timeout: 2)).flatMap { Self.persistentGroupID($0) }
        if let saved { forgetClients(ofNetwork: saved, c) } // a list saved by an older version
        let persistent = saved.map { "persistent=\($0)" } ?? "persistent"
        try c.expectOK("P2P_GROUP_ADD \(persistent) freq=\(settings.frequency)", timeout: 5)
        _ = install(g) {
            groupRequestedAt = nowMs
            reformAt = nil
        }
        set(.starting, "forming a P2P group on \(settings.frequency) MHz", generation: g)
    }

    /// The network id of the first saved persistent group we own, from a LIST_NETWORKS reply
    /// (`id<TAB>ssid<TAB>bssid<TAB>flags`, flags containing `[P2P-PERSISTENT]`).
    /// With `ssid`, only that group's entry.
    static func persistentGroupID(_ listNetworks: String, ssid: String? = nil) -> Int? {
        for line in listNetworks.split(separator: "\n").dropFirst() {
            let columns = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard columns.count >= 4, columns[3].contains("[P2P-PERSISTENT]"), columns[1].hasPrefix("DIRECT-"),
                  ssid == nil || columns[1] == ssid!, let id = Int(columns[0]) else { continue }
            return id
        }
        return nil
    }

    private func teardownSupplicant(grace: Double = 0.5) {
        let (c, m, s) = lock.withLock { () -> (WPAControlSocket?, WPAControlSocket?, ChildProcess?) in
            defer { control = nil; monitor = nil; supplicant = nil }
            return (control, monitor, supplicant)
        }
        _ = try? m?.request("DETACH", timeout: 0.3)
        c?.close()
        m?.close()
        s?.stop(grace: grace)
    }

    // MARK: Supervisor thread

    /// The supervisor of the start that began under generation `g`: ends when stop() moves the
    /// generation on (a later start's supervisor is another thread).
    private func supervise(generation g: Int) {
        var lastPingMs = nowMs
        var nextReconnectMs: Int64 = 0
        while isCurrent(g) {
            let m = lock.withLock { monitor }
            var text: String?
            do {
                text = try m?.receive(timeout: 0.25)
                if m == nil { usleep(250_000) }
            } catch {
                controlLost("\(error)", generation: g)
            }
            guard isCurrent(g) else { break }
            if let text, let event = WPAEvent(parsing: text) { handle(event, generation: g) }
            let now = nowMs
            if now - lastPingMs >= 5_000 || lock.withLock({ supplicant?.exitStatus != nil }) {
                lastPingMs = now
                checkSupplicant(generation: g, nextReconnectMs: &nextReconnectMs)
            }
            let (reform, requested, hasGroup) = lock.withLock { (reformAt, groupRequestedAt, groupInterface != nil) }
            if let reform, now >= reform { tryRequestGroup(generation: g) }
            if !hasGroup && reform == nil && requested > 0 && now - requested > settings.groupStartTimeoutMs {
                set(.failed, "wpa_supplicant accepted P2P_GROUP_ADD but no group started within \(settings.groupStartTimeoutMs / 1000) s", generation: g)
                _ = install(g) { reformAt = now + 5_000; groupRequestedAt = 0 }
            }
        }
    }

    private func tryRequestGroup(generation g: Int) {
        do { try requestGroup(generation: g) } catch {
            set(.degraded, "cannot re-form the P2P group: \(error)", generation: g)
            _ = install(g) { reformAt = nowMs + 5_000 }
        }
    }

    private func checkSupplicant(generation g: Int, nextReconnectMs: inout Int64) {
        if let s = lock.withLock({ supplicant }), let status = s.exitStatus {
            controlLost("wpa_supplicant exited with status \(status): \(s.logTail(lines: 2))", generation: g)
            return
        }
        guard let c = lock.withLock({ control }) else { reconnect(generation: g, nextReconnectMs: &nextReconnectMs); return }
        do { _ = try c.request("PING", timeout: 2) } catch { controlLost("\(error)", generation: g) }
    }

    /// The supplicant or its socket went away: links go down; we try to get it back every 5 s.
    private func controlLost(_ why: String, generation g: Int) {
        guard lock.withLock({ control != nil && running && generation == g }) else { return }
        stopGroupServices(reason: "wpa_supplicant is gone")
        teardownSupplicant()
        lock.withLock { groupInterface = nil; reformAt = nil; groupRequestedAt = 0 }
        set(.failed, "lost wpa_supplicant: \(why)", generation: g)
        events.log(.warning, "lost wpa_supplicant: \(why)")
    }

    private func reconnect(generation g: Int, nextReconnectMs: inout Int64) {
        guard nowMs >= nextReconnectMs else { return }
        nextReconnectMs = nowMs + 5_000
        do {
            try connectSupplicant(generation: g)
            try advertiseService()
            try requestGroup(generation: g)
        } catch {
            guard isCurrent(g) else { return } // stop() is cleaning up
            teardownSupplicant()
            set(.failed, "wpa_supplicant unavailable: \(error)", generation: g)
        }
    }

    /// One supplicant event, for the supervisor of generation `g` (ignored once it is stopped).
    func handle(_ event: WPAEvent, generation g: Int) {
        guard isCurrent(g) else { return }
        switch event.name {
        case "P2P-GROUP-STARTED":
            guard let iface = event.arguments.first else { return }
            guard event.arguments.dropFirst().first == "GO" else {
                events.log(.warning, "group \(iface) started as a client, not as owner; removing it")
                _ = try? lock.withLock({ control })?.request("P2P_GROUP_REMOVE \(iface)")
                return
            }
            groupStarted(iface, ssid: event.fields["ssid"], goAddress: event.fields["go_dev_addr"], generation: g)
        case "P2P-GROUP-REMOVED":
            guard let iface = event.arguments.first, iface == lock.withLock({ groupInterface }) else { return }
            let why = event.fields["reason"] ?? "unknown"
            stopGroupServices(reason: "P2P group removed (\(why))")
            lock.withLock {
                groupInterface = nil
                groupRemovals += 1
                stations.removeAll()
                reformAt = nowMs + 1_000
            }
            set(.starting, "P2P group \(iface) removed (\(why)); re-forming")
            events.log(.info, "P2P group \(iface) removed (reason \(why)); re-forming in 1 s")
        case "P2P-SERV-DISC-REQ":
            // wpa_supplicant answers from the services we added; we only count the questions.
            let n = lock.withLock { serviceQueries += 1; return serviceQueries }
            // A device's address only at debug (Docs/operations.md, "What the log holds").
            if n <= 3 || n % 100 == 0 { events.log(.info, "service discovery query (\(n) so far)") }
            events.log(.debug, "service discovery query from \(event.arguments.dropFirst().first ?? "?")")
        case "P2P-DEVICE-FOUND":
            let addr = event.fields["p2p_dev_addr"] ?? event.arguments.first ?? ""
            _ = lock.withLock { devicesFound.insert(addr) }
        case "AP-STA-CONNECTED":
            if let addr = event.arguments.first {
                let n = lock.withLock { stations.insert(addr); return stations.count }
                events.gauge("wifidirect_stations", Double(n))
                events.log(.info, "a station joined the group (\(n) now)")
                events.log(.debug, "station \(addr) joined the group")
                forgetPersistentClients()
            }
        case "AP-STA-DISCONNECTED":
            if let addr = event.arguments.first {
                let n = lock.withLock { stations.remove(addr); return stations.count }
                events.gauge("wifidirect_stations", Double(n))
            }
        case "P2P-PROV-DISC-PBC-REQ", "P2P-PROV-DISC-ENTER-PIN", "P2P-PROV-DISC-SHOW-PIN", "P2P-GO-NEG-REQUEST":
            authorize(peer: event.arguments.first ?? "")
        default:
            break
        }
    }

    /// A phone asks to join: open WPS on the group interface (push-button or the configured
    /// PIN). Without a group yet, answer its GO negotiation with P2P_CONNECT as owner.
    private func authorize(peer: String) {
        let (iface, c) = lock.withLock { (groupInterface, control) }
        guard let c else { return }
        do {
            if let iface {
                let g = try WPAControlSocket(path: (controlPath as NSString).deletingLastPathComponent + "/" + iface, localDirectory: settings.runtimeDirectory)
                defer { g.close() }
                switch settings.wpsMethod {
                case .pbc: try g.expectOK("WPS_PBC")
                case .pin: _ = try g.checked("WPS_PIN any \(settings.wpsPin ?? "")")
                }
            } else if !peer.isEmpty {
                let method = settings.wpsMethod == .pbc ? "pbc" : (settings.wpsPin ?? "")
                _ = try c.checked("P2P_CONNECT \(peer) \(method) go_intent=15 persistent freq=\(settings.frequency)")
            }
            events.log(.info, "authorised a device to join (\(settings.wpsMethod.rawValue))")
            events.log(.debug, "authorised \(peer) to join")
        } catch {
            events.log(.warning, "cannot authorise a device to join: \(error)")
        }
    }

    /// wpa_supplicant (2.10, p2p_pd.c) deletes a saved persistent group when a phone that is
    /// its only listed client sends a new Provision Discovery Request, i.e. rejoins with PIN or
    /// push-button ("Remove stale persistent group"): the hub would lose its SSID and
    /// passphrase at the next restart or re-formation. The hub's group is always running, so
    /// the list of past clients buys nothing (it serves re-invocation by invitation); it is
    /// kept empty: cleared whenever a station joins, and saved.
    private func forgetPersistentClients() {
        let (c, ssid) = lock.withLock { (control, groupSSID) }
        guard let c, let ssid, let list = try? c.request("LIST_NETWORKS", timeout: 2),
              let id = Self.persistentGroupID(list, ssid: ssid) else { return }
        forgetClients(ofNetwork: id, c)
    }

    private func forgetClients(ofNetwork id: Int, _ c: WPAControlSocket) {
        do { try Self.clearClientList(network: id, control: c) } catch {
            events.log(.warning, "cannot clear the persistent group's client list: \(error)")
        }
    }

    /// Empties network `id`'s `p2p_client_list` (an empty value) and saves the config; a
    /// refused SAVE_CONFIG (a supplicant that is not ours, `update_config=0`) is not an error.
    static func clearClientList(network id: Int, control c: WPAControlSocket) throws {
        try c.expectOK("SET_NETWORK \(id) p2p_client_list ", timeout: 2)
        _ = try? c.request("SAVE_CONFIG", timeout: 2)
    }

    // MARK: The group's services: address, DHCP, TCP

    /// Sets up the group's services. Each step can take a while (ip, dnsmasq) and stop() does
    /// not wait for them all: what is made after a stop is ended instead of installed.
    private func groupStarted(_ iface: String, ssid: String?, goAddress: String?, generation g: Int) {
        let current = install(g) {
            groupInterface = iface
            groupSSID = ssid
            goDeviceAddress = goAddress
            groupsFormed += 1
            groupRequestedAt = 0
        }
        guard current else { return }
        events.increment("wifidirect_groups_formed_total")
        do {
            try assignAddress(iface)
            if settings.dhcp {
                guard isCurrent(g) else { return }
                let d = try DHCPServer.launch(settings: settings, interface: iface)
                guard install(g, { dhcp = d }) else {
                    d.stop(grace: 0.5)
                    return
                }
            }
            if settings.wpsMethod == .pin, let pin = settings.wpsPin {
                // Keep the PIN armed so a phone with the PIN can join at any time.
                let g = try WPAControlSocket(path: (controlPath as NSString).deletingLastPathComponent + "/" + iface, localDirectory: settings.runtimeDirectory)
                _ = try? g.checked("WPS_PIN any \(pin) 0")
                g.close()
            }
            guard isCurrent(g) else { return }
            let firstID = lock.withLock { nextLinkID }
            let server = SecureStreamEngine(identity: identity, settings: Self.linkSettings(settings, firstLinkID: firstID),
                                            events: ServerEvents(transport: self))
            try server.start()
            let bound: IPEndpoint
            do {
                bound = try server.listen(on: IPEndpoint.resolve(host: settings.groupAddress, port: settings.port))
            } catch {
                server.stop()
                throw error
            }
            guard install(g, { self.server = server; serverAddress = bound; nextLinkID = firstID + 1_000_000 }) else {
                server.stop()
                return
            }
            set(.running, "group owner of \(ssid ?? iface) on \(iface), \(settings.groupAddress):\(settings.port)", generation: g)
            events.log(.info, "P2P group \(ssid ?? "?") up on \(iface); phones connect to \(settings.groupAddress):\(settings.port)")
        } catch {
            guard isCurrent(g) else { return }
            set(.degraded, "P2P group \(iface) is up but its services are not: \(error)", generation: g)
            events.log(.warning, "P2P group \(iface) services failed: \(error)")
        }
    }

    /// `ip addr add` in a subprocess rather than rtnetlink: one call per group, and iproute2's
    /// messages (address exists, no such device) are better than a bare errno. CNetlink links
    /// libnl-genl only, not libnl-route.
    private func assignAddress(_ iface: String) throws {
        do {
            try ChildProcess.run(settings.ipPath, ["addr", "add", "\(settings.groupAddress)/\(settings.prefixLength)", "dev", iface])
        } catch ChildProcessError.exited(_, _, let output) where output.contains("File exists") {
            // Already there (a re-formed persistent group on the same interface name).
        }
        try ChildProcess.run(settings.ipPath, ["link", "set", "dev", iface, "up"])
    }

    /// The group's link server reports through the transport, which keeps link IDs unique
    /// across the servers of successive groups. Its log lines are warnings or info (debug and
    /// notice lines too), as the transport's own.
    private final class ServerEvents: LinkEvents {
        weak let transport: WiFiDirectTransport?
        private let events: any LinkEvents

        init(transport: WiFiDirectTransport) {
            self.transport = transport
            events = transport.events
        }

        func linkUp(_ link: LinkInfo) {
            if let t = transport { t.lock.withLock { t.nextLinkID = max(t.nextLinkID, link.id + 1) } }
            events.linkUp(link)
        }
        func linkDown(_ id: LinkID, reason: String?) { events.linkDown(id, reason: reason) }
        func frameReceived(_ frame: [UInt8], on link: LinkID) { events.frameReceived(frame, on: link) }
        func statusChanged() { events.statusChanged() }
        func log(_ level: LogLevel, _ message: String) { events.log(level >= .warning ? .warning : .info, message) }
        func increment(_ name: String, by value: Double) { events.increment(name, by: value) }
        func gauge(_ name: String, _ value: Double) { events.gauge(name, value) }
    }

    private func stopGroupServices(reason: String) {
        let (s, d) = lock.withLock { () -> (SecureStreamEngine?, ChildProcess?) in
            defer { server = nil; serverAddress = nil; dhcp = nil }
            return (server, dhcp)
        }
        if let s {
            let c = s.snapshot.counters
            lock.withLock { retired = retired + c }
            s.stop(reason: reason)
        }
        d?.stop(grace: 0.5)
    }

    /// The group's TCP side: phones (role endpoint) dial the group owner; the hub never dials.
    static func linkSettings(_ settings: WiFiDirectSettings, firstLinkID: LinkID) -> SecureStreamEngine.Settings {
        var s = SecureStreamEngine.Settings(kind: "wifi-direct", role: .hub, peerRoles: [.endpoint], cost: settings.cost, metricPrefix: "wifidirect")
        s.maxSessions = settings.maxSessions
        // Every phone of the group is in the group owner's one /24: the per-address cap is
        // what separates them (the group's size is the radio's).
        s.maxInboundPerCrowd = settings.maxSessions
        s.idleTimeoutMs = settings.readTimeoutMs
        s.idleTimeoutKey = "read_timeout_s"
        s.queueFrames = settings.queueFrames
        s.queueBytes = settings.queueBytes
        s.maxFramesPerSecond = settings.maxFramesPerSecond
        s.rateLimitDisconnectMs = settings.rateLimitDisconnectMs
        s.firstLinkID = firstLinkID
        s.threadName = "yaok-wifidirect-tcp"
        return s
    }

    // MARK: Status

    public var status: TransportStatus {
        lock.withLock {
            let snap = server?.snapshot
            let c = snap?.counters ?? .init()
            var details: [String: String] = [
                "radios": radios.map(\.summary).joined(separator: "; "),
                "p2p_radios": radios.filter(\.supportsP2PGO).map { $0.name }.joined(separator: ","),
                "frequency": "\(settings.frequency)",
                "wps_method": settings.wpsMethod.rawValue,
                "supplicant": settings.manageSupplicant ? (supplicant.map { "managed pid \($0.pid)" } ?? "managed, not running") : "external",
                "ctrl_interface": controlPath.isEmpty ? settings.ctrlInterface : controlPath,
                "group_interface": groupInterface ?? "",
                "group_ssid": groupSSID ?? "",
                "group_address": "\(settings.groupAddress)/\(settings.prefixLength)",
                "listen": serverAddress?.description ?? "",
                "dhcp": settings.dhcp ? (dhcp.map { "dnsmasq pid \($0.pid)" } ?? "not running") : "off",
                "stations": "\(stations.count)",
                "devices_found": "\(devicesFound.count)",
                "groups_formed": "\(groupsFormed)",
                "group_removals": "\(groupRemovals)",
                "links_up_total": "\(retired.linksUpTotal + c.linksUpTotal)",
                "handshake_failures": "\(retired.handshakeFailures + c.handshakeFailures)",
                "refused_role": "\(retired.refusedRole + c.refusedRole)",
                "rate_limited": "\(retired.throttled + c.throttled)",
                "unsealed_frames": "\(retired.unsealedFrames + c.unsealedFrames)",
                "disconnects_misbehaviour": "\(retired.misbehaviourDisconnects + c.misbehaviourDisconnects)",
                "read_timeouts": "\(retired.idleTimeouts + c.idleTimeouts)",
                "half_open_evicted": "\(retired.halfOpenEvicted + c.halfOpenEvicted)",
                "crowd_evicted": "\(retired.crowdEvicted + c.crowdEvicted)",
                "rate_limit_disconnects": "\(retired.rateLimitDisconnects + c.rateLimitDisconnects)",
                "service_queries": "\(serviceQueries)",
            ]
            if let g = goDeviceAddress { details["go_device_address"] = g }
            return TransportStatus(state: state, reason: reason, links: snap?.links.count ?? 0, peers: snap?.peersSeen ?? 0,
                                   framesIn: retired.framesIn + c.framesIn, framesOut: retired.framesOut + c.framesOut,
                                   bytesIn: retired.bytesIn + c.bytesIn, bytesOut: retired.bytesOut + c.bytesOut,
                                   lastError: lastError, details: details)
        }
    }
}
