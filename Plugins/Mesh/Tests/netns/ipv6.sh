#!/usr/bin/env bash
# Hubs on links with ONLY IPv6 link-local addresses (no IPv4 on those links at all):
#   A –(beacons on ff02::5961:6f6b, discovered)– B –(static peer [fe80::…%if]:7813)– C
# A and B find each other by link-local multicast beacons and link over TCP to each
# other's fe80:: address with its scope; C has discovery off and dials B's link-local
# address from its config. An endpoint at A writes to one at C (two hops), C's endpoint
# answers with a delivery receipt that travels back.
#
#   sudo Plugins/Mesh/Tests/netns/ipv6.sh          (BIN=<products dir>, default .build/debug)
source "$(dirname "$0")/lib.sh"
preflight

for n in A B C; do make_ns "$n"; done
connect6 A B    # link 1
connect6 B C    # link 2
for end in "A $(link_if_x 1)" "B $(link_if_y 1)" "B $(link_if_x 2)" "C $(link_if_y 2)"; do
    read -r ns ifname <<< "$end"
    [[ -z $(ip -n "$TAG-$ns" -4 addr show dev "$ifname") ]] || fail "$ifname in $ns has an IPv4 address"
done
b_ll=$(link_local B "$(link_if_x 2)")
write_config A
write_config B
write_config C "discovery: false" "peers: [\"[$b_ll%$(link_if_y 2)]:7813\"]"
for n in A B C; do start_hub "$n"; done

links_ok() { links_are A 1 && links_are B 2 && links_are C 1; }
wait_for 40 "mesh links A:1 B:2 C:1 over IPv6 link-local" links_ok
a_neighbour=$(mesh_detail A neighbours)
[[ $a_neighbour == *"@[fe80::"*"%$(link_if_x 1)]:"* ]] || fail "A's neighbour is not at B's link-local address with A's interface as scope: $a_neighbour"
[[ $(mesh_detail C neighbours) == *"@[$b_ll%$(link_if_y 2)]:7813" ]] || fail "C's neighbour: $(mesh_detail C neighbours)"
[[ $(mesh_detail A interfaces) == "$(link_if_x 1)(fe80::"* ]] || fail "A's beacon interfaces: $(mesh_detail A interfaces)"
(( $(mesh_detail A beacons_received) > 0 )) || fail "A heard no beacons"
[[ $(mesh_detail A beacons_bad) == 0 ]] || fail "A counted bad beacons"
[[ $(mesh_detail B ipv6) == on ]] || fail "B's ipv6: $(mesh_detail B ipv6)"
[[ $(mesh_status A | jq -r .state) == running ]] || fail "A's mesh: $(mesh_status A)"
pass "IPv6 link-local only: A and B discovered each other by ff02:: beacons (A's neighbour $a_neighbour); C dialled B's [fe80::…%if] from its config"

make_pair alice Alice carol Carol
HUB=udp://127.0.0.1:7811
yaok_in C carol listen --hub "$HUB" --count 1 --json --timeout 60 > "$WORK/carol.json" &
carol_pid=$!
yaok_in A alice send Carol "over link-local IPv6" --hub "$HUB" --wait-delivered --json --timeout 60 > "$WORK/alice.json" \
    || fail "alice's message was not delivered (no receipt): $(cat "$WORK/alice.json")"
wait "$carol_pid" || fail "carol's listener: $(cat "$WORK/carol.json")"
[[ $(jq -r 'select(.event == "message") | .text' "$WORK/carol.json") == "over link-local IPv6" ]] || fail "carol got: $(cat "$WORK/carol.json")"
[[ -n $(jq -r 'select(.event == "delivered") | .id' "$WORK/alice.json") ]] || fail "alice got no receipt: $(cat "$WORK/alice.json")"
pass "alice at A -> carol at C over two link-local hops; carol's delivery receipt came back"
