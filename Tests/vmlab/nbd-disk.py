#!/usr/bin/env python3
"""nbd-disk.py — a virtual disk with a volatile write cache, for power-cut tests.

An NBD server (fixed newstyle handshake, Python 3 standard library only) that serves one
image file over a Unix socket to QEMU, one connection at a time. Writes land in an
in-memory overlay (the disk's volatile cache) and are visible to reads at once; only
NBD_CMD_FLUSH (or a write with the FUA flag: that write plus a flush) moves the overlay
to the image file, in block order, and fsyncs it. When the connection ends without a
flush, which is what killing QEMU does (the power cut), the overlay is thrown away: the
image holds exactly what the guest had flushed.

    nbd-disk.py --image disk.img --socket /path/nbd.sock [--lie] [--log FILE]
                [--qemu-pidfile FILE]

--lie     a disk that lies about flushes: FLUSH and FUA are acknowledged and nothing
          is ever written to the image, so every cut loses everything since the image
          was made (the control of Tests/vmlab/powercut-test.sh).
--log     one line per connection (writes, flushes, blocks persisted and discarded);
          default stderr.
--qemu-pidfile  makes SIGUSR1 arm a cut at a write: the server answers the next WRITE
          (the guest now believes it done) and at once kills QEMU (the PID in FILE) with
          SIGKILL, reads nothing more, and drops the overlay; so the power goes between a
          write and the flush that would have made it durable.

QEMU: -drive file=nbd+unix:///disk?socket=/path/nbd.sock,format=raw,if=virtio,cache=none
The server runs until SIGTERM or SIGINT; a connection in progress then counts as a cut.
"""
import argparse
import os
import signal
import socket
import struct
import sys
import time

# Handshake (all numbers big-endian on the wire).
NBDMAGIC = 0x4E42444D41474943          # "NBDMAGIC"
IHAVEOPT = 0x49484156454F5054          # "IHAVEOPT": newstyle greeting and option requests
REPLY_MAGIC = 0x0003E889045565A9       # option replies
FLAG_FIXED_NEWSTYLE = 1 << 0
FLAG_NO_ZEROES = 1 << 1
C_FLAG_FIXED_NEWSTYLE = 1 << 0
C_FLAG_NO_ZEROES = 1 << 1

OPT_EXPORT_NAME = 1
OPT_ABORT = 2
OPT_LIST = 3
OPT_INFO = 6
OPT_GO = 7
REP_ACK = 1
REP_SERVER = 2
REP_INFO = 3
REP_ERR_UNSUP = (1 << 31) + 1
INFO_EXPORT = 0

# Transmission flags: we have flags, and the client should send flushes.
TFLAG_HAS_FLAGS = 1 << 0
TFLAG_SEND_FLUSH = 1 << 2
TRANSMISSION_FLAGS = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH

REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH = 0, 1, 2, 3
CMD_FLAG_FUA = 1 << 0
EIO, EINVAL = 5, 22

BLOCK = 4096
EXPORT_NAMES = ("", "disk")


class Closed(Exception):
    """The peer went away (EOF or a reset): the power cut, or a client that hung up."""


