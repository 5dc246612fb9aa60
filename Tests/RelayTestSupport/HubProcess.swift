import Foundation
import XCTest
import enum YaokPluginKit.Hex

/// A real `yaok-hub run` with the UDP transport on a free loopback port and the relay plugin,
/// output to `dir/hub.log`. Its relay section is `relay` (the YAML lines that name the relay:
/// `address:` with its pins, or an `addresses:` list); `relayAddresses:` makes the list.
public final class HubProcess {
    public static var binary: String { RelayProcess.productsDirectory + "/yaok-hub" }
    public let dir: String
    public let udpPort: UInt16
    private let process = Process()

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
        self.dir = dir
        let plugins = dir + "/plugins"
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
        for lib in ["libyaok-plugin-udp.so", "libyaok-plugin-relay.so"] {
            let built = RelayProcess.productsDirectory + "/" + lib
            guard FileManager.default.fileExists(atPath: built) else { throw XCTSkip("\(lib) is not built") }
            try FileManager.default.copyItem(atPath: built, toPath: plugins + "/" + lib)
        }
        let udp = try UDPSink()   // a free port: taken, then given to the hub
        udpPort = udp.port
        udp.close()
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
        try config.write(toFile: dir + "/hub.yaml", atomically: true, encoding: .utf8)
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["run", "--config", dir + "/hub.yaml"]
        var env = ProcessInfo.processInfo.environment
        env.removeValue(forKey: "NOTIFY_SOCKET")
        process.environment = env
        _ = FileManager.default.createFile(atPath: dir + "/hub.log", contents: nil)
        let logFile = try XCTUnwrap(FileHandle(forWritingAtPath: dir + "/hub.log"))
        process.standardOutput = logFile
        process.standardError = logFile
        try process.run()
    }

    /// `udp://` address for `yaok --hub`.
    public var url: String { "udp://127.0.0.1:\(udpPort)" }

    public func log() -> String { (try? String(contentsOfFile: dir + "/hub.log", encoding: .utf8)) ?? "" }

    /// The hub's signing key in hex (`yaok-hub identity --json`): what a phone pins (`yaok --trust-hub`).
    public func signingKey() throws -> String {
        let (rc, out) = try runTool(Self.binary, ["identity", "--socket", dir + "/control.sock", "--json"])
        guard rc == 0, let object = try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any],
              let key = object["signingKey"] as? String else { throw HubIdentityError(output: out) }
        return key
    }

    struct HubIdentityError: Error, CustomStringConvertible {
        let output: String
        var description: String { "yaok-hub identity gave no signing key: \(output)" }
    }

    /// `yaok-hub status` through the control socket: exit status and output.
    public func status() throws -> (Int32, String) { try runTool(Self.binary, ["status", "--socket", dir + "/control.sock"]) }

    /// SIGTERM and wait (bounded: SIGKILL after 10 s).
    public func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
    }
}
