#!/bin/bash
# ble-test.sh — the BLE transport on a real kernel Bluetooth stack (btvirt), checked
# from the outside with BlueZ's own tools. Run from the host (boots the VM) or in the guest.
#
# hci0 = the hub (yaok-hub with the BLE plugin; hci0 starts DOWN so the plugin brings it up)
# hci1 = a phone (hcitool / gatttool as an LE central)
#
# Then ble-flows.sh in the same VM: `yaok` phones over BLE through two hubs (see there), and
# BENCH lines: ATT traffic and time for a 10 KB frame each way at ATT MTU 23, 185 and 517.
#
# Needs: BUILD=<scratch dir> holding debug/yaok-hub, debug/yaok, debug/libyaok-plugin-ble.so
#        debug/libyaok-plugin-mesh.so and debug/ble-phone (default .build-ble; build them one
#        by one with swift build --scratch-path .build-ble --product yaok-hub   (and yaok,
#        yaok-plugin-ble, yaok-plugin-mesh, ble-phone))
# Prints BLE_TEST=PASS and exits 0 when every check passed (about 5-8 minutes under TCG).
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/.build-ble}
HUB=$BUILD/debug/yaok-hub
PLUGIN=$BUILD/debug/libyaok-plugin-ble.so
PHONE=$BUILD/debug/ble-phone
# On the host: check the test phone was built (Package.swift's ble-phone), then boot the VM.
if ! grep -q 'vmlab.cmd=' /proc/cmdline 2>/dev/null; then
  [ -x "$PHONE" ] || { echo "BLE_TEST=FAIL: no $PHONE (swift build --scratch-path ${BUILD%/} --product ble-phone)"; exit 1; }
  BUILD=$BUILD bash "$REPO/Tests/vmlab/ble-flows.sh" --prepare || { echo "BLE_TEST=FAIL: cannot prepare the phones of ble-flows.sh"; exit 1; }
fi
. "$(dirname "$0")/lib.sh"
export VMLAB_TIMEOUT=${VMLAB_TIMEOUT:-900}
vmlab_enter "$@"
exec 2>&1
FAILS=0
check() {   # check DESCRIPTION COMMAND... — records a failure instead of stopping
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; FAILS=$((FAILS + 1)); fi
}
die() { echo "BLE_TEST=FAIL: $*"; exit 1; }
[ -x "$HUB" ] && [ -f "$PLUGIN" ] || die "build $HUB and $PLUGIN first"

