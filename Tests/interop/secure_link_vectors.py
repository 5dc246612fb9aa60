#!/usr/bin/env python3
"""Recomputes the secure-link vectors of Docs/protocol.md §8 with an independent
implementation (Python `cryptography`, i.e. OpenSSL) of Docs/protocol.md §5:
Noise_NN_25519_ChaChaPoly_SHA256 with signed identity payloads. Exits non-zero on any
difference, so a change on either side that breaks interoperability fails the tests."""
import hashlib, hmac, re, struct, sys, pathlib
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

RAW = (Encoding.Raw, PublicFormat.Raw)

def x_pub(sk): return X25519PrivateKey.from_private_bytes(sk).public_key().public_bytes(*RAW)
def ed(seed): return Ed25519PrivateKey.from_private_bytes(seed)
def sha(b): return hashlib.sha256(b).digest()
def hkdf2(ck, ikm):
    t = hmac.new(ck, ikm, hashlib.sha256).digest()
    o1 = hmac.new(t, b"\x01", hashlib.sha256).digest()
    return o1, hmac.new(t, o1 + b"\x02", hashlib.sha256).digest()
def nonce(n): return b"\x00" * 4 + struct.pack("<Q", n)
def tlv(t, v): return bytes([t]) + struct.pack(">H", len(v)) + v

phone_seed, phone_kx = b"\x01" * 32, b"\x02" * 32   # Fixed.sender
hub_seed, hub_kx = b"\x05" * 32, b"\x06" * 32       # Fixed.hub
ei, er = b"\x0a" * 32, b"\x0b" * 32                 # Fixed.link*Ephemeral
ENDPOINT, HUB = 1, 2

def identity(role, seed, kx, context, h):
    body = bytes([role]) + ed(seed).public_key().public_bytes(*RAW) + x_pub(kx)
    return body + ed(seed).sign(context + h + body)

name = b"Noise_NN_25519_ChaChaPoly_SHA256"
h = ck = name
h = sha(h + b"yaok-link-v2\x02")
Ei = x_pub(ei)
h = sha(h + Ei); h = sha(h + b"")                    # -> e, empty payload
hello = tlv(0x20, b"\x02" + Ei + b"\x00" * 16)
Er = x_pub(er)
h = sha(h + Er)
ck, k = hkdf2(ck, X25519PrivateKey.from_private_bytes(er).exchange(X25519PublicKey.from_public_bytes(Ei)))
payload = identity(HUB, hub_seed, hub_kx, b"yaok-link-v2 responder", h)
enc = ChaCha20Poly1305(k).encrypt(nonce(0), payload, h)
h = sha(h + enc)
reply = tlv(0x22, Er + enc)
i2r, r2i = hkdf2(ck, b"")
mine = identity(ENDPOINT, phone_seed, phone_kx, b"yaok-link-v2 initiator", h)
ident = tlv(0x23, struct.pack(">Q", 0) + ChaCha20Poly1305(i2r).encrypt(nonce(0), tlv(0x15, mine), b""))
computed = {"linkHelloFrame": hello, "linkReplyFrame": reply, "linkIdentityFrame": ident, "linkHandshakeHash": h}

vectors = (pathlib.Path(__file__).resolve().parents[1] / "YaokWireTests" / "Vectors.swift").read_text()
def vector(n): return bytes.fromhex(re.search(r'static let %s = "([0-9a-f]*)"' % n, vectors).group(1))
computed["sealedCustodyAckFrame"] = tlv(0x23, struct.pack(">Q", 0) + ChaCha20Poly1305(r2i).encrypt(
    nonce(0), vector("custodyAckFrame"), b""))
bad = [n for n, v in computed.items() if vector(n) != v]
for n in bad: print("MISMATCH %s\n  swift : %s\n  python: %s" % (n, vector(n).hex(), computed[n].hex()))
print("secure-link vectors: %d of %d reproduced independently" % (len(computed) - len(bad), len(computed)))
sys.exit(1 if bad else 0)
