#!/usr/bin/env bash
# A line of four hubs A–B–C–D in network namespaces, each seeing only its neighbours
# over veth pairs. Checks discovery and links, then endpoint messages across three hops
# with receipts, a partition and heal, and a SIGKILLed hub mid-transfer.
#
#   sudo Plugins/Mesh/Tests/netns/line.sh          (BIN=<products dir>, default .build/debug)
#   PHASES="links" ... runs only the link checks.
source "$(dirname "$0")/lib.sh"
PHASES=${PHASES:-"links message partition crash abuse degraded"}
preflight

for n in A B C D; do make_ns "$n"; done
connect A 10.99.1.1 B 10.99.1.2    # link 1
connect B 10.99.2.1 C 10.99.2.2    # link 2
connect C 10.99.3.1 D 10.99.3.2    # link 3
for n in A B C D; do write_config "$n"; start_hub "$n"; done
declare -A ID=()
for n in A B C D; do ID[$n]=$(hub_id "$n"); done


all_line_links() { links_are A 1 && links_are B 2 && links_are C 2 && links_are D 1; }

# --- Phase 1: discovery alone builds exactly one link per neighbour pair.
wait_for 30 "mesh links A:1 B:2 C:2 D:1" all_line_links
[[ $(tcp_peers A) == "${ID[B]}" ]] || fail "A's router links are $(tcp_peers A), expected B (${ID[B]})"
[[ $(tcp_peers B) == $(printf '%s\n' "${ID[A]}" "${ID[C]}" | sort | paste -sd,) ]] || fail "B's router links are $(tcp_peers B)"
[[ $(tcp_peers C) == $(printf '%s\n' "${ID[B]}" "${ID[D]}" | sort | paste -sd,) ]] || fail "C's router links are $(tcp_peers C)"
[[ $(tcp_peers D) == "${ID[C]}" ]] || fail "D's router links are $(tcp_peers D), expected C (${ID[C]})"
# A hub can be dialled by a neighbour that heard its beacon before it hears one itself
# (the neighbour started first and beacons once a second), so wait for each hub's first.
heard_beacon() { (( $(mesh_detail "$1" beacons_received) > 0 )); }
for n in A B C D; do
    [[ $(mesh_status "$n" | jq -r .state) == running ]] || fail "hub $n mesh state: $(mesh_status "$n")"
    wait_for 10 "hub $n hears a beacon" heard_beacon "$n"
    [[ $(mesh_detail "$n" beacons_bad) == 0 ]] || fail "hub $n counted bad beacons"
done
# Still exactly one link per pair a few keepalive rounds later (no duplicate-session flapping).
sleep 3
all_line_links || fail "links changed: A:$(mesh_links A) B:$(mesh_links B) C:$(mesh_links C) D:$(mesh_links D)"
for n in A B C D; do
    [[ $(mesh_detail "$n" links_up_total) == $(mesh_links "$n") ]] || fail "hub $n brought links up $(mesh_detail "$n" links_up_total) times (flapping)"
done
pass "line A-B-C-D: mesh links A:1 B:2 C:2 D:1, each to the right neighbour, stable"
metrics=$(hub_metrics B) || fail "B's control socket gave no metrics"
grep -Eq '^yaok_transport_mesh_links\{transport="mesh"\} 2(\.0)?$' <<< "$metrics" || fail "B's mesh_links gauge is not 2: $(grep mesh <<< "$metrics")"
grep -Eq '^yaok_transport_mesh_beacons_sent_total\{transport="mesh"\} [1-9]' <<< "$metrics" || fail "B reports no beacons sent: $(grep mesh <<< "$metrics")"
pass "B's metrics: mesh_links 2, beacons sent"

has_phase() { [[ " $PHASES " == *" $1 "* ]]; }
HUB=udp://127.0.0.1:7811

# events FILE EVENT: the lines of a `yaok --json` output with that event.
events() { jq -c --arg e "$2" 'select(.event == $e)' "$1" 2>/dev/null || true; }

if has_phase message || has_phase partition || has_phase crash; then
    make_pair alice Alice dave Dave
fi

