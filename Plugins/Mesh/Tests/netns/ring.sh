#!/usr/bin/env bash
# A ring of five hubs A–B–C–D–E–A in network namespaces. An endpoint at A sends K
# messages to an endpoint at C; C's endpoint collects them and its receipts flood
# back. Each envelope (K messages + K receipts) must cross each mesh link at most
# once, counted by the mesh transport's per-neighbour bundle counters.
#
#   sudo Plugins/Mesh/Tests/netns/ring.sh          (BIN=<products dir>, default .build/debug)
source "$(dirname "$0")/lib.sh"
K=${K:-5}
preflight

HUBS=(A B C D E)
for n in "${HUBS[@]}"; do make_ns "$n"; done
connect A 10.98.1.1 B 10.98.1.2
connect B 10.98.2.1 C 10.98.2.2
connect C 10.98.3.1 D 10.98.3.2
connect D 10.98.4.1 E 10.98.4.2
connect E 10.98.5.1 A 10.98.5.2
for n in "${HUBS[@]}"; do write_config "$n"; start_hub "$n"; done

ring_links() { for n in "${HUBS[@]}"; do links_are "$n" 2 || return 1; done; }
wait_for 30 "every ring hub to have 2 mesh links" ring_links
pass "ring of five: every hub has exactly 2 mesh links"

neighbour_keys() { mesh_detail "$1" neighbours | tr ',' '\n' | cut -d@ -f1 | sort | paste -sd,; }

make_pair alice Alice carol Carol
HUB=udp://127.0.0.1:7811
for i in $(seq 1 "$K"); do
    "$BIN/yaok" send --home "$WORK/alice" Carol "ring message $i" --json > /dev/null
done
yaok_in A alice listen --hub "$HUB" --json --timeout 3 > /dev/null || true
: > "$WORK/carol.json"
carol_has_all() {
    yaok_in C carol listen --hub "$HUB" --json --timeout 4 >> "$WORK/carol.json" 2>/dev/null || true
    (( $(jq -r 'select(.event == "message") | .id' "$WORK/carol.json" | sort -u | wc -l) >= K ))
}
wait_for 120 "carol at C to get $K messages" carol_has_all
alice_has_receipts() {
    yaok_in A alice listen --hub "$HUB" --json --timeout 3 > /dev/null 2>&1 || true
    (( $("$BIN/yaok" outbox --home "$WORK/alice" --json | jq -r 'select(.state == "delivered") | .id' | wc -l) >= K ))
}
wait_for 120 "alice to get $K delivery receipts" alice_has_receipts
pass "$K messages A -> C and $K receipts back"

# Let the floods settle: counters stop changing.
snapshot() { for n in "${HUBS[@]}"; do echo "$n $(mesh_detail "$n" bundles_by_peer)"; done; }
prev=""
for _ in $(seq 1 30); do
    cur=$(snapshot)
    [[ $cur == "$prev" ]] && break
    prev=$cur
    sleep 2
done
echo "bundle frames received/sent per neighbour key prefix:"
echo "$cur" | sed 's/^/  /'

envelopes=$((2 * K))
worst=0
while read -r n entries; do
    for e in $(echo "$entries" | tr ',' ' '); do
        peer=${e%%:*}; counts=${e#*:}; in=${counts%/*}; out=${counts#*/}
        # in = envelopes received from that neighbour; the neighbour's "out" to us is the same
        # frames seen from the other end, so the link's crossings are in(n<-peer) + in(peer<-n).
        echo "$n $peer $in $out"
    done
done <<< "$cur" > "$WORK/edges.txt"
# Crossings per undirected link: the "in" counts at both ends. Each end names the other by its
# mesh key prefix; a hub's own prefix is the one both of its ring neighbours list.
declare -A SELF=()
for n in "${HUBS[@]}"; do
    # n's own key appears in the neighbours list of both its ring neighbours; take the common one.
    case $n in A) a=E b=B;; B) a=A b=C;; C) a=B b=D;; D) a=C b=E;; E) a=D b=A;; esac
    SELF[$n]=$(comm -12 <(neighbour_keys "$a" | tr ',' '\n') <(neighbour_keys "$b" | tr ',' '\n'))
done
for pair in A:B B:C C:D D:E E:A; do
    x=${pair%:*}; y=${pair#*:}
    xin=$(awk -v n="$x" -v p="${SELF[$y]}" '$1 == n && $2 == p { print $3 }' "$WORK/edges.txt"); xin=${xin:-0}
    yin=$(awk -v n="$y" -v p="${SELF[$x]}" '$1 == n && $2 == p { print $3 }' "$WORK/edges.txt"); yin=${yin:-0}
    crossings=$((xin + yin))
    echo "  link $x-$y: $crossings bundle frames ($x got $xin, $y got $yin) for $envelopes envelopes"
    (( crossings <= envelopes )) || fail "link $x-$y carried $crossings bundle frames for $envelopes envelopes"
    (( crossings > worst )) && worst=$crossings
done
total=0
for n in "${HUBS[@]}"; do
    got=$(mesh_detail "$n" bundles_in)
    (( got <= envelopes )) || fail "hub $n received $got bundle frames for $envelopes envelopes (some envelope came twice)"
    total=$((total + got))
done
pass "each of $envelopes envelopes crossed each link at most once (busiest link: $worst; $total bundle frames in all)"
