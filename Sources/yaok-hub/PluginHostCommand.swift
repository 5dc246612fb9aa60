import ArgumentParser
import YaokHubCore
import YaokSupervision

/// `yaok-hub plugin-host`: the process the hub starts for each transport (Docs/plugin-protocol.md).
/// Not for operators: the hub passes the socket on fd 3.
struct PluginHostCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugin-host", abstract: "Serve one transport plugin for the hub (started by the hub).", shouldDisplay: false)

    @Option(help: "The plugin file to serve.") var plugin: String?
    @Option(help: "Check one plugin file and print what was found, as JSON.") var probe: String?
    @Option(help: "The socket inherited from the hub.") var fd: Int32 = 3
    @Option(name: .customLong("memory-limit-mb"), help: "Address-space limit, MB (0: none).") var memoryLimitMB: Int = 0
    @Option(help: "Capabilities to keep, a hex bit mask of CAP_* numbers (default: none).") var capabilities: String = "0"
    @Flag(help: "Set up the sandbox, then run the program given after --.") var exec = false
    @Argument(parsing: .postTerminator, help: "With --exec: the program (an absolute path) and its arguments.") var program: [String] = []

    func run() throws {
        if let probe { throw ExitCode(PluginProcessMain.probe(path: probe)) }
        guard let mask = UInt64(capabilities, radix: 16) else { throw ValidationError("--capabilities must be a hex bit mask") }
        if exec {
            guard !program.isEmpty else { throw ValidationError("--exec needs the program after --") }
            throw ExitCode(PluginProcessMain.exec(program, memoryLimitMB: memoryLimitMB, capabilities: mask))
        }
        guard let plugin else { throw ValidationError("--plugin, --probe or --exec is required") }
        PluginProcessMain.run(pluginPath: plugin, fd: fd, memoryLimitMB: memoryLimitMB, capabilities: mask)
    }
}
