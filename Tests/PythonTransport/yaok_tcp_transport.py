#!/usr/bin/env python3
"""A Ya OK Hub transport as a standalone program: TCP carriers, Python standard library only.

The hub starts it (``command:`` in a transport section) with a SOCK_SEQPACKET socket on file
descriptor 3 and speaks Docs/plugin-protocol.md over it. This program only moves bytes: it
listens, dials its configured peers, and hands the hub each connection as a *carrier* and each
whole link record that arrives on it. The hub runs the link session (handshake, sealing, pings,
link close) itself, so nothing here needs X25519 or ChaCha20-Poly1305, and nothing here ever
sees a frame in clear.

Config keys (beside ``enabled``, ``plugin`` and ``command``):
  listen: "HOST:PORT"        where to accept carriers (required)
  peers: ["HOST:PORT", ...]  whom to dial (default none)
  redial_s: N                first wait before dialling a peer again, doubling to 60 (default 2)
"""

import json
import os
import selectors
import socket
import struct
import sys
import time

PROTOCOL_VERSION = 1
KIND = "pytcp"
VERSION = "1.0.0"
MAX_MESSAGE = 131072
# A link record is type(1) | length(2, big-endian) | value: at most 65,538 bytes.
RECORD_MAX = 3 + 0xFFFF
MAX_INBOUND = 64
MAX_QUEUED = 4 << 20

# Hub -> program
CREATE, START, STOP, SEND, STATUS, SIGNATURE, CARRIER_SEND, CARRIER_CLOSE = range(1, 9)
# Program -> hub
HELLO, REPLY, LOG, LINK_DOWN, STATUS_CHANGED, CARRIER_UP, CARRIER_RECORD = 0x80, 0x81, 0x82, 0x86, 0x88, 0x89, 0x8A
INFO, WARNING = 2, 4


def text(s):
    b = s.encode()
    return struct.pack(">I", len(b)) + b


class ConfigError(Exception):
    pass


