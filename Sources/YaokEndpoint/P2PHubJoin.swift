import Foundation
#if canImport(Glibc)
import Glibc
import YaokWPA
import YaokProcess
#endif

/// A hub reached over Wi-Fi Direct through this machine's own wpa_supplicant:
/// `p2p://IFACE[?ctrl=DIR][&pin=PIN][&name=INSTANCE][&timeout=SECONDS]`.
///
/// `IFACE` is the radio the phone's wpa_supplicant runs on (`-i`); `ctrl` its
/// `ctrl_interface` directory (default `/run/wpa_supplicant`); `pin` joins with that WPS PIN
/// (8 digits) instead of push-button; `name` takes only the hub advertising that `_yaok._tcp`
/// instance; `timeout` bounds each service-discovery query (default 30 s).
public struct P2PHubTarget: Sendable, Equatable, CustomStringConvertible {
    public var interface: String
    public var controlDirectory: String = "/run/wpa_supplicant"
    public var pin: String?
    public var instance: String?
    public var discoveryTimeout: Double = 30

    public init(interface: String) { self.interface = interface }

    /// Parses `p2p://IFACE?…` (the scheme is required).
    public static func parse(_ text: String) throws -> P2PHubTarget {
        func bad(_ why: String) -> P2PHubError { .badAddress(redacted(text), why) }
        guard text.hasPrefix("p2p://") else { throw bad("it does not start with p2p://") }
        let rest = text.dropFirst(6)
        let parts = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let iface = String(parts[0])
        guard !iface.isEmpty else { throw bad("no interface after p2p:// (e.g. p2p://wlan0)") }
        guard iface.utf8.count <= 15, iface.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) }) else {
            throw bad("\"\(iface)\" is not a network interface name (1-15 letters, digits, - _ .)")
        }
        var target = P2PHubTarget(interface: iface)
        guard parts.count == 2 else { return target }
        var seen = Set<String>()
        for pair in parts[1].split(separator: "&", omittingEmptySubsequences: false) {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard kv.count == 2, !kv[0].isEmpty else { throw bad("\"\(pair)\" is not key=value") }
            let key = String(kv[0]), value = String(kv[1])
            guard seen.insert(key).inserted else { throw bad("\(key) given twice") }
            switch key {
            case "ctrl":
                guard value.hasPrefix("/"), value.utf8.count <= 80 else {
                    throw bad("ctrl must be the absolute path of wpa_supplicant's ctrl_interface directory (at most 80 bytes)")
                }
                target.controlDirectory = value.count > 1 && value.hasSuffix("/") ? String(value.dropLast()) : value
            case "pin":
                guard value.utf8.count == 8, value.allSatisfy({ $0.isASCII && $0.isNumber }) else { throw bad("pin must be 8 digits") }
                target.pin = value
            case "name":
                guard (1...63).contains(value.utf8.count), !value.contains(".") else { throw bad("name must be one DNS label of 1-63 bytes") }
                target.instance = value
            case "timeout":
                guard let s = Double(value), s >= 1, s <= 600 else { throw bad("timeout must be 1-600 seconds") }
                target.discoveryTimeout = s
            default:
                throw bad("unknown option \(key) (known: ctrl, pin, name, timeout)")
            }
        }
        return target
    }

    /// `text` with every `pin=` value masked, for errors.
    static func redacted(_ text: String) -> String {
        guard let q = text.firstIndex(of: "?") else { return text }
        let options = text[text.index(after: q)...].split(separator: "&", omittingEmptySubsequences: false).map {
            $0.hasPrefix("pin=") ? "pin=…" : String($0)
        }
        return String(text[...q]) + options.joined(separator: "&")
    }

    /// The phone supplicant's P2P control sockets to try: the P2P Device socket first (P2P
    /// events reach only its listeners when the driver has one), then the interface's.
    public var controlCandidates: [String] {
        ["\(controlDirectory)/p2p-dev-\(interface)", "\(controlDirectory)/\(interface)"]
    }

    /// The address without the PIN.
    public var description: String {
        var options: [String] = []
        if controlDirectory != "/run/wpa_supplicant" { options.append("ctrl=\(controlDirectory)") }
        if pin != nil { options.append("pin=…") }
        if let instance { options.append("name=\(instance)") }
        if discoveryTimeout != 30 { options.append("timeout=\(Int(discoveryTimeout))") }
        return "p2p://\(interface)" + (options.isEmpty ? "" : "?" + options.joined(separator: "&"))
    }
}

