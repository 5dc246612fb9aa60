#!/usr/bin/env bash
# Benchmark (prints figures, asserts nothing): the hub's instructions per message and its
# receipt, counted by callgrind (stable on a noisy machine, unlike time), by library and by
# task. `yaok-bench --path-only` runs twice against a release hub started under callgrind —
# SMALL messages, then LARGE — each message from A through the hub to B, B's delivery receipt
# back through the hub to A; the difference between the two runs divided by LARGE − SMALL is
# the cost of one more message, start-up and shutdown cancelled out. Only the hub process is
# counted (its plugin processes run natively: the UDP transport's link crypto is theirs).
#
#   swift build -c release --product yaok-hub && swift build -c release --product yaok-bench \
#     && swift build -c release --product yaok-plugin-udp
#   Tests/bench/callgrind-hub.sh            (BIN=.build/release SMALL=300 LARGE=1300)
#
# Throughput against Reticulum is Tests/bench/versus-reticulum.sh; this script is for where
# the hub's instructions go. KEEP=1 keeps the callgrind files (printed path) for
# `callgrind_annotate`.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE/../../.build/release}
SMALL=${SMALL:-300}
LARGE=${LARGE:-1300}
for f in yaok-hub yaok-bench libyaok-plugin-udp.so; do
    [[ -e $BIN/$f ]] || { echo "no $BIN/$f: swift build -c release --product ${f%.so} (lib… → yaok-plugin-udp) first" >&2; exit 1; }
done
command -v valgrind > /dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d)
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
BIN=$(cd "$BIN" && pwd)
# yaok-bench starts the hub it is given; this one is the release hub under callgrind. (Its
# name must not end in "yaok-hub": yaok-bench then runs `status` with the plain binary.)
# Valgrind 3.19 (Debian 12) gives up on the DWARF 5 the Swift toolchain writes: the hub runs
# from a copy without debug sections (function names stay, in the symbol table).
objcopy --strip-debug "$BIN/yaok-hub" "$work/yaok-hub"
# Under valgrind its own descriptors sit above the limit the hub sees; Foundation's Process,
# which starts the plugin probes, asks to close every open descriptor in the child and glibc
# refuses those (EBADF), so no plugin would load. A preloaded shim skips them (bench only).
cat > "$work/spawnshim.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <spawn.h>
#include <unistd.h>
int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *actions, int fd) {
    static int (*real)(posix_spawn_file_actions_t *, int);
    if (!real) real = (int (*)(posix_spawn_file_actions_t *, int))dlsym(RTLD_NEXT, "posix_spawn_file_actions_addclose");
    if (fd >= getdtablesize()) return 0;
    return real(actions, fd);
}
C
cc -shared -fPIC -O2 -o "$work/spawnshim.so" "$work/spawnshim.c" -ldl
cat > "$work/hub-under-callgrind" <<EOF
#!/bin/sh
LD_PRELOAD="$work/spawnshim.so" exec valgrind --tool=callgrind --callgrind-out-file="\$CALLGRIND_OUT" "$work/yaok-hub" "\$@"
EOF
chmod +x "$work/hub-under-callgrind"
echo "machine: $(uname -m), $(nproc) cores, $(grep -m1 -E '^(model name|Model)' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || true); $(valgrind --version)"
for n in "$SMALL" "$LARGE"; do
    echo "== $n messages (hub under callgrind; load: $(cut -d' ' -f1-3 /proc/loadavg))"
    CALLGRIND_OUT=$work/hub.$n.out "$BIN/yaok-bench" --path-only --messages "$n" --plugin-dir "$BIN" \
        --hub-binary "$work/hub-under-callgrind" --start-timeout 600 > "$work/bench.$n.txt" 2>&1 \
        || { echo "yaok-bench failed:"; tail -20 "$work/bench.$n.txt"; exit 1; }
    grep -E "msg/s|hub CPU" "$work/bench.$n.txt" | sed 's/^/  /' || true
    # SIGTERM reaches the hub through valgrind; the file is complete once valgrind exits.
    for _ in $(seq 600); do pgrep -f "callgrind-out-file=$work/hub.$n.out" > /dev/null || break; sleep 0.1; done
done
{
python3 - "$work/hub.$SMALL.out" "$work/hub.$LARGE.out" "$SMALL" "$LARGE" <<'PY'
import re, sys
from collections import defaultdict

def self_costs(path):
    """Self Ir per (object, function) from a callgrind out file (name compression resolved)."""
    names = {"ob": {}, "fn": {}}
    cost = defaultdict(int)
    ob = fn = "?"
    skip_next = False
    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?: (.*))?", rest)
        if not m: return rest
        if m.group(2) is not None: names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), rest)
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("ob="): ob = name("ob", line[3:])
        elif line.startswith("fn="): fn = name("fn", line[3:])
        elif line.startswith(("cob=", "cfn=")): name("ob" if line.startswith("cob=") else "fn", line[4:])
        elif line.startswith("calls="): skip_next = True
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            parts = line.split()
            if skip_next: skip_next = False; continue
            if len(parts) >= 2: cost[(ob, fn)] += int(parts[1])
    return cost