class Reader:
    """Reads big-endian fields; a short message raises ValueError."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if self.at + n > len(self.data):
            raise ValueError("short message")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def string(self):
        return self.take(self.u32()).decode("utf-8", "replace")

    def rest(self):
        return self.take(len(self.data) - self.at)


def parse_address(value, key_path, line):
    where = f"{key_path} (line {line})" if line else key_path
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{where}: expected \"HOST:PORT\", got {value!r}")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: port must be 1-65535, got {port!r}")
    return host, int(port)


class Carrier:
    def __init__(self, sock, link, dialled, remote, peer=None):
        self.sock, self.link, self.dialled, self.remote, self.peer = sock, link, dialled, remote, peer
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.connected = not dialled
        self.opened = time.monotonic()


class Transport:
    def __init__(self, hub):
        self.hub = hub
        self.selector = selectors.DefaultSelector()
        self.selector.register(hub, selectors.EVENT_READ, "hub")
        self.listener = None
        self.carriers = {}
        self.next_link = 1
        self.peers = []
        self.redial_s = 2.0
        self.dial_at = {}
        self.backoff = {}
        self.path = "transports.?"
        self.counters = {"frames_in": 0, "frames_out": 0, "bytes_in": 0, "bytes_out": 0}
        self.last_error = None
        self.listen_address = None

    # Hub side

    def tell(self, kind, body=b""):
        self.hub.send(bytes([kind]) + body)

    def log(self, level, message):
        self.tell(LOG, struct.pack(">i", level) + message.encode())

    def reply(self, request, code, message=""):
        self.tell(REPLY, struct.pack(">Ii", request, code) + message.encode())

    def configure(self, config):
        self.path = config.get("path", "transports.?")
        values = config.get("values", {})
        for key in values:
            if key not in ("enabled", "plugin", "listen", "peers", "redial_s"):
                line = values[key].get("line")
                where = f"{self.path}.{key} (line {line})" if line else f"{self.path}.{key}"
                raise ConfigError(f"{where}: unknown key; this transport knows listen, peers, redial_s")
        if "listen" not in values:
            raise ConfigError(f"{self.path}.listen: is required (\"HOST:PORT\")")
        entry = values["listen"]
        self.listen_address = parse_address(entry["value"], f"{self.path}.listen", entry.get("line"))
        entry = values.get("peers", {"value": []})
        if not isinstance(entry["value"], list):
            raise ConfigError(f"{self.path}.peers (line {entry.get('line')}): expected a list of \"HOST:PORT\"")
        self.peers = [parse_address(p, f"{self.path}.peers", entry.get("line")) for p in entry["value"]]
        entry = values.get("redial_s", {"value": 2})
        if not isinstance(entry["value"], int) or not 1 <= entry["value"] <= 60:
            raise ConfigError(f"{self.path}.redial_s (line {entry.get('line')}): expected 1-60 seconds")
        self.redial_s = float(entry["value"])

    def start(self):
        host, port = self.listen_address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError as e:
            listener.close()
            raise ConfigError(f"{self.path}.listen: cannot listen on {host}:{port}: {e.strerror}")
        listener.listen(16)
        listener.setblocking(False)
        self.listener = listener
        self.selector.register(listener, selectors.EVENT_READ, "listener")
        now = time.monotonic()
        for peer in self.peers:
            self.dial_at[peer] = now
            self.backoff[peer] = self.redial_s

    def stop(self):
        for link in list(self.carriers):
            self.drop(link, None)
        if self.listener:
            self.selector.unregister(self.listener)
            self.listener.close()
            self.listener = None
        self.peers, self.dial_at = [], {}

    def status(self):
        up = len(self.carriers)
        state = "running" if self.listener else "stopped"
        reason = f"listening on {self.listen_address[0]}:{self.listen_address[1]}; {up} carriers" if self.listener else "not started"
        status = {"state": state, "reason": reason, "links": up, "peers": len(self.peers), "details": {"program": "python"}}
        status.update(self.counters)
        if self.last_error:
            status["last_error"] = self.last_error
        return json.dumps(status)

    def from_hub(self, message):
        r = Reader(message)
        kind = r.take(1)[0]
        if kind == CREATE:
            request = r.u32()
            r.take(64)  # the hub's public keys: the hub runs the link sessions, nothing to do with them here
            r.string()
            try:
                self.configure(json.loads(r.string()))
                self.reply(request, 0)
            except ConfigError as e:
                self.reply(request, 1, str(e))
        elif kind == START:
            request = r.u32()
            try:
                self.start()
                self.reply(request, 0)
                self.tell(STATUS_CHANGED)
            except ConfigError as e:
                self.last_error = str(e)
                self.reply(request, 1, str(e))
        elif kind == STOP:
            request = r.u32()
            self.stop()
            self.reply(request, 0)
        elif kind == STATUS:
            self.reply(r.u32(), 0, self.status())
        elif kind == SEND:
            self.reply(r.u32(), 1, "this transport moves link records on carriers; the hub seals frames itself")
        elif kind == CARRIER_SEND:
            link, record = r.u64(), r.rest()
            carrier = self.carriers.get(link)
            if carrier is None:
                return
            if len(carrier.outbox) + len(record) > MAX_QUEUED:
                self.drop(link, "the peer is not reading (4 MB queued)")
                return
            carrier.outbox += record
            self.counters["frames_out"] += 1
            self.counters["bytes_out"] += len(record)
            self.flush(carrier)
        elif kind == CARRIER_CLOSE:
            link, reason = r.u64(), r.rest().decode("utf-8", "replace")
            carrier = self.carriers.get(link)
            if carrier is not None:
                self.log(INFO, f"carrier {link} to {carrier.remote} closed by the hub: {reason}")
                self.drop(link, None)
        # SIGNATURE and unknown types: nothing to do.

    # Carriers

    def watch(self, carrier):
        events = selectors.EVENT_READ
        if carrier.outbox or not carrier.connected:
            events |= selectors.EVENT_WRITE
        self.selector.modify(carrier.sock, events, carrier.link)

    def open(self, sock, dialled, remote, peer=None):
        link = self.next_link
        self.next_link += 1
        carrier = Carrier(sock, link, dialled, remote, peer)
        self.carriers[link] = carrier
        self.selector.register(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if dialled else 0), link)
        if not dialled:
            self.announce(carrier)
        return carrier

    def announce(self, carrier):
        carrier.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = struct.pack(">QBII", carrier.link, 1 if carrier.dialled else 0, RECORD_MAX, 1) + text(KIND) + text(carrier.remote)
        self.tell(CARRIER_UP, body)

    def drop(self, link, reason):
        """Closes a carrier; `reason` set: the connection ended here, so tell the hub."""
        carrier = self.carriers.pop(link, None)
        if carrier is None:
            return
        self.selector.unregister(carrier.sock)
        carrier.sock.close()
        if carrier.peer is not None:
            # A carrier that ended quickly (refused, a duplicate the hub closed) waits longer next time.
            lived = time.monotonic() - carrier.opened
            wait = self.redial_s if lived > 30 else min(60.0, self.backoff.get(carrier.peer, self.redial_s) * 2)
            self.backoff[carrier.peer] = wait
            if carrier.peer in self.peers:
                self.dial_at[carrier.peer] = time.monotonic() + wait
        if reason is not None and carrier.connected:
            self.tell(LINK_DOWN, struct.pack(">Q", link) + reason.encode())

    def dial(self, peer):
        host, port = peer
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        self.dial_at[peer] = None
        carrier = self.open(sock, True, f"{host}:{port}", peer)
        try:
            sock.connect((host, port))
        except BlockingIOError:
            pass
        except OSError as e:
            self.last_error = f"dial {host}:{port}: {e.strerror}"
            self.drop(carrier.link, None)

    def flush(self, carrier):
        try:
            while carrier.outbox:
                n = carrier.sock.send(carrier.outbox)
                del carrier.outbox[:n]
        except BlockingIOError:
            pass
        except OSError as e:
            self.drop(carrier.link, f"write: {e.strerror}")
            return
        self.watch(carrier)

    def readable(self, carrier):
        try:
            data = carrier.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as e:
            self.drop(carrier.link, f"read: {e.strerror}")
            return
        if not data:
            self.drop(carrier.link, "the peer closed the connection")
            return
        carrier.inbox += data
        # Hand on every whole record; the 16-bit length bounds what waits here.
        while len(carrier.inbox) >= 3:
            total = 3 + (carrier.inbox[1] << 8 | carrier.inbox[2])
            if len(carrier.inbox) < total:
                break
            record = bytes(carrier.inbox[:total])
            del carrier.inbox[:total]
            self.counters["frames_in"] += 1
            self.counters["bytes_in"] += total
            self.tell(CARRIER_RECORD, struct.pack(">Q", carrier.link) + record)

    def writable(self, carrier):
        if not carrier.connected:
            error = carrier.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self.last_error = f"dial {carrier.remote}: {os.strerror(error)}"
                self.drop(carrier.link, None)
                return
            carrier.connected = True
            self.announce(carrier)
        self.flush(carrier)

    def accept(self):
        try:
            sock, address = self.listener.accept()
        except OSError:
            return
        if sum(1 for c in self.carriers.values() if not c.dialled) >= MAX_INBOUND:
            sock.close()
            return
        sock.setblocking(False)
        self.open(sock, False, f"{address[0]}:{address[1]}")

    def run(self):
        while True:
            now = time.monotonic()
            due = [t for t in self.dial_at.values() if t is not None]
            timeout = max(0.0, min(due) - now) if due else None
            for key, mask in self.selector.select(timeout):
                if key.data == "hub":
                    message = self.hub.recv(MAX_MESSAGE)
                    if not message:
                        return  # the hub closed its end: done
                    try:
                        self.from_hub(message)
                    except ValueError:
                        self.log(WARNING, f"malformed message from the hub ({len(message)} bytes); ignored")
                elif key.data == "listener":
                    self.accept()
                else:
                    carrier = self.carriers.get(key.data)
                    if carrier is not None and mask & selectors.EVENT_READ:
                        self.readable(carrier)
                    carrier = self.carriers.get(key.data)
                    if carrier is not None and mask & selectors.EVENT_WRITE:
                        self.writable(carrier)
            now = time.monotonic()
            for peer, when in list(self.dial_at.items()):
                if when is not None and when <= now and self.listener is not None:
                    self.dial(peer)


def main():
    hub = socket.socket(fileno=3)
    transport = Transport(hub)
    transport.tell(HELLO, struct.pack(">H", PROTOCOL_VERSION) + text(KIND) + text(VERSION))
    transport.run()


if __name__ == "__main__":
    sys.exit(main())