/// Why a `p2p://` hub could not be reached.
public enum P2PHubError: Error, Equatable, CustomStringConvertible {
    case badAddress(String, String)
    case noControlSocket(tried: [String])
    case supplicant(String)
    case noHub(seconds: Double, detail: String)
    case noPort(instance: String, peer: String, seconds: Double)
    case joinFailed(String)
    case interfaceDown(String, seconds: Double)
    case noDHCPClient(interface: String, lookedIn: [String])
    case dhcpFailed(client: String, interface: String, reason: String)

    public var description: String {
        switch self {
        case .badAddress(let text, let why): return "hub address \"\(text)\": \(why)"
        case .noControlSocket(let tried):
            return "no wpa_supplicant control socket at \(tried.joined(separator: " or ")) (is this machine's wpa_supplicant running on that interface with ctrl_interface=\(URL(fileURLWithPath: tried.first ?? "/").deletingLastPathComponent().path)? otherwise give ?ctrl=DIR)"
        case .supplicant(let why): return "wpa_supplicant: \(why)"
        case .noHub(let s, let detail): return "no Ya OK hub answered P2P service discovery (_yaok._tcp) within \(Self.seconds(s)) s\(detail.isEmpty ? "" : " (\(detail))")"
        case .noPort(let instance, let peer, let s): return "hub \(instance) (\(peer)) did not give its TCP port (TXT port=) within \(Self.seconds(s)) s"
        case .joinFailed(let why): return "join failed: \(why)"
        case .interfaceDown(let name, let s): return "the group interface \(name) did not come up within \(Self.seconds(s)) s"
        case .noDHCPClient(let name, let dirs):
            return "no DHCP client found (looked for \(DHCPClient.names.joined(separator: ", ")) in \(dirs.joined(separator: ":"))) and the group interface \(name) has no IPv4 address; install one (e.g. Debian's busybox or isc-dhcp-client)"
        case .dhcpFailed(let client, let name, let why): return "\(client) got no DHCP lease on \(name): \(why)"
        }
    }

    static func seconds(_ s: Double) -> String { s == s.rounded() ? String(Int(s)) : String(format: "%.1f", s) }
}

/// A DHCP client program found on this machine.
public struct DHCPClient: Sendable, Equatable {
    public enum Kind: String, Sendable { case dhclient, udhcpc, busybox, dhcpcd }
    public var kind: Kind
    public var path: String

    /// What is looked for, in order of preference.
    public static let names = ["dhclient", "udhcpc", "busybox udhcpc", "dhcpcd"]

    /// `$PATH` and the usual system directories.
    public static var defaultDirectories: [String] {
        var dirs = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        for d in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] where !dirs.contains(d) { dirs.append(d) }
        return dirs
    }

    /// The first client found in `directories` (busybox only when it has the udhcpc applet).
    public static func find(in directories: [String] = defaultDirectories) -> DHCPClient? {
        func lookup(_ name: String) -> String? {
            directories.lazy.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
        }
        if let p = lookup("dhclient") { return DHCPClient(kind: .dhclient, path: p) }
        if let p = lookup("udhcpc") { return DHCPClient(kind: .udhcpc, path: p) }
        if let p = lookup("busybox"), let list = try? ChildProcess.run(p, ["--list"]),
           list.split(separator: "\n").contains("udhcpc") { return DHCPClient(kind: .busybox, path: p) }
        if let p = lookup("dhcpcd") { return DHCPClient(kind: .dhcpcd, path: p) }
        return nil
    }
}

/// Makes this machine a phone of a Wi-Fi Direct hub: finds the hub by P2P service discovery
/// through the local wpa_supplicant, joins its group as a client, takes an address from the
/// hub's DHCP server, and gives the TCP address of the hub's link server on the group.
public enum P2PHubJoin {
    /// Where the hub is now reachable, and how it was found.
    public struct Joined: Sendable, Equatable {
        /// The group owner's address on the group (the DHCP server, else the subnet's first host).
        public var host: String
        /// The hub's TCP port from its TXT record.
        public var port: UInt16
        public var groupInterface: String
        public var localAddress: String
        public var instance: String
        public var hubDevice: String
        public var ssid: String
        /// True when this machine was already a client of the hub's group (no new join).
        public var reused: Bool
    }

