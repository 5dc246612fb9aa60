#!/usr/bin/env bash
# Spray-and-wait in real hubs. Four hubs, A in the middle:
#
#        B
#      / |
#     A––C      A–B, A–C, A–D, B–C, C–D: every neighbour of A has another neighbour
#      \ |      that lacks the message, so anything but "wait" would show as frames.
#        D
#
# Every hub runs `policy: spray-and-wait`, `spray_copies: 3`, and trusts the other three.
#  1. bounded copies: dave is offline (never attached anywhere). alice at A sends K1
#     messages; A, the source hub, hands out exactly copies − 1 = 2 copies of each, and
#     the hubs holding a copy wait: no other hub sends a single bundle frame.
#  2. direct delivery: A is reloaded with `spray_copies: 1` (no copies to hand out).
#     dave attaches at D; once D's attachment announcement reached A, alice sends K2
#     messages: A sends each one to D, the neighbour where dave is attached, and nothing
#     to B or C; dave gets them all.
# Counted with the mesh transport's per-neighbour bundle counters (bundles_by_peer).
#
#   sudo Plugins/Mesh/Tests/netns/spray.sh          (BIN=<products dir>, default .build/debug)
source "$(dirname "$0")/lib.sh"
K1=${K1:-6}
K2=${K2:-5}
preflight

HUBS=(A B C D)
for n in "${HUBS[@]}"; do make_ns "$n"; done
connect A 10.97.1.1 B 10.97.1.2
connect A 10.97.2.1 C 10.97.2.2
connect A 10.97.3.1 D 10.97.3.2
connect B 10.97.4.1 C 10.97.4.2
connect C 10.97.5.1 D 10.97.5.2
# The hubs trust each other (hub_trust: list, every hub's key): a trusted hub's custody
# acknowledgement is a copy handed out. Under open trust an untrusted hub's word uses up no
# copy by design (Docs/protocol.md), so the bound would hold only by the order of events.
# Each hub makes its identity on a first start; then all restart trusting the four keys.
for n in "${HUBS[@]}"; do write_config "$n"; start_hub "$n"; done
keys=()
for n in "${HUBS[@]}"; do
    keys+=("\"$("$BIN/yaok-hub" identity --json --socket "$WORK/$n/control.sock" | jq -r .signingKey)\"")
    kill_hub "$n"
done
TRUST="  hub_trust: list
  trusted_hubs: [$(IFS=,; echo "${keys[*]}")]"
ROUTER_EXTRA="  policy: spray-and-wait
  spray_copies: 3
$TRUST"
for n in "${HUBS[@]}"; do write_config "$n"; start_hub "$n"; done

star_links() { links_are A 3 && links_are B 2 && links_are C 3 && links_are D 2; }
wait_for 30 "mesh links A:3 B:2 C:3 D:2" star_links
[[ $(hub_status A | jq -r .router.policy) == "spray-and-wait(3)" ]] || fail "A's policy: $(hub_status A | jq -r .router.policy)"
pass "four hubs linked (A:3 B:2 C:3 D:2), policy spray-and-wait(3)"

# A's mesh key prefix (first 4 bytes of its key), from B's neighbour entry at A's address on link 1.
KEY_A=$(mesh_detail B neighbours | tr ',' '\n' | awk -F@ '$2 ~ /^10\.97\.1\.1:/ { print $1 }')
[[ $KEY_A =~ ^[0-9a-f]{8}$ ]] || fail "A's key prefix not found in B's neighbours: $(mesh_detail B neighbours)"

# bundles N: bundle frames hub N received and sent (mesh, all neighbours), "in out".
bundles() { echo "$(mesh_detail "$1" bundles_in) $(mesh_detail "$1" bundles_out)"; }
# from_peer N KEY: bundle frames hub N received from the neighbour with that key prefix.
from_peer() { mesh_detail "$1" bundles_by_peer | tr ',' '\n' | awk -F'[:/]' -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print 0 }'; }

make_pair alice Alice dave Dave
HUB=udp://127.0.0.1:7811

# --- 1. bounded copies while the recipient is nowhere.
yaok_in A alice send Dave "spray {n}" --repeat "$K1" --hub "$HUB" --json --timeout 30 > "$WORK/send1.json" \
    || fail "hub A did not take all $K1 messages: $(tail -n 3 "$WORK/send1.json")"
copies=$((2 * K1))
a_sent_all() { (( $(mesh_detail A bundles_out) >= copies )); }
wait_for 30 "A to hand out $copies copies" a_sent_all
# Settled: nothing moves for three custody-timeout-free seconds (a hub that did not wait would
# have forwarded within milliseconds of taking custody).
prev=""
for _ in $(seq 1 15); do
    cur=$(for n in "${HUBS[@]}"; do bundles "$n"; done | paste -sd' ')
    [[ $cur == "$prev" ]] && break
    prev=$cur
    sleep 1