# --- Phase 2: an endpoint at A writes to an endpoint at D (three mesh hops); D answers; receipts return.
if has_phase message; then
    yaok_in A alice send Dave "hello from A" --hub "$HUB" --json --timeout 20 > "$WORK/send1.json" || fail "alice send: $(cat "$WORK/send1.json")"
    id1=$(events "$WORK/send1.json" queued | jq -r .id)
    [[ -n $(events "$WORK/send1.json" handed_over) ]] || fail "hub A did not take custody: $(cat "$WORK/send1.json")"
    yaok_in D dave listen --hub "$HUB" --count 1 --json --timeout 60 > "$WORK/listen1.json" || true
    [[ $(events "$WORK/listen1.json" message | jq -r .text) == "hello from A" ]] || fail "dave at D did not get the message: $(cat "$WORK/listen1.json")"
    [[ $(events "$WORK/listen1.json" message | jq -r .id) == "$id1" ]] || fail "message id changed on the way"
    pass "alice at A -> dave at D across three mesh hops"

    yaok_in A alice listen --hub "$HUB" --count 1 --json --timeout 90 > "$WORK/listen2.json" &
    alice_pid=$!
    yaok_in D dave send Alice "hello back from D" --hub "$HUB" --json --wait-delivered --timeout 90 > "$WORK/send2.json" || fail "dave send: $(cat "$WORK/send2.json")"
    [[ -n $(events "$WORK/send2.json" delivered) ]] || fail "dave got no delivery receipt: $(cat "$WORK/send2.json")"
    wait "$alice_pid" || true
    [[ $(events "$WORK/listen2.json" message | jq -r .text) == "hello back from D" ]] || fail "alice did not get the answer: $(cat "$WORK/listen2.json")"
    pass "dave's answer reached alice and dave got her delivery receipt"

    delivered_to_alice() {
        yaok_in A alice listen --hub "$HUB" --json --timeout 3 > /dev/null 2>&1 || true
        "$BIN/yaok" outbox --home "$WORK/alice" --json | jq -e --arg id "$id1" 'select(.id == $id and .state == "delivered")' > /dev/null
    }
    wait_for 60 "dave's receipt for alice's first message" delivered_to_alice
    pass "alice's first message is marked delivered by dave's receipt"
fi

# --- Phase 3: cut C–D, send while partitioned, heal, and the message arrives.
if has_phase partition; then
    ip -n "$TAG-C" link set "$(link_if_x 3)" down
    wait_for 20 "C to lose its link to D" links_are C 1
    wait_for 20 "D to lose its link to C" links_are D 0
    pass "partition C|D: links C:1 D:0"
    yaok_in A alice send Dave "sent during the partition" --hub "$HUB" --json --timeout 20 > "$WORK/send3.json" || fail "alice send: $(cat "$WORK/send3.json")"
    id3=$(events "$WORK/send3.json" queued | jq -r .id)
    # The message travels to C and waits there.
    c_holds_it() { (( $(hub_status C | jq '.router.queue.queued + .router.queue.inFlight') >= 1 )); }
    wait_for 30 "C to hold the message" c_holds_it
    ip -n "$TAG-C" link set "$(link_if_x 3)" up
    wait_for 30 "links A:1 B:2 C:2 D:1 after healing" all_line_links
    pass "healed: links A:1 B:2 C:2 D:1"
    yaok_in D dave listen --hub "$HUB" --count 1 --json --timeout 90 > "$WORK/listen3.json" || true
    [[ $(events "$WORK/listen3.json" message | jq -r .id) == "$id3" ]] || fail "dave did not get the message sent during the partition: $(cat "$WORK/listen3.json")"
    pass "the message sent during the partition arrived after healing"
fi

