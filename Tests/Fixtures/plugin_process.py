"""The plugin-process protocol (Docs/plugin-protocol.md) as the test programs beside this file
speak it: fd 3 to the hub, message kinds, and the hub's `create` read. Standard library only;
a program here imports it from its own directory."""
import json
import socket
import struct

# Hub -> plugin
CREATE, START, STOP, SEND, STATUS, SIGNATURE = 1, 2, 3, 4, 5, 6
# Plugin -> hub
HELLO, REPLY, LOG, SIGN, METRIC, LINK_UP, LINK_DOWN, FRAME, STATUS_CHANGED = 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88
ENDPOINT, HUB = 1, 2
# The link-identity statements a handshake has the hub sign (Docs/protocol.md section 5).
RESPONDER, INITIATOR = b"yaok-link-v2 responder", b"yaok-link-v2 initiator"


def text(s):
    b = s.encode()
    return struct.pack(">I", len(b)) + b


def request_of(body):
    """The u32 request ID that begins a create, start, stop, send or status."""
    return struct.unpack(">I", body[:4])[0]


class Hub:
    """The hub at the other end of fd 3."""

    def __init__(self):
        self.sock = socket.socket(fileno=3)

    def tell(self, kind, body=b""):
        self.sock.send(bytes([kind]) + body)

    def reply(self, request, code, message=""):
        self.tell(REPLY, struct.pack(">Ii", request, code) + message.encode())

    def hello(self, kind, version="1.0.0"):
        self.tell(HELLO, struct.pack(">H", 1) + text(kind) + text(version))

    def sign(self, request, message):
        self.tell(SIGN, struct.pack(">I", request) + message)

    def messages(self):
        """(kind, body) of each message until the hub closes fd 3."""
        while True:
            m = self.sock.recv(200000)
            if not m:
                return
            yield m[0], m[1:]


def parse_create(body):
    """(request, hub Ed25519 key, hub X25519 key, instance name, {key: value}) of a create."""
    request = request_of(body)
    signing, kx = body[4:36], body[36:68]
    n = struct.unpack(">I", body[68:72])[0]
    instance = body[72:72 + n].decode()
    at = 72 + n
    m = struct.unpack(">I", body[at:at + 4])[0]
    values = json.loads(body[at + 4:at + 4 + m])["values"]
    return request, signing, kx, instance, {k: v["value"] for k, v in values.items()}
