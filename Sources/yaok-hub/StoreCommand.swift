import ArgumentParser
import Foundation
import YaokHubCore
import YaokStore

/// `yaok-hub store …`: offline maintenance of a stopped hub's store.
struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store", abstract: "Offline maintenance of the hub's store (stop the hub first).",
        subcommands: [Rewrite.self])

    struct Rewrite: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rewrite the store into a fresh file with pages of --page-size bytes (free pages dropped), then put it in place.",
            discussion: """
            The hub must be stopped: this takes the data directory's lock (hub.lock) and the store's \
            exclusive lock, and refuses while a hub holds either. Every table's rows are counted in \
            both files before the new one replaces the old; an interrupted run leaves the old store \
            as it was. Stores made before 2 KB pages became the default (the hub logs "pages of 4096 \
            bytes" at start) write about 40 % fewer bytes per message after this.
            """)
        @OptionGroup var options: ConfigOption
        @Option(help: "Page size of the new file: 2048 (the default for new stores), 4096 or 1024.")
        var pageSize: Int = SQLCipherDatabase.defaultPageSize
        @Option(help: ArgumentHelp("The store's key file, for a hub whose key comes as a systemd credential (the packaged hub: /etc/yaok-hub/db.key).",
                                   discussion: "Default: $CREDENTIALS_DIRECTORY/yaok-db-key if set, else the config's store.key_file."))
        var keyFile: String?

        func run() throws {
            let config = try options.loadOrExit()
            let dataDir = Paths.dataDirectory(configured: config.dataDir)
            let storePath = Paths.storeFile(dataDirectory: dataDir)
            do {
                guard FileManager.default.fileExists(atPath: storePath) else {
                    throw runtimeFailure("there is no store at \(storePath) (data_dir \(dataDir))", code: 66)
                }
                let lock = try DataDirectoryLock(dataDirectory: dataDir)
                defer { withExtendedLifetime(lock) {} }
                let key: [UInt8]
                if let keyFile {
                    key = try DatabaseKey.load(keyFile: keyFile, environment: [:], createIfMissing: false)
                } else {
                    key = try DatabaseKey.load(keyFile: Paths.resolve(config.store.keyFile, in: dataDir), createIfMissing: false)
                }
                // Unbuffered, line by line: a script (or a test) can act on each step as it starts.
                func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
                let report = try SQLCipherDatabase.rewrite(path: storePath, key: key, pageSize: pageSize, progress: say)
                say("store \(storePath) rewritten: pages of \(report.oldPageSize) -> \(report.newPageSize) bytes, "
                      + "\(report.rows) rows in \(report.tables) tables, \(Self.megabytes(report.bytesBefore)) -> \(Self.megabytes(report.bytesAfter)) MB")
            } catch {
                FileHandle.standardError.write(Data("yaok-hub: store rewrite: \(error)\n".utf8))
                throw ExitCode(1)
            }
        }

        static func megabytes(_ bytes: Int64) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }
    }
}