W=/tmp/hubtest; mkdir -p $W/plugins $W/data; chmod 700 $W/data
install -m 0755 "$PLUGIN" $W/plugins/
hub_config() {   # hub_config ADAPTER NAME [DATA_DIR]
  cat > $W/hub.yaml <<YAML
hub:
  name: vm-hub
  data_dir: ${3:-$W/data}
  plugin_dirs: [$W/plugins]
  control_socket: $W/control.sock
  log_level: debug
transports:
  ble:
    enabled: true
    adapter: $1
    name: $2
    advertising_interval_ms: 100
YAML
}
HUB_PID=
start_hub() {   # start_hub [COMMAND PREFIX...] — e.g. a setpriv invocation
  "$@" "$HUB" run --config $W/hub.yaml > $W/hub.log 2>&1 &
  HUB_PID=$!
  wait_for 60 "the hub's control socket" test -S $W/control.sock || { cat $W/hub.log; die "hub did not start"; }
}
stop_hub() {
  [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null && wait "$HUB_PID" 2>/dev/null
  HUB_PID=; rm -f $W/control.sock
}
ble_status() { "$HUB" status --config $W/hub.yaml --json 2>/dev/null; }
ble_state_is() { ble_status | grep -q "\"state\" *: *\"$1\""; }

step "btvirt: two LE controllers"
start_btvirt 3 || die "no virtual controllers"
hciconfig hci1 up || die "cannot bring hci1 up"
hciconfig hci2 up || die "cannot bring hci2 up"
hciconfig hci0 down
A0=$(bdaddr hci0); echo "hub adapter hci0 = $A0 (down)"

step "unavailable: a missing adapter is named, with the present ones"
hub_config hci7 vm-test-hub; start_hub
wait_for 30 "ble status unavailable" ble_state_is unavailable
ble_status | tr ',' '\n' | grep -E '"(state|reason)"'
check "reason names hci7 and lists hci0, hci1, hci2" sh -c "\"$HUB\" status --config $W/hub.yaml --json | grep -q 'no Bluetooth adapter hci7 (present: hci0, hci1, hci2)'"
stop_hub

step "unavailable: ATT channel already bound (as bluetoothd would)"
hciconfig hci0 up
l2test -d -V le_public -J 4 -i hci0 > /tmp/l2srv.log 2>&1 &
L2=$!
wait_for 5 "l2test listening" grep -qi 'waiting for connection' /tmp/l2srv.log
cat /sys/kernel/debug/bluetooth/l2cap
hub_config hci0 vm-test-hub; start_hub
wait_for 30 "ble status unavailable" ble_state_is unavailable
ble_status | tr ',' '\n' | grep -E '"reason"'
check "reason says bluetoothd owns CID 4 on hci0" sh -c "\"$HUB\" status --config $W/hub.yaml --json | grep -q 'bluetoothd is running on hci0; stop it (systemctl stop bluetooth)'"
stop_hub
kill $L2; wait $L2 2>/dev/null
hciconfig hci0 down

step "unavailable: rfkill soft block"
RF=$(ls -d /sys/class/bluetooth/hci0/rfkill* 2>/dev/null | head -1)
if [ -n "$RF" ]; then
  echo 1 > "$RF/soft"
  hub_config hci0 vm-test-hub; start_hub
  wait_for 30 "ble status unavailable" ble_state_is unavailable
  ble_status | tr ',' '\n' | grep -E '"reason"'
  check "reason says soft-blocked by rfkill" sh -c "\"$HUB\" status --config $W/hub.yaml --json | grep -q 'hci0 is soft-blocked by rfkill (rfkill unblock bluetooth)'"
  stop_hub
  echo 0 > "$RF/soft"
else
  check "hci0 has an rfkill switch in sysfs" false
fi

step "unavailable: no capabilities (hub as nobody, hci0 down)"
mkdir -p $W/nobody; chown 65534:65534 $W/nobody; chmod 700 $W/nobody
# nobody may not be able to enter the checkout (a `mktemp -d` clone is mode 0700), and the
# hub re-executes itself for each plugin's probe and process: give it a copy it can run, named
# yaok-hub (a binary of another name looks for the plugin host as yaok-hub beside it).
install -D -m 0755 "$HUB" $W/unprivileged/yaok-hub
hub_config hci0 vm-test-hub $W/nobody
sed -i "s|control_socket: .*|control_socket: $W/nobody/control.sock|" $W/hub.yaml
chmod 644 $W/hub.yaml
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
  $W/unprivileged/yaok-hub run --config $W/hub.yaml > $W/hub.log 2>&1 &
HUB_PID=$!
wait_for 60 "the hub's control socket" test -S $W/nobody/control.sock || cat $W/hub.log
wait_for 30 "ble status unavailable" ble_state_is unavailable
ble_status | tr ',' '\n' | grep -E '"reason"'
check "reason names CAP_NET_ADMIN" sh -c "\"$HUB\" status --config $W/hub.yaml --json | grep -q 'permission denied to bring hci0 up: the hub needs CAP_NET_ADMIN'"
kill $HUB_PID; wait $HUB_PID 2>/dev/null; HUB_PID=
check "hci0 stayed down" sh -c "hciconfig hci0 | grep -q DOWN"

step "unavailable: CAP_NET_ADMIN only (can bring hci0 up, cannot send raw HCI commands)"
rm -f $W/nobody/control.sock
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin \
  --bounding-set=-all,+net_admin $W/unprivileged/yaok-hub run --config $W/hub.yaml > $W/hub.log 2>&1 &
HUB_PID=$!
wait_for 60 "the hub's control socket" test -S $W/nobody/control.sock || cat $W/hub.log
wait_for 30 "ble status unavailable" ble_state_is unavailable
ble_status | tr ',' '\n' | grep -E '"reason"'
check "reason names CAP_NET_RAW for the advertising commands" sh -c "\"$HUB\" status --config $W/hub.yaml --json | grep -q 'permission denied to send LE Set Advertising Parameters to hci0: the hub needs CAP_NET_RAW'"
kill $HUB_PID; wait $HUB_PID 2>/dev/null; HUB_PID=
hciconfig hci0 down

step "running: hub on hci0 (plugin brings it up and advertises)"
hub_config hci0 vm-test-hub; start_hub
wait_for 30 "ble status running" ble_state_is running || { cat $W/hub.log; ble_status; }
ble_status | tr ',' '\n' | grep -E '"(state|reason)"'
check "hci0 was brought up by the plugin" sh -c "hciconfig hci0 | grep -q 'UP RUNNING'"

step "hci1 scans for the hub"
seen=no
for _ in 1 2 3 4; do
  timeout -s INT 5 hcitool -i hci1 lescan --duplicates > /tmp/scan.log 2>&1
  grep -qi "^$A0 vm-test-hub" /tmp/scan.log && { seen=yes; break; }
done
sort /tmp/scan.log | uniq -c
check "advertising with the hub name in the scan response" [ $seen = yes ]
"$PHONE" hci1 scan 6 > /tmp/scanphone.log 2>&1; cat /tmp/scanphone.log
check "BLEScanner finds the hub by its service UUID, with its name" grep -qi "^HUB $A0 name=vm-test-hub" /tmp/scanphone.log

step "gatttool: primary services"
timeout 20 gatttool -i hci1 -b "$A0" --primary > /tmp/primary.log 2>&1; echo "rc=$?"; cat /tmp/primary.log
check "GAP service 0x1800" grep -q 'uuid: 00001800-' /tmp/primary.log
check "GATT service 0x1801" grep -q 'uuid: 00001801-' /tmp/primary.log
check "Ya OK service 985e0001-a6d1-4b8d-91e4-1f4ec90c658a" grep -q 'uuid: 985e0001-a6d1-4b8d-91e4-1f4ec90c658a' /tmp/primary.log

step "gatttool: characteristics"
timeout 20 gatttool -i hci1 -b "$A0" --characteristics > /tmp/chars.log 2>&1; echo "rc=$?"; cat /tmp/chars.log
for u in 985e0002 985e0003 985e0004 985e0005; do
  check "characteristic $u" grep -q "uuid = $u-a6d1-4b8d-91e4-1f4ec90c658a" /tmp/chars.log
done
check "RX is write + write-without-response (0x0c)" grep -q "properties = 0x0c, .*uuid = 985e0003-" /tmp/chars.log
check "TX is notify (0x10)" grep -q "properties = 0x10, .*uuid = 985e0004-" /tmp/chars.log

step "gatttool: reads"
NAME=$(timeout 20 gatttool -i hci1 -b "$A0" --char-read -u 0x2a00 | sed -n 's/.*value: //p' | xxd -r -p)
echo "Device Name: $NAME"
check "GAP Device Name reads vm-test-hub" [ "$NAME" = vm-test-hub ]
IDENT=$(timeout 20 gatttool -i hci1 -b "$A0" --char-read -u 985e0002-a6d1-4b8d-91e4-1f4ec90c658a | sed -n 's/.*value: //p' | tr -d ' ')
echo "Identity (first bytes): $IDENT"
HUBKEY=$("$HUB" identity --config $W/hub.yaml --json 2>/dev/null | tr -d ' \n' | sed -n 's/.*"signingKey":"\([0-9a-fA-F]*\)".*/\1/p' | tr 'A-F' 'a-f')
echo "hub signing key per yaok-hub identity: ${HUBKEY:-(not found)}"
check "Identity starts with role 02 (hub)" sh -c "echo '$IDENT' | grep -q '^02'"
check "Identity carries the hub's signing key" sh -c "[ -n '$HUBKEY' ] && echo '$HUBKEY' | grep -q \"^\$(echo '$IDENT' | cut -c3-)\""
CTRL=$(timeout 20 gatttool -i hci1 -b "$A0" --char-read -u 985e0005-a6d1-4b8d-91e4-1f4ec90c658a | sed -n 's/.*value: //p' | tr -d ' ')
check "Control reads version 1, handshaking (0100)" [ "$CTRL" = 0100 ]

step "phone: BLEHubClient connects, discovers, subscribes, runs the link handshake"
"$PHONE" hci1 "$A0" 60 517 1200 > /tmp/phone.log 2>&1 &   # holds the link until killed (at most 60 s)
PHONE_PID=$!
wait_for 60 "the phone's handshake" grep -q -E 'HANDSHAKE_OK|PHONE_ERROR' /tmp/phone.log
cat /tmp/phone.log
check "handshake proved the hub's key" grep -q "HANDSHAKE_OK hub=$HUBKEY role=hub" /tmp/phone.log
links_are() { ble_status | tr -d ' \n' | grep -q "\"links\":$1[,}]"; }
check "hub reports the link up (links: 1)" wait_for 20 "links 1" links_are 1
check "1200-byte ping answered by a pong with the same bytes (MTU 517: 3 chunks of ≤512 each way)" \
  wait_for 30 "the pong" grep -q 'PING_OK 1200 bytes at ATT MTU 517' /tmp/phone.log
cat /tmp/phone.log | grep -E 'received|PING'
check "hub counted the ping (frames_in >= 1)" sh -c "\"$HUB\" status --config $W/hub.yaml --json | tr -d ' \n' | grep -q '\"frames_in\":[1-9]'"
PHONEKEY=$(sed -n 's/^phone signing key: //p' /tmp/phone.log)
check "hub log names the phone's link" wait_for 10 "link-up log" grep -q -i "link.*up\|up.*link" $W/hub.log
kill "$PHONE_PID"; wait "$PHONE_PID" 2>/dev/null
check "link reported down after the phone left (links: 0)" wait_for 30 "links 0" links_are 0

step "phone at the minimum ATT MTU (23): 1200-byte ping = 75 chunks each way"
"$PHONE" hci1 "$A0" 0 23 1200 > /tmp/phone23.log 2>&1
cat /tmp/phone23.log | grep -E 'HANDSHAKE|PING|ERROR|connected'
check "ping/pong at MTU 23" grep -q 'PING_OK 1200 bytes at ATT MTU 23' /tmp/phone23.log
# ATT is a fixed channel: closing the socket sends nothing; the hub learns of it when the
# LE link drops (a few seconds later). A new central connecting before that would reuse
# the old link and its authenticated ATT channel.
check "link down after the MTU-23 phone left" wait_for 30 "links 0" links_are 0

step "benchmark: a 10 KB frame (a 10 KB message's size) each way at ATT MTU 23, 185 and 517"
for m in 23 185 517; do
  "$PHONE" hci1 "$A0" 0 $m 10500 > /tmp/bench$m.log 2>&1
  grep -E 'BENCH|ERROR|MISMATCH' /tmp/bench$m.log
  check "10 KB ping/pong at MTU $m" grep -q "PING_OK 10500 bytes at ATT MTU $m" /tmp/bench$m.log
  # A new connection must not reuse this LE link: its ATT MTU is fixed by the first exchange.
  wait_for 30 "links 0" links_are 0
done

step "a phone that stops reading for 3 s while the hub streams a 10 KB frame at ATT MTU 23 (~660 notifications)"
# Notifications are not flow controlled: what does not fit the phone's receive queue the
# kernel drops. The client's 4 MB queue holds the whole frame; with an 8 KB queue the loss
# is reported by name (SO_RXQ_OVFL), not as a frame that never completes.
PHONE_STALL_MS=3000 "$PHONE" hci1 "$A0" 0 23 10500 > /tmp/stall.log 2>&1
grep -E 'PING|ERROR' /tmp/stall.log
check "the 4 MB receive queue holds the whole frame through the stall" grep -q "PING_OK 10500 bytes at ATT MTU 23" /tmp/stall.log
wait_for 30 "links 0" links_are 0
PHONE_STALL_MS=3000 PHONE_RECEIVE_QUEUE=8192 "$PHONE" hci1 "$A0" 0 23 10500 > /tmp/stall-small.log 2>&1
grep -E 'PING|ERROR' /tmp/stall-small.log
check "with an 8 KB queue the phone names the kernel's drops" grep -q "PHONE_ERROR: the kernel dropped [0-9]* notification" /tmp/stall-small.log
wait_for 30 "links 0" links_are 0

step "a central that never authenticates is dropped after the 30 s handshake timeout"
l2test -n -V le_public -J 4 -i hci1 "$A0" > /tmp/silent.log 2>&1 &
SILENT=$!
check "hub drops the silent central" wait_for 60 "the handshake timeout" grep -q 'no completed link handshake within 30 s' $W/hub.log
kill $SILENT 2>/dev/null; wait $SILENT 2>/dev/null
cat /tmp/silent.log; grep -E 'BLE' $W/hub.log | tail -4

step "the hub keeps advertising after centrals come and go"
check "hub still running" ble_state_is running
stop_hub

step "max_connections: 1 — a second central is turned away until the first leaves"
hub_config hci0 vm-test-hub; echo "    max_connections: 1" >> $W/hub.yaml; start_hub
wait_for 30 "ble status running" ble_state_is running
"$PHONE" hci1 "$A0" 60 > /tmp/phoneA.log 2>&1 &
PHONE_PID=$!
wait_for 60 "phone A's handshake" grep -q -E 'HANDSHAKE_OK|PHONE_ERROR' /tmp/phoneA.log
check "phone A is linked" grep -q HANDSHAKE_OK /tmp/phoneA.log
timeout 20 gatttool -i hci2 -b "$A0" --primary > /tmp/second.log 2>&1; echo "second central: rc=$?"; head -3 /tmp/second.log
check "second central gets no service list" sh -c "! grep -q 'uuid: 985e0001' /tmp/second.log"
kill "$PHONE_PID"; wait "$PHONE_PID" 2>/dev/null
wait_for 30 "links 0" links_are 0
timeout 20 gatttool -i hci2 -b "$A0" --primary > /tmp/second.log 2>&1; echo "second central again: rc=$?"
check "after phone A left, the second central discovers the Ya OK service" grep -q 'uuid: 985e0001' /tmp/second.log
stop_hub
grep -E 'BLE|ble' $W/hub.log | tail -15
kill $BTVIRT_PID 2>/dev/null; wait $BTVIRT_PID 2>/dev/null

step "ble-flows.sh: yaok phones over BLE through two hubs"
BUILD=$BUILD bash "$REPO/Tests/vmlab/ble-flows.sh" || FAILS=$((FAILS + 1))
step "done"
[ $FAILS = 0 ] && echo BLE_TEST=PASS || { echo "BLE_TEST=FAIL ($FAILS checks)"; exit 1; }
