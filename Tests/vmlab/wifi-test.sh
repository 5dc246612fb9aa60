#!/bin/bash
# wifi-test.sh — the Wi-Fi Direct transport's VM test (see Plugins/WiFiDirect/README.md).
#
# In the VM: three mac80211_hwsim radios; wlan0 stays with the hub, wlan1 goes into network
# namespace "phone" (wlan2 into "phone2", spare), so frames really cross the simulated air.
# The hub is the plugin's own code (WiFiDirectTransport: nl80211 probe, managed
# wpa_supplicant, P2P_GROUP_ADD, ip address, dnsmasq, TCP link server), run by the
# VMTests/testHubSide test case; the phone is a plain wpa_supplicant driven by the plugin's
# phone side (VMTests/testPhoneDiscovery: P2PServiceDiscovery finds the hub by its _yaok._tcp
# service, P2PGroupJoin joins with push-button), takes a DHCP lease from the plugin's
# dnsmasq, and runs VMTests/testPhoneSide (WiFiDirectClient: handshake as endpoint, records
# echoed, 1 MB timed). Then the group is removed from outside and the plugin must
# re-form it; finally the hub's supplicant is killed and stop() must end the restart in < 2 s.
# Phase 2 (the real daemon) also removes the group while the phone is away: a message queued
# for the phone meanwhile reaches it over TCP after it rejoins.
#
#   Tests/vmlab/wifi-test.sh          # from the host (boots the VM), or inside the guest
#   BIN=.build-wifi/debug (default)   # where YaokHubPackageTests.xctest is
# Prints WIFI_TEST=PASS / FAIL; logs and notes are copied to Tests/vmlab/out/wifi/.
. "$(dirname "$0")/lib.sh"
export VMLAB_TIMEOUT=${VMLAB_TIMEOUT:-460}
vmlab_enter "$@"
set -u
exec 2>&1
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$REPO/.build-wifi/debug}
case $BIN in /*) ;; *) BIN=$REPO/$BIN ;; esac
XCTEST=$BIN/YaokHubPackageTests.xctest
OUT=$REPO/Tests/vmlab/out/wifi
W=/tmp/wifi
mkdir -p "$W" "$OUT"
rm -f "$OUT"/*
HUB_PID=
DAEMON_PID=
result() {
  cp -f "$W"/*.log "$W"/*.out "$W"/*.json "$W"/hub-* "$W"/phone-* "$W"/hub-run/*.log "$OUT"/ 2>/dev/null
  for f in "$W"/daemon/run/*.log; do [ -e "$f" ] && cp -f "$f" "$OUT/daemon-$(basename "$f")"; done
  [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null
  echo "WIFI_TEST=$1"; [ "$1" = PASS ] && exit 0 || exit 1
}
fail() { echo "FAIL: $*"; tail -30 "$W/hub.out" 2>/dev/null; tail -15 "$W/hub-run/wpa_supplicant.log" 2>/dev/null; result FAIL; }
[ -x "$XCTEST" ] || fail "no test binary at $XCTEST (swift build --build-tests --scratch-path .build-wifi)"

step "three hwsim radios, two moved into namespaces"
modprobe mac80211_hwsim radios=3 || fail "modprobe mac80211_hwsim"
wait_for 10 "wlan2" test -e /sys/class/net/wlan2 || fail "radios did not appear"
for pair in "wlan1 phone" "wlan2 phone2"; do
  set -- $pair
  ip netns add "$2"
  iw phy "$(basename "$(readlink /sys/class/net/$1/phy80211)")" set netns name "$2" || fail "move $1"
  ip netns exec "$2" ip link set lo up
done
iw dev | grep -E 'Interface|phy'

step "hub: the plugin forms the group"
YAOK_WIFI_VM=hub YAOK_WIFI_VM_DIR=$W YAOK_WIFI_IF=wlan0 \
  "$XCTEST" YaokWiFiDirectPluginTests.VMTests/testHubSide > "$W/hub.out" 2>&1 &
HUB_PID=$!
wait_for 90 "the hub's group" test -e "$W/hub-group" || fail "no group from the plugin"
cat "$W/hub-probe" "$W/hub-group"
HUB_DEV=$(awk '{print $2}' "$W/hub-group")
GROUP_IF=$(awk '{print $1}' "$W/hub-group")
ip addr show dev "$GROUP_IF" | grep inet
step "hub group $GROUP_IF, device address $HUB_DEV"

step "phone: wpa_supplicant in its namespace, finds the hub"
cat > "$W/phone.conf" <<CONF
ctrl_interface=/run/wpa-phone
update_config=0
device_name=vmlab-phone
device_type=10-0050F204-5
config_methods=virtual_push_button keypad
p2p_listen_reg_class=81
p2p_listen_channel=6
CONF
ip netns exec phone wpa_supplicant -B -D nl80211 -i wlan1 -c "$W/phone.conf" -dd -t -f "$W/phone-wpa.log" || fail "phone supplicant"
C1="ip netns exec phone wpa_cli -p /run/wpa-phone -i p2p-dev-wlan1"
wait_for 10 "the phone's control socket" $C1 ping || fail "phone control socket"
found() { $C1 p2p_peers | grep -qi "$HUB_DEV"; }
# P2P service discovery before joining: VMTests/testPhoneDiscovery schedules a broadcast
# _yaok._tcp PTR query on the phone's supplicant (sent to every peer the find meets), waits for
# the group owner's P2P-SERV-DISC-RESP naming the instance, then asks that hub for its TXT
# record (port). The P2P_SERV_DISC_REQ argument is the query TLV in hex, not "bonjour ...".
# Then it joins that hub's group with push-button (P2PGroupJoin: P2P_CONNECT <hub> pbc join,
# P2P-GROUP-STARTED <if> client); the plugin answers the provision discovery with WPS_PBC.
step "phone finds the hub by its _yaok._tcp service (P2P service discovery) and joins with push-button"
ip netns exec phone env YAOK_WIFI_VM=phone-discovery YAOK_WIFI_VM_DIR=$W YAOK_WIFI_PHONE_CTRL=/run/wpa-phone/p2p-dev-wlan1 \
  YAOK_WIFI_HUB_DEV="$HUB_DEV" YAOK_WIFI_JOIN=pbc "$XCTEST" YaokWiFiDirectPluginTests.VMTests/testPhoneDiscovery > "$W/phone-sd.out" 2>&1
SD_RC=$?
grep -E "error|passed|failed" "$W/phone-sd.out" | head -5
[ -e "$W/phone-sd" ] || fail "the phone did not find the hub's _yaok._tcp service"
echo "service discovery: $(cat "$W/phone-sd")"
found || fail "the service's owner is not in the phone's peer list"
$C1 p2p_peer "$HUB_DEV" | grep -E '^(device_name|config_methods|dev_capab|group_capab)='
[ $SD_RC = 0 ] && [ -e "$W/phone-joined" ] || fail "the phone did not join the hub's group"
echo "joined: $(cat "$W/phone-joined")"
joined() {
  G1=$(ip netns exec phone ls /sys/class/net | grep '^p2p-wlan1-' | head -1)
  [ -n "$G1" ] && ip netns exec phone wpa_cli -p /run/wpa-phone -i "$G1" status | grep -q wpa_state=COMPLETED
}
wait_for 60 "the phone in the group" joined || fail "phone did not join"
G1=$(ip netns exec phone ls /sys/class/net | grep '^p2p-wlan1-' | head -1)
step "phone joined on $G1; DHCP from the plugin's dnsmasq"
cat > "$W/udhcpc.sh" <<'SCRIPT'
#!/bin/sh
[ "$1" = bound ] || [ "$1" = renew ] || exit 0
ip addr add "$ip/${mask:-24}" dev "$interface"
echo "$ip" > /tmp/wifi/phone-lease
SCRIPT
chmod +x "$W/udhcpc.sh"
ip netns exec phone busybox udhcpc -i "$G1" -n -q -f -t 8 -T 2 -s "$W/udhcpc.sh" || fail "no DHCP lease"
echo "phone address: $(cat "$W/phone-lease")"
ip netns exec phone busybox ping -c 2 -W 2 192.168.49.1 | tail -2

step "phone links to the hub over TCP and exchanges records"
ip netns exec phone env YAOK_WIFI_VM=phone YAOK_WIFI_VM_DIR=$W YAOK_WIFI_HUB=192.168.49.1 \
  "$XCTEST" YaokWiFiDirectPluginTests.VMTests/testPhoneSide > "$W/phone.out" 2>&1
grep -E "error|passed|failed" "$W/phone.out" | head -5
[ -e "$W/phone-done" ] || fail "phone side failed"
cat "$W/phone-bench"

step "group torn down; the plugin re-forms it"
wait "$HUB_PID"; RC=$?; HUB_PID=
grep -E "error|passed|failed" "$W/hub.out" | head -8
cat "$W/hub-links" "$W/hub-reformed" 2>/dev/null
cat "$W/hub-stop" 2>/dev/null
[ $RC = 0 ] && [ -e "$W/hub-reformed" ] && [ -e "$W/hub-stop" ] || fail "hub side failed (exit $RC)"
# The supplicant killed with SIGKILL above leaves its group interface behind: clear it so the
# daemon's group below is the only one carrying 192.168.49.1.
for i in $(ls /sys/class/net | grep '^p2p-wlan0-'); do iw dev "$i" del 2>/dev/null; done

# --- Phase 2: the real daemon. yaok-hub dlopens the wifidirect and udp plugins (config
# through the C ABI, real Ed25519 identity); `yaok` on the phone attaches with
# --hub p2p://wlan1?ctrl=/run/wpa-phone&pin=…: through the phone's wpa_supplicant it finds the
# hub by its _yaok._tcp service (port from the TXT record), leaves any other group, joins the
# daemon's group with the PIN, takes a DHCP lease (busybox udhcpc) and links over TCP to the
# group owner; it reaches a `yaok` endpoint on the hub's machine (UDP).
step "real yaok-hub loads the wifidirect plugin and forms the group"
H=$W/daemon
mkdir -p "$H/plugins"
cp "$BIN/libyaok-plugin-wifidirect.so" "$BIN/libyaok-plugin-udp.so" "$H/plugins/"
cat > "$H/hub.yaml" <<CFG
hub:
  name: vmhub
  data_dir: $H/data
  control_socket: $H/control.sock
  plugin_dirs: ["$H/plugins"]
  log_level: debug
transports:
  udp:
    enabled: true
    listen: 0.0.0.0:7811
  wifi-direct:
    enabled: true
    plugin: wifidirect
    interface: wlan0
    runtime_dir: $H/run
    wps_method: pin
    wps_pin: "12345670"
CFG
"$BIN/yaok-hub" run --config "$H/hub.yaml" > "$W/daemon-hub.log" 2>&1 &
DAEMON_PID=$!
# What the daemon and its wpa_supplicant saw, for a failure in its phase (fail() shows phase 1's).
# The phone's side of service discovery: its supplicant's find, scans, queries sent, answers
# and timeouts (its -dd log is far too long to print whole).
phone_sd_log() {
  grep -E "Control interface command 'P2P_(SERV_DISC|FIND|STOP_FIND)|Scan completed|BSS: Add new|Start Service Discovery|Service Discovery Query TX callback|GAS Initial Response|Timeout \(state=SD_DURING_FIND|Too many SD|Do not start Service|P2P-GROUP-|P2P-DEVICE-LOST|Failed to send Action" \
    "$W/phone-wpa.log" | tail -n "${1:-50}" | cut -c1-200
}
daemon_logs() {
  echo "-- daemon-hub.log"; tail -30 "$W/daemon-hub.log"
  echo "-- the daemon's wpa_supplicant"; tail -20 "$H/run/wpa_supplicant.log" 2>/dev/null
  echo "-- the phone's wpa_supplicant (service discovery)"; phone_sd_log 50
}
wifi_status() { "$BIN/yaok-hub" status --json --socket "$H/control.sock" | jq -c '.transports[] | select(.name == "wifi-direct") | .status'; }
daemon_running() { [ "$(wifi_status | jq -r .state)" = running ]; }
wait_for 90 "the daemon's Wi-Fi Direct group" daemon_running || { wifi_status; tail -20 "$W/daemon-hub.log"; fail "daemon: no group"; }
wifi_status | jq -M -c '{state, reason, group: .details.group_interface, ssid: .details.group_ssid}'

step "yaok on the phone: --hub p2p://wlan1 (service discovery, join with the PIN, DHCP, TCP) -> yaok on the hub's machine"
Y=$BIN/yaok
P2P_HUB="p2p://wlan1?ctrl=/run/wpa-phone&pin=12345670"
"$Y" init --home "$H/alice" --name Alice >/dev/null && "$Y" init --home "$H/bob" --name Bob >/dev/null || fail "yaok init"
"$Y" contacts add --home "$H/alice" "$("$Y" qr --home "$H/bob")" >/dev/null
"$Y" contacts add --home "$H/bob" "$("$Y" qr --home "$H/alice")" >/dev/null
# The phone is still a client of phase 1's group, or was until the plugin stopped: yaok leaves
# any group that is not the hub's before joining.
# Service discovery gets 60 s here, not the default 30: about once in six CI runs the
# phone's first find after phase 1 meets no answer from the daemon's new group within 30 s
# (cause not found yet; daemon_logs shows both sides when it happens).
ip netns exec phone "$Y" send Bob "hello over wi-fi direct" --home "$H/alice" --hub "$P2P_HUB&timeout=60" --json --timeout 90 \
  > "$W/daemon-send.json" 2> "$W/phone-p2p-send.err" || { cat "$W/daemon-send.json" "$W/phone-p2p-send.err"; daemon_logs; fail "yaok send from the phone"; }
cat "$W/phone-p2p-send.err"
grep -q "p2p: joining with PIN" "$W/phone-p2p-send.err" || fail "yaok did not join the daemon's group itself"
grep -q "hub at 192.168.49.1:7814" "$W/phone-p2p-send.err" || fail "yaok did not find the group owner at 192.168.49.1:7814"
wifi_status | jq -M -c '{stations: .details.stations, dhcp: .details.dhcp}'
"$Y" listen --home "$H/bob" --hub udp://127.0.0.1:7811 --count 1 --json --timeout 60 > "$W/daemon-listen.json" || true
text=$(jq -r 'select(.event == "message") | .text' "$W/daemon-listen.json")
[ "$text" = "hello over wi-fi direct" ] || { cat "$W/daemon-send.json" "$W/daemon-listen.json"; fail "bob did not get alice's message"; }
echo "bob got: $text"

step "yaok on the phone again: already in the hub's group (no new join), gets bob's delivery receipt"
ip netns exec phone "$Y" listen --home "$H/alice" --hub "$P2P_HUB" --json --timeout 12 \
  > "$W/daemon-receipt.json" 2> "$W/phone-p2p-again.err" || { cat "$W/phone-p2p-again.err"; fail "yaok listen (already joined)"; }
cat "$W/phone-p2p-again.err"
grep -q "p2p: already a client of" "$W/phone-p2p-again.err" || fail "yaok joined again instead of using the group it is in"
jq -e -s 'any(.[]; .event == "delivered")' "$W/daemon-receipt.json" >/dev/null || { cat "$W/daemon-receipt.json"; fail "no delivery receipt for alice"; }
echo "alice got bob's delivery receipt over the same group"
# A hub name nobody advertises: the error says so, within the given timeout.
ip netns exec phone "$Y" listen --home "$H/alice" --hub "p2p://wlan1?ctrl=/run/wpa-phone&name=no-such-hub&timeout=4" --timeout 5 \
  > /dev/null 2> "$W/phone-p2p-nohub.err" && fail "yaok attached to a hub named no-such-hub"
grep "Error" "$W/phone-p2p-nohub.err"
grep -q "no Ya OK hub answered P2P service discovery (_yaok._tcp) within 4 s" "$W/phone-p2p-nohub.err" || fail "no specific error for a hub that does not answer"

step "group removed while the phone is away; bob's message for alice waits at the hub"
SSID_A=$(wifi_status | jq -r .details.group_ssid)
GROUP_IF=$(wifi_status | jq -r .details.group_interface)
wpa_cli -p "$H/run/wpa" -i p2p-dev-wlan0 p2p_group_remove "$GROUP_IF" | grep -q OK || fail "P2P_GROUP_REMOVE on the daemon's supplicant"
for g in $(ip netns exec phone ls /sys/class/net | grep '^p2p-wlan1-'); do $C1 p2p_group_remove "$g" >/dev/null; done
reformed() { [ "$(wifi_status | jq -r '(.details.groups_formed | tostring) + " " + .state')" = "2 running" ]; }
wait_for 60 "the daemon to re-form its group" reformed || { wifi_status; fail "the daemon did not re-form the group"; }
wifi_status | jq -M -c '{state, removals: .details.group_removals, formed: .details.groups_formed, ssid: .details.group_ssid}'
[ "$(wifi_status | jq -r .details.group_ssid)" = "$SSID_A" ] || fail "the group came back with another SSID"
"$Y" send Alice "queued while you were away" --home "$H/bob" --hub udp://127.0.0.1:7811 --json --timeout 30 > "$W/daemon-queued-send.json" \
  || { cat "$W/daemon-queued-send.json"; fail "bob's send to the away phone"; }

step "phone rejoins the re-formed group (yaok --hub p2p://) and gets the queued message over TCP"
ip netns exec phone "$Y" listen --home "$H/alice" --hub "$P2P_HUB" --count 1 --json --timeout 60 \
  > "$W/daemon-queued-listen.json" 2> "$W/phone-p2p-rejoin.err" || cat "$W/phone-p2p-rejoin.err"
grep "^p2p:" "$W/phone-p2p-rejoin.err"
grep -q "p2p: joining with PIN" "$W/phone-p2p-rejoin.err" || fail "yaok did not rejoin the re-formed group"
text=$(jq -r 'select(.event == "message") | .text' "$W/daemon-queued-listen.json")
[ "$text" = "queued while you were away" ] || { cat "$W/daemon-queued-send.json" "$W/daemon-queued-listen.json"; fail "alice did not get the message queued while she was away"; }
echo "alice got after rejoining: $text"

step "group torn down under a running yaok listen: it finds the re-formed group, rejoins by itself and gets the next message"
ip netns exec phone "$Y" listen --home "$H/alice" --hub "$P2P_HUB" --count 1 --json --timeout 170 \
  > "$W/daemon-live.json" 2> "$W/phone-p2p-live.err" &
LIVE_PID=$!
live_connected() { grep -q '"event" *: *"connected"' "$W/daemon-live.json" 2>/dev/null; }
wait_for 60 "the running yaok listen to attach" live_connected || { cat "$W/phone-p2p-live.err"; fail "yaok listen did not attach"; }
GROUP_IF=$(wifi_status | jq -r .details.group_interface)
wpa_cli -p "$H/run/wpa" -i p2p-dev-wlan0 p2p_group_remove "$GROUP_IF" | grep -q OK || fail "second P2P_GROUP_REMOVE on the daemon's supplicant"
reformed3() { [ "$(wifi_status | jq -r '(.details.groups_formed | tostring) + " " + .state')" = "3 running" ]; }
wait_for 60 "the daemon to re-form its group again" reformed3 || { wifi_status; fail "the daemon did not re-form the group a second time"; }
"$Y" send Alice "sent after the second re-form" --home "$H/bob" --hub udp://127.0.0.1:7811 --json --timeout 30 > "$W/daemon-live-send.json" \
  || { cat "$W/daemon-live-send.json"; fail "bob's send after the second re-form"; }
wait "$LIVE_PID" || true
grep "^p2p:" "$W/phone-p2p-live.err"
grep -q "finding its group again" "$W/phone-p2p-live.err" || fail "the running yaok did not notice the lost group"
text=$(jq -r 'select(.event == "message") | .text' "$W/daemon-live.json")
[ "$text" = "sent after the second re-form" ] || { cat "$W/daemon-live.json" "$W/phone-p2p-live.err"; fail "the running yaok listen did not rejoin and receive"; }
echo "alice's running yaok rejoined by itself and got: $text"

step "daemon killed with SIGKILL and restarted: stale helpers ended, the same persistent group back"
SSID1=$(wifi_status | jq -r .details.group_ssid)
saved() { echo "$1: $(grep -c 'network={' "$H/run/wpa_supplicant.conf") saved network(s); $(wpa_cli -p "$H/run/wpa" -i p2p-dev-wlan0 list_networks | tail -n +2 | cut -f2,4 | tr '\t\n' ' ')"; }
saved "before the kill"
kill -KILL "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null
"$BIN/yaok-hub" run --config "$H/hub.yaml" >> "$W/daemon-hub.log" 2>&1 &
DAEMON_PID=$!
wait_for 90 "the restarted daemon's group" daemon_running || { wifi_status; fail "restarted daemon: no group"; }
SSID2=$(wifi_status | jq -r .details.group_ssid)
saved "after the restart"
HELPERS=$(pgrep -f -- "$H/run/wpa_supplicant.conf" | wc -l)
echo "group $SSID1 before, $SSID2 after; wpa_supplicant processes for this hub: $HELPERS"
[ "$SSID1" = "$SSID2" ] || fail "the restarted daemon formed a different group ($SSID1 -> $SSID2)"
[ "$HELPERS" = 1 ] || fail "$HELPERS supplicants for one hub after the restart"
kill "$DAEMON_PID"; wait "$DAEMON_PID"
step "done"
result PASS
