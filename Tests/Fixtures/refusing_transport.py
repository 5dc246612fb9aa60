#!/usr/bin/env python3
"""A transport program for the router's tests (Docs/plugin-protocol.md over fd 3): on start it
reports one link to an endpoint whose keys its section names (`peer_key`, `peer_kx`, hex), with
the link proof its section names (`proof`, hex: the test made it as that endpoint; the program
first has the hub sign its own half over the proof's hash, as a handshake would), and it answers every `send` of a bundle with the code its section names (`send_code`, the
ABI's yaok_send_result: 2 queue full, 3 no link, 4 too large, 1 failed); other frames are
taken. Its status counts the bundle sends it was asked for. Python standard library only."""

import json
import socket
import struct
import sys

CREATE, START, STOP, SEND, STATUS, SIGNATURE = 1, 2, 3, 4, 5, 6
HELLO, REPLY, SIGN, LINK_UP, STATUS_CHANGED = 0x80, 0x81, 0x83, 0x85, 0x88


def text(s):
    b = s.encode()
    return struct.pack(">I", len(b)) + b


def main():
    hub = socket.socket(fileno=3)
    tell = lambda kind, body=b"": hub.send(bytes([kind]) + body)
    reply = lambda request, code, message="": tell(REPLY, struct.pack(">Ii", request, code) + message.encode())
    tell(HELLO, struct.pack(">H", 1) + text("refuse") + text("1.0.0"))
    config, sends, running, hub_keys = {}, 0, False, b""
    while True:
        message = hub.recv(200000)
        if not message:
            return 0
        kind, body = message[0], message[1:]
        request = struct.unpack(">I", body[:4])[0] if kind in (CREATE, START, STOP, SEND, STATUS) else 0
        if kind == CREATE:
            hub_keys = body[4:68]
            at = 4 + 64
            n = struct.unpack(">I", body[at:at + 4])[0]
            at += 4 + n
            n = struct.unpack(">I", body[at:at + 4])[0]
            values = json.loads(body[at + 4:at + 4 + n])["values"]
            config = {k: v["value"] for k, v in values.items()}
            reply(request, 0)
        elif kind == START:
            running = True
            reply(request, 0)
            proof = bytes.fromhex(config["proof"])
            tell(SIGN, struct.pack(">I", 1) + b"yaok-link-v2 responder" + proof[1:33] + bytes([2]) + hub_keys)
        elif kind == SIGNATURE:
            peer = bytes.fromhex(config["peer_key"]) + bytes.fromhex(config["peer_kx"])
            tell(LINK_UP, struct.pack(">Q", 7) + peer + struct.pack(">III", 1, 65000, 1) + text("refuse") + text("")
                 + bytes.fromhex(config["proof"]))
            tell(STATUS_CHANGED)
        elif kind == STOP:
            running = False
            reply(request, 0)
        elif kind == SEND:
            # Bundles only (TLV type 1 after the u32 request and u64 link): the hub's other
            # frames, such as its custodyAcks announcement at link up, go through.
            if body[12:13] != b"\x01":
                reply(request, 0)
                continue
            sends += 1
            reply(request, int(config.get("send_code", 1)), "refused on purpose")
        elif kind == STATUS:
            state = "running" if running else "stopped"
            reply(request, 0, json.dumps({"state": state, "reason": "refusing sends", "links": 1 if running else 0, "peers": 0,
                                          "frames_in": 0, "frames_out": 0, "bytes_in": 0, "bytes_out": 0,
                                          "details": {"sends_asked": str(sends)}}))


if __name__ == "__main__":
    sys.exit(main())
