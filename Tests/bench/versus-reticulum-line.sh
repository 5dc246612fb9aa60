#!/usr/bin/env bash
# Benchmark (prints figures, asserts nothing): the line of four against Reticulum/LXMF on the
# same topology, in one invocation, so both see the same machine in the same minutes:
# a sender attached to the first of four forwarding nodes, the receiver to the last,
# 200-byte messages all handed to the sender before the clock starts.
#   1. Plugins/Mesh/Tests/netns/bench-line.sh (four hubs in network namespaces, RUNS times);
#   2. Tests/bench/reticulum-line.py: four `rnsd` transport nodes in a chain on loopback TCP,
#      the peer bench's LXMF sender and receiver (opportunistic delivery, NR messages);
#   3. bench-line.sh RUNS times again;
# then prints every throughput figure, the medians, the ratio (ours ÷ Reticulum) and each
# forwarding node's CPU per message on both sides.
# Usage (root, for the namespaces): BIN=.build/release RUNS=1 N=10000 NR=2000 Tests/bench/versus-reticulum-line.sh
# Ours also runs its load and latency phases (M, P, RATE as in bench-line.sh; defaults here
# M=20, P=2000). The Reticulum side needs python3-venv and PyPI (or a wheel cache) once; its
# venv is kept in ${YAOK_PEER_BENCH_CACHE:-~/.cache/yaok-peer-bench}.
set -euo pipefail
cd "$(dirname "$0")/../.."
export BIN=${BIN:-.build/release}
BIN=$(cd "$BIN" && pwd)
RUNS=${RUNS:-1}
export N=${N:-10000} M=${M:-20} P=${P:-2000}
NR=${NR:-2000}
CACHE=${YAOK_PEER_BENCH_CACHE:-$HOME/.cache/yaok-peer-bench}
mkdir -p "$CACHE"
cp Tests/bench/reticulum/bench.py Tests/bench/reticulum/node.py Tests/bench/reticulum/run.sh Tests/bench/reticulum-line.py "$CACHE/"
if [[ ! -x $CACHE/venv/bin/python ]] || ! "$CACHE/venv/bin/python" -c 'import RNS, LXMF' 2>/dev/null; then
    (cd "$CACHE" && python3 -m venv venv && venv/bin/pip install -q "rns>=1.5,<1.6" "lxmf>=1.2,<1.3")
fi

ours=()
ours_cpu=()
run_ours() {
    for _ in $(seq "$RUNS"); do
        out=$(Plugins/Mesh/Tests/netns/bench-line.sh 2>&1) || { printf '%s\n' "$out"; echo "bench-line.sh failed" >&2; exit 1; }
        printf '%s\n' "$out"
        ours+=("$(sed -nE 's/^throughput phase: .* = ([0-9.]+) msg\/s end to end$/\1/p' <<<"$out")")
        ours_cpu+=("$(sed -nE 's/^  hub ([A-D]): CPU .* \(([0-9.]+) ms per message\).*/\1 \2/p' <<<"$out" | paste -sd, -)")
    done
}
echo "== Ya OK Hub, line of four ($RUNS run(s), N=$N; load: $(cut -d' ' -f1-3 /proc/loadavg))"
run_ours
echo "== Reticulum/LXMF, line of four rnsd ($NR messages; load: $(cut -d' ' -f1-3 /proc/loadavg))"
rout=$(cd "$CACHE" && N=$NR "$CACHE/venv/bin/python" -u reticulum-line.py 2>&1) || { printf '%s\n' "$rout"; echo "the Reticulum line did not finish" >&2; exit 1; }
grep "^reticulum line:" <<<"$rout"
theirs=$(sed -nE 's/.* ([0-9.]+) msg\/s end to end.*/\1/p' <<<"$rout" | head -1)
echo "== Ya OK Hub again ($RUNS run(s); load: $(cut -d' ' -f1-3 /proc/loadavg))"
run_ours
median=$(printf '%s\n' "${ours[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo
echo "Ya OK Hub, line of four: ${ours[*]} msg/s (median $median); CPU per message and receipt, each hub (ms): ${ours_cpu[*]}"
echo "Reticulum/LXMF, line of four: ${theirs:-?} msg/s; $(sed -nE 's/^reticulum line: (CPU per message.*)/\1/p' <<<"$rout")"
if [[ -n ${theirs:-} ]]; then
    awk -v o="$median" -v t="$theirs" -v lo="$(printf '%s\n' "${ours[@]}" | sort -n | head -1)" -v hi="$(printf '%s\n' "${ours[@]}" | sort -n | tail -1)" \
        'BEGIN { printf "ratio (ours / Reticulum, same invocation, line of four): median %.0f×, range %.0f–%.0f×\n", o / t, lo / t, hi / t }'
fi
