import ArgumentParser
import Foundation
import YaokConsole
import YaokHubCore

/// `yaok-hub console-certificate`: prints the SHA-256 fingerprint of the console's TLS
/// certificate, making the self-signed pair first if neither file exists, so the operator can
/// note it before opening the console in a browser.
struct ConsoleCertificateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console-certificate",
        abstract: "Print the SHA-256 fingerprint of the console's TLS certificate (made self-signed if absent).",
        discussion: "Compare it with the fingerprint your browser shows for the console before you log in. Run it as the user the hub runs as, or as root (new files then go to the owner of the data directory).")
    @Option(name: .shortAndLong, help: "Config file (default: the embedded default config).") var config: String?

    func run() throws {
        let (cfg, dataDir) = try consoleConfig(config)
        let certificatePath = Paths.resolve(cfg.console.tlsCertificate, in: dataDir)
        let keyPath = Paths.resolve(cfg.console.tlsKey, in: dataDir)
        try checkRootMayWrite(certificatePath, named: "tls_certificate", configPath: config, dataDirectory: dataDir)
        try checkRootMayWrite(keyPath, named: "tls_key", configPath: config, dataDirectory: dataDir)
        let host = (try? ConsoleServer.hostPort(cfg.console.listen).0) ?? "127.0.0.1"
        do {
            let certificate = try ConsoleCertificate.loadOrCreate(certificatePath: certificatePath, keyPath: keyPath,
                                                                  hosts: ConsoleCertificate.hosts(listenHost: host))
            if certificate.created { print("made a self-signed certificate: \(certificatePath) (key \(keyPath), mode 0600)") }
            print("SHA-256 \(certificate.fingerprint)")
            if !cfg.console.tls { print("note: console.tls is off in this config; the console serves plain HTTP until you switch it on") }
        } catch {
            FileHandle.standardError.write(Data("yaok-hub: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}
