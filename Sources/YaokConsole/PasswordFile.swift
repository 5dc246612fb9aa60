import CSodium
import Foundation
import Glibc
import YaokCrypto
import YaokPluginKit

/// The console password, kept only as an Argon2id hash (libsodium `crypto_pwhash_str`) in a
/// 0600 file: `yaok-hub console-password` writes it, the console verifies logins against it.
public enum PasswordFile {
    /// Why a password cannot be set or checked.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        case tooShort(Int)
        case tooLong(Int)
        case hashFailed
        case cannotWrite(String, String)
        public var description: String {
            switch self {
            case .tooShort(let n): return "the password must have at least \(n) characters"
            case .tooLong(let n): return "the password must have at most \(n) bytes"
            case .hashFailed: return "libsodium could not hash the password (out of memory?)"
            case .cannotWrite(let p, let why): return "cannot write \(p): \(why)"
            }
        }
    }

    public static let minLength = 10
    /// Bounds the work an unauthenticated request can cause (Argon2 cost is fixed, input hashing is not).
    public static let maxBytes = 256

    /// An Argon2id hash string with libsodium's interactive limits (64 MiB, ops 2): about a
    /// tenth of a second on a Raspberry Pi 4, and fine for one operator logging in.
    public static func hash(_ password: String) throws -> String {
        let bytes = Array(password.utf8)
        guard password.count >= minLength else { throw Failure.tooShort(minLength) }
        guard bytes.count <= maxBytes else { throw Failure.tooLong(maxBytes) }
        _ = sodium_init()
        var out = [CChar](repeating: 0, count: Int(crypto_pwhash_STRBYTES))
        let rc = bytes.withUnsafeBufferPointer { pw in
            pw.withMemoryRebound(to: CChar.self) { p in
                crypto_pwhash_str_alg(&out, p.baseAddress!, UInt64(p.count), UInt64(crypto_pwhash_OPSLIMIT_INTERACTIVE),
                                      Int(crypto_pwhash_MEMLIMIT_INTERACTIVE), crypto_pwhash_ALG_ARGON2ID13)
            }
        }
        guard rc == 0 else { throw Failure.hashFailed }
        return String(nulTerminated: out)
    }

    /// True when `password` matches `hash` (constant time inside libsodium).
    public static func verify(_ password: String, hash: String) -> Bool {
        let bytes = Array(password.utf8)
        guard !bytes.isEmpty, bytes.count <= maxBytes, hash.hasPrefix("$argon2id$") else { return false }
        _ = sodium_init()
        return bytes.withUnsafeBufferPointer { pw in
            pw.withMemoryRebound(to: CChar.self) { p in crypto_pwhash_str_verify(hash, p.baseAddress!, UInt64(p.count)) == 0 }
        }
    }

    /// The stored hash, or nil when no password was set (or the file is not a hash).
    public static func read(path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path), data.count < 512 else { return nil }
        let s = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return s.hasPrefix("$argon2id$") ? s : nil
    }

    /// Writes the hash with mode 0600 through a temporary file and rename; when run as root,
    /// the file goes to the owner of its directory (the service user), who must read it.
    public static func write(hash: String, path: String) throws {
        do throws(PrivateFileError) { try PrivateFile.write(Array((hash + "\n").utf8), to: path, owner: serviceOwner(of: path)) } catch {
            throw Failure.cannotWrite(path, error.reason)
        }
    }
}
