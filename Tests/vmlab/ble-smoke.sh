#!/bin/bash
# ble-smoke.sh — proves the VM's Bluetooth LE stack works end to end with two virtual
# controllers (btvirt): one advertises connectable, the other finds it in an LE scan,
# and an L2CAP LE connection on the ATT fixed channel (CID 4) carries data.
# Run it from the host (it boots the VM itself) or inside the guest. Prints
# BLE_SMOKE=PASS and exits 0 on success.
. "$(dirname "$0")/lib.sh"; vmlab_enter "$@"
exec 2>&1
fail() { echo "BLE_SMOKE=FAIL: $*"; exit 1; }

step "btvirt: two LE controllers"
start_btvirt 2 || fail "no virtual controllers"
hciconfig hci0 up && hciconfig hci1 up || fail "cannot power the controllers"
A0=$(bdaddr hci0); A1=$(bdaddr hci1)
echo "hci0=$A0 hci1=$A1"

step "hci0 advertises (btmgmt, connectable)"
for c in "power on" "le on" "connectable on" "name vmlab-smoke" "advertising on"; do
  btmgmt -i hci0 $c >/dev/null || fail "btmgmt $c"
done

step "hci1 scans"
# hcitool drives the LE scan over raw HCI; SIGINT makes it restore the scan state.
# Under TCG on a loaded host the first reports can take a while: up to 4 windows of 5 s.
seen=no
for _ in 1 2 3 4; do
  timeout -s INT 5 hcitool -i hci1 lescan --duplicates > /tmp/scan.log 2>&1
  grep -qi "^$A0 vmlab-smok" /tmp/scan.log && { seen=yes; break; }
done
sort /tmp/scan.log | uniq -c
[ $seen = yes ] || fail "hci1 did not see hci0's advertising"

step "L2CAP LE, ATT CID 4: hci1 connects to the advertising hci0"
l2test -d -V le_public -J 4 -i hci0 > /tmp/l2srv.log 2>&1 &
SRV=$!
wait_for 5 "l2test listening" grep -q -i 'waiting for connection' /tmp/l2srv.log
timeout 10 l2test -s -V le_public -J 4 -i hci1 -N 3 -b 20 "$A0" > /tmp/l2cli.log 2>&1
echo "l2test client rc=$?"
wait_for 5 "l2test server to receive" grep -q 'Received 20 bytes' /tmp/l2srv.log
kill $SRV 2>/dev/null
cat /tmp/l2cli.log /tmp/l2srv.log | tail -8
grep -q 'Received 20 bytes' /tmp/l2srv.log || fail "no data over CID 4"

kill $BTVIRT_PID 2>/dev/null
step "done"
echo BLE_SMOKE=PASS
