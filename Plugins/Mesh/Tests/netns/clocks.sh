#!/usr/bin/env bash
# A line of three hubs whose clocks disagree, as field hubs' do (Docs/protocol.md §2.2):
#   A (clock 2 days behind) – B (true clock, its operator vouches for it) – C (3 days ahead)
# in network namespaces, linked by the mesh transport, under `hub_trust: network` with a
# certificate each. Each hub's wall clock is moved by libfaketime (`faketime`; its monotonic
# clock stays true, as on a Raspberry Pi). Checks:
#   - every hub link is certified and stays trusted (certificates judged against each hub's
#     estimate of true time, with the tolerance of its source, not blindly against its clock);
#   - A and C learn true time from B (a certified hub whose source is its system clock) and
#     say how far off they are: about 48 h behind, about 3 d ahead;
#   - a message from alice at A reaches carol at C and carol's receipt comes back, and the
#     other way round; no hub refuses anything for its lifetime.
#
#   sudo Plugins/Mesh/Tests/netns/clocks.sh          (BIN=<products dir>, default .build/debug)
source "$(dirname "$0")/lib.sh"
preflight
if ! command -v faketime >/dev/null; then
    [[ ${YAOK_CI:-} == 1 ]] && fail "faketime is not installed (.ci/run installs it: apt-get install faketime)"
    skip "faketime is not installed (apt-get install faketime)"
fi
export FAKETIME_DONT_FAKE_MONOTONIC=1
declare -A CLOCK=([A]="-2d" [B]="" [C]="+3d")
declare -A TRUST=([A]=never [B]=always [C]=never)

for n in A B C; do make_ns "$n"; done
connect A 10.77.1.1 B 10.77.1.2
connect B 10.77.2.1 C 10.77.2.2

# start_clocked NAME: the hub in its namespace, its wall clock CLOCK[NAME] away. The faketime
# wrapper waits for the hub as its child: HUBPID then names the hub itself, so that stopping it
# (kill_hub, the cleanup) signals the hub.
start_clocked() {
    local name=$1
    if [[ -z ${CLOCK[$name]} ]]; then start_hub "$name"; return; fi
    ip netns exec "$TAG-$name" faketime -f "${CLOCK[$name]}" "$BIN/yaok-hub" run --config "$WORK/$name/hub.yaml" >> "$WORK/$name/hub.log" 2>&1 &
    local wrapper=$!
    HUBPID[$name]=$wrapper
    wait_for 30 "hub $name's control socket" hub_status "$name"
    HUBPID[$name]=$(pgrep -P "$wrapper" -f yaok-hub | head -1)
    [[ -n ${HUBPID[$name]} ]] || fail "no yaok-hub under faketime for $name"
}

# First run (true clocks): each hub makes its identity; the network key certifies each for 30 days.
"$BIN/yaok-hub" network-key init "$WORK/network.key" > "$WORK/network.txt"
network=$(awk '/^network key/ { print $3 }' "$WORK/network.txt")
[[ ${#network} == 64 ]] || fail "no network key: $(cat "$WORK/network.txt")"
for n in A B C; do
    write_config "$n"
    start_hub "$n"
    key=$("$BIN/yaok-hub" identity --json --socket "$WORK/$n/control.sock" | jq -r .signingKey)
    [[ ${#key} == 64 ]] || fail "hub $n's signing key: $key"
    "$BIN/yaok-hub" cert issue --network-key "$WORK/network.key" --hub "$key" --days 30 --out "$WORK/$n/hub.cert" >/dev/null
    kill_hub "$n"
    ROUTER_EXTRA=$'  hub_trust: network\n  network_key: '"$network"$'\n  hub_certificate: '"$WORK/$n/hub.cert"$'\nclock:\n  trust_system_clock: '"${TRUST[$n]}" \
        write_config "$n"
done
for n in A B C; do start_clocked "$n"; done

links_ok() { links_are A 1 && links_are B 2 && links_are C 1; }
wait_for 60 "mesh links A:1 B:2 C:1" links_ok
trust_of() { hub_status "$1" | jq -r '[.router.links[] | select(.role == "hub") | .trust] | unique | join(",")'; }
certified() { [[ $(trust_of A) == certified && $(trust_of B) == certified && $(trust_of C) == certified ]]; }
wait_for 30 "every hub link certified" certified
for n in A B C; do
    refused=$(hub_status "$n" | jq '.router.counters.certificatesRefused')
    [[ $refused == 0 ]] || fail "hub $n refused $refused certificates"
done
pass "A (-2 d), B (true) and C (+3 d) linked; every hub link certified"

clock_of() { hub_status "$1" | jq -r '.router.clock | "\(.source) \(.systemSynchronised)"'; }
learnt() { [[ $(clock_of A) == "hubs false" && $(clock_of C) == "hubs false" ]]; }
wait_for 30 "A and C taking true time from B" learnt
summary() { "$BIN/yaok-hub" status --socket "$WORK/$1/control.sock" | sed -n 's/^clock: //p'; }
[[ $(summary B) == "synchronised (system)"* ]] || fail "B's clock: $(summary B)"
[[ $(summary A) == "unsynchronised, about 48 h behind (1 hub)" ]] || fail "A's clock: $(summary A)"
[[ $(summary C) == "unsynchronised, about 3 d ahead (1 hub)" ]] || fail "C's clock: $(summary C)"
offset=$(hub_metrics A | awk '/^yaok_hub_clock_offset_seconds/ { print int($2) }')
(( offset < -172000 && offset > -173600 )) || fail "A's yaok_hub_clock_offset_seconds: $offset"
pass "A says: $(summary A); C says: $(summary C); B: $(summary B)"

make_pair alice Alice carol Carol
HUB=udp://127.0.0.1:7811
# over_line FROM_NS FROM_HOME TO_NS TO_HOME TO_NAME TEXT: one message and its receipt across the line.
over_line() {
    yaok_in "$3" "$4" listen --hub "$HUB" --count 1 --json --timeout 60 > "$WORK/$4.json" &
    local listener=$!
    yaok_in "$1" "$2" send "$5" "$6" --hub "$HUB" --wait-delivered --json --timeout 60 > "$WORK/$2.json" \
        || fail "$2's message was not delivered (no receipt): $(cat "$WORK/$2.json")"
    wait "$listener" || fail "$4's listener: $(cat "$WORK/$4.json")"
    [[ $(jq -r 'select(.event == "message") | .text' "$WORK/$4.json") == "$6" ]] || fail "$4 got: $(cat "$WORK/$4.json")"
    [[ -n $(jq -r 'select(.event == "delivered") | .id' "$WORK/$2.json") ]] || fail "$2 got no receipt: $(cat "$WORK/$2.json")"
}
over_line A alice C carol Carol "across three clocks"
over_line C carol A alice Alice "and back"
for n in A B C; do
    counts=$(hub_status "$n" | jq -c '[.router.counters.refusedExpired, .router.counters.refusedLifetime]')
    [[ $counts == "[0,0]" ]] || fail "hub $n refused for lifetime [expired, lifetime]: $counts"
done
pass "alice at A (-2 d) <-> carol at C (+3 d) through B: both messages delivered, both receipts back, nothing refused for its lifetime"
