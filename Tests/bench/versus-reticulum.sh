#!/usr/bin/env bash
# Benchmark (prints figures, asserts nothing): Ya OK Hub against Reticulum/LXMF on the same
# shape, in one invocation, so both see the same machine in the same minutes:
# A → middle node → B on loopback, 200-byte messages, messages composed before the clock starts.
#   1. `yaok-bench --path-only --messages MESSAGES`, RUNS times (hub: release build);
#   2. the Reticulum peer bench (Tests/bench/reticulum, `opportunistic` phase, N1 messages);
#   3. `yaok-bench` RUNS times again (the machine may have changed meanwhile);
# then prints every figure, the medians and the ratio (ours ÷ Reticulum), and the load average.
# Usage: BIN=.build/release RUNS=3 MESSAGES=3000 N1=2000 Tests/bench/versus-reticulum.sh
# Installed (the yaok-hub package, e.g. on a Raspberry Pi):
#   bash /usr/share/yaok-hub/bench/versus-reticulum.sh    (BIN=/usr/bin, plugins from the package)
# The Reticulum side needs python3-venv and PyPI (or a wheel cache) once; its venv is kept in
# ${YAOK_PEER_BENCH_CACHE:-~/.cache/yaok-peer-bench}.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -f $HERE/../../Package.swift ]]; then BIN=${BIN:-$HERE/../../.build/release}; else BIN=${BIN:-/usr/bin}; fi
if [[ -f $BIN/libyaok-plugin-udp.so ]]; then PLUGIN_DIR=${PLUGIN_DIR:-$BIN}; else PLUGIN_DIR=${PLUGIN_DIR:-/usr/lib/yaok-hub/plugins}; fi
RUNS=${RUNS:-3}
MESSAGES=${MESSAGES:-3000}
N1=${N1:-2000}
CACHE=${YAOK_PEER_BENCH_CACHE:-$HOME/.cache/yaok-peer-bench}
[[ -x $BIN/yaok-bench && -x $BIN/yaok-hub && -f $PLUGIN_DIR/libyaok-plugin-udp.so ]] || {
    echo "no yaok-bench, yaok-hub and UDP plugin in $BIN and $PLUGIN_DIR: swift build -c release first (or install yaok-hub)" >&2; exit 1; }
mkdir -p "$CACHE"
cp "$HERE/reticulum/bench.py" "$HERE/reticulum/node.py" "$HERE/reticulum/run.sh" "$CACHE/"
echo "machine: $(uname -m), $(nproc) cores, $(grep -m1 -E '^(model name|Model)' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //' || true)"

ours=()
run_ours() {
    for _ in $(seq "$RUNS"); do
        # Not `tee /dev/stderr`: reopening it truncates a log file that stderr was redirected to.
        out=$("$BIN/yaok-bench" --path-only --messages "$MESSAGES" --plugin-dir "$PLUGIN_DIR")
        printf '%s\n' "$out" >&2
        line=$(grep "msg/s" <<<"$out" | head -1)
        ours+=("$(echo "$line" | sed -E 's/.* ([0-9]+) msg\/s.*/\1/')")
    done
}
echo "== Ya OK Hub ($RUNS runs, $MESSAGES messages; load: $(cut -d' ' -f1-3 /proc/loadavg))"
run_ours 2>&1
echo "== Reticulum/LXMF (opportunistic, $N1 messages; load: $(cut -d' ' -f1-3 /proc/loadavg))"
rlog=$(mktemp)
(cd "$CACHE" && N1=$N1 PHASES=opportunistic bash run.sh) > "$rlog" 2>&1 || true
grep -A3 "peerbench summary" "$rlog" || { tail -20 "$rlog"; echo "the Reticulum bench did not finish" >&2; exit 1; }
theirs=$(awk '/^s1-opportunistic|^opportunistic/ { print $5 }' "$rlog" | head -1)
echo "== Ya OK Hub again ($RUNS runs; load: $(cut -d' ' -f1-3 /proc/loadavg))"
run_ours 2>&1
rm -f "$rlog"
median=$(printf '%s\n' "${ours[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo
echo "Ya OK Hub: ${ours[*]} msg/s (median $median)"
echo "Reticulum/LXMF: ${theirs:-?} msg/s"
if [[ -n ${theirs:-} ]]; then
    awk -v o="$median" -v t="$theirs" -v lo="$(printf '%s\n' "${ours[@]}" | sort -n | head -1)" -v hi="$(printf '%s\n' "${ours[@]}" | sort -n | tail -1)" \
        'BEGIN { printf "ratio (ours / Reticulum, same invocation): median %.0f×, range %.0f–%.0f×\n", o / t, lo / t, hi / t }'
fi
