# lib.sh — helpers shared by the VM lab's guest-side scripts (source it).

# Re-runs the calling script inside the VM when it was started on the host.
# usage (first line of a guest script): . "$(dirname "$0")/lib.sh"; vmlab_enter "$@"
vmlab_enter() {
  if ! grep -q 'vmlab.cmd=' /proc/cmdline 2>/dev/null; then
    local self
    self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    # The guest starts with a clean environment: carry over where the binaries are.
    local env=""
    [ -n "${BIN:-}" ] && env+="BIN=$(cd "$BIN" 2>/dev/null && pwd || echo "$BIN") "
    [ -n "${BUILD:-}" ] && env+="BUILD=$(cd "$BUILD" 2>/dev/null && pwd || echo "$BUILD") "
    exec "$(dirname "$self")/vmrun.sh" "${env}bash $self $*"
  fi
}

VMLAB_T0=$(date +%s%N)
# Prints a step marker with the milliseconds since the script started.
step() { echo "## [+$(( ($(date +%s%N) - VMLAB_T0) / 1000000 )) ms] $*"; }

# wait_for SECONDS DESCRIPTION COMMAND... — polls COMMAND every 0.1 s until it succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then echo "timed out after ${limit}s waiting for $what" >&2; return 1; fi
    sleep 0.1
  done
}

# bdaddr HCI — the controller's BD address (e.g. 00:AA:01:00:00:23).
bdaddr() { cat "/sys/kernel/debug/bluetooth/$1/identity" 2>/dev/null | cut -d' ' -f1 | grep . || hciconfig "$1" | awk '/BD Address/{print $3}'; }

mgmt_index_ready() { btmgmt info 2>/dev/null | grep -q "^$1:"; }

# start_btvirt N — loads the Bluetooth core and the virtual HCI driver, starts btvirt
# with N LE-only controllers linked by one virtual radio, and waits until hci0..hci(N-1)
# are fully set up. Under TCG on a loaded host the kernel's first HCI commands to a new
# controller can time out; such a controller stays without a management index for good,
# so the whole btvirt is restarted (up to 3 attempts).
start_btvirt() {
  local n=$1 attempt i ok
  modprobe bluetooth && modprobe hci_vhci || return 1
  for attempt in 1 2 3; do
    btvirt -L -l"$n" > /tmp/btvirt.log 2>&1 &
    BTVIRT_PID=$!
    ok=yes
    for i in $(seq 0 $((n - 1))); do
      wait_for 20 "hci$i" test -e "/sys/class/bluetooth/hci$i" || { ok=no; break; }
    done
    if [ $ok = yes ]; then
      for i in $(seq 0 $((n - 1))); do
        wait_for 15 "hci$i's management index" mgmt_index_ready "hci$i" || { ok=no; break; }
      done
    fi
    [ $ok = yes ] && return 0
    echo "start_btvirt: attempt $attempt failed; restarting btvirt" >&2
    dmesg | grep -i -E 'bluetooth|hci' | tail -5 >&2
    kill "$BTVIRT_PID" 2>/dev/null; wait "$BTVIRT_PID" 2>/dev/null
    wait_for 10 "controllers to go away" sh -c '! ls /sys/class/bluetooth/hci* >/dev/null 2>&1'
  done
  cat /tmp/btvirt.log
  return 1
}
