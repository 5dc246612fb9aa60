#!/usr/bin/env python3
"""A transport program for the router's tests (Docs/plugin-protocol.md over fd 3): on start it
reports one link to an endpoint whose keys its section names (`peer_key`, `peer_kx`, hex), with
the link proof its section names (`proof`, hex: the test made it as that endpoint; the program
first has the hub sign its own half over the proof's hash, as a handshake would), and it answers
every `send` of a bundle with the code its section names (`send_code`, the ABI's
yaok_send_result: 2 queue full, 3 no link, 4 too large, 1 failed); other frames are taken. Its
status counts the bundle sends it was asked for. Python standard library only."""

import json
import struct
import sys

from plugin_process import *


def main():
    hub = Hub()
    hub.hello("refuse")
    config, sends, running, hub_keys = {}, 0, False, b""
    for kind, body in hub.messages():
        if kind == CREATE:
            request, signing, kx, _, config = parse_create(body)
            hub_keys = signing + kx
            hub.reply(request, 0)
        elif kind == START:
            running = True
            hub.reply(request_of(body), 0)
            proof = bytes.fromhex(config["proof"])
            hub.sign(1, RESPONDER + proof[1:33] + bytes([HUB]) + hub_keys)
        elif kind == SIGNATURE:
            peer = bytes.fromhex(config["peer_key"]) + bytes.fromhex(config["peer_kx"])
            hub.tell(LINK_UP, struct.pack(">Q", 7) + peer + struct.pack(">III", ENDPOINT, 65000, 1) + text("refuse") + text("")
                     + bytes.fromhex(config["proof"]))
            hub.tell(STATUS_CHANGED)
        elif kind == STOP:
            running = False
            hub.reply(request_of(body), 0)
        elif kind == SEND:
            # Bundles only (TLV type 1 after the u32 request and u64 link): the hub's other
            # frames, such as its custodyAcks announcement at link up, go through.
            if body[12:13] != b"\x01":
                hub.reply(request_of(body), 0)
                continue
            sends += 1
            hub.reply(request_of(body), int(config.get("send_code", 1)), "refused on purpose")
        elif kind == STATUS:
            state = "running" if running else "stopped"
            hub.reply(request_of(body), 0, json.dumps({"state": state, "reason": "refusing sends", "links": 1 if running else 0, "peers": 0,
                                                        "frames_in": 0, "frames_out": 0, "bytes_in": 0, "bytes_out": 0,
                                                        "details": {"sends_asked": str(sends)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
