#!/bin/bash
# powercut-test.sh — the power-cut loop: every bundle the hub has custody-acknowledged
# survives a sudden power cut (Docs/store.md, "Power cuts"; Tests/vmlab/README.md).
#
# The hub's data directory (SQLCipher store, identity, key) is on ext4 on a virtio-blk disk
# of the VM, served by nbd-disk.py on the host: a disk with a volatile write cache, whose
# writes stay in memory until the guest flushes them and are gone if QEMU dies first.
# Each boot mounts the disk, starts yaok-hub on it (UDP on loopback), and lets a `yaok`
# sender (a new one each boot) send messages to a recipient at a steady rate; every message
# ID the hub acknowledges ("handed_over") goes to the 9p share, fsynced as it comes. 2-8 s into
# the traffic (random) the power is cut: odd cuts kill QEMU with SIGKILL from the host at
# that moment; even cuts arm nbd-disk.py, which kills QEMU right after the next write it
# acknowledges, so the power goes between a write and its flush. The next boot recovers the
# same disk (ext4 journal, SQLite WAL), starts the hub on it, and attaches the recipient
# (`yaok listen`), which must receive every message acknowledged before the cut.
#   lost  = acknowledged, and received at no later boot
#   twice = received as a new message at two boots (each boot starts the recipient from
#           the same copy, so a message the hub hands out again after a cut shows up)
# The last boot only checks.
#
# The control: in the first POWERCUT_CONTROL_CUTS boots a second hub runs beside the first,
# on a second disk that lies about flushes (nbd-disk.py --lie: acknowledged, nothing ever
# persisted), with its own sender and recipient, through the same cuts. It must lose
# acknowledged messages, or the check could not see a loss and would prove nothing.
#
#   Tests/vmlab/powercut-test.sh      # from the host; BIN=$PWD/.build/debug by default
#
# Environment: BIN (yaok-hub, yaok, libyaok-plugin-udp.so), POWERCUT_CUTS (10),
# POWERCUT_CONTROL_CUTS (2), POWERCUT_RATE (messages per second offered to the hub, 10;
# the control's sender offers half), POWERCUT_SEED (seeds the cut moments; printed),
# POWERCUT_HUB_LOG (the hubs' log_level, info), VMLAB_SHARE (results go to
# $VMLAB_SHARE/powercut; default Tests/vmlab/out/powercut).
# Prints a POWERCUT line per cut, then
#   POWERCUT cuts=10 acked=N lost=0 twice=0
#   POWERCUT_CONTROL lying-disk cuts=2 acked=N lost=M (>0 expected)
#   POWERCUT_TEST=PASS | FAIL
# Exit 0 only if the real disk lost nothing and the control lost something; 77 (skipped)
# when qemu or the guest kernel is missing outside CI.
LAB=$(cd "$(dirname "$0")" && pwd)
SELF=$LAB/$(basename "$0")
. "$LAB/lib.sh"
set -u

# fsync_tee FILE — appends stdin to FILE and fsyncs after every read. The share is mounted
# cache=loose: without the fsync the lines would wait in the guest's page cache, and the
# power cut would take them.
fsync_tee() {
  python3 -c '
import os, sys
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    data = os.read(0, 65536)
    if not data:
        break
    os.write(out, data)
    os.fsync(out)
' "$1"
}

# ids_of EVENT FILE — the IDs of yaok's JSON events of one kind, one per line, repeats kept
# (a line cut short by the power cut is skipped).
ids_of() { [ -e "$2" ] && jq -R -r --arg e "$1" 'fromjson? | select(.event == $e) | .id' "$2" 2>/dev/null; }

