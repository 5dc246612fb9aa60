import ArgumentParser

/// Subcommands defined in their own files (kept apart so each mode's owner edits one file).
let extraSubcommands: [ParsableCommand.Type] = [ATTServeCommand.self, NetworkKeyCommand.self, CertCommand.self, PluginHostCommand.self, ConsolePasswordCommand.self, ConsoleCertificateCommand.self, StoreCommand.self]
