import ArgumentParser
import Foundation

/// Subcommands defined in their own files (kept apart so each mode's owner edits one file).
let extraSubcommands: [ParsableCommand.Type] = [ATTServeCommand.self, NetworkKeyCommand.self, CertCommand.self, PluginHostCommand.self, ConsolePasswordCommand.self, ConsoleCertificateCommand.self, StoreCommand.self]

/// A failure while a well-formed command ran: `Error: …` on stderr without the usage banner
/// (ArgumentParser prints that for usage errors, exit 64), and an exit code that says what
/// happened (1 refused, 66 no input, 75 try again later).
func runtimeFailure(_ message: String, code: Int32) -> ExitCode {
    FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
    return ExitCode(code)
}
