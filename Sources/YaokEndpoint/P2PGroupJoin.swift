import Foundation
import YaokWPA

/// The phone side of joining a hub's group, for a Linux machine acting as a phone (and the
/// VM test): through the phone's own wpa_supplicant, `P2P_CONNECT <hub> pbc|<pin> join`, then
/// waits for the supplicant to report the group up as a client. Addressing is the caller's
/// (a DHCP client on the returned interface: the hub runs dnsmasq).
public enum P2PGroupJoin {
    /// The group the phone is now a client of.
    public struct Joined: Sendable, Equatable {
        /// The phone's group interface, e.g. `p2p-wlan1-0`.
        public var interface: String
        public var ssid: String
        public var goDeviceAddress: String
        public var frequency: Int?
    }

    public enum JoinError: Error, Equatable, CustomStringConvertible {
        case failed(event: String)
        case timeout(seconds: Double)
        public var description: String {
            switch self {
            case .failed(let event): return "joining the hub's group failed: \(event)"
            case .timeout(let s): return "the hub's group did not come up as a client within \(s) s"
            }
        }
    }

    /// Events that end a join attempt without a group.
    static let failures: Set<String> = ["P2P-GROUP-FORMATION-FAILURE", "P2P-PROV-DISC-FAILURE", "WPS-FAIL", "P2P-GO-NEG-FAILURE"]

    /// Joins the group whose owner has P2P device address `hub` (as found by
    /// ``P2PServiceDiscovery``), with push-button, or with `pin` (8 digits) when given.
    /// `controlPath` is the phone supplicant's P2P control socket.
    public static func join(controlPath: String, localDirectory: String, hub: String, pin: String? = nil,
                            timeout: Double = 60) throws -> Joined {
        let c = try WPAControlSocket(path: controlPath, localDirectory: localDirectory)
        defer { c.close() }
        let events = try WPAControlSocket(path: controlPath, localDirectory: localDirectory)
        defer { _ = try? events.request("DETACH", timeout: 0.5); events.close() }
        try events.attach()
        _ = try c.checked("P2P_CONNECT \(hub) \(pin ?? "pbc") join", timeout: 10)
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else {
                _ = try? c.request("P2P_CANCEL", timeout: 2)
                throw JoinError.timeout(seconds: timeout)
            }
            guard let text = try events.receive(timeout: min(left, 1)), let event = WPAEvent(parsing: text) else { continue }
            if let joined = joined(event) { return joined }
            if failures.contains(event.name) { throw JoinError.failed(event: event.redacted) }
        }
    }

    /// `P2P-GROUP-STARTED <if> client ssid="…" freq=… psk=… go_dev_addr=…` → the group.
    static func joined(_ event: WPAEvent) -> Joined? {
        guard event.name == "P2P-GROUP-STARTED", event.arguments.count >= 2, event.arguments[1] == "client" else { return nil }
        return Joined(interface: event.arguments[0], ssid: event.fields["ssid"] ?? "", goDeviceAddress: event.fields["go_dev_addr"] ?? "",
                      frequency: event.fields["freq"].flatMap { Int($0) })
    }
}
