#!/usr/bin/env bash
# Benchmark (not a test: it prints figures and asserts only that every message arrived).
# A line of four hubs A–B–C–D in network namespaces (veth, mesh transport), release
# binaries; a `yaok` endpoint attached to hub A over UDP sends 200-byte messages to a
# `yaok` endpoint attached to hub D (three hub-to-hub hops).
#
#   sudo Plugins/Mesh/Tests/netns/bench-line.sh
#   env: N=10000   messages in the throughput phase
#        M=100     messages per recipient in the latency phase (sent one at a time)
#        P=5000 RATE=500  messages in the load phase and their offered rate per second
#        SAMPLE_S=60  seconds between samples of the throughput phase (messages at D,
#                  each hub's CPU, and its store size)
#        BIN=<products dir>  (default .build-release/release; build yaok-hub, yaok,
#                  yaok-plugin-mesh and yaok-plugin-udp with -c release first)
#        YAOK_QUEUE=<yaok binary> used only to queue the throughput phase (default
#                  $BIN/yaok; it needs `send --repeat`). Lets the measured endpoints be an
#                  older release build when the current one cannot be built in release.
#
# Phases:
#   load        P messages from A to dave at D, composed and sent at RATE per second while
#               attached (`yaok send --rate`): created -> stored at D, and each hub's own
#               added latency per bundle from its router counters (hopLatency*: in -> out on
#               the next link, the commit and the next hub's offer/request included), receipts too.
#   latency     M messages, one `yaok send --hub` at A after another, to bob listening at
#               B (1 hub-to-hub hop), then M to carol at C (2 hops), then M to dave at D
#               (3 hops): created (composed at A) → stored at the recipient, no backlog.
#               The per-hop figure is the growth per added hop (from 1 to 3 hops), which
#               takes out the fixed costs (A's attach, the endpoint links, stores).
#   throughput  N messages queued in alice's outbox first (one `yaok send --repeat N`
#               without --hub only composes), dave listens at D, then `yaok listen` at A
#               attaches and pushes them all: messages per second from attach to the last
#               one stored at D.
# Each hub's CPU time (utime+stime from /proc/<pid>/stat) and disk writes (write_bytes from
# /proc/<pid>/io) are counted over the throughput phase; peak RSS is VmHWM at the end. Exit 0 = all arrived, 77 = skipped.
# KEEP=1 keeps the work directory: hub logs and stores, and status-after-load-<hub>.json.
REPO=$(cd "$(dirname "$0")/../../../.." && pwd)
export BIN=${BIN:-$REPO/.build-release/release}
source "$(dirname "$0")/lib.sh"
N=${N:-10000}
M=${M:-100}
P=${P:-5000}
RATE=${RATE:-500}
HUB=udp://127.0.0.1:7811
BENCH_PIDS=()

# Our background `yaok` processes go first, then lib.sh's cleanup (hubs, namespaces, $WORK).
bench_cleanup() {
    local rc=$?
    for pid in "${BENCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${BENCH_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    (exit $rc)
    cleanup
}
trap bench_cleanup EXIT

# Hub config for benchmarking: quiet logs, the router's per-link and per-sender rate
# limits lifted (as yaok-bench does) so they do not set the pace.
bench_config() {
    cat > "$WORK/$1/hub.yaml" <<CFG
hub:
  name: $1
  data_dir: $WORK/$1/data
  control_socket: $WORK/$1/control.sock
  plugin_dirs: ["$WORK/plugins"]
  log_level: warning
router:
  link_frames_per_second: 1000000
  sender_envelopes_per_minute: 1000000
transports:
  udp:
    enabled: true
    listen: 127.0.0.1:7811
  mesh:
    enabled: true
    beacon_interval_s: 1
CFG
}

