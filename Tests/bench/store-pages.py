#!/usr/bin/env python3
"""Which b-tree each committed page belongs to: a page-by-page breakdown of a hub's writes.

Benchmark aid (not a test). Reads a hub's store (store.db, its WAL and store.key) without
SQLite's codec: decrypts every page with the store key (SQLCipher's layout: AES-256-CBC,
the page's IV and HMAC in the space reserved at its end, 48 bytes with this machine's
SQLCipher 3, 80 with SQLCipher 4; read from page 1), lays the
committed WAL frames over the main file, asks plain SQLite's `dbstat` who owns each page,
and then counts, for every commit still in the WAL, the pages it wrote per b-tree.

    Tests/bench/store-pages.py DATA_DIR [MESSAGES_IN_THOSE_COMMITS]
    DB=endpoint.db Tests/bench/store-pages.py ENDPOINT_HOME     (a `yaok` endpoint's store)

Copy store.db-wal before store.db if the hub is running (a checkpoint rewrites the main
file; frames after the last complete commit are ignored). The HMACs are not checked: this
reads a store, it does not trust one.
"""
import collections, os, sqlite3, struct, sys, tempfile
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

PAGE, IV = 4096, 16      # PAGE: the store's page size, read from its WAL's header in main()


def decrypt(key, reserve, pageno, raw):
    skip = 16 if pageno == 1 else 0                 # page 1 starts with the file's salt
    iv = raw[PAGE - reserve:PAGE - reserve + IV]
    d = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    body = d.update(raw[skip:PAGE - reserve]) + d.finalize()
    head = b"SQLite format 3\0" if pageno == 1 else b""
    return head + body + bytes(reserve)


def wal_commits(path):
    """The page numbers each complete commit wrote (oldest first), and the newest committed
    version of every page in the WAL."""
    commits, pages, frames, committed = [], set(), {}, {}
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return commits, committed
    if len(data) < 32:
        return commits, committed
    salt = data[16:24]
    off = 32
    while off + 24 + PAGE <= len(data):
        pgno, size_after = struct.unpack(">II", data[off:off + 8])
        if data[off + 8:off + 16] != salt:
            break                                   # a frame left from an older WAL cycle
        frames[pgno] = data[off + 24:off + 24 + PAGE]
        pages.add(pgno)
        if size_after:                              # the commit frame
            commits.append(pages)
            committed.update(frames)
            pages, frames = set(), {}
        off += 24 + PAGE
    return commits, committed


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    messages = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    key = open(os.path.join(d, "store.key"), "rb").read()   # 32 raw bytes, or 64 hex digits
    if len(key.strip()) == 64:
        key = bytes.fromhex(key.strip().decode())
    assert len(key) == 32, "store.key: expected 32 raw bytes or 64 hex digits"
    db_name = os.environ.get("DB", "store.db")
    main_file = open(os.path.join(d, db_name), "rb").read()
    global PAGE
    try:
        PAGE = struct.unpack(">I", open(os.path.join(d, db_name + "-wal"), "rb").read(12)[8:12])[0]
    except (FileNotFoundError, struct.error):
        sys.exit("no WAL to read")
    for reserve in (48, 80):
        header = decrypt(key, reserve, 1, main_file[:PAGE])
        if int.from_bytes(header[16:18], "big") == PAGE and header[20] == reserve:
            break
    else:
        sys.exit(f"{db_name}: page 1 does not decrypt with store.key (wrong key or layout)")
    commits, committed = wal_commits(os.path.join(d, db_name + "-wal"))
    if not commits:
        sys.exit("no complete commit in the WAL")
    image = {n + 1: main_file[n * PAGE:(n + 1) * PAGE] for n in range(len(main_file) // PAGE)}
    image.update(committed)
    with tempfile.NamedTemporaryFile(suffix=".db") as plain:
        for n in range(1, max(image) + 1):
            raw = image.get(n, bytes(PAGE))
            plain.write(decrypt(key, reserve, n, raw) if any(raw) else raw)
        plain.flush()
        db = sqlite3.connect(plain.name)
        owner = {p: name for name, p in db.execute("SELECT name, pageno FROM dbstat")}
        free_pages = db.execute("PRAGMA freelist_count").fetchone()[0]
        db.close()
    # Auto-vacuum's pointer-map pages: page 2, then one before every (usable size / 5) pages.
    per_map = (PAGE - reserve) // 5
    def who(p):
        if p in owner:
            return owner[p]
        if p >= 2 and (p - 2) % (per_map + 1) == 0:
            return "(pointer map)"
        return "(free list or freed)"
    totals = collections.Counter()
    for pages in commits:
        totals.update(who(p) for p in pages)
    n = len(commits)
    frames = sum(len(p) for p in commits)
    print(f"{n} commits in the WAL, {frames} pages written ({frames / n:.1f} per commit); "
          f"the file has {max(image)} pages, {free_pages} on the free list")
    print(f"{'b-tree':40} {'pages/commit':>13} {'share':>7}" + ("  pages/message" if messages else ""))
    for name, c in totals.most_common():
        line = f"{name:40} {c / n:13.2f} {c / frames:7.1%}"
        if messages:
            line += f"  {c / messages:13.3f}"
        print(line)


if __name__ == "__main__":
    main()