done
read -r a_in a_out b_in b_out c_in c_out d_in d_out <<< "$cur"
echo "  bundle frames in/out: A $a_in/$a_out  B $b_in/$b_out  C $c_in/$c_out  D $d_in/$d_out"
(( a_out == copies )) || fail "A handed out $a_out bundle frames for $K1 messages, expected exactly $copies (copies 3 = 2 handed out)"
(( b_in + c_in + d_in == copies )) || fail "the neighbours received $((b_in + c_in + d_in)) bundle frames, A sent $copies"
for n in B C D; do
    (( $(from_peer "$n" "$KEY_A") <= K1 )) || fail "hub $n got some message twice from A"
done
(( b_out + c_out + d_out == 0 )) || fail "hubs holding a copy did not wait: B sent $b_out, C $c_out, D $d_out bundle frames"
[[ $(hub_status A | jq .router.counters.untrustedHandOvers) == 0 ]] || fail "A handed copies to hubs it does not trust"
pass "spray: $K1 messages, A handed out exactly $copies copies (2 each); B, C, D took $b_in/$c_in/$d_in and sent none on (wait phase)"

# --- 2. direct delivery to the neighbour where the recipient is attached.
ROUTER_EXTRA="  policy: spray-and-wait
  spray_copies: 1
$TRUST"
write_config A
kill -HUP "${HUBPID[A]}"
policy_is_1() { [[ $(hub_status A | jq -r .router.policy) == "spray-and-wait(1)" ]]; }
wait_for 20 "A to reload with spray_copies 1" policy_is_1
wait_for 30 "links A:3 B:2 C:3 D:2 after A's reload" star_links
a_frames_before=$(mesh_status A | jq .frames_in)
d_from_a_before=$(from_peer D "$KEY_A"); b_from_a_before=$(from_peer B "$KEY_A"); c_from_a_before=$(from_peer C "$KEY_A")
ip netns exec "$TAG-D" "$BIN/yaok" listen --home "$WORK/dave" --hub "$HUB" --json --timeout 90 > "$WORK/dave.json" 2>&1 &
dave_pid=$!
dave_attached() { grep -q '"event":"connected"' "$WORK/dave.json"; }
wait_for 20 "dave to attach at D" dave_attached
# D announces dave's attachment to its neighbours: A hears it (a frame, not a bundle) on its mesh links.
a_heard() { (( $(mesh_status A | jq .frames_in) > a_frames_before )); }
wait_for 20 "D's attachment announcement to reach A" a_heard
yaok_in A alice send Dave "direct {n}" --repeat "$K2" --hub "$HUB" --json --timeout 30 > "$WORK/send2.json" \
    || fail "hub A did not take all $K2 messages: $(tail -n 3 "$WORK/send2.json")"
dave_has_all() { (( $(jq -r 'select(.event == "message") | select(.text | startswith("direct ")) | .id' "$WORK/dave.json" 2>/dev/null | sort -u | wc -l) >= K2 )); }
wait_for 60 "dave at D to get the $K2 direct messages" dave_has_all
kill -TERM "$dave_pid" 2>/dev/null || true
wait "$dave_pid" 2>/dev/null || true
d_got=$(( $(from_peer D "$KEY_A") - d_from_a_before ))
b_got=$(( $(from_peer B "$KEY_A") - b_from_a_before ))
c_got=$(( $(from_peer C "$KEY_A") - c_from_a_before ))
echo "  bundle frames from A since the reload: to D $d_got, to B $b_got, to C $c_got"
(( d_got >= K2 )) || fail "A sent $d_got bundle frames to D, expected the $K2 messages for dave directly"
(( b_got == 0 && c_got == 0 )) || fail "A sent copies to B ($b_got) or C ($c_got) with spray_copies 1"
# `yaok send --repeat` numbered the texts: {n} became 1..K2.
texts=$(jq -r 'select(.event == "message") | select(.text | startswith("direct ")) | .text' "$WORK/dave.json" | sort -u | paste -sd,)
[[ $texts == "$(seq -f 'direct %g' 1 "$K2" | sort | paste -sd,)" ]] || fail "dave's texts: $texts"
dups=$(jq -r 'select(.event == "message") | .id' "$WORK/dave.json" | sort | uniq -d | wc -l)
(( dups == 0 )) || fail "dave got $dups messages twice"
pass "direct: with spray_copies 1, A sent all $K2 messages to D where dave is attached ($d_got frames) and none to B or C; dave got them once each"