# ------------------------------------------------------------------------------------------
# Guest side: one boot.
#   powercut-test.sh --guest W BOOT LANE:DEV:PORT:RATE:ROLE ...
# W is the run's directory on the share, a lane one hub on one disk; ROLE is traffic (check
# the cut before this boot if any, then send until the power goes) or last (check, stop).
# ------------------------------------------------------------------------------------------
guest() {
  W=$1 BOOT=$2; shift 2
  G=/tmp/powercut
  rm -rf "$G"; mkdir -p "$G"
  # Process substitution needs /dev/fd, which the guest's bare devtmpfs lacks.
  [ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
  fail() { echo "FAIL (boot $BOOT): $*"; exit 1; }
  LANES=("$@")
  step "boot $BOOT: guest up after $(cut -d' ' -f1 /proc/uptime) s; lanes ${LANES[*]}"
  modprobe virtio_blk && modprobe ext4 || fail "modprobe virtio_blk ext4"

  local spec lane dev port rate role
  for spec in "${LANES[@]}"; do
    IFS=: read -r lane dev port rate role <<< "$spec"
    lane_start "$lane" "$dev" "$port"
    # The recipient starts with the hub (it attaches as soon as the hub answers).
    [ "$BOOT" -gt 1 ] && lane_listen "$lane" "$port"
  done
  for spec in "${LANES[@]}"; do
    IFS=: read -r lane dev port rate role <<< "$spec"
    wait_hub "$lane" || fail "the $lane hub did not start"
  done
  step "hubs running on the recovered disks"

  if [ "$BOOT" -gt 1 ]; then
    local pids=()
    for spec in "${LANES[@]}"; do
      IFS=: read -r lane dev port rate role <<< "$spec"
      lane_check "$lane" & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "a check failed"; done
  fi

  local traffic=()
  for spec in "${LANES[@]}"; do
    IFS=: read -r lane dev port rate role <<< "$spec"
    if [ "$role" = last ]; then lane_stop "$lane"; else lane_traffic "$lane" "$port" "$rate"; traffic+=("$lane"); fi
  done
  [ ${#traffic[@]} -eq 0 ] && { step "done"; exit 0; }
  for lane in "${traffic[@]}"; do
    wait_for 60 "the $lane hub's first custody ack" grep -q '"event":"handed_over"' "$W/$lane/acked.$BOOT" \
      || { cat "$G/$lane.send.err"; fail "no custody ack from the $lane hub"; }
  done
  : > "$W/traffic.$BOOT"   # a 9p create reaches the host at once: it starts the cut timer
  step "custody acks coming in (${traffic[*]}); the power goes 2-8 s from now"
  sleep 60
  fail "no power cut within 60 s"
}

# wait_hub LANE — until the hub's log has its "ready" line and its UDP transport started
# (the log, not `yaok-hub status`: each status call costs 1-2 s under TCG). Under TCG on a
# loaded host the plugin process can miss its 10 s create answer; the hub then tries again by
# itself (a NOTE line says so; the host counts them).
wait_hub() {
  local log=$G/$1/hub.log deadline=$((SECONDS + 300)) noted=0
  while [ $SECONDS -lt $deadline ]; do
    grep -q ' ready: ' "$log" && grep -q 'transport udp (udp) started in process' "$log" && return 0
    if [ $noted = 0 ] && grep -q 'transport udp not started' "$log"; then
      echo "NOTE: $1 hub: $(grep 'transport udp not started' "$log" | tail -1 | sed 's/.*\] //')"; noted=1
    fi
    sleep 0.2
  done
  return 1
}

# lane_start LANE DEV PORT — mounts the lane's disk and starts its hub.
lane_start() {
  local lane=$1 dev=$2 port=$3 D=$W/$1
  mkdir -p "/mnt/$lane" "$G/$lane/plugins"
  wait_for 20 "/dev/$dev" test -b "/dev/$dev" || fail "no /dev/$dev"
  mount -t ext4 "/dev/$dev" "/mnt/$lane" || fail "mount /dev/$dev"
  step "$lane: /dev/$dev mounted: $(dmesg | grep -E "EXT4-fs \($dev\)" | sed 's/^\[[ 0-9.]*\] //' | tr '\n' ' ')"
  ls -l "/mnt/$lane/hub" 2>/dev/null   # the hub makes its data directory at the first boot
  # Plugins must not be writable by others; the guest's copy is root's.
  cp "$BIN/libyaok-plugin-udp.so" "$G/$lane/plugins/"
  cat > "$G/$lane/hub.yaml" <<CFG
hub:
  name: powercut-$lane
  data_dir: /mnt/$lane/hub
  control_socket: $G/$lane/control.sock
  plugin_dirs: ["$G/$lane/plugins"]
  log_level: ${HUB_LOG_LEVEL:-info}
router:
  sender_envelopes_per_minute: 1000000
transports:
  udp:
    enabled: true
    listen: 127.0.0.1:$port
CFG
  # The identities are made on the host. Each boot has its own sender (Bob knows them all),
  # so no sender sends again what an earlier boot left in its outbox (that could hide a
  # loss), and Bob's receipts wait at the hub for senders that never come back instead of
  # flooding the next boot's sender. Bob starts every boot from the same copy.
  cp -a "$W/homes/alice.$BOOT" "$G/$lane/alice"
  cp -a "$W/homes/bob" "$G/$lane/bob"
  # The hub's log goes to the console (it reaches the host at once, cut or not; the host
  # files it as LANE/hub.N.log) and to a local file for the ready line.
  "$BIN/yaok-hub" run --config "$G/$lane/hub.yaml" > >(tee "$G/$lane/hub.log" | sed -u "s/^/[$lane hub] /") 2>&1 &
  echo $! > "$G/$lane/hub.pid"
}

# lane_listen LANE PORT — bob, the recipient, attaches to the lane's hub.
lane_listen() {
  local H=$G/$1
  "$BIN/yaok" listen --home "$H/bob" --hub "udp://127.0.0.1:$2" --json --timeout 200 > "$H/recv.json" 2> "$H/listen.err" &
  echo $! > "$H/listen.pid"
}

now_ms() { local t=${EPOCHREALTIME/./}; echo $((10#$t / 1000)); }

# lane_check LANE — every message acknowledged before the cut must reach bob. Ends once all
# have arrived and bob's stream has been quiet for 1 s, or after 8 s of quiet without them
# (the rest count as missing at this boot; a later boot may still deliver them).
lane_check() {
  local lane=$1 D=$W/$1 prev=$((BOOT - 1)) H=$G/$1
  ids_of handed_over "$D/acked.$prev" | sort -u > "$H/expected"
  local want lpid t0 size=-1 quiet_since all=no s
  want=$(wc -l < "$H/expected"); lpid=$(cat "$H/listen.pid"); t0=$(now_ms); quiet_since=$t0
  wait_for 30 "the $lane recipient to attach" grep -q '"event":"connected"' "$H/recv.json" || { cat "$H/listen.err"; return 1; }
  while [ $(( $(now_ms) - t0 )) -lt 120000 ]; do
    s=$(stat -c %s "$H/recv.json")
    if [ "$s" != "$size" ]; then size=$s; quiet_since=$(now_ms)
    elif [ "$all" = no ] && [ "$(grep -c '"event":"message"' "$H/recv.json")" -ge "$want" ]; then
      ids_of message "$H/recv.json" | sort -u > "$H/got"
      [ -z "$(comm -23 "$H/expected" "$H/got")" ] && all=yes
    fi
    [ "$all" = yes ] && [ $(( $(now_ms) - quiet_since )) -ge 1000 ] && break
    [ $(( $(now_ms) - quiet_since )) -ge 8000 ] && break
    sleep 0.25
  done
  kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null
  dd if="$H/recv.json" of="$D/recv.$BOOT" conv=fsync status=none
  ids_of message "$H/recv.json" | sort -u > "$H/got"
  step "$lane: recipient got $(wc -l < "$H/got") messages, $(comm -12 "$H/expected" "$H/got" | wc -l) of the $want acknowledged before cut $prev, $(( $(now_ms) - t0 )) ms after its hub was up"
}

# lane_traffic LANE PORT RATE — alice sends to bob through the lane's hub until the power goes.
lane_traffic() {
  local lane=$1 port=$2 rate=$3 H=$G/$1
  "$BIN/yaok" send Bob "boot $BOOT message {n}" --home "$H/alice" --hub "udp://127.0.0.1:$port" \
    --repeat 100000 --rate "$rate" --json --timeout 600 > >(fsync_tee "$W/$lane/acked.$BOOT") 2> "$G/$lane.send.err" &
  step "$lane: alice -> bob at $rate/s"
}

# lane_stop LANE — the last boot of a lane: the hub stops cleanly, the disk is unmounted.
lane_stop() {
  local lane=$1 pid; pid=$(cat "$G/$1/hub.pid")
  kill -TERM "$pid"
  wait_for 30 "the $lane hub to stop" sh -c "! kill -0 $pid" || fail "the $lane hub did not stop on SIGTERM"
  umount "/mnt/$lane" || fail "umount /mnt/$lane"
  step "$lane: hub stopped, disk unmounted"
}

if [ "${1:-}" = --guest ]; then
  shift
  guest "$@"
  exit $?
fi

# ------------------------------------------------------------------------------------------
# Host side
# ------------------------------------------------------------------------------------------
exec 2>&1
BIN=${BIN:-$PWD/.build/debug}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
CUTS=${POWERCUT_CUTS:-10}
CONTROL_CUTS=${POWERCUT_CONTROL_CUTS:-2}
RATE=${POWERCUT_RATE:-10}
CONTROL_RATE=$(( RATE / 2 > 0 ? RATE / 2 : 1 ))
SEED=${POWERCUT_SEED:-$(( $(date +%s) % 32768 ))}
RANDOM=$SEED
SHARE=${VMLAB_SHARE:-$LAB/out}
mkdir -p "$SHARE"; SHARE=$(cd "$SHARE" && pwd)
W=$SHARE/powercut
T0=$SECONDS

skip_or_fail() {
  if [ "${CI:-}" = true ] || [ "${YAOK_CI:-}" = 1 ]; then echo "FAIL: $*"; echo "POWERCUT_TEST=FAIL"; exit 1; fi
  echo "POWERCUT_TEST=SKIP: $*"; exit 77
}
KVER=${VMLAB_KVER:-$(ls /lib/modules 2>/dev/null | grep -- '-amd64$' | sort -V | tail -1 || true)}
command -v qemu-system-x86_64 >/dev/null || skip_or_fail "qemu-system-x86_64 missing (run Tests/vmlab/setup.sh)"
[ -n "$KVER" ] && [ -r "/boot/vmlinuz-$KVER" ] || skip_or_fail "no Debian amd64 guest kernel (run Tests/vmlab/setup.sh)"
for tool in mkfs.ext4 python3 jq; do command -v $tool >/dev/null || skip_or_fail "$tool missing (run Tests/vmlab/setup.sh)"; done
for f in yaok-hub yaok libyaok-plugin-udp.so; do
  [ -e "$BIN/$f" ] || { echo "FAIL: no $BIN/$f (swift build, or set BIN)"; echo "POWERCUT_TEST=FAIL"; exit 1; }
done
[ "$CUTS" -ge 1 ] && [ "$CONTROL_CUTS" -ge 1 ] || { echo "FAIL: POWERCUT_CUTS and POWERCUT_CONTROL_CUTS must be at least 1"; exit 1; }

# One run at a time per share: a second one would delete this one's files.
exec 9> "$SHARE/.powercut.lock"
flock -n 9 || { echo "FAIL: another powercut-test.sh is running with $SHARE"; echo "POWERCUT_TEST=FAIL"; exit 1; }
rm -rf "$W"; mkdir -p "$W/homes" "$W/real" "$W/control"
SOCKDIR=$(mktemp -d /tmp/powercut.XXXXXX)   # Unix socket paths must be short
NBD_REAL= NBD_CONTROL= VM_PID=
cleanup() {
  [ -n "$VM_PID" ] && [ -s "$SOCKDIR/qemu.pid" ] && kill -9 "$(cat "$SOCKDIR/qemu.pid")" 2>/dev/null
  [ -n "$NBD_REAL" ] && kill "$NBD_REAL" 2>/dev/null
  [ -n "$NBD_CONTROL" ] && kill "$NBD_CONTROL" 2>/dev/null
  rm -rf "$SOCKDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bad() { echo "FAIL: $*"; echo "POWERCUT_TEST=FAIL"; exit 1; }

BOOTS=$(( (CUTS > CONTROL_CUTS ? CUTS : CONTROL_CUTS) + 1 ))
# Identities, on the host: Bob receives; Alice N sends in boot N (on both hubs).
Y=$BIN/yaok
"$Y" init --home "$W/homes/bob" --name Bob >/dev/null && BOB=$("$Y" qr --home "$W/homes/bob") || bad "yaok init"
for b in $(seq 1 "$BOOTS"); do
  "$Y" init --home "$W/homes/alice.$b" --name "Alice $b" >/dev/null \
    && "$Y" contacts add --home "$W/homes/alice.$b" "$BOB" >/dev/null \
    && "$Y" contacts add --home "$W/homes/bob" "$("$Y" qr --home "$W/homes/alice.$b")" >/dev/null \
    || bad "yaok init / contacts add"
done

# One disk per lane: ext4 made on the host, served by its own nbd-disk.py.
for lane in real control; do
  truncate -s 256M "$W/$lane/disk.img"
  mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$W/$lane/disk.img" || bad "mkfs.ext4"
done
python3 "$LAB/nbd-disk.py" --image "$W/real/disk.img" --socket "$SOCKDIR/real.sock" --log "$W/real/nbd.log" \
  --qemu-pidfile "$SOCKDIR/qemu.pid" &
NBD_REAL=$!
python3 "$LAB/nbd-disk.py" --image "$W/control/disk.img" --socket "$SOCKDIR/control.sock" --log "$W/control/nbd.log" --lie \
  --qemu-pidfile "$SOCKDIR/qemu.pid" &
NBD_CONTROL=$!
wait_for 10 "nbd-disk.py's sockets" test -S "$SOCKDIR/real.sock" -a -S "$SOCKDIR/control.sock" || bad "nbd-disk.py did not start"

echo "powercut: BIN=$BIN cuts=$CUTS control_cuts=$CONTROL_CUTS rate=${RATE}/s (control ${CONTROL_RATE}/s) seed=$SEED boots=$BOOTS results in $W"

# Waits up to SECONDS for FILE to appear while process PID lives.
wait_file() {
  local deadline=$((SECONDS + $1))
  while [ $SECONDS -lt $deadline ]; do
    [ -e "$3" ] && return 0
    kill -0 "$2" 2>/dev/null || { [ -e "$3" ]; return; }
    sleep 0.05
  done
  return 1
}
lines() { grep -c . "$@" 2>/dev/null || true; }

# report_cut LANE CUT LANE_CUTS — one line: how the cut came, what the disk dropped, what
# the next boot's recipient got of what was acknowledged before it, and what it got again.
report_cut() {
  local lane=$1 cut=$2 of=$3 D=$W/$1 b=$(($2 + 1)) p
  local acked recv got dropped again
  acked=$(ids_of handed_over "$D/acked.$cut" | sort -u | grep . || true)
  recv=$(ids_of message "$D/recv.$b" | sort -u | grep . || true)
  got=$(comm -12 <(echo "$acked") <(echo "$recv") | lines)
  again=$(comm -12 <(echo "$recv") <(for p in $(seq 2 $((b - 1))); do ids_of message "$D/recv.$p"; done | sort -u | grep .) | lines)
  dropped=$(grep "session $cut ended" "$D/nbd.log" | sed -E 's/.*blocks_discarded=([0-9]+).*/\1/')
  printf 'POWERCUT %s cut %d/%d: %s; disk dropped %s unflushed blocks; acked %d, received %d of them at boot %d (+%d unacked), missing %d, twice %d\n' \
    "$lane" "$cut" "$of" "$(cat "$W/cut.$cut")" "${dropped:-?}" \
    "$(echo "$acked" | lines)" "$got" "$b" "$(( $(echo "$recv" | lines) - got ))" "$(( $(echo "$acked" | lines) - got ))" "$again"
}

FAILED=0
for boot in $(seq 1 "$BOOTS"); do
  lanes=() drives=() devs=(vda vdb) n=0 traffic=no
  for lane in real control; do
    cuts=$CUTS port=7811 rate=$RATE
    [ $lane = control ] && cuts=$CONTROL_CUTS port=7812 rate=$CONTROL_RATE
    [ "$boot" -le $((cuts + 1)) ] || continue
    role=traffic; [ "$boot" = $((cuts + 1)) ] && role=last
    [ $role = traffic ] && traffic=yes
    lanes+=("$lane:${devs[$n]}:$port:$rate:$role"); n=$((n + 1))
    drives+=("-drive file=nbd+unix:///disk?socket=$SOCKDIR/$lane.sock,format=raw,if=virtio,cache=none")
  done
  rm -f "$SOCKDIR/qemu.pid"
  VMLAB_SHARE=$SHARE VMLAB_TIMEOUT=420 VMLAB_PVH=1 VMLAB_QEMU_ARGS="${drives[*]} -pidfile $SOCKDIR/qemu.pid" \
    "$LAB/vmrun.sh" "BIN=$BIN HUB_LOG_LEVEL=${POWERCUT_HUB_LOG:-info} bash $SELF --guest $W $boot ${lanes[*]}" > "$W/vm.$boot.log" 2>&1 &
  VM_PID=$!
  if [ $traffic = yes ]; then
    if wait_file 380 "$VM_PID" "$W/traffic.$boot"; then
      delay_ms=$((2000 + RANDOM % 6001))
      sleep "$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000)))"
      at="$((delay_ms / 1000)).$(printf %03d $((delay_ms % 1000))) s into the traffic"
      if [ $((boot % 2)) = 1 ]; then
        echo "SIGKILL $at" > "$W/cut.$boot"
        kill -9 "$(cat "$SOCKDIR/qemu.pid")"
      else
        # Armed: nbd-disk.py kills QEMU right after the next write it acknowledges. A disk
        # that stays idle for 5 s gets the plain SIGKILL instead.
        echo "at the first write $at" > "$W/cut.$boot"
        kill -USR1 "$([ "$boot" -le "$CUTS" ] && echo "$NBD_REAL" || echo "$NBD_CONTROL")"   # a disk with traffic
        for _ in $(seq 100); do kill -0 "$(cat "$SOCKDIR/qemu.pid")" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$(cat "$SOCKDIR/qemu.pid")" 2>/dev/null && echo "SIGKILL $at + 5 s (no write came)" > "$W/cut.$boot"
      fi
      wait "$VM_PID"; rc=$?
      [ $rc = 137 ] || { echo "  boot $boot: vmrun exited $rc, not 137 (killed) at the cut"; FAILED=1; }
    else
      wait "$VM_PID"; rc=$?
      echo "  boot $boot: the guest never started traffic (vmrun exit $rc); its console:"
      tail -n 40 "$W/vm.$boot.log" | sed 's/^/    /'
      FAILED=1
    fi
  else
    wait "$VM_PID"; rc=$?
    [ $rc = 0 ] || { echo "  boot $boot (checks only): vmrun exit $rc; its console:"; tail -n 40 "$W/vm.$boot.log" | sed 's/^/    /'; FAILED=1; }
  fi
  VM_PID=
  for lane in real control; do
    grep -a "^\[$lane hub\] " "$W/vm.$boot.log" | cut -d' ' -f3- | tr -d '\r' > "$W/$lane/hub.$boot.log"
    [ -s "$W/$lane/hub.$boot.log" ] || rm -f "$W/$lane/hub.$boot.log"
  done
  if [ "$boot" -gt 1 ]; then
    [ "$boot" -le $((CUTS + 1)) ] && report_cut real $((boot - 1)) "$CUTS"
    [ "$boot" -le $((CONTROL_CUTS + 1)) ] && report_cut control $((boot - 1)) "$CONTROL_CUTS"
  fi
  [ $FAILED = 0 ] || break
done
# Cuts whose next boot ran (and checked them): a run stopped by a failed boot cannot say whether
# the messages acknowledged in that boot survive, so they are reported as unchecked, not lost.
LAST_BOOT=$boot
kill "$NBD_REAL" "$NBD_CONTROL" 2>/dev/null; wait "$NBD_REAL" "$NBD_CONTROL" 2>/dev/null; NBD_REAL= NBD_CONTROL=

# totals LANE CUTS — sets ACKED, LOST, TWICE, RESENT and UNCHECKED; LANE/lost-ids lists the lost messages.
totals() {
  local D=$W/$1 cuts=$2 b
  UNCHECKED=0
  if [ "$LAST_BOOT" -le "$cuts" ]; then
    UNCHECKED=$(for b in $(seq "$LAST_BOOT" "$cuts"); do ids_of handed_over "$D/acked.$b"; done | sort -u | lines)
    cuts=$((LAST_BOOT - 1))
  fi
  for b in $(seq 1 "$cuts"); do ids_of handed_over "$D/acked.$b"; done | sort -u > "$D/acked-ids"
  for b in $(seq 2 $((cuts + 1))); do ids_of message "$D/recv.$b"; done | sort > "$D/received-ids"
  comm -23 "$D/acked-ids" <(sort -u "$D/received-ids") > "$D/lost-ids"
  ACKED=$(lines "$D/acked-ids")
  LOST=$(lines "$D/lost-ids")
  TWICE=$(uniq -d "$D/received-ids" | lines)
  RESENT=$(for b in $(seq 2 $((cuts + 1))); do ids_of duplicate "$D/recv.$b"; done | lines)
}
totals real "$CUTS"
R_ACKED=$ACKED R_LOST=$LOST
echo "POWERCUT cuts=$CUTS acked=$ACKED lost=$LOST twice=$TWICE$([ "$UNCHECKED" = 0 ] || echo " unchecked=$UNCHECKED (acknowledged after the last checked cut: the run stopped)")"
echo "powercut: copies the hub sent again within one attach (the recipient dropped them as duplicates): $RESENT;" \
     "cuts that dropped unflushed writes: $(grep -E 'session [0-9]+ ended: cut' "$W/real/nbd.log" | grep -vc 'blocks_discarded=0$')/$CUTS;" \
     "hub starts whose UDP transport was created again after a late answer: $(cat "$W"/vm.*.log | grep -ac '^NOTE: .* hub: transport udp not started');" \
     "store commits of a second or more (custody answers waited for the disk): $(cat "$W"/real/hub.*.log 2>/dev/null | grep -ac 'store: a commit took')"
if [ "$LOST" != 0 ]; then
  echo "lost message IDs (the hub's logs and the disk image are in $W/real):"
  head -n 20 "$W/real/lost-ids" | sed 's/^/  /'
fi
totals control "$CONTROL_CUTS"
C_ACKED=$ACKED C_LOST=$LOST
echo "POWERCUT_CONTROL lying-disk cuts=$CONTROL_CUTS acked=$ACKED lost=$LOST (>0 expected)"
echo "powercut: $((SECONDS - T0)) s in all"

result=PASS
[ $FAILED = 0 ] || { echo "FAIL: a boot went wrong (console logs: $W/vm.N.log, hub logs: $W/LANE/hub.N.log)"; result=FAIL; }
[ "$R_ACKED" -gt 0 ] || { echo "FAIL: the real disk's hub acknowledged nothing"; result=FAIL; }
[ "$R_LOST" = 0 ] || { echo "FAIL: $R_LOST acknowledged messages lost on a disk that keeps what it flushed"; result=FAIL; }
[ "$C_LOST" -gt 0 ] || { echo "FAIL: the control lost nothing: this check cannot see a loss"; result=FAIL; }
echo "POWERCUT_TEST=$result"
[ $result = PASS ]