    /// `p2p://…` joined and turned into `tcp://GO:PORT`; any other address parsed as usual.
    public static func hubAddress(_ text: String, log: (String) -> Void = { _ in }) throws -> HubAddress {
        guard text.hasPrefix("p2p://") else { return try HubSession.parseHubAddress(text) }
        let target = try P2PHubTarget.parse(text)
        let j = try join(target, log: log)
        return .p2p(target, host: j.host, port: j.port)
    }

    /// Seconds allowed for the join, the interface to come up, and the DHCP client.
    static let joinTimeout = 60.0, interfaceTimeout = 10.0, dhcpTimeout = 30.0

    public static func join(_ target: P2PHubTarget, dhcpDirectories: [String] = DHCPClient.defaultDirectories,
                            log: (String) -> Void = { _ in }) throws -> Joined {
        guard let control = target.controlCandidates.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
            throw P2PHubError.noControlSocket(tried: target.controlCandidates)
        }
        // Our end of the control sockets lives in a private directory, removed afterwards.
        var template = Array("/tmp/yaok-p2p-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw P2PHubError.supplicant("mkdtemp: \(String(cString: strerror(errno)))") }
        let local = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: local) }
        do {
            return try join(target, control: control, local: local, dhcpDirectories: dhcpDirectories, log: log)
        } catch let e as WPAControlError {
            throw P2PHubError.supplicant(e.description)
        }
    }

    private static func join(_ target: P2PHubTarget, control: String, local: String, dhcpDirectories: [String],
                             log: (String) -> Void) throws -> Joined {
        let c = try WPAControlSocket(path: control, localDirectory: local)
        defer { c.close() }
        guard try c.request("PING", timeout: 2).hasPrefix("PONG") else { throw P2PHubError.supplicant("\(control) does not answer PING with PONG") }
        let groups = clientGroups(target, local: local)
        log("p2p: asking for _yaok._tcp through \(control)\(groups.isEmpty ? "" : " (in group \(groups.map { "\($0.ssid) on \($0.interface)" }.joined(separator: ", ")))")")

        // 1. Service discovery: a hub (PTR), then its port (TXT).
        let ptr: P2PServiceResponse
        do {
            ptr = try P2PServiceDiscovery.query(controlPath: control, localDirectory: local, timeout: target.discoveryTimeout) {
                guard let wanted = target.instance else { return !$0.instances.isEmpty }
                return $0.instances.contains(wanted)
            }
        } catch P2PServiceDiscovery.DiscoveryError.noAnswer(let s, let n) {
            var detail = n > 0 ? "\(n) service responses without \(target.instance.map { "instance \($0)" } ?? "a Ya OK hub")" : ""
            if !groups.isEmpty { detail += (detail.isEmpty ? "" : "; ") + "this radio is in group \(groups.map(\.ssid).joined(separator: ", "))" }
            throw P2PHubError.noHub(seconds: s, detail: detail)
        }
        let instance = target.instance ?? ptr.instances[0]
        let txt: P2PServiceResponse
        do {
            txt = try P2PServiceDiscovery.query(controlPath: control, localDirectory: local, peer: ptr.peer,
                                                queryHex: P2PService.txtQueryHex(instance: instance), timeout: target.discoveryTimeout) {
                $0.peer.lowercased() == ptr.peer.lowercased() && $0.ports[instance] != nil
            }
        } catch is P2PServiceDiscovery.DiscoveryError {
            throw P2PHubError.noPort(instance: instance, peer: ptr.peer, seconds: target.discoveryTimeout)
        }
        guard let port = txt.ports[instance], port > 0 else { throw P2PHubError.noPort(instance: instance, peer: ptr.peer, seconds: 0) }
        let peerInfo = keyValues((try? c.request("P2P_PEER \(ptr.peer)", timeout: 2)) ?? "")
        let hubSSID = peerInfo["oper_ssid"]
        // The GO's group interface address, when the find learnt it (the BSSID of its group).
        let hubBSSID = peerInfo["interface_addr"].flatMap { $0 == "00:00:00:00:00:00" ? nil : $0.lowercased() }
        log("p2p: hub \(instance) at \(ptr.peer), port \(port)\(hubSSID.map { ", group \($0)" } ?? "")")

        // 2. The group: already in it, or leave other groups and join.
        var groupInterface: String, ssid: String, reused = false
        if let hubSSID, let current = groups.first(where: {
            $0.associated && $0.ssid == hubSSID && (hubBSSID == nil || $0.bssid == hubBSSID)
        }) {
            groupInterface = current.interface
            ssid = hubSSID
            reused = true
            log("p2p: already a client of \(ssid) (\(current.bssid ?? "?")) on \(groupInterface)")
        } else {
            // Another hub's group, or one whose owner has gone: leave it, as a phone would.
            for g in groups {
                log("p2p: leaving group \(g.ssid) on \(g.interface)\(g.associated ? "" : " (not associated)")")
                _ = try? c.request("P2P_GROUP_REMOVE \(g.interface)", timeout: 5)
            }
            log("p2p: joining with \(target.pin == nil ? "push-button" : "PIN")")
            do {
                let j = try P2PGroupJoin.join(controlPath: control, localDirectory: local, hub: ptr.peer, pin: target.pin, timeout: joinTimeout)
                groupInterface = j.interface
                ssid = j.ssid
            } catch let e as P2PGroupJoin.JoinError {
                throw P2PHubError.joinFailed(e.description)
            } catch let e as WPAControlError {
                throw P2PHubError.joinFailed(e.description)
            }
        }
        guard waitUp(groupInterface, timeout: interfaceTimeout) else { throw P2PHubError.interfaceDown(groupInterface, seconds: interfaceTimeout) }

        // 3. An address: the one the interface has, else a DHCP lease from the hub's dnsmasq.
        var server: String?
        if ipv4(of: groupInterface) == nil {
            guard let client = DHCPClient.find(in: dhcpDirectories) else {
                throw P2PHubError.noDHCPClient(interface: groupInterface, lookedIn: dhcpDirectories)
            }
            log("p2p: DHCP on \(groupInterface) with \(client.path)\(client.kind == .busybox ? " udhcpc" : "")")
            server = try lease(groupInterface, client: client, local: local)
        }
        guard let address = ipv4(of: groupInterface) else {
            throw P2PHubError.dhcpFailed(client: "DHCP", interface: groupInterface, reason: "the interface has no IPv4 address afterwards")
        }
        let host = server ?? firstHost(address.address, prefix: address.prefix)
        log("p2p: \(address.address)/\(address.prefix) on \(groupInterface); hub at \(host):\(port)")
        return Joined(host: host, port: port, groupInterface: groupInterface, localAddress: address.address, instance: instance,
                      hubDevice: ptr.peer, ssid: ssid, reused: reused)
    }

    /// A P2P group this radio's supplicant runs as a client.
    struct Group: Equatable {
        var interface: String
        var ssid: String
        /// The group owner's interface address, lower case.
        var bssid: String?
        /// Associated (`wpa_state=COMPLETED`); a group whose owner went away is not.
        var associated: Bool
    }

    /// Client groups of this supplicant: control sockets named `p2p-…` other than the P2P
    /// Device's, not running as group owner.
    static func clientGroups(_ target: P2PHubTarget, local: String) -> [Group] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: target.controlDirectory)) ?? []
        return names.sorted().compactMap { name in
            guard name.hasPrefix("p2p-"), !name.hasPrefix("p2p-dev-"), name != target.interface,
                  let s = try? WPAControlSocket(path: "\(target.controlDirectory)/\(name)", localDirectory: local) else { return nil }
            defer { s.close() }
            let status = keyValues((try? s.request("STATUS", timeout: 2)) ?? "")
            guard !status.isEmpty, status["mode"] != "P2P GO" else { return nil }
            return Group(interface: name, ssid: status["ssid"] ?? "?", bssid: status["bssid"]?.lowercased(),
                         associated: status["wpa_state"] == "COMPLETED")
        }
    }

    /// `key=value` lines of a control-interface reply.
    static func keyValues(_ text: String) -> [String: String] {
        var out: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let eq = line.firstIndex(of: "=") else { continue }
            out[String(line[..<eq])] = String(line[line.index(after: eq)...])
        }
        return out
    }

    /// Runs the DHCP client once on `interface`; returns the DHCP server's address when the
    /// client tells it (udhcpc through our script, dhclient through its lease file).
    static func lease(_ interface: String, client: DHCPClient, local: String) throws -> String? {
        let leaseFile = "\(local)/lease"
        let arguments: [String]
        switch client.kind {
        case .udhcpc, .busybox:
            // udhcpc configures nothing itself: its script adds the address and notes the server.
            let script = "\(local)/udhcpc.sh"
            let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) } ?? "ip"
            let text = """
            #!/bin/sh
            case "$1" in bound|renew)
              \(ip) addr replace "$ip/${mask:-24}" dev "$interface" || exit 1
              echo "${serverid:-}" > '\(leaseFile)' ;;
            esac
            exit 0

            """
            guard FileManager.default.createFile(atPath: script, contents: Data(text.utf8), attributes: [.posixPermissions: 0o700]) else {
                throw P2PHubError.dhcpFailed(client: client.path, interface: interface, reason: "cannot write \(script)")
            }
            arguments = (client.kind == .busybox ? ["udhcpc"] : []) + ["-i", interface, "-n", "-q", "-f", "-t", "8", "-T", "2", "-s", script]
        case .dhclient:
            arguments = ["-1", "-4", "-lf", leaseFile, "-pf", "\(local)/dhclient.pid", interface]
        case .dhcpcd:
            arguments = ["-1", "-4", "-w", "-t", "25", interface]
        }
        do {
            _ = try ChildProcess.run(client.path, arguments, timeout: dhcpTimeout)
        } catch let e as ChildProcessError {
            throw P2PHubError.dhcpFailed(client: client.path, interface: interface, reason: e.description)
        }
        guard let text = try? String(contentsOfFile: leaseFile, encoding: .utf8) else { return nil }
        if client.kind == .dhclient { return dhclientServer(text) }
        let server = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return isIPv4(server) ? server : nil
    }

    /// The last `option dhcp-server-identifier A.B.C.D;` of a dhclient lease file.
    static func dhclientServer(_ leases: String) -> String? {
        let key = "option dhcp-server-identifier "
        return leases.split(separator: "\n").compactMap { line -> String? in
            let l = line.trimmingCharacters(in: .whitespaces)
            guard l.hasPrefix(key) else { return nil }
            let v = String(l.dropFirst(key.count)).trimmingCharacters(in: CharacterSet(charactersIn: "; "))
            return isIPv4(v) ? v : nil
        }.last
    }

    static func isIPv4(_ s: String) -> Bool {
        var a = in_addr()
        return inet_pton(AF_INET, s, &a) == 1
    }

    /// The subnet's first host (the hub's default group address 192.168.49.1 for a /24 lease).
    static func firstHost(_ address: String, prefix: Int) -> String {
        var a = in_addr()
        guard inet_pton(AF_INET, address, &a) == 1, (1...30).contains(prefix) else { return "192.168.49.1" }
        let mask: UInt32 = prefix == 0 ? 0 : ~UInt32(0) << (32 - UInt32(prefix))
        let host = (UInt32(bigEndian: a.s_addr) & mask) | 1
        let b = [host >> 24, host >> 16, host >> 8, host].map { String($0 & 0xff) }
        return b.joined(separator: ".")
    }

    /// The first IPv4 address and prefix length on `interface`.
    static func ipv4(of interface: String) -> (address: String, prefix: Int)? {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return nil }
        defer { freeifaddrs(list) }
        for p in sequence(first: first, next: { $0.pointee.ifa_next }) {
            let i = p.pointee
            guard String(cString: i.ifa_name) == interface, let sa = i.ifa_addr, sa.pointee.sa_family == sa_family_t(AF_INET) else { continue }
            var addr = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            var buf = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            guard inet_ntop(AF_INET, &addr, &buf, socklen_t(buf.count)) != nil else { continue }
            let mask = i.ifa_netmask.map { m in m.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) } } ?? 0
            return (String(nulTerminated: buf), mask.nonzeroBitCount)
        }
        return nil
    }

    /// Waits until `interface` exists and is up and running (carrier).
    static func waitUp(_ interface: String, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            var list: UnsafeMutablePointer<ifaddrs>?
            if getifaddrs(&list) == 0, let first = list {
                let wanted = UInt32(IFF_UP) | UInt32(IFF_RUNNING)
                let up = sequence(first: first, next: { $0.pointee.ifa_next }).contains(where: {
                    String(cString: $0.pointee.ifa_name) == interface && $0.pointee.ifa_flags & wanted == wanted
                })
                freeifaddrs(list)
                if up { return true }
            }
            usleep(100_000)
        } while Date() < deadline
        return false
    }
}
