#!/usr/bin/env bash
# Benchmark (prints figures, asserts nothing): the hub's memory idle and with N bundles
# queued for a recipient who never attaches ("RSS with 100,000 bundles queued").
# One release `yaok-hub` on loopback UDP; alice's `yaok` composes N 200-byte messages first
# (`send --repeat`, no hub), then attaches and pushes them all; bob never attaches.
# Then restarts it with the store full, and rewrites the store to 4 KB pages and back.
# Usage: BIN=.build/release N=100000 Tests/bench/rss-queued.sh
set -euo pipefail
BIN=${BIN:-.build-release/release}
N=${N:-100000}
BIN=$(cd "$BIN" && pwd)
WORK=$(mktemp -d)
HUB_PID=""; LISTEN_PID=""
cleanup() {
    [[ -n $LISTEN_PID ]] && kill "$LISTEN_PID" 2>/dev/null || true
    [[ -n $HUB_PID ]] && kill "$HUB_PID" 2>/dev/null && wait "$HUB_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(( 30000 + RANDOM % 20000 ))
mkdir -m 700 "$WORK/plugins" "$WORK/data"
cp "$BIN/libyaok-plugin-udp.so" "$WORK/plugins/"
cat > "$WORK/hub.yaml" <<YAML
hub:
  data_dir: $WORK/data
  control_socket: $WORK/control.sock
  plugin_dirs: ["$WORK/plugins"]
  log_level: warning
router:
  link_frames_per_second: 1000000
  sender_envelopes_per_minute: 1000000
store:
  size_cap_mb: 1024
transports:
  udp:
    enabled: true
    listen: 127.0.0.1:$PORT
YAML
"$BIN/yaok-hub" run --config "$WORK/hub.yaml" 2> "$WORK/hub.log" &
HUB_PID=$!
for _ in $(seq 100); do [[ -S $WORK/control.sock ]] && break; sleep 0.1; done
[[ -S $WORK/control.sock ]] || { cat "$WORK/hub.log"; echo "the hub did not start" >&2; exit 1; }
rss() { awk -v k="$1" '$1 == k":" { printf "%.1f", $2 / 1024 }' "/proc/$HUB_PID/status"; }
queued() { "$BIN/yaok-hub" status --json --config "$WORK/hub.yaml" | python3 -c 'import json,sys; q=json.load(sys.stdin)["router"]["queue"]; print(q["queued"] + q["inFlight"])'; }
sleep 2
echo "hub idle: VmRSS $(rss VmRSS) MB, VmHWM $(rss VmHWM) MB"
"$BIN/yaok" init --home "$WORK/alice" --name Alice > /dev/null
"$BIN/yaok" init --home "$WORK/bob" --name Bob > /dev/null
"$BIN/yaok" contacts add --home "$WORK/alice" "$("$BIN/yaok" qr --home "$WORK/bob")" > /dev/null
TEXT=$(printf 'm%.0s' $(seq 190))
t0=$(date +%s.%N)
"$BIN/yaok" send --home "$WORK/alice" Bob "$TEXT {n}" --repeat "$N" > /dev/null
echo "composed $N messages in alice's outbox in $(echo "$(date +%s.%N) - $t0" | bc) s"
t0=$(date +%s.%N)
"$BIN/yaok" listen --home "$WORK/alice" --hub "udp://127.0.0.1:$PORT" --timeout 3600 > /dev/null 2>&1 &
LISTEN_PID=$!
while :; do
    q=$(queued)
    [[ $q -ge $N ]] && break
    kill -0 "$LISTEN_PID" 2>/dev/null || { echo "alice's yaok exited at $q queued" >&2; exit 1; }
    sleep 1
done
echo "hub took $N bundles in $(echo "$(date +%s.%N) - $t0" | bc) s"
kill "$LISTEN_PID"; wait "$LISTEN_PID" 2>/dev/null || true; LISTEN_PID=""
sleep 2
echo "hub with $N bundles queued: VmRSS $(rss VmRSS) MB, VmHWM $(rss VmHWM) MB; store $(du -sh "$WORK/data" | cut -f1)"
# A restart with the store full: opening it counts the carried bytes from the carried index
# (schema 7), so this is what a hub with N queued takes to answer again.
kill "$HUB_PID"; wait "$HUB_PID" 2>/dev/null || true
t0=$(date +%s.%N)
"$BIN/yaok-hub" run --config "$WORK/hub.yaml" 2>> "$WORK/hub.log" &
HUB_PID=$!
for _ in $(seq 1200); do   # at most a minute
    "$BIN/yaok-hub" status --config "$WORK/hub.yaml" > /dev/null 2>&1 && break
    kill -0 "$HUB_PID" 2>/dev/null || { cat "$WORK/hub.log"; echo "the hub did not restart" >&2; exit 1; }
    sleep 0.05
done
"$BIN/yaok-hub" status --config "$WORK/hub.yaml" > /dev/null 2>&1 || { echo "the hub did not answer within a minute" >&2; exit 1; }
echo "hub restarted with $N bundles queued: status answered after $(echo "$(date +%s.%N) - $t0" | bc) s"
# Moving that full store to another page size and back (`yaok-hub store rewrite`, hub
# stopped): what an operator waits, and the file before and after.
kill "$HUB_PID"; wait "$HUB_PID" 2>/dev/null || true; HUB_PID=""
for size in 4096 2048; do
    t0=$(date +%s.%N)
    out=$("$BIN/yaok-hub" store rewrite --config "$WORK/hub.yaml" --page-size "$size" | tail -n 1)
    echo "store rewrite to $size-byte pages: $(echo "$(date +%s.%N) - $t0" | bc) s ($out)"
done