small, large = self_costs(sys.argv[1]), self_costs(sys.argv[2])
n = int(sys.argv[4]) - int(sys.argv[3])
diff = defaultdict(int)
for k in set(small) | set(large): diff[k] = large.get(k, 0) - small.get(k, 0)
total = sum(diff.values())

def library(ob):
    base = ob.rsplit("/", 1)[-1]
    for pat, label in [(r"libsodium", "libsodium"), (r"libsqlcipher", "SQLCipher (SQLite)"), (r"libcrypto", "OpenSSL libcrypto (page cipher)"),
                       (r"libswiftCore", "Swift runtime and stdlib"), (r"libFoundation", "Foundation"), (r"libdispatch", "Dispatch"),
                       (r"^libc\.|libc-", "libc"), (r"ld-linux", "dynamic loader"), (r"yaok-hub", "yaok-hub (our code)")]:
        if re.search(pat, base): return label
    return base

TASKS = [
    ("Ed25519 signature verify", r"crypto_sign_ed25519_verify|crypto_sign_verify|ge25519|fe25519|sc25519|_crypto_sign_ed25519_verify"),
    ("other libsodium (hashes, seal/open)", r"^crypto_|sodium|blake2|sha256|sha512|chacha|poly1305"),
    ("store page cipher (OpenSSL)", r"EVP_|AES|aes|HMAC|hmac|sha512_block|SHA512|sqlcipher_|ossl_|CRYPTO_"),
    ("SQLite", r"^sqlite3|^vdbe|^btree|^pager|^pcache|^wal"),
    ("BundleStore (custody bookkeeping, storing)", r"YaokStore"),
    ("receipt commitments", r"ReceiptCommitments"),
    ("set reconciliation IDs", r"YaokReconcile"),
    ("router", r"YaokRouting|Router\b"),
    ("plugin-process messages and supervision", r"YaokSupervision|PluginProcess|PluginMessage|YaokHubPluginProtocol"),
    ("wire parsing (bundle, envelope, TLV)", r"YaokWire"),
    ("other hub code", r"YaokHubCore|YaokPluginKit|YaokCrypto"),
    ("Swift runtime: conformances, casts, metadata", r"swift_conformsToProtocol|swift_dynamicCast|swift_getWitnessTable|Metadata|swift_getGeneric|protocol conformance"),
    ("Swift runtime: retain/release, allocation", r"swift_retain|swift_release|swift_allocObject|swift_deallocObject|swift_bridgeObject|swift_unknownObject|malloc|free|_int_malloc|_int_free|cfree"),
    ("Swift stdlib (collections, hashing, strings)", r"Swift\.|\$ss|Hasher|String|Array|Dictionary|Set<"),
    ("Dispatch and threads", r"dispatch_|_dispatch|pthread"),
    ("system calls and libc", r"__libc|syscall|epoll|read|write|memcpy|memmove|memset|strlen|__GI_|__memcpy|__memset"),
]
def task(ob, fn):
    if re.fullmatch(r"0x[0-9a-f]+", fn):
        # Debian's libsodium and SQLCipher carry no symbols: their share is counted whole.
        return {"libsodium": "libsodium: Ed25519 verify, SHA-256 (no symbols)",
                "SQLCipher (SQLite)": "SQLCipher: SQL, b-trees, pager (no symbols)",
                "OpenSSL libcrypto (page cipher)": "store page cipher: AES, HMAC (OpenSSL, no symbols)"}.get(library(ob), "unnamed code in " + library(ob))
    for label, pat in TASKS:
        if re.search(pat, fn): return label
    return "other (" + library(ob) + ")"

print(f"hub instructions per message and its receipt: {total / n:,.0f}   ({total:,} over {n} messages: the {sys.argv[4]}-message run less the {sys.argv[3]}-message one)")
def table(title, key):
    agg = defaultdict(int)
    for (ob, fn), c in diff.items(): agg[key(ob, fn)] += c
    print(f"-- by {title}")
    for k, c in sorted(agg.items(), key=lambda kv: -kv[1]):
        if abs(c) / n < 2_000: continue
        print(f"  {c / n:>12,.0f}  {100 * c / total:5.1f} %  {k}")
table("library", lambda ob, fn: library(ob))
table("task", task)
print("-- top functions (self; Swift names demangled below when `swift demangle` is at hand)")
for (ob, fn), c in sorted(diff.items(), key=lambda kv: -kv[1])[:25]:
    print(f"  {c / n:>12,.0f}  {fn if not re.fullmatch(r'0x[0-9a-f]+', fn) else fn + ' in ' + library(ob)}")
PY
} > "$work/report.txt"
if command -v swift > /dev/null; then swift demangle --simplified < "$work/report.txt" | cut -c1-160; else cut -c1-160 "$work/report.txt"; fi
[[ ${KEEP:-0} == 1 ]] && echo "callgrind files kept in $work (callgrind_annotate $work/hub.$LARGE.out)"
exit 0
