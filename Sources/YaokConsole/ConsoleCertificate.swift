import Crypto
import Foundation
import Glibc
import NIOSSL
import SwiftASN1
import X509
import YaokCrypto
import YaokPluginKit

/// The console's TLS certificate and key (`console.tls`). An operator may supply both files
/// (a certificate from their own CA); with neither present the hub makes a self-signed pair
/// once — P-256 ECDSA, the key in a 0600 file — and keeps it, so its fingerprint stays what the
/// operator noted. A browser cannot check a self-signed certificate itself: the operator
/// compares the fingerprint it shows with ``fingerprint`` (`yaok-hub console-certificate`).
public struct ConsoleCertificate: Sendable {
    /// The chain as NIOSSL serves it, leaf first.
    public let chain: [NIOSSLCertificate]
    public let key: NIOSSLPrivateKey
    /// SHA-256 of the leaf's DER, as browsers show it: `AB:CD:…` (32 bytes, upper case).
    public let fingerprint: String
    /// True when this call made the pair.
    public let created: Bool

    /// Why the console cannot serve TLS; each names the file and the config key.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        case onlyOne(present: String, missing: String, missingKey: String)
        case unreadable(path: String, key: String, why: String)
        case cannotCreate(path: String, PrivateFileError)

        public var description: String {
            switch self {
            case .onlyOne(let present, let missing, let missingKey):
                return "console.\(missingKey): \(missing) does not exist but \(present) does; supply both files, "
                    + "or remove both to have a self-signed pair made"
            case .unreadable(let path, let key, let why): return "console.\(key): cannot use \(path): \(why)"
            case .cannotCreate(let path, let error): return "cannot write \(path): \(error.reason)"
            }
        }
    }

    /// Years a self-signed certificate made here is valid; renewing means removing both files.
    static let validityYears = 5

    /// Loads the pair, or makes a self-signed one when neither file exists. `hosts` are the
    /// names and addresses the certificate names (its subjectAltName); run as root, new files
    /// go to the owner of their directory (the service user), as the password file does.
    public static func loadOrCreate(certificatePath: String, keyPath: String, hosts: [String]) throws -> ConsoleCertificate {
        let haveCert = FileManager.default.fileExists(atPath: certificatePath)
        let haveKey = FileManager.default.fileExists(atPath: keyPath)
        var created = false
        switch (haveCert, haveKey) {
        case (true, false): throw Failure.onlyOne(present: certificatePath, missing: keyPath, missingKey: "tls_key")
        case (false, true): throw Failure.onlyOne(present: keyPath, missing: certificatePath, missingKey: "tls_certificate")
        case (false, false):
            let pair = try makeSelfSigned(hosts: hosts)
            // The key first: a crash between the two leaves a key without a certificate,
            // which the next start names rather than silently replaces.
            var writing = keyPath
            do throws(PrivateFileError) {
                try PrivateFile.write(Array(pair.keyPEM.utf8), to: keyPath, owner: serviceOwner(of: keyPath))
                writing = certificatePath
                try PrivateFile.write(Array(pair.certificatePEM.utf8), to: certificatePath, mode: 0o644, owner: serviceOwner(of: certificatePath))
            } catch {
                throw Failure.cannotCreate(path: writing, error)
            }
            created = true
        case (true, true): break
        }
        let chain: [NIOSSLCertificate]
        do { chain = try NIOSSLCertificate.fromPEMFile(certificatePath) } catch {
            throw Failure.unreadable(path: certificatePath, key: "tls_certificate", why: "not a PEM certificate (\(error))")
        }
        guard let leaf = chain.first else {
            throw Failure.unreadable(path: certificatePath, key: "tls_certificate", why: "no certificate in the file")
        }
        // An operator's key may be a symlink (certbot's are), so it is followed.
        var pem: [UInt8]
        do throws(PrivateFileError) {
            pem = try PrivateFile.read(keyPath, maxBytes: 1 << 20, followSymlinks: true)
        } catch .insecurePermissions(_, let mode) {
            throw Failure.unreadable(path: keyPath, key: "tls_key", why: "other users may read it (mode \(String(mode & 0o777, radix: 8))); chmod 600 it")
        } catch {
            throw Failure.unreadable(path: keyPath, key: "tls_key", why: error.reason)
        }
        defer { wipe(&pem) }
        let key: NIOSSLPrivateKey
        do { key = try NIOSSLPrivateKey(bytes: pem, format: .pem) } catch {
            throw Failure.unreadable(path: keyPath, key: "tls_key", why: "not a PEM private key (\(error))")
        }
        let der: [UInt8]
        do { der = try leaf.toDERBytes() } catch {
            throw Failure.unreadable(path: certificatePath, key: "tls_certificate", why: "\(error)")
        }
        return ConsoleCertificate(chain: chain, key: key, fingerprint: fingerprint(der: der), created: created)
    }

    /// `AB:CD:…`: the SHA-256 of a certificate's DER bytes in the form browsers show.
    public static func fingerprint(der: [UInt8]) -> String {
        let hex = Hex.encode(Hash.sha256(der)).uppercased()
        var out = ""
        for (i, c) in hex.enumerated() {
            if i > 0 && i % 2 == 0 { out.append(":") }
            out.append(c)
        }
        return out
    }

    /// A self-signed server certificate for `hosts` (IP addresses and DNS names), P-256 ECDSA.
    static func makeSelfSigned(hosts: [String], now: Date = Date()) throws -> (certificatePEM: String, keyPEM: String) {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            OrganizationName("Ya OK Hub")
            CommonName("Ya OK Hub console")
        }
        var names: [GeneralName] = []
        for host in hosts {
            if let ip = ipBytes(host) { names.append(.ipAddress(ASN1OctetString(contentBytes: ArraySlice(ip)))) } else { names.append(.dnsName(host)) }
        }
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            try ExtendedKeyUsage([.serverAuth])
            SubjectAlternativeNames(names)
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-3600),
            notValidAfter: now.addingTimeInterval(Double(validityYears) * 365.25 * 86_400),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: .init(key))
        return (try certificate.serializeAsPEM().pemString, key.pemRepresentation)
    }

    /// The bytes of an IPv4 or IPv6 literal, or nil for a name.
    static func ipBytes(_ host: String) -> [UInt8]? {
        var a4 = in_addr()
        if inet_pton(AF_INET, host, &a4) == 1 { return withUnsafeBytes(of: a4) { Array($0) } }
        var a6 = in6_addr()
        if inet_pton(AF_INET6, host, &a6) == 1 { return withUnsafeBytes(of: a6) { Array($0) } }
        return nil
    }

    /// What the certificate should name for a console listening on `listenHost`: that address
    /// (unless it is a wildcard), loopback and `localhost`.
    public static func hosts(listenHost: String) -> [String] {
        var hosts = ["localhost", "127.0.0.1", "::1"]
        if !["0.0.0.0", "::", ""].contains(listenHost), !hosts.contains(listenHost) { hosts.insert(listenHost, at: 0) }
        return hosts
    }

    /// The server side of TLS 1.2 or later with this pair.
    public var tlsConfiguration: TLSConfiguration {
        var c = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        c.minimumTLSVersion = .tlsv12
        return c
    }
}

/// Who should own a console file written at `path`: run as root (`yaok-hub console-password`
/// and `console-certificate`), the owner of its directory, the service user who must read
/// it; otherwise nobody in particular (the writer).
func serviceOwner(of path: String) -> PrivateFile.Owner? {
    guard geteuid() == 0 else { return nil }
    let dir = (path as NSString).deletingLastPathComponent
    var st = stat()
    guard stat(dir.isEmpty ? "." : dir, &st) == 0 else { return nil }
    return PrivateFile.Owner(uid: st.st_uid, gid: st.st_gid)
}
