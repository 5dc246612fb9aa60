import ArgumentParser
import Foundation
import YaokCrypto
import YaokPluginKit
import YaokWire

/// `yaok-hub network-key …`: the operator's network signing key, kept off the hubs.
struct NetworkKeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "network-key", abstract: "Manage a network key (signs hub certificates for `hub_trust: network`).",
        subcommands: [Init.self])

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a new Ed25519 network key in FILE (mode 0600; never overwrites) and print its public key.")
        @Argument(help: "Where to write the key. Keep it off the hubs.") var file: String

        func run() throws {
            do {
                let key = try NetworkKeyFile.create(path: file)
                print("network key \(YaokPluginKit.Hex.encode(key.publicKey))")
                print("put it in each hub's config: router.network_key: \(YaokPluginKit.Hex.encode(key.publicKey))")
            } catch {
                FileHandle.standardError.write(Data("yaok-hub: \(error)\n".utf8))
                throw ExitCode(1)
            }
        }
    }
}

/// `yaok-hub cert …`: hub certificates.
struct CertCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cert", abstract: "Issue and inspect hub certificates.", subcommands: [Issue.self, Inspect.self])

    struct Issue: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Sign a certificate for a hub's Ed25519 key (see `yaok-hub identity --json`, signingKey).")
        @Option(help: "The network key file (from `network-key init`).") var networkKey: String
        @Option(help: "The hub's Ed25519 public key, 64 hex digits.") var hub: String
        @Option(help: "Days of validity, from now.") var days: Int
        @Option(help: "Where to write the certificate (refuses to overwrite).") var out: String

        func validate() throws {
            guard (1...3650).contains(days) else { throw ValidationError("--days must be 1...3650") }
            guard Self.hexKey(hub) != nil else { throw ValidationError("--hub must be an Ed25519 public key: 64 hex digits") }
        }

        static func hexKey(_ s: String) -> [UInt8]? {
            guard s.utf8.count == 64, let bytes = YaokPluginKit.Hex.decode(s), bytes.count == 32 else { return nil }
            return bytes
        }

        /// Writes a new file (O_EXCL: an existing certificate is never replaced). A certificate
        /// is public; 0644 lets the hub's service user read it.
        static func writeNew(_ path: String, _ bytes: [UInt8]) throws {
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
            guard fd >= 0 else { throw CertFileError.cannotWrite(path, String(cString: strerror(errno))) }
            defer { close(fd) }
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
            guard n == bytes.count, fsync(fd) == 0 else {
                unlink(path)
                throw CertFileError.cannotWrite(path, String(cString: strerror(errno)))
            }
        }

        func run() throws {
            do {
                let key = try NetworkKeyFile.load(path: networkKey)
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let cert = try HubCertificate.issue(networkKey: key, hubKey: Self.hexKey(hub)!, notBeforeMs: now,
                                                    notAfterMs: now + Int64(days) * 86_400_000)
                try Self.writeNew(out, cert.encoded)
                print(CertCommand.describe(cert, nowMs: now))
            } catch let error as ValidationError {
                throw error
            } catch {
                FileHandle.standardError.write(Data("yaok-hub: \(error)\n".utf8))
                throw ExitCode(1)
            }
        }
    }

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a certificate: hub, network key, validity, and whether its signature verifies.")
        @Argument(help: "The certificate file.") var file: String

        func run() throws {
            guard let data = FileManager.default.contents(atPath: file) else {
                FileHandle.standardError.write(Data("yaok-hub: cannot read \(file)\n".utf8))
                throw ExitCode(1)
            }
            do {
                let cert = try HubCertificate(parsing: [UInt8](data))
                print(CertCommand.describe(cert, nowMs: Int64(Date().timeIntervalSince1970 * 1000)))
                if !cert.signatureVerifies { throw ExitCode(2) }
            } catch let exit as ExitCode {
                throw exit
            } catch {
                FileHandle.standardError.write(Data("yaok-hub: \(file): \(error)\n".utf8))
                throw ExitCode(1)
            }
        }
    }

    /// What `issue` and `inspect` print: public values only.
    static func describe(_ cert: HubCertificate, nowMs: Int64) -> String {
        let f = ISO8601DateFormatter()
        func date(_ ms: Int64) -> String { f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)) }
        let state = nowMs < cert.notBeforeMs ? "not yet valid" : nowMs > cert.notAfterMs ? "expired" : "valid now"
        return """
        hub key      \(YaokPluginKit.Hex.encode(cert.hubKey))
        hub          \(Identity.fingerprint(Hash.sha256(cert.hubKey)))
        network key  \(YaokPluginKit.Hex.encode(cert.networkKey))
        not before   \(date(cert.notBeforeMs))
        not after    \(date(cert.notAfterMs))  (\(state))
        signature    \(cert.signatureVerifies ? "verifies" : "DOES NOT VERIFY")
        """
    }
}

/// Why a certificate file was not written.
enum CertFileError: Error, CustomStringConvertible {
    case cannotWrite(String, String)
    var description: String {
        switch self {
        case .cannotWrite(let p, let why): return "cannot create \(p) (\(why)); an existing certificate is never overwritten"
        }
    }
}
