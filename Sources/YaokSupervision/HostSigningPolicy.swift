import YaokPluginKit
import YaokRelayProtocol

/// Decides what the hub signs for one transport's plugin process (Docs/plugin-protocol.md,
/// "Signing"): a compromised plugin must not get the hub's signature on anything it could use
/// as the hub elsewhere (a relay login, an attachment announcement, a certificate).
struct HostSigningPolicy: Sendable {
    /// The hub's keys: every statement signed must be about them.
    let signingKey: [UInt8]
    let kxKey: [UInt8]
    /// The section's plugin kind; `relay` and `mesh` get their own statements signed.
    let kind: String
    /// A `command:` program: whatever kind it names, it gets only link identities signed.
    let isProgram: Bool

    /// Nil if `message` may be signed; otherwise why not.
    func refusal(of message: [UInt8]) -> String? {
        for context in [SecureLink.responderContext, SecureLink.initiatorContext] where message.starts(with: context) {
            let rest = message.dropFirst(context.count)
            guard rest.count == HostSigning.linkIdentityLength else { return "a link identity of \(rest.count) bytes" }
            let body = Array(rest.dropFirst(32))
            guard body[0] == UInt8(PeerRole.hub.rawValue) else { return "a link identity with role \(body[0]), not the hub's" }
            guard Array(body[1..<33]) == signingKey, Array(body[33..<65]) == kxKey else { return "a link identity with keys that are not the hub's" }
            return nil
        }
        if message.starts(with: Registration.context) {
            guard kind == "relay", !isProgram else { return "a relay registration, from a transport that is not the relay plugin" }
            // context ‖ relay key(32) ‖ kind(1) ‖ user key(32) ‖ time(8) ‖ nonce(16) ‖ binding(32) ‖ until(8)
            let rest = Array(message.dropFirst(Registration.context.count))
            guard rest.count == 32 + 97 else { return "a relay registration of \(rest.count) bytes" }
            guard rest[32] == Registration.Kind.owner.rawValue else { return "a carried relay registration (only phones sign those)" }
            guard Array(rest[33..<65]) == signingKey else { return "a relay registration for another key" }
            return nil
        }
        if message.starts(with: HostSigning.meshBeaconMagic) {
            guard kind == "mesh", !isProgram else { return "a mesh beacon, from a transport that is not the mesh plugin" }
            guard message.count == HostSigning.meshBeaconSignedLength else { return "a mesh beacon of \(message.count) bytes" }
            guard Array(message[5..<37]) == signingKey, Array(message[37..<69]) == kxKey else { return "a mesh beacon with keys that are not the hub's" }
            return nil
        }
        return "\(message.count) bytes under no context a transport may sign"
    }
}
