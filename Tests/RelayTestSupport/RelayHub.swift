import Foundation
import HubTestSupport
import XCTest
import enum YaokPluginKit.Hex

/// A real `yaok-hub run` with the UDP transport on a free loopback port and the relay plugin,
/// output to `dir/hub.log`. Its relay section is `relay` (the YAML lines that name the relay:
/// `address:` with its pins, or an `addresses:` list); `relayAddresses:` makes the list.
public final class RelayHub: HubProcess {
    public static var binary: String { RelayProcess.productsDirectory + "/yaok-hub" }
    public let udpPort: UInt16

    /// A hub on the nodes of one relay (`addresses:`), moving to another after `failoverAfterS`.
    public convenience init(dir: String, relayAddresses: [String], relayKey: [UInt8], custodyTimeoutS: Int = 5, failoverAfterS: Int = 3) throws {
        try self.init(dir: dir, relay: "addresses:\n" + relayAddresses.map { "  - " + $0 }.joined(separator: "\n")
                        + "\nfailover_after_s: \(failoverAfterS)",
                      relayKey: relayKey, custodyTimeoutS: custodyTimeoutS)
    }

    /// - Parameter relay: lines of the relay transport's section naming the relay, without
    ///   indentation (e.g. `address: wss://…` and `tls_spki_sha256: …`).
    public init(dir: String, relay: String, relayKey: [UInt8], custodyTimeoutS: Int = 5, name: String = "relay-test") throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else { throw XCTSkip("\(Self.binary) is not built") }
        let plugins = dir + "/plugins"
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
        for lib in ["libyaok-plugin-udp.so", "libyaok-plugin-relay.so"] {
            let built = RelayProcess.productsDirectory + "/" + lib
            guard FileManager.default.fileExists(atPath: built) else { throw XCTSkip("\(lib) is not built") }
            try FileManager.default.copyItem(atPath: built, toPath: plugins + "/" + lib)
        }
        let udp = try UDPSink()   // a free port: taken, then given to the hub
        let udpPort = udp.port
        udp.close()
        self.udpPort = udpPort
        let config = """
        hub:
          name: \(name)
          data_dir: \(dir)/data
          control_socket: \(dir)/control.sock
          plugin_dirs: ["\(plugins)"]
          log_level: info
        router:
          custody_timeout_s: \(custodyTimeoutS)
        transports:
          udp:
            enabled: true
            listen: 127.0.0.1:\(udpPort)
          relay:
            enabled: true
        \(relay.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            relay_key: \(Hex.encode(relayKey))
            poll_interval_s: 1

        """
        try super.init(dir: dir, config: config, executable: Self.binary)
    }

    /// `udp://` address for `yaok --hub`.
    public var url: String { "udp://127.0.0.1:\(udpPort)" }
}