def recv_exact(conn, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = conn.recv_into(view[got:], n - got)
        except (ConnectionResetError, BrokenPipeError):
            raise Closed("connection reset")
        if k == 0:
            raise Closed("end of stream")
        got += k
    return bytes(buf)


class Disk:
    """The image file plus the volatile overlay: block number -> bytearray(BLOCK)."""

    def __init__(self, path, lie):
        self.fd = os.open(path, os.O_RDWR)
        self.size = os.fstat(self.fd).st_size
        if self.size % BLOCK:
            raise SystemExit(f"nbd-disk: {path}: size {self.size} is not a multiple of {BLOCK}")
        self.lie = lie
        self.overlay = {}
        self.armed = False
        self.reset_counters()

    def reset_counters(self):
        self.writes = self.flushes = self.fua = self.persisted = 0

    def _block(self, b):
        """Current contents of block b (overlay first, else the image)."""
        data = self.overlay.get(b)
        if data is not None:
            return data
        return os.pread(self.fd, BLOCK, b * BLOCK)

    def read(self, offset, length):
        out = bytearray()
        end = offset + length
        b = offset // BLOCK
        while b * BLOCK < end:
            data = self._block(b)
            lo = max(offset, b * BLOCK) - b * BLOCK
            hi = min(end, (b + 1) * BLOCK) - b * BLOCK
            out += data[lo:hi]
            b += 1
        return bytes(out)

    def write(self, offset, data):
        self.writes += 1
        end = offset + len(data)
        b = offset // BLOCK
        pos = 0
        while b * BLOCK < end:
            lo = max(offset, b * BLOCK) - b * BLOCK
            hi = min(end, (b + 1) * BLOCK) - b * BLOCK
            if lo == 0 and hi == BLOCK:
                block = bytearray(data[pos:pos + BLOCK])
            else:
                block = bytearray(self._block(b))
                block[lo:hi] = data[pos:pos + (hi - lo)]
            self.overlay[b] = block
            pos += hi - lo
            b += 1

    def flush(self):
        """Moves the overlay to the image and fsyncs it; a lying disk only says it did."""
        self.flushes += 1
        if self.lie:
            return
        for b in sorted(self.overlay):
            os.pwrite(self.fd, self.overlay[b], b * BLOCK)
        os.fsync(self.fd)
        self.persisted += len(self.overlay)
        self.overlay.clear()

    def cut(self):
        """The power goes: everything not flushed is gone. Returns the blocks dropped."""
        dropped = len(self.overlay)
        self.overlay.clear()
        return dropped


def option_reply(conn, opt, rtype, data=b""):
    conn.sendall(struct.pack(">QIII", REPLY_MAGIC, opt, rtype, len(data)) + data)


def handshake(conn, disk):
    """Fixed newstyle negotiation. Returns True when transmission may start."""
    conn.sendall(struct.pack(">QQH", NBDMAGIC, IHAVEOPT, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
    (cflags,) = struct.unpack(">I", recv_exact(conn, 4))
    if not cflags & C_FLAG_FIXED_NEWSTYLE:
        return False  # we only speak fixed newstyle
    no_zeroes = bool(cflags & C_FLAG_NO_ZEROES)
    while True:
        magic, opt, length = struct.unpack(">QII", recv_exact(conn, 16))
        if magic != IHAVEOPT:
            return False
        data = recv_exact(conn, length) if length else b""
        if opt == OPT_EXPORT_NAME:
            # No reply header: size, flags, and (unless NO_ZEROES) 124 bytes of padding.
            if data.decode(errors="replace") not in EXPORT_NAMES:
                return False  # the only answer EXPORT_NAME allows for a bad name is hanging up
            conn.sendall(struct.pack(">QH", disk.size, TRANSMISSION_FLAGS) + (b"" if no_zeroes else bytes(124)))
            return True
        if opt in (OPT_GO, OPT_INFO):
            if len(data) < 6:
                option_reply(conn, opt, (1 << 31) + 3)  # NBD_REP_ERR_INVALID
                continue
            (nlen,) = struct.unpack(">I", data[:4])
            name = data[4:4 + nlen].decode(errors="replace")
            if name not in EXPORT_NAMES:
                option_reply(conn, opt, (1 << 31) + 6)  # NBD_REP_ERR_UNKNOWN
                continue
            # Info requests (block size etc.) are optional to honour; we send only the export.
            option_reply(conn, opt, REP_INFO, struct.pack(">HQH", INFO_EXPORT, disk.size, TRANSMISSION_FLAGS))
            option_reply(conn, opt, REP_ACK)
            if opt == OPT_GO:
                return True
            continue
        if opt == OPT_LIST:
            option_reply(conn, opt, REP_SERVER, struct.pack(">I", 4) + b"disk")
            option_reply(conn, opt, REP_ACK)
            continue
        if opt == OPT_ABORT:
            try:
                option_reply(conn, opt, REP_ACK)
            except OSError:
                pass
            return False
        # Structured replies, meta contexts, TLS, extended headers: not offered.
        option_reply(conn, opt, REP_ERR_UNSUP)


def reply(conn, handle, error=0, data=b""):
    conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, error, handle) + data)


def transmission(conn, disk, qemu_pidfile):
    """Serves requests until the client disconnects. Returns how it ended."""
    while True:
        magic, flags, cmd, handle, offset, length = struct.unpack(">IHHQQI", recv_exact(conn, 28))
        if magic != REQUEST_MAGIC:
            return "bad request magic"
        if cmd == CMD_WRITE:
            data = recv_exact(conn, length)
            if offset + length > disk.size:
                reply(conn, handle, EINVAL)
                continue
            disk.write(offset, data)
            if flags & CMD_FLAG_FUA:
                disk.fua += 1
                disk.flush()
            reply(conn, handle)
            if disk.armed and qemu_pidfile:
                with open(qemu_pidfile) as f:
                    os.kill(int(f.read().split()[0]), signal.SIGKILL)
                return f"cut at a write (armed, {len(disk.overlay)} blocks unflushed)"
        elif cmd == CMD_READ:
            if offset + length > disk.size:
                reply(conn, handle, EINVAL)
                continue
            reply(conn, handle, 0, disk.read(offset, length))
        elif cmd == CMD_FLUSH:
            try:
                disk.flush()
                reply(conn, handle)
            except OSError:
                reply(conn, handle, EIO)
        elif cmd == CMD_DISC:
            return "disconnect (NBD_CMD_DISC)"
        else:
            reply(conn, handle, EINVAL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--image", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--lie", action="store_true", help="acknowledge flushes without persisting anything")
    ap.add_argument("--log", help="append one line per connection here (default stderr)")
    ap.add_argument("--qemu-pidfile", help="SIGUSR1 arms a cut: QEMU (this PID) is killed right after the next write")
    args = ap.parse_args()

    disk = Disk(args.image, args.lie)
    log = open(args.log, "a", buffering=1) if args.log else sys.stderr
    mode = "lying" if args.lie else "honest"

    def say(msg):
        print(f"nbd-disk [{time.strftime('%H:%M:%S')}] {msg}", file=log, flush=True)

    # SIGTERM/SIGINT end the server like a cut: unflushed data is not written.
    def stop(signum, _frame):
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def arm(_signum, _frame):
        disk.armed = True
        say("armed: QEMU is killed right after the next write")
    signal.signal(signal.SIGUSR1, arm)

    try:
        os.unlink(args.socket)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(args.socket)
    srv.listen(4)
    say(f"serving {args.image} ({disk.size} bytes, {mode} flushes) on {args.socket}")
    session = 0
    try:
        while True:
            conn, _ = srv.accept()
            session += 1
            disk.reset_counters()
            how = "?"
            try:
                how = transmission(conn, disk, args.qemu_pidfile) if handshake(conn, disk) else "refused in negotiation"
            except Closed as e:
                how = f"cut ({e})"
            except OSError as e:
                how = f"cut ({e.strerror or e.__class__.__name__})"
            finally:
                conn.close()
                disk.armed = False
                dropped = disk.cut()
                say(f"session {session} ended: {how}; writes={disk.writes} flushes={disk.flushes} fua={disk.fua} "
                    f"blocks_persisted={disk.persisted} blocks_discarded={dropped}")
    finally:
        srv.close()
        try:
            os.unlink(args.socket)
        except OSError:
            pass


if __name__ == "__main__":
    main()