now_ms() { date +%s%3N; }
# cpu_ticks PID: utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
# write_bytes PID: bytes the process has caused to be written to storage (what wears an SD card).
write_bytes() { awk '/^write_bytes:/ { print $2 }' "/proc/$1/io"; }
# busy_ticks: the machine's non-idle CPU time so far (all cores), in clock ticks.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
# peak_rss_kib PID: VmHWM in KiB.
peak_rss_kib() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
# percentile FILE P: the P-th percentile (0–100, nearest rank) of the numbers in FILE, one a line.
percentile() { sort -n "$1" | awk -v p="$2" '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit } i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'; }
# text SEQ: a 200-byte message text.
text() { printf 'bench %06d %0187d' "$1" 0; }
# A 200-byte template for `yaok send --repeat N`: {n} becomes the number, padded to the width of N.
template() { printf 'bench {n} %0*d' $(( 200 - 7 - ${#1} )) 0; }

preflight
for n in A B C D; do make_ns "$n"; done
connect A 10.99.1.1 B 10.99.1.2
connect B 10.99.2.1 C 10.99.2.2
connect C 10.99.3.1 D 10.99.3.2
for n in A B C D; do bench_config "$n"; start_hub "$n"; done
for n in A B C D; do
    [[ $(cat "/proc/${HUBPID[$n]}/comm") == yaok-hub ]] || fail "pid ${HUBPID[$n]} is not hub $n"
done
all_line_links() { links_are A 1 && links_are B 2 && links_are C 2 && links_are D 1; }
wait_for 30 "mesh links A:1 B:2 C:2 D:1" all_line_links
make_pair alice Alice dave Dave
# More recipients for the latency phase, one and two hops away.
for who in bob:Bob carol:Carol; do
    home=${who%:*}; name=${who#*:}
    "$BIN/yaok" init --home "$WORK/$home" --name "$name" >/dev/null
    "$BIN/yaok" contacts add --home "$WORK/alice" "$("$BIN/yaok" qr --home "$WORK/$home")" >/dev/null
    "$BIN/yaok" contacts add --home "$WORK/$home" "$("$BIN/yaok" qr --home "$WORK/alice")" >/dev/null
done
echo "line A-B-C-D up (release binaries from $BIN); $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# listen_at_d COUNT OUT [NS HOME]: dave (or HOME in NS) listens in the background until COUNT
# messages; waits until attached.
listen_at_d() {
    DAVE_OUT=$2
    ip netns exec "$TAG-${3:-D}" "$BIN/yaok" listen --home "$WORK/${4:-dave}" --hub "$HUB" --count "$1" --json --timeout 900 > "$DAVE_OUT" 2> "$DAVE_OUT.err" &
    DAVE_PID=$!
    BENCH_PIDS+=("$DAVE_PID")
    attached() { grep -q '"event":"connected"' "$DAVE_OUT"; }
    wait_for 20 "dave to attach to hub D" attached
}
# wait_dave SECONDS: waits for dave's listener to exit (it does after its count).
wait_dave() {
    local deadline=$((SECONDS + $1))
    while kill -0 "$DAVE_PID" 2>/dev/null; do
        (( SECONDS < deadline )) || fail "dave's listener did not get all messages within $1 s"
        sleep 0.2
    done
    wait "$DAVE_PID" || fail "dave's listener failed: $(tail -n 3 "$DAVE_OUT.err" 2>/dev/null)"
}
# inbox_since MS [HOME]: dave's (or HOME's) inbox lines "created_ms received_ms" for messages received after MS.
inbox_since() {
    "$BIN/yaok" inbox --home "$WORK/${2:-dave}" --json | jq -r --argjson t "$1" 'select(.received_ms >= $t) | "\(.created_ms) \(.received_ms)"'
}

# --- load: P messages offered at RATE/s from A to D, first, so each hub's added-latency
# histogram (router counters hopLatency*: a bundle in -> out on its next link, its commit and
# the next hub's offer/request round trip included) holds this phase alone.
listen_at_d "$P" "$WORK/load-listen.json"
declare -A LOAD_CPU0=()
for n in A B C D; do LOAD_CPU0[$n]=$(cpu_ticks "${HUBPID[$n]}"); done
busy0=$(busy_ticks)
t_load=$(now_ms)
yaok_in A alice send Dave "$(template "$P")" --repeat "$P" --rate "$RATE" --hub "$HUB" --timeout 120 > /dev/null || fail "the paced send of $P messages failed"
wait_dave 120
load_busy=$(echo "($(busy_ticks) - $busy0) / $(getconf CLK_TCK) / (($(now_ms) - $t_load) / 1000) / $(nproc) * 100" | bc -l)
load_hubs_ms=0
for n in A B C D; do load_hubs_ms=$(echo "$load_hubs_ms + ($(cpu_ticks "${HUBPID[$n]}") - ${LOAD_CPU0[$n]}) * 1000 / $(getconf CLK_TCK) / $P" | bc -l); done
inbox_since "$t_load" > "$WORK/load.txt"
[[ $(wc -l < "$WORK/load.txt") == "$P" ]] || fail "load phase: dave has $(wc -l < "$WORK/load.txt") of $P messages"
awk '{ print $2 - $1 }' "$WORK/load.txt" > "$WORK/load-ms.txt"
# Every hub's full status after the phase, for a look behind the figures (KEEP=1 keeps $WORK):
# e.g. reconcileRefused and duplicates show a stall at link-up.
for n in A B C D; do hub_status "$n" > "$WORK/status-after-load-$n.json"; done
LOAD_HOPS=()
for n in A B C D; do
    LOAD_HOPS+=("$(jq -r --arg n "$n" '.router.counters | "  hub \($n): p50 \(.hopLatencyP50Us / 1000) ms  p99 \(.hopLatencyP99Us / 1000) ms  max \(.hopLatencyMaxUs / 1000) ms  (\(.hopLatencySamples) bundles); custody ack after \((.custodyLatencyP50Us // 0) / 1000) / \((.custodyLatencyP99Us // 0) / 1000) ms (p50 / p99)"' "$WORK/status-after-load-$n.json")")
done

# --- latency: one message at a time, no backlog, to recipients 1, 2 and 3 hub-to-hub hops away.
declare -A LAT50=() LAT99=()
for target in 1:B:bob:Bob 2:C:carol:Carol 3:D:dave:Dave; do
    IFS=: read -r hops ns home name <<< "$target"
    listen_at_d "$M" "$WORK/latency-$home.json" "$ns" "$home"
    t_lat=$(now_ms)
    for i in $(seq 1 "$M"); do
        yaok_in A alice send "$name" "$(text "$i")" --hub "$HUB" --timeout 30 > /dev/null || fail "send $i to $name in the latency phase failed"
    done
    wait_dave 120
    inbox_since "$t_lat" "$home" > "$WORK/latency-$home.txt"
    [[ $(wc -l < "$WORK/latency-$home.txt") == "$M" ]] || fail "latency phase: $name has $(wc -l < "$WORK/latency-$home.txt") of $M messages"
    awk '{ print $2 - $1 }' "$WORK/latency-$home.txt" > "$WORK/latency-ms-$hops.txt"
    LAT50[$hops]=$(percentile "$WORK/latency-ms-$hops.txt" 50)
    LAT99[$hops]=$(percentile "$WORK/latency-ms-$hops.txt" 99)
done
lat50=${LAT50[3]}
lat99=${LAT99[3]}

# --- throughput: queue N in one batch, then push them all at once.
q0=$(now_ms)
"${YAOK_QUEUE:-$BIN/yaok}" send --home "$WORK/alice" Dave "$(template "$N")" --repeat "$N" > /dev/null || fail "queueing $N messages failed"
echo "queued $N messages in alice's outbox in $(( $(now_ms) - q0 )) ms (one yaok send --repeat)"
listen_at_d "$N" "$WORK/throughput-listen.json"
declare -A CPU0=() WRITES0=()
for n in A B C D; do CPU0[$n]=$(cpu_ticks "${HUBPID[$n]}"); WRITES0[$n]=$(write_bytes "${HUBPID[$n]}"); done
t0=$(now_ms)
# Not through yaok_in: a backgrounded shell function would give the subshell's pid, not yaok's.
ip netns exec "$TAG-A" "$BIN/yaok" listen --home "$WORK/alice" --hub "$HUB" --json --timeout 900 > "$WORK/alice-listen.json" &
alice_pid=$!
BENCH_PIDS+=("$alice_pid")
# Sample while waiting: arrivals, CPU per hub and store size show whether a falling rate is
# per-message work growing with the store (CPU per message rises) or the machine (it does not).
SAMPLE_S=${SAMPLE_S:-60}
echo "t_s delivered_at_D cpu_A cpu_B cpu_C cpu_D store_MB_B load1" > "$WORK/samples.txt"
deadline=$((SECONDS + 900)); next_sample=$SECONDS
while kill -0 "$DAVE_PID" 2>/dev/null; do
    (( SECONDS < deadline )) || fail "dave's listener did not get all messages within 900 s"
    if (( SECONDS >= next_sample )); then
        next_sample=$((SECONDS + SAMPLE_S))
        echo "$(( ($(now_ms) - t0) / 1000 )) $(grep -c '"event":"message"' "$DAVE_OUT")" \
             "$(for n in A B C D; do cpu_ticks "${HUBPID[$n]}"; done | paste -sd' ')" \
             "$(du -sm "$WORK/B/data" | cut -f1) $(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/samples.txt"
    fi
    sleep 0.2
done
wait_dave 1
t_done=$(now_ms)
declare -A CPU1=() WRITES1=()
for n in A B C D; do CPU1[$n]=$(cpu_ticks "${HUBPID[$n]}"); WRITES1[$n]=$(write_bytes "${HUBPID[$n]}"); done
inbox_since "$t0" > "$WORK/throughput.txt"
got=$(wc -l < "$WORK/throughput.txt")
[[ $got == "$N" ]] || fail "throughput phase: dave has $got of $N messages"
t_last=$(awk 'BEGIN { m = 0 } { if ($2 > m) m = $2 } END { print m }' "$WORK/throughput.txt")
t_first=$(awk 'NR == 1 || $2 < m { m = $2 } END { print m }' "$WORK/throughput.txt")
elapsed_ms=$(( t_last - t0 ))
(( elapsed_ms > 0 )) || elapsed_ms=1
awk -v t0="$t0" '{ print $2 - t0 }' "$WORK/throughput.txt" > "$WORK/backlog-ms.txt"

tick=$(getconf CLK_TCK)
echo
echo "== line A-B-C-D, 200-byte messages, endpoint at A (UDP) -> 3 mesh hops -> endpoint at D (UDP)"
printf 'load phase: %d messages offered at %d/s, created at A -> stored at D: p50 %s ms  p99 %s ms\n' \
    "$P" "$RATE" "$(percentile "$WORK/load-ms.txt" 50)" "$(percentile "$WORK/load-ms.txt" 99)"
printf '  the machine was %.0f%% busy over the phase; the four hubs used %.2f ms of CPU per message together (plugin processes not counted)\n' "$load_busy" "$load_hubs_ms"
echo "  per hop, each hub's added latency per bundle (in -> out on the next link, receipts included):"
printf '%s\n' "${LOAD_HOPS[@]}"
printf 'latency phase (%d messages each, one at a time), created at A -> stored at the recipient:\n' "$M"
for hops in 1 2 3; do
    printf '  %d hub-to-hub hop(s) (recipient at %s): p50 %s ms  p99 %s ms\n' "$hops" "$(cut -d' ' -f"$hops" <<< "B C D")" "${LAT50[$hops]}" "${LAT99[$hops]}"
done
printf '  per hub-to-hub hop, growth from 1 to 3 hops / 2:  p50 %.1f ms  p99 %.1f ms\n' \
    "$(echo "(${LAT50[3]} - ${LAT50[1]}) / 2" | bc -l)" "$(echo "(${LAT99[3]} - ${LAT99[1]}) / 2" | bc -l)"
printf '  per hub-to-hub hop, end to end at D / 3:          p50 %.1f ms  p99 %.1f ms\n' \
    "$(echo "$lat50 / 3" | bc -l)" "$(echo "$lat99 / 3" | bc -l)"
printf 'throughput phase: %d of %d delivered in %.2f s from attach = %.1f msg/s end to end\n' \
    "$got" "$N" "$(echo "$elapsed_ms / 1000" | bc -l)" "$(echo "$got * 1000 / $elapsed_ms" | bc -l)"
printf '  first message stored at D %d ms after attach; first to last %.1f msg/s\n' \
    "$(( t_first - t0 ))" "$(echo "($got - 1) * 1000 / ($t_last - $t_first + 1)" | bc -l)"
printf '  longest gap between two arrivals at D: %s ms (a stall shows here)\n' \
    "$(awk '{ print $2 }' "$WORK/throughput.txt" | sort -n | awk 'NR > 1 && $1 - p > g { g = $1 - p } { p = $1 } END { print g + 0 }')"
b50=$(percentile "$WORK/backlog-ms.txt" 50); b90=$(percentile "$WORK/backlog-ms.txt" 90)
printf '  attach -> stored at D (queueing behind the backlog): p50 %s ms  p90 %s ms  p99 %s ms\n' \
    "$b50" "$b90" "$(percentile "$WORK/backlog-ms.txt" 99)"
printf '  rate until half arrived %.1f msg/s, until 90%% arrived %.1f msg/s (an end-to-end rate well below these means the tail stalled)\n' \
    "$(echo "$got * 0.5 * 1000 / ($b50 + 1)" | bc -l)" "$(echo "$got * 0.9 * 1000 / ($b90 + 1)" | bc -l)"
for n in A B C D; do
    cpu_s=$(echo "(${CPU1[$n]} - ${CPU0[$n]}) / $tick" | bc -l)
    printf '  hub %s: CPU %.2f s in the phase (%.3f ms per message), disk writes %.1f KB per message, peak RSS %d KiB (%.1f MB)\n' \
        "$n" "$cpu_s" "$(echo "$cpu_s * 1000 / $got" | bc -l)" "$(echo "(${WRITES1[$n]} - ${WRITES0[$n]}) / 1000 / $got" | bc -l)" \
        "$(peak_rss_kib "${HUBPID[$n]}")" "$(echo "$(peak_rss_kib "${HUBPID[$n]}") / 1024" | bc -l)"
done
echo "(dave's delivery receipts travel back D -> A during the phase; the hubs carry them too)"
echo "throughput phase sampled every ${SAMPLE_S} s: window rate, and hub B's CPU per message in that window"
awk -v tick="$tick" 'NR == 2 { t = $1; d = $2; c = $4 } NR > 2 { n = $2 - d; printf "  %4d-%4d s: %6.1f msg/s  B %.2f ms CPU per message  B store %d MB  load %s\n", t, $1, n / ($1 - t + 0.001), (n > 0 ? ($4 - c) * 1000 / tick / n : 0), $7, $8; t = $1; d = $2; c = $4 }' "$WORK/samples.txt"
# Counters that explain stalls: custody timeouts (a bundle or its acknowledgement was lost
# and the 30 s custody timer resent it), UDP datagrams dropped, mesh queue full / throttled.
for n in A B C D; do
    hub_status "$n" > "$WORK/status-$n.json" || true
    jq -r --arg n "$n" '"  hub \($n) counters: " + ([.router | paths(scalars) as $p | select(($p | last | tostring) | test("custody|Timeout|timeout|resend|refused|RateLimited|QueueFull|window|roundTrip"; "")) | "\($p | map(tostring) | join("."))=\(getpath($p))"] | join(" "))
        + " | " + ([.transports[] | "\(.name): " + ([.status.details // {} | to_entries[] | select(.key | test("dropped|queue_full|throttled|failures")) | "\(.key)=\(.value)"] | join(" "))] | join("; "))' \
        "$WORK/status-$n.json" 2>/dev/null || echo "  hub $n: status unreadable"
done
kill -TERM "$alice_pid" 2>/dev/null || true
wait "$alice_pid" 2>/dev/null || true
exit 0