# --- Phase 4: SIGKILL hub B while 20 messages cross it, restart it: all arrive, none twice.
if has_phase crash; then
    N=20
    for i in $(seq 1 $N); do
        "$BIN/yaok" send --home "$WORK/alice" Dave "crash test message $i" --json > /dev/null
    done
    # Attaching hands the whole outbox to hub A, which offers it on to B at once.
    yaok_in A alice listen --hub "$HUB" --json --timeout 3 > /dev/null || true
    b_busy() { (( $(hub_status B | jq '.router.queue.queued + .router.queue.inFlight + .router.queue.handedOver') >= 1 )); }
    wait_for 30 "B to take some of the messages" b_busy
    kill_hub B KILL
    pass "hub B killed with SIGKILL mid-transfer"
    sleep 1
    start_hub B
    wait_for 40 "links A:1 B:2 C:2 D:1 after B restarted" all_line_links
    got_all() {
        yaok_in D dave listen --hub "$HUB" --json --timeout 5 >> "$WORK/listen4.json" 2>/dev/null || true
        (( $(events "$WORK/listen4.json" message | jq -r 'select(.text | startswith("crash test")) | .id' | sort -u | wc -l) >= N ))
    }
    : > "$WORK/listen4.json"
    wait_for 240 "all $N messages at dave" got_all
    total=$(events "$WORK/listen4.json" message | jq -r 'select(.text | startswith("crash test")) | .id' | wc -l)
    unique=$(events "$WORK/listen4.json" message | jq -r 'select(.text | startswith("crash test")) | .id' | sort -u | wc -l)
    [[ $total == "$N" && $unique == "$N" ]] || fail "dave got $total message events for $unique distinct messages, expected $N each"
    inbox=$("$BIN/yaok" inbox --home "$WORK/dave" --json | jq -r 'select(.text | startswith("crash test")) | .id' | sort | uniq -d | wc -l)
    [[ $inbox == 0 ]] || fail "dave's inbox holds duplicates"
    pass "after SIGKILL and restart of B: $N of $N messages arrived, none twice"
    # Once Dave's receipts have crossed them, the middle hubs count no work.
    # Each message there ended with its receipt; each receipt they handed on was taken by a
    # hub they do not trust (open trust) and is kept, handed over, not queued and retried
    # until it expires (nothing acknowledges a receipt, so a queued one would stay queued at
    # every hub it crosses).
    middle_idle() { for n in B C; do (( $(hub_status "$n" | jq '.router.queue.queued + .router.queue.inFlight') == 0 )) || return 1; done; }
    wait_for 60 "B and C to count no queued work" middle_idle
    for n in B C; do
        (( $(hub_status "$n" | jq '.router.counters.untrustedReceiptHandOvers') >= 1 )) || fail "hub $n handed over no receipt: $(hub_status "$n" | jq -c .router.queue)"
    done
    pass "after the receipts: B and C count no queued work (receipts handed over B:$(hub_status B | jq .router.counters.untrustedReceiptHandOvers) C:$(hub_status C | jq .router.counters.untrustedReceiptHandOvers))"
fi

# --- Phase 5: a forged beacon is counted bad; a client that skips the handshake is disconnected.
if has_phase abuse; then
    bad_before=$(mesh_detail B beacons_bad)
    hs_before=$(mesh_detail B handshake_failures)
    # A well-formed, current beacon for a random key with an all-zero signature, sent to B's beacon port.
    ip netns exec "$TAG-A" python3 -c '
import os, socket, struct, time
b = b"YKMB\x01" + os.urandom(64) + struct.pack(">HQ", 7813, int(time.time() * 1000)) + bytes(64)
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b, ("10.99.1.2", 7812))'
    bad_grew() { (( $(mesh_detail B beacons_bad) > bad_before )); }
    wait_for 10 "B to count the forged beacon" bad_grew
    # Bundle records in clear before any handshake: the first one ends the connection.
    ip netns exec "$TAG-A" python3 -c '
import socket
s = socket.create_connection(("10.99.1.2", 7813), timeout=5)
s.sendall(b"\x01\x00\x03abc" * 20)
s.settimeout(10)
while True:
    try:
        if not s.recv(4096): break
    except OSError: break'
    hs_grew() { (( $(mesh_detail B handshake_failures) > hs_before )); }
    wait_for 10 "B to disconnect the junk client" hs_grew
    grep -q "record type 0x1 in clear" "$WORK/B/hub.log" || fail "B logged no reason for the disconnect"
    all_line_links || fail "abuse disturbed the real links"
    pass "forged beacon counted bad; a client skipping the handshake was disconnected with a logged reason; links intact"
fi

# --- Phase 6: a configured interface that does not exist: degraded, named, and the others keep working.
if has_phase degraded; then
    write_config D "interfaces: [\"$(link_if_y 3)\", \"nosuch0\"]"
    kill -HUP "${HUBPID[D]}"
    d_degraded() { [[ $(mesh_status D | jq -r .state) == degraded ]] && mesh_status D | jq -r .reason | grep -q nosuch0; }
    wait_for 20 "D's mesh to be degraded naming nosuch0" d_degraded
    wait_for 30 "D to link with C again after the reload" links_are D 1
    [[ $(mesh_detail D missing_interfaces) == *nosuch0* ]] || fail "missing_interfaces: $(mesh_detail D missing_interfaces)"
    pass "D: $(mesh_status D | jq -r .reason)"
fi
echo "all phases passed: $PHASES"
