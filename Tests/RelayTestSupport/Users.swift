import Foundation
import XCTest
import YaokCrypto
import YaokWire
import enum YaokPluginKit.Hex

/// `yaok init` for Alice and Bob under `dir`, each with the other as a contact; their homes.
public func initAliceAndBob(_ yaok: String, in dir: String, file: StaticString = #filePath, line: UInt = #line) throws -> (alice: String, bob: String) {
    let alice = dir + "/alice", bob = dir + "/bob"
    XCTAssertEqual(try runTool(yaok, ["init", "--home", alice, "--name", "Alice"]).0, 0, file: file, line: line)
    XCTAssertEqual(try runTool(yaok, ["init", "--home", bob, "--name", "Bob"]).0, 0, file: file, line: line)
    let aliceCode = try runTool(yaok, ["qr", "--home", alice]).1.trimmingCharacters(in: .whitespacesAndNewlines)
    let bobCode = try runTool(yaok, ["qr", "--home", bob]).1.trimmingCharacters(in: .whitespacesAndNewlines)
    XCTAssertEqual(try runTool(yaok, ["contacts", "add", "--home", alice, bobCode]).0, 0, file: file, line: line)
    XCTAssertEqual(try runTool(yaok, ["contacts", "add", "--home", bob, aliceCode]).0, 0, file: file, line: line)
    return (alice, bob)
}

/// A fresh 0700 directory under the system's temporary directory; removing it is appended
/// to `cleanup` (which the test runs in reverse at tear-down, after its processes stop).
public func makeTemporaryDirectory(_ prefix: String, cleanup: inout [() -> Void]) throws -> String {
    let d = NSTemporaryDirectory() + prefix + Hex.encode(Random.bytes(6))
    try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    cleanup.append { try? FileManager.default.removeItem(atPath: d) }
    return d
}

public func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// A signed message bundle from `sender` to `recipient`: `size` times "a".
public func messageBundle(from sender: Identity, to recipient: Identity, size: Int = 32) throws -> [UInt8] {
    try messageBundle(String(repeating: "a", count: size), from: sender, to: recipient)
}

/// A signed message bundle from `sender` to `recipient` saying `text`.
public func messageBundle(_ text: String, from sender: Identity, to recipient: Identity) throws -> [UInt8] {
    let envelope = try Envelope.sealMessage(plaintext: Array(text.utf8), from: sender,
                                            toSigningKey: recipient.signingKey, recipientKXKey: recipient.kxKey, createdMs: nowMs())
    return YaokWire.Bundle(envelope: envelope).encoded
}
