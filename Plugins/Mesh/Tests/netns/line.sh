#!/usr/bin/env bash
# A line of four hubs A–B–C–D in network namespaces, each seeing only its neighbours
# over veth pairs. Checks discovery and links, then endpoint messages across three hops
# with receipts, a partition and heal, and a SIGKILLed hub mid-transfer.
#
#   sudo Plugins/Mesh/Tests/netns/line.sh          (BIN=.build-mesh/debug by default)
#   PHASES="links" ... runs only the link checks.
source "$(dirname "$0")/lib.sh"
PHASES=${PHASES:-"links message partition crash"}
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
for n in A B C D; do
    [[ $(mesh_status "$n" | jq -r .state) == running ]] || fail "hub $n mesh state: $(mesh_status "$n")"
    (( $(mesh_detail "$n" beacons_received) > 0 )) || fail "hub $n heard no beacons"
    [[ $(mesh_detail "$n" beacons_bad) == 0 ]] || fail "hub $n counted bad beacons"
done
# Still exactly one link per pair a few keepalive rounds later (no duplicate-session flapping).
sleep 3
all_line_links || fail "links changed: A:$(mesh_links A) B:$(mesh_links B) C:$(mesh_links C) D:$(mesh_links D)"
for n in A B C D; do
    [[ $(mesh_detail "$n" links_up_total) == $(mesh_links "$n") ]] || fail "hub $n brought links up $(mesh_detail "$n" links_up_total) times (flapping)"
done
pass "line A-B-C-D: mesh links A:1 B:2 C:2 D:1, each to the right neighbour, stable"
