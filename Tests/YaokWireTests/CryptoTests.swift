import XCTest
import YaokCrypto
import enum YaokPluginKit.Hex

final class CryptoTests: XCTestCase {
    func testSignVerifyAndTamper() {
        let kp = SigningKeyPair.generate()
        let msg = Array("hello".utf8)
        let sig = kp.sign(msg)
        XCTAssertEqual(sig.count, 64)
        XCTAssertTrue(SigningKeyPair.verify(signature: sig, message: msg, publicKey: kp.publicKey))
        var bad = sig; bad[10] ^= 1
        XCTAssertFalse(SigningKeyPair.verify(signature: bad, message: msg, publicKey: kp.publicKey))
        XCTAssertFalse(SigningKeyPair.verify(signature: sig, message: Array("hellp".utf8), publicKey: kp.publicKey))
        XCTAssertFalse(SigningKeyPair.verify(signature: sig, message: msg, publicKey: SigningKeyPair.generate().publicKey))
        XCTAssertFalse(SigningKeyPair.verify(signature: Array(sig.prefix(63)), message: msg, publicKey: kp.publicKey))
        XCTAssertFalse(SigningKeyPair.verify(signature: sig, message: msg, publicKey: Array(kp.publicKey.prefix(31))))
    }

    func testSeededKeysAreDeterministic() throws {
        let a = try SigningKeyPair(seed: [UInt8](repeating: 1, count: 32))
        let b = try SigningKeyPair(seed: [UInt8](repeating: 1, count: 32))
        XCTAssertEqual(a.publicKey, b.publicKey)
        XCTAssertEqual(a.sign([1, 2, 3]), b.sign([1, 2, 3]))
        // RFC 8032 test 1: secret 9d61b19d..., public d75a9801...
        let rfc = try SigningKeyPair(seed: Hex.decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")!)
        XCTAssertEqual(Hex.encode(rfc.publicKey), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        XCTAssertEqual(Hex.encode(rfc.sign([])),
                       "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
        XCTAssertThrowsError(try SigningKeyPair(seed: [1, 2]))
        XCTAssertThrowsError(try KXKeyPair(secretKey: [UInt8](repeating: 0, count: 31)))
    }

    func testX25519RFC7748Vector() throws {
        // RFC 7748 section 6.1: Alice's private and public keys.
        let alice = try KXKeyPair(secretKey: Hex.decode("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")!)
        XCTAssertEqual(Hex.encode(alice.publicKey), "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
    }

    func testIdentityUserIDAndFingerprint() throws {
        let id = try Identity(ed25519Seed: [UInt8](repeating: 1, count: 32), x25519Secret: [UInt8](repeating: 2, count: 32))
        XCTAssertEqual(id.userID, Hash.sha256(id.signingKey))
        let fp = id.fingerprint
        XCTAssertEqual(fp.count, 64 + 15)
        let groups = fp.split(separator: " ")
        XCTAssertEqual(groups.count, 16)
        XCTAssertTrue(groups.allSatisfy { $0.count == 4 && $0.allSatisfy { "0123456789abcdef".contains($0) } })
        XCTAssertEqual(fp.replacingOccurrences(of: " ", with: ""), Identity.hexUserID(id.userID))
    }

    func testHashAndRandom() {
        XCTAssertEqual(Hex.encode(Hash.sha256(Array("abc".utf8))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(Random.bytes(40).count, 40)
        XCTAssertNotEqual(Random.bytes(32), Random.bytes(32))
        for _ in 0..<50 {
            let u = Random.uuidV4()
            XCTAssertEqual(u.count, 16)
            XCTAssertEqual(u[6] >> 4, 4)
            XCTAssertEqual(u[8] >> 6, 2)
        }
    }

    func testSecretBytesNeverPrinted() {
        let s = SecretBytes(copying: [1, 2, 3])
        XCTAssertEqual("\(s)", "<secret>")
        XCTAssertEqual(String(reflecting: s), "<secret>")
        XCTAssertEqual(s.withUnsafeBytes { Array($0) }, [1, 2, 3])
    }

    func testSealedBoxRoundTripAndFailures() throws {
        let recipient = KXKeyPair.generate()
        let eph = KXKeyPair.generate()
        let nonce = SealedBox.randomNonce()
        let ad: [UInt8] = [9, 9, 9]
        let ct = try SealedBox.seal(plaintext: [1, 2, 3], additionalData: ad[...], recipientKXKey: recipient.publicKey, ephemeral: eph, nonce: nonce)
        XCTAssertEqual(ct.count, 3 + SealedBox.tagLength)
        XCTAssertEqual(try SealedBox.open(ciphertext: ct[...], additionalData: ad[...], ephemeralPublicKey: eph.publicKey, nonce: nonce, recipient: recipient), [1, 2, 3])
        // Wrong AD, wrong key, flipped bit.
        XCTAssertThrowsError(try SealedBox.open(ciphertext: ct[...], additionalData: [9, 9, 8][...], ephemeralPublicKey: eph.publicKey, nonce: nonce, recipient: recipient)) {
            XCTAssertEqual($0 as? CryptoError, .decryptionFailed)
        }
        XCTAssertThrowsError(try SealedBox.open(ciphertext: ct[...], additionalData: ad[...], ephemeralPublicKey: eph.publicKey, nonce: nonce, recipient: .generate()))
        var flipped = ct; flipped[0] ^= 0x80
        XCTAssertThrowsError(try SealedBox.open(ciphertext: flipped[...], additionalData: ad[...], ephemeralPublicKey: eph.publicKey, nonce: nonce, recipient: recipient))
        // Small-order point (all zeros) gives an all-zero shared secret: refused.
        XCTAssertThrowsError(try SealedBox.seal(plaintext: [1], additionalData: [][...], recipientKXKey: [UInt8](repeating: 0, count: 32), ephemeral: eph, nonce: nonce)) {
            XCTAssertEqual($0 as? CryptoError, .weakPublicKey)
        }
        // Empty plaintext works.
        let empty = try SealedBox.seal(plaintext: [], additionalData: [][...], recipientKXKey: recipient.publicKey, ephemeral: eph, nonce: nonce)
        XCTAssertEqual(try SealedBox.open(ciphertext: empty[...], additionalData: [][...], ephemeralPublicKey: eph.publicKey, nonce: nonce, recipient: recipient), [])
    }

    /// A bundle ID reads its 16 bytes the same from an array or a slice, gives them back, and
    /// orders as the bytes do; any other length is no ID.
    func testBundleIDPacksItsBytesFromAnArrayOrASlice() {
        for _ in 0..<100 {
            let bytes = (0..<16).map { _ in UInt8.random(in: 0...255) }, other = (0..<16).map { _ in UInt8.random(in: 0...255) }
            let id = BundleID(bytes)
            XCTAssertEqual(BundleID(([9] + bytes)[1...]), id)
            XCTAssertEqual(id?.bytes, bytes)
            XCTAssertEqual(id! < BundleID(other)!, bytes.lexicographicallyPrecedes(other))
        }
        XCTAssertNil(BundleID([UInt8](repeating: 1, count: 15)))
        XCTAssertNil(BundleID([UInt8](repeating: 1, count: 17)))
        XCTAssertNil(BundleID([UInt8](repeating: 1, count: 17)[1...].dropFirst()))
    }
}
