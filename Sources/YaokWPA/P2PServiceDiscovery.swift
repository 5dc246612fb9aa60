import Foundation
import YaokPluginKit

/// The phone side of P2P service discovery, for a Linux machine acting as a phone (and the VM
/// test): through the phone's own wpa_supplicant, asks peers met during `P2P_FIND` for
/// `_yaok._tcp` and waits for a `P2P-SERV-DISC-RESP` that answers.
///
/// wpa_supplicant sends a scheduled query (GAS Initial Request) to every peer the find meets
/// that sets the service-discovery capability bit; a group owner answers on its operating
/// channel, so the hub needs no listen mode of its own (see Plugins/WiFiDirect/README.md).
public enum P2PServiceDiscovery {
    public enum DiscoveryError: Error, Equatable, CustomStringConvertible {
        case noAnswer(seconds: Double, responses: Int)
        public var description: String {
            switch self {
            case .noAnswer(let s, let n):
                return "no peer answered the _yaok._tcp service query within \(s) s (\(n) service responses without it)"
            }
        }
    }

    /// Schedules `P2P_SERV_DISC_REQ <peer> <query>`, runs `P2P_FIND`, and returns the first
    /// response `accept` takes; cancels the query and stops the find either way.
    /// `controlPath` is the phone supplicant's P2P control socket (`p2p-dev-<if>` or `<if>`).
    public static func query(controlPath: String, localDirectory: String, peer: String = "00:00:00:00:00:00",
                             queryHex: String = P2PService.ptrQueryHex, timeout: Double = 30,
                             accept: (P2PServiceResponse) -> Bool = { !$0.instances.isEmpty }) throws -> P2PServiceResponse {
        let c = try WPAControlSocket(path: controlPath, localDirectory: localDirectory)
        defer { c.close() }
        let events = try WPAControlSocket(path: controlPath, localDirectory: localDirectory)
        defer { _ = try? events.request("DETACH", timeout: 0.5); events.close() }
        try events.attach()
        let id = try c.checked("P2P_SERV_DISC_REQ \(peer) \(queryHex)").trimmingCharacters(in: .whitespacesAndNewlines)
        defer {
            _ = try? c.request("P2P_SERV_DISC_CANCEL_REQ \(id)", timeout: 1)
            _ = try? c.request("P2P_STOP_FIND", timeout: 2)
        }
        try c.expectOK("P2P_FIND")
        let deadline = Date().addingTimeInterval(timeout)
        var others = 0
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { throw DiscoveryError.noAnswer(seconds: timeout, responses: others) }
            guard let text = try events.receive(timeout: min(left, 1)), let event = WPAEvent(parsing: text),
                  event.name == "P2P-SERV-DISC-RESP" else { continue }
            if let response = try? P2PServiceResponse(event: event), accept(response) { return response }
            others += 1
        }
    }
}
