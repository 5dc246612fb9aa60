#!/bin/bash
# setclock-test.sh — `clock.set_system_clock: true` on a real kernel (Docs/operations.md,
# "Clock and power in the field"): a box that boots two days behind, with no network time,
# learns true time from its pinned relay and steps its own system clock to it.
#
# Stepping CLOCK_REALTIME needs CAP_SYS_TIME and moves the whole machine's clock (no
# namespace holds it), so it runs in a VM. On the host: a `yaok-relay` on 127.0.0.1 (true
# time), reached from the guest through QEMU's user-mode network at 10.0.2.2. In the guest:
# the clock set two days back, then `yaok-hub run` (as root, so with CAP_SYS_TIME) with the
# relay transport and `set_system_clock: true`. It must log the step, its status must say
# the system clock is within a minute of the relay, the guest's clock must read true time
# (within a minute of the host's), and the hub must keep running and stop cleanly.
#
#   Tests/vmlab/setclock-test.sh      # from the host; BIN=$PWD/.build/debug by default
#
# Prints SETCLOCK_TEST=PASS | FAIL. Exit 0 pass; 77 (skipped) when qemu or the guest kernel
# is missing outside CI; otherwise 1.
LAB=$(cd "$(dirname "$0")" && pwd)
SELF=$LAB/$(basename "$0")
. "$LAB/lib.sh"
set -u

guest() {
  local port=$1 key=$2 host_t0=$3 G=/tmp/setclock
  fail() { echo "FAIL: $*"; echo "--- hub log"; cat "$G/hub.log" 2>/dev/null | tail -n 40; exit 1; }
  ok() { echo "ok - $*"; }
  rm -rf "$G"; mkdir -p "$G/plugins"
  cp "$BIN/libyaok-plugin-relay.so" "$G/plugins/"
  # The guest's clock ran from the host's at boot; the box now "boots" two days behind.
  local behind=172800
  date -s "@$(( $(date +%s) - behind ))" > /dev/null || fail "date -s"
  ok "the guest's clock set two days back: $(date -u '+%F %T')"
  cat > "$G/hub.yaml" <<CFG
hub:
  name: setclock
  data_dir: $G/data
  control_socket: $G/control.sock
  plugin_dirs: ["$G/plugins"]
  log_level: info
clock:
  set_system_clock: true
transports:
  relay:
    enabled: true
    address: 10.0.2.2:$port
    relay_key: $key
    poll_interval_s: 2
CFG
  "$BIN/yaok-hub" run --config "$G/hub.yaml" > "$G/hub.log" 2>&1 &
  local hub=$!
  # Waits are bounded by uptime: the wall clock jumps two days in the middle of them.
  until_uptime() {
    local limit=$1; shift
    local deadline=$(( $(cut -d. -f1 /proc/uptime) + limit ))
    until "$@" > /dev/null 2>&1; do
      [ "$(cut -d. -f1 /proc/uptime)" -lt "$deadline" ] || return 1
      sleep 0.2
    done
  }
  until_uptime 90 grep -q 'clock: set the system clock forward by' "$G/hub.log" \
    || fail "the hub did not set the system clock within 90 s"
  ok "the hub logged: $(grep -o 'clock: set the system clock.*' "$G/hub.log" | head -1)"
  # The guest started at the host's host_t0 (give or take its boot); its uptime counts since.
  local up expected now
  up=$(cut -d. -f1 /proc/uptime); expected=$((host_t0 + up)); now=$(date +%s)
  # Off by the time from launch to the guest kernel's start (seconds); a missed step by two days.
  [ $((now - expected)) -ge -120 ] && [ $((now - expected)) -le 120 ] \
    || fail "the guest's clock reads $now, true time is about $expected ($((now - expected)) s off)"
  ok "the guest's clock now reads true time ($((now - expected)) s from the host's launch time plus uptime)"
  local status
  until_uptime 20 sh -c "'$BIN/yaok-hub' status --config '$G/hub.yaml' | grep -q 'within a minute of relay'" \
    || fail "status: $("$BIN/yaok-hub" status --config "$G/hub.yaml" 2>&1 | grep -i clock)"
  status=$("$BIN/yaok-hub" status --config "$G/hub.yaml" 2>&1)
  ok "status: $(echo "$status" | grep -i 'clock:' | sed 's/^ *//')"
  [ "$(grep -c 'clock: set the system clock' "$G/hub.log")" = 1 ] || fail "the clock was set more than once"
  ok "set once"
  kill -TERM "$hub"; wait "$hub"; local rc=$?
  [ $rc = 0 ] || fail "the hub exited $rc on SIGTERM"
  ok "the hub stopped cleanly"
  echo "SETCLOCK_GUEST=PASS"
}

if [ "${1:-}" = --guest ]; then shift; guest "$@"; exit $?; fi

# ---- host ----
skip_or_fail() {
  if [ "${CI:-}" = true ] || [ "${YAOK_CI:-}" = 1 ]; then echo "FAIL: $*"; echo "SETCLOCK_TEST=FAIL"; exit 1; fi
  echo "SETCLOCK_TEST=SKIP: $*"; exit 77
}
BIN=${BIN:-$(cd "$LAB/../.." && pwd)/.build/debug}
BIN=$(cd "$BIN" && pwd)
KVER=${VMLAB_KVER:-$(ls /lib/modules 2>/dev/null | grep -- '-amd64$' | sort -V | tail -1 || true)}
command -v qemu-system-x86_64 >/dev/null || skip_or_fail "qemu-system-x86_64 missing (run Tests/vmlab/setup.sh)"
[ -n "$KVER" ] && [ -r "/boot/vmlinuz-$KVER" ] || skip_or_fail "no Debian amd64 guest kernel (run Tests/vmlab/setup.sh)"
for f in yaok-hub yaok-relay libyaok-plugin-relay.so; do
  [ -e "$BIN/$f" ] || { echo "FAIL: no $BIN/$f (swift build, or set BIN)"; echo "SETCLOCK_TEST=FAIL"; exit 1; }
done

W=$(mktemp -d /tmp/setclock.XXXXXX)
relay_pid=
cleanup() { [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
key=$("$BIN/yaok-relay" key --data-dir "$W/relay") || { echo "FAIL: yaok-relay key"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN/yaok-relay" run --listen "127.0.0.1:$port" --data-dir "$W/relay" > "$W/relay.log" 2>&1 &
relay_pid=$!
t0=$(date +%s)
VMLAB_NET=1 VMLAB_TIMEOUT=240 "$LAB/vmrun.sh" "BIN=$BIN bash $SELF --guest $port $key $t0" > "$W/vm.log" 2>&1
rc=$?
grep -E '^(ok|FAIL|SETCLOCK)' "$W/vm.log"
if [ $rc = 0 ] && grep -q '^SETCLOCK_GUEST=PASS' "$W/vm.log"; then
  echo "setclock: $(( $(date +%s) - t0 )) s"; echo "SETCLOCK_TEST=PASS"; exit 0
fi
echo "--- the VM's console (last 60 lines)"; tail -n 60 "$W/vm.log"
echo "--- relay log (last 20 lines)"; tail -n 20 "$W/relay.log"
echo "SETCLOCK_TEST=FAIL"; exit 1
