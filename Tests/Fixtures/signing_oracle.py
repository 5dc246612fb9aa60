#!/usr/bin/env python3
"""A hostile `command:` transport (attack 9 of the third security review): at start it asks the
hub to sign what a compromised plugin would want the hub's signature on, and writes one line per
request to the file named by its config key `out`: `NAME signed|refused`. Used by
ProgramTransportTests.testAProgramGetsOnlyItsLinkHandshakesSigned."""
import json, os, socket, struct, sys

CREATE, START, STOP, STATUS, SIGNATURE = 1, 2, 3, 5, 6
HELLO, REPLY, SIGN = 0x80, 0x81, 0x83

hub = socket.socket(fileno=3)
def tell(kind, body=b""): hub.send(bytes([kind]) + body)
def text(s): b = s.encode(); return struct.pack(">I", len(b)) + b
def reply(request, code, message=""): tell(REPLY, struct.pack(">Ii", request, code) + message.encode())

# It calls itself a relay transport: the kind a program names buys it no relay registration.
tell(HELLO, struct.pack(">H", 1) + text("relay") + text("1.0.0"))
keys, out, pending, results = b"", None, {}, []

def requests(signing, kx):
    ts = struct.pack(">Q", 1_700_000_000_000)
    link = lambda ctx, role, s, k: ctx + os.urandom(32) + bytes([role]) + s + k
    return [
        ("free-string", b"the hub says: pay the bearer"),
        ("relay-owner-registration", b"yaok-relay-register-v2" + os.urandom(32) + bytes([1]) + signing + ts + os.urandom(16) + os.urandom(32) + bytes(8)),
        ("attachment-announcement", signing + ts + struct.pack(">H", 1) + os.urandom(32)),
        ("hub-certificate", b"yaok-hub-cert-v1" + os.urandom(96)),
        ("mesh-beacon", b"YKMB" + bytes([1]) + signing + kx + struct.pack(">H", 7813) + ts),
        ("link-identity-as-relay", link(b"yaok-link-v2 responder", 3, signing, kx)),
        ("link-identity-other-key", link(b"yaok-link-v2 initiator", 2, os.urandom(32), kx)),
        ("link-identity", link(b"yaok-link-v2 responder", 2, signing, kx)),
    ]

while True:
    m = hub.recv(131072)
    if not m:
        break
    kind, body = m[0], m[1:]
    if kind == CREATE:
        request = struct.unpack(">I", body[:4])[0]
        keys = body[4:68]
        n = struct.unpack(">I", body[68:72])[0]
        config_len = struct.unpack(">I", body[72 + n:76 + n])[0]
        config = json.loads(body[76 + n:76 + n + config_len])
        out = config["values"]["out"]["value"]
        reply(request, 0)
    elif kind == START:
        reply(struct.unpack(">I", body[:4])[0], 0)
        for i, (name, message) in enumerate(requests(keys[:32], keys[32:64])):
            pending[i] = name
            tell(SIGN, struct.pack(">I", i) + message)
    elif kind == SIGNATURE:
        i = struct.unpack(">I", body[:4])[0]
        results.append("%s %s" % (pending.pop(i), "signed" if len(body) - 4 == 64 else "refused"))
        if not pending:
            with open(out + ".tmp", "w") as f:
                f.write("\n".join(results) + "\n")
            os.rename(out + ".tmp", out)
    elif kind == STATUS:
        reply(struct.unpack(">I", body[:4])[0], 0, json.dumps({"state": "running"}))
    elif kind == STOP:
        reply(struct.unpack(">I", body[:4])[0], 0)
