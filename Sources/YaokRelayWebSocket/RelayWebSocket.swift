/// YaokRelayWebSocket: the relay's packets carried as binary WebSocket messages over TLS 1.3,
/// for uplinks that block UDP. The server side is a listener in `yaok-relay`; the client side
/// pins the relay certificate's SubjectPublicKeyInfo (SPKI) hash.
///
/// Each relay packet (at most 1472 bytes, exactly as on UDP) is one binary WebSocket message.
/// The relay's own handshake and secure channel run inside unchanged, so TLS adds a second,
/// independent layer: the SPKI pin authenticates the TLS server, the pinned Ed25519 relay key
/// the relay itself.
import Foundation
import NIOCore
import NIOSSL
import YaokCrypto
import YaokRelayProtocol
#if canImport(Glibc)
import Glibc
#endif
import enum YaokPluginKit.Hex
import struct YaokPluginKit.IPEndpoint

/// Errors setting up the TLS listener or client.
public enum RelayTLSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The private key file is readable by others than its owner.
    case keyFilePermissions(path: String, mode: UInt16)
    /// A certificate or key file could not be read or parsed.
    case cannotLoad(path: String, reason: String)
    /// The certificate file holds no certificate.
    case noCertificate(path: String)
    /// A `wss://` URL that does not parse.
    case badURL(String)
    /// A pin that is not 64 hex digits.
    case badPin(String)

    public var description: String {
        switch self {
        case .keyFilePermissions(let path, let mode):
            return "TLS key file \(path) has mode \(String(mode, radix: 8)); it must be readable by its owner only (chmod 600 \(path))"
        case .cannotLoad(let path, let reason): return "cannot load \(path): \(reason)"
        case .noCertificate(let path): return "\(path) holds no PEM certificate"
        case .badURL(let text): return "expected wss://host:port[/path], got \"\(text)\""
        case .badPin(let text): return "expected the relay's TLS SPKI SHA-256 as 64 hex digits (from `yaok-relay tls-pin`), got \"\(text)\""
        }
    }
}

/// SPKI pins: SHA-256 (libsodium `crypto_hash_sha256`) of a certificate's DER
/// SubjectPublicKeyInfo, the same value `curl --pinnedpubkey sha256//…` uses (there base64).
public enum SPKIPin {
    /// The pin of a certificate.
    public static func sha256(of certificate: NIOSSLCertificate) throws -> [UInt8] {
        Hash.sha256(try certificate.extractPublicKey().toSPKIBytes())
    }

    /// The pin of the first (leaf) certificate in a PEM file.
    public static func sha256(certificateFile path: String) throws -> [UInt8] {
        let chain = try RelayTLSFiles.loadCertificates(path)
        return try sha256(of: chain[0])
    }

    /// Parses 64 hex digits.
    public static func parse(_ text: String) throws -> [UInt8] {
        guard let bytes = Hex.decode(text.trimmingCharacters(in: .whitespaces)), bytes.count == 32 else { throw RelayTLSError.badPin(text) }
        return bytes
    }
}

/// Loading the relay's certificate chain and private key (PEM files).
public enum RelayTLSFiles {
    /// The certificates in a PEM file, leaf first.
    public static func loadCertificates(_ path: String) throws -> [NIOSSLCertificate] {
        let chain: [NIOSSLCertificate]
        do { chain = try NIOSSLCertificate.fromPEMFile(path) } catch {
            throw RelayTLSError.cannotLoad(path: path, reason: String(describing: error))
        }
        guard !chain.isEmpty else { throw RelayTLSError.noCertificate(path: path) }
        return chain
    }

    /// The private key, refused unless the file is mode 0600 or stricter (no group/other bits).
    public static func loadPrivateKey(_ path: String) throws -> NIOSSLPrivateKey {
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw RelayTLSError.cannotLoad(path: path, reason: String(cString: strerror(errno)))
        }
        let mode = UInt16(st.st_mode & 0o777)
        guard mode & 0o077 == 0 else { throw RelayTLSError.keyFilePermissions(path: path, mode: mode) }
        do { return try NIOSSLPrivateKey(file: path, format: .pem) } catch {
            throw RelayTLSError.cannotLoad(path: path, reason: String(describing: error))
        }
    }

    /// A TLS 1.3-only server context for the certificate chain and key.
    public static func serverContext(certificatePath: String, privateKeyPath: String) throws -> NIOSSLContext {
        let chain = try loadCertificates(certificatePath)
        let key = try loadPrivateKey(privateKeyPath)
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.minimumTLSVersion = .tlsv13
        do { return try NIOSSLContext(configuration: tls) } catch {
            throw RelayTLSError.cannotLoad(path: certificatePath, reason: "TLS context: \(error)")
        }
    }
}

/// A relay WebSocket address: `wss://host:port/path` (port 443 and path
/// ``RelayWebSocketURL/defaultPath`` when omitted; `[v6]` literals allowed).
public struct RelayWebSocketURL: Sendable, Hashable, CustomStringConvertible {
    /// The path the relay's listener upgrades; any other path gets 404.
    public static let defaultPath = "/yaok-relay"
    public var host: String
    public var port: UInt16
    public var path: String

    public init(host: String, port: UInt16, path: String = RelayWebSocketURL.defaultPath) {
        self.host = host
        self.port = port
        self.path = path
    }

    /// Parses `wss://host[:port][/path]`.
    public init(parsing text: String) throws {
        guard text.lowercased().hasPrefix("wss://") else { throw RelayTLSError.badURL(text) }
        var rest = Substring(text.dropFirst(6))
        var path = Self.defaultPath
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        var host: String
        var port: UInt16 = 443
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw RelayTLSError.badURL(text) }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = UInt16(after.dropFirst()) else { throw RelayTLSError.badURL(text) }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let p = UInt16(rest[rest.index(after: colon)...]) else { throw RelayTLSError.badURL(text) }
            port = p
        } else {
            host = String(rest)
        }
        guard !host.isEmpty, host.utf8.count <= 253, port > 0, path.utf8.count <= 256,
              !path.contains(where: { $0 == " " || $0 == "\r" || $0 == "\n" }) else { throw RelayTLSError.badURL(text) }
        self.init(host: host, port: port, path: path)
    }

    /// The host and port as an ``IPEndpoint`` (for messages and the client's configuration).
    public var address: IPEndpoint { IPEndpoint(host: host, port: port) }

    public var description: String {
        (host.contains(":") ? "wss://[\(host)]:\(port)" : "wss://\(host):\(port)") + path
    }
}

/// Limits shared by both ends.
enum RelayWebSocketLimits {
    /// Largest WebSocket frame accepted: one relay packet, with room to spare for nothing else.
    static let maxFrameSize = RelayPacket.maxDatagramLength
}
