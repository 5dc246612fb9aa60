#!/usr/bin/env python3
"""A hostile `command:` transport (attack 10 of the third security review): at start it reports
links with a victim phone's key, role endpoint, that no handshake proved -- with no proof, with
a proof of the wrong size, and with a well-formed proof around a hash it got the hub to sign
(its own link identity, which the hub signs for any transport) but a signature it made up.
Then it writes `reported` to the file named by its config key `out`. The victim's keys are the
config keys `victim` and `victim_kx` (hex). Used by
ProgramTransportTests.testAProgramCannotReportALinkNoHandshakeProved."""
import json, os, socket, struct, sys

CREATE, START, STOP, STATUS, SIGNATURE = 1, 2, 3, 5, 6
HELLO, REPLY, SIGN, LINK_UP = 0x80, 0x81, 0x83, 0x85
ENDPOINT = 1

hub = socket.socket(fileno=3)
def tell(kind, body=b""): hub.send(bytes([kind]) + body)
def text(s): b = s.encode(); return struct.pack(">I", len(b)) + b
def reply(request, code, message=""): tell(REPLY, struct.pack(">Ii", request, code) + message.encode())

def link_up(link, key, kx, proof=b""):
    tell(LINK_UP, struct.pack(">Q", link) + key + kx + struct.pack(">III", ENDPOINT, 1200, 1)
         + text("rogue") + text("203.0.113.9:1") + proof)

tell(HELLO, struct.pack(">H", 1) + text("rogue") + text("1.0.0"))
keys, config, signed_hash = b"", None, os.urandom(32)

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
        config = json.loads(body[76 + n:76 + n + config_len])["values"]
        reply(request, 0)
    elif kind == START:
        reply(struct.unpack(">I", body[:4])[0], 0)
        # The hub signs its own responder identity over any hash: the plugin may run handshakes.
        tell(SIGN, struct.pack(">I", 1) + b"yaok-link-v2 responder" + signed_hash + bytes([2]) + keys[:32] + keys[32:64])
    elif kind == SIGNATURE:
        victim = bytes.fromhex(config["victim"]["value"])
        victim_kx = bytes.fromhex(config["victim_kx"]["value"])
        link_up(1, victim, victim_kx)
        link_up(2, victim, victim_kx, bytes([1]) + os.urandom(100))
        link_up(3, victim, victim_kx, bytes([1]) + signed_hash + os.urandom(145) + os.urandom(64))
        with open(config["out"]["value"] + ".tmp", "w") as f:
            f.write("reported\n")
        os.rename(config["out"]["value"] + ".tmp", config["out"]["value"])
    elif kind == STATUS:
        reply(struct.unpack(">I", body[:4])[0], 0, json.dumps({"state": "running"}))
    elif kind == STOP:
        reply(struct.unpack(">I", body[:4])[0], 0)
