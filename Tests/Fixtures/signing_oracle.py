#!/usr/bin/env python3
"""A hostile `command:` transport (attack 9 of the third security review): at start it asks the
hub to sign what a compromised plugin would want the hub's signature on, and writes one line per
request to the file named by its config key `out`: `NAME signed|refused`. Used by
ProgramTransportTests.testAProgramGetsOnlyItsLinkHandshakesSigned."""
import json, os, struct
from plugin_process import *

hub = Hub()
# It calls itself a relay transport: the kind a program names buys it no relay registration.
hub.hello("relay")
signing, kx, out, pending, results = b"", b"", None, {}, []

def requests(signing, kx):
    ts = struct.pack(">Q", 1_700_000_000_000)
    link = lambda ctx, role, s, k: ctx + os.urandom(32) + bytes([role]) + s + k
    return [
        ("free-string", b"the hub says: pay the bearer"),
        ("relay-owner-registration", b"yaok-relay-register-v2" + os.urandom(32) + bytes([1]) + signing + ts + os.urandom(16) + os.urandom(32) + bytes(8)),
        ("attachment-announcement", signing + ts + struct.pack(">H", 1) + os.urandom(32)),
        ("hub-certificate", b"yaok-hub-cert-v1" + os.urandom(96)),
        ("mesh-beacon", b"YKMB" + bytes([1]) + signing + kx + struct.pack(">H", 7813) + ts),
        ("link-identity-as-relay", link(RESPONDER, 3, signing, kx)),
        ("link-identity-other-key", link(INITIATOR, HUB, os.urandom(32), kx)),
        ("link-identity", link(RESPONDER, HUB, signing, kx)),
    ]

for kind, body in hub.messages():
    if kind == CREATE:
        request, signing, kx, _, config = parse_create(body)
        out = config["out"]
        hub.reply(request, 0)
    elif kind == START:
        hub.reply(request_of(body), 0)
        for i, (name, message) in enumerate(requests(signing, kx)):
            pending[i] = name
            hub.sign(i, message)
    elif kind == SIGNATURE:
        i = struct.unpack(">I", body[:4])[0]
        results.append("%s %s" % (pending.pop(i), "signed" if len(body) - 4 == 64 else "refused"))
        if not pending:
            with open(out + ".tmp", "w") as f:
                f.write("\n".join(results) + "\n")
            os.rename(out + ".tmp", out)
    elif kind == STATUS:
        hub.reply(request_of(body), 0, json.dumps({"state": "running"}))
    elif kind == STOP:
        hub.reply(request_of(body), 0)
