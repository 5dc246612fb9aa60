import ArgumentParser
import Dispatch
import Foundation
import Glibc
import YaokATT
import YaokProcess

/// `yaok-hub att-serve`: serves a JSON attribute table over a UNIX SOCK_SEQPACKET socket,
/// one ATT PDU per packet, a fresh table copy per connection. It exercises the same ATT
/// engine the BLE plugin uses, without a radio.
struct ATTServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "att-serve",
        abstract: "Serve an ATT attribute table on a UNIX SOCK_SEQPACKET socket.",
        discussion: """
            Each connection gets its own fresh copy of the table (writes on one connection are \
            not seen by others). The link counts as unencrypted, so attributes that need \
            encryption, authentication or authorization answer with the matching ATT error. \
            The table format is described in Docs/att-table-format.md. Stops on SIGINT/SIGTERM.
            """)

    @Option(name: .long, help: "The JSON attribute table file.")
    var table: String

    @Option(name: .long, help: "The UNIX socket path to listen on (a stale socket file is replaced).")
    var socket: String

    @Option(name: .long, help: "Server receive MTU announced in Exchange MTU (23...517).")
    var mtu: UInt16 = 512

    @Flag(name: .customLong("no-cccd-check"), help: "Accept CCCD writes of any length (default: exactly 2 octets).")
    var noCCCDCheck = false

    @Option(name: .customLong("max-connections"), help: "Connections served at once; more are closed at once.")
    var maxConnections: Int = 16

    func validate() throws {
        guard (23...517).contains(mtu) else { throw ValidationError("--mtu must be in 23...517, got \(mtu)") }
        guard (1...1024).contains(maxConnections) else {
            throw ValidationError("--max-connections must be in 1...1024, got \(maxConnections)")
        }
    }

    func run() throws {
        let attributeTable = try AttributeTableFile.load(path: table)
        let options = ATTSeqpacketServer.Options(serverReceiveMTU: mtu, checkCCCDWrites: !noCCCDCheck,
                                                 maxConnections: maxConnections)
        let server = ATTSeqpacketServer(table: attributeTable, socketPath: socket, options: options)
        server.onConnect = { id, engine in
            Self.log("\(id) connected")
            // Only handles and sizes are logged: values may be message content.
            engine.onWrite = { handle, value, isCommand in
                Self.log("\(id) \(isCommand ? "write command" : "write") handle \(Self.hex(handle)) (\(value.count) bytes)")
                return nil
            }
        }
        server.onDisconnect = { id in Self.log("\(id) disconnected") }

        // main installed SignalWaiter's handlers first thing, so a SIGTERM that comes before
        // this point waits in its pipe and is read here. (A dispatch source of att-serve's own,
        // set up after SIG_IGN, would lose one that came before: it would sit in that pipe, unread.)
        let stopRequested = DispatchSemaphore(value: 0)
        SignalWaiter.start { signalNumber in
            if signalNumber == SIGINT || signalNumber == SIGTERM { stopRequested.signal() }
        }

        try server.start()
        Self.log("serving \(attributeTable.count) attributes on \(socket) (server MTU \(mtu), CCCD check \(noCCCDCheck ? "off" : "on"))")
        stopRequested.wait()
        Self.log("stopping")
        server.stop()
    }

    private static func hex(_ handle: UInt16) -> String {
        let digits = String(handle, radix: 16)
        return "0x" + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    private static func log(_ line: String) {
        FileHandle.standardError.write(Data("att-serve: \(line)\n".utf8))
    }
}
