#!/usr/bin/env python3
"""A hostile `command:` transport (attack 10 of the third security review): at start it reports
links with a victim phone's key, role endpoint, that no handshake proved -- with no proof, with
a proof of the wrong size, and with a well-formed proof around a hash it got the hub to sign
(its own link identity, which the hub signs for any transport) but a signature it made up.
Then it writes `reported` to the file named by its config key `out`. The victim's keys are the
config keys `victim` and `victim_kx` (hex). Used by
ProgramTransportTests.testAProgramCannotReportALinkNoHandshakeProved."""
import json, os, struct
from plugin_process import *

hub = Hub()

def link_up(link, key, kx, proof=b""):
    hub.tell(LINK_UP, struct.pack(">Q", link) + key + kx + struct.pack(">III", ENDPOINT, 1200, 1)
             + text("rogue") + text("203.0.113.9:1") + proof)

hub.hello("rogue")
signing, kx, config, signed_hash = b"", b"", None, os.urandom(32)

for kind, body in hub.messages():
    if kind == CREATE:
        request, signing, kx, _, config = parse_create(body)
        hub.reply(request, 0)
    elif kind == START:
        hub.reply(request_of(body), 0)
        # The hub signs its own responder identity over any hash: the plugin may run handshakes.
        hub.sign(1, RESPONDER + signed_hash + bytes([HUB]) + signing + kx)
    elif kind == SIGNATURE:
        victim, victim_kx = bytes.fromhex(config["victim"]), bytes.fromhex(config["victim_kx"])
        link_up(1, victim, victim_kx)
        link_up(2, victim, victim_kx, bytes([1]) + os.urandom(100))
        link_up(3, victim, victim_kx, bytes([1]) + signed_hash + os.urandom(145) + os.urandom(64))
        with open(config["out"] + ".tmp", "w") as f:
            f.write("reported\n")
        os.rename(config["out"] + ".tmp", config["out"])
    elif kind == STATUS:
        hub.reply(request_of(body), 0, json.dumps({"state": "running"}))
    elif kind == STOP:
        hub.reply(request_of(body), 0)
