#!/usr/bin/env bash
# Runs the packaged hub under a real systemd: boots a clean Debian 12 root with systemd as
# PID 1 in systemd-nspawn (own network namespace), installs the .deb files there with
# `dpkg -i` (postinst creates the user with systemd-sysusers, enables and starts the unit)
# and checks what only systemd can show: Type=notify readiness (active, STATUS=running),
# the credential (no store.key written), ambient capabilities, the watchdog (still the same
# process with no restart after more than WatchdogSec), `systemctl reload` (SIGHUP via
# /bin/kill), `yaok-hub status`, a cold start offline (the unit neither pulls in nor waits for
# network-online.target or network time: systemd's view, and a restart while both wait), a clean
# stop, and remove/purge through systemd; then the relay's unit (active, listening, key from its
# credential), the relay as a cluster node with
# the packaged drop-in (systemd-analyze verify; its relay key and PostgreSQL password as
# credentials; a clear error naming the store while the database is unreachable; then, if
# PostgreSQL is installed on this machine, serving on a real one reached through its UNIX
# socket, bound into the container at /run/postgresql) and its purge.
#
# Exit 0 pass, 77 skipped (reason printed), 1 fail. Needs root, systemd-nspawn
# (apt-get install systemd-container), and the packages in .build-pkg/debs-test (made by
# Tests/packaging/install-test.sh) or .build-pkg/debs (packaging/build-debs.sh).
# The systemd root is cached in .build-pkg (Tests/packaging/debian-roots.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
work="$repo/.build-pkg"
skip() { echo "SKIP: $*"; exit 77; }
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { local what=$1; shift; if "$@"; then echo "ok: $what"; else fail "$what"; fi; }

[ "$(id -u)" -eq 0 ] || skip "needs root"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn missing (apt-get install systemd-container)"
debs=""
for d in "$work/debs-test" "$work/debs"; do ls "$d"/yaok-hub_*.deb >/dev/null 2>&1 && { debs=$d; break; }; done
[ -n "$debs" ] || skip "no packages; run Tests/packaging/install-test.sh or packaging/build-debs.sh first"

root=$(mktemp -d "$work/sdroot.XXXXXX")
nspawn_pid=""
pg_dir=""
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n | tail -1)
# PostgreSQL's programs as `postgres`, from `/`: they refuse a working directory they cannot
# enter, and the checkout may be one (a `mktemp -d` clone is mode 0700).
as_postgres() { (cd / && runuser -u postgres -- "$@"); }
cleanup() {
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    kill -TERM "$nspawn_pid"   # nspawn asks the container's systemd to power off
    for _ in $(seq 1 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn_pid" 2>/dev/null
  fi
  rm -rf --one-file-system "$root"
  if [ -n "$pg_dir" ]; then
    [ -f "$pg_dir/data/postmaster.pid" ] && as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1
    rm -rf "$pg_dir"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

step "systemd root"
# The base root plus systemd, dbus, procps and curl (the console check); cached.
tarball=$(bash Tests/packaging/debian-roots.sh systemd)
case $? in 0) ;; 77) skip "no Debian root with systemd (above)" ;; *) fail "Tests/packaging/debian-roots.sh systemd"; exit 1 ;; esac
tar -C "$root" -xzf "$tarball"
mkdir -p "$root/root/debs"
cp "$debs"/yaok-swift-runtime_*.deb "$debs"/yaok-hub_*.deb "$debs"/yaok-relay_*.deb "$root/root/debs/"

# A PostgreSQL for the relay cluster node, on this machine (the container has no network to
# install one): UNIX socket only, in a directory bound into the container at /run/postgresql;
# the relay's role logs in with a password (scram-sha-256), so the credential is really used.
pg_bind=()
pg_password=""
if [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] && id postgres >/dev/null 2>&1; then
  step "PostgreSQL for the cluster node"
  pg_dir=$(mktemp -d /tmp/yaok-sdpg.XXXXXX)
  mkdir -m 0755 "$pg_dir/sock"
  chown postgres:postgres "$pg_dir" "$pg_dir/sock"
  chmod 0711 "$pg_dir"
  pg_password=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  if as_postgres "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust --no-sync -E UTF8 --locale=C >"$pg_dir/initdb.log" 2>&1 \
     && printf 'local yaok_relay yaok_relay scram-sha-256\nlocal all postgres trust\n' > "$pg_dir/data/pg_hba.conf" \
     && as_postgres "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 30 \
          -o "-c listen_addresses='' -c unix_socket_directories='$pg_dir/sock' -c fsync=off" start >/dev/null \
     && printf "CREATE ROLE yaok_relay LOGIN PASSWORD '%s';\nCREATE DATABASE yaok_relay OWNER yaok_relay;\n" "$pg_password" \
          | as_postgres "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$pg_dir/sock" -U postgres -d postgres -f - >/dev/null; then
    pg_bind=(--bind="$pg_dir/sock:/run/postgresql")
  else
    echo "note: could not start PostgreSQL here ($pg_dir/*.log); the cluster node is checked without a database"
  fi
else
  echo "note: no PostgreSQL on this machine; the cluster node is checked without a database"
fi
pg_sql() { as_postgres "$pg_bin/psql" -X -A -t -h "$pg_dir/sock" -U postgres -d yaok_relay -c "$1" 2>&1; }

step "boot"
systemd-nspawn -q -D "$root" --boot --private-network --register=no --keep-unit --console=passive "${pg_bind[@]}" \
  > "$work/systemd-test-console.log" 2>&1 &
nspawn_pid=$!
init_pid=""
for _ in $(seq 1 300); do
  # nspawn's first child is a helper; the container's PID 1 is the child running systemd.
  init_pid=$(ps -o pid=,comm= --ppid "$nspawn_pid" | awk '$2 == "systemd" {print $1}' | head -1)
  [ -n "$init_pid" ] && break
  kill -0 "$nspawn_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$init_pid" ] || { tail -n 20 "$work/systemd-test-console.log"; skip "systemd-nspawn could not boot a container here"; }
in_ct() { nsenter -t "$init_pid" -a "$@"; }
# Until systemd has its bus up, systemctl cannot even ask; then --wait waits for boot.
state=""
for _ in $(seq 1 120); do
  state=$(timeout 60 nsenter -t "$init_pid" -a systemctl is-system-running --wait 2>&1)
  case "$state" in *"Failed to connect"*|*"No such file"*|"") sleep 0.5 ;; *) break ;; esac
done
case "$state" in running|degraded) echo "container systemd: $state" ;; *) tail -n 20 "$work/systemd-test-console.log"; skip "container did not boot ($state)" ;; esac

step "dpkg -i (postinst starts the service)"
check "dpkg -i" in_ct sh -c 'dpkg -i /root/debs/yaok-swift-runtime_*.deb /root/debs/yaok-hub_*.deb'
check "user created by systemd-sysusers" in_ct getent passwd yaok-hub
check "unit enabled" in_ct systemctl -q is-enabled yaok-hub
active=""
for _ in $(seq 1 100); do
  active=$(in_ct systemctl show -P ActiveState yaok-hub)
  [ "$active" = active ] || [ "$active" = failed ] && break
  sleep 0.2
done
check "yaok-hub.service is active (READY=1 received)" test "$active" = active
check "status text is 'running'" test "$(in_ct systemctl show -P StatusText yaok-hub)" = running
check "WatchdogUSec is 30s" test "$(in_ct systemctl show -P WatchdogUSec yaok-hub)" = 30s
main_pid=$(in_ct systemctl show -P MainPID yaok-hub)
check "hub runs as yaok-hub" test "$(in_ct ps -o user= -p "$main_pid" 2>/dev/null || in_ct stat -c %U /proc/"$main_pid")" = yaok-hub
cap_amb=$(in_ct awk '/^CapAmb/ {print $2}' /proc/"$main_pid"/status)
# CAP_NET_BIND_SERVICE (10), CAP_NET_ADMIN (12), CAP_NET_RAW (13).
check "ambient capabilities are exactly NET_BIND_SERVICE, NET_ADMIN, NET_RAW ($cap_amb)" test "$cap_amb" = 0000000000003400
check "yaok-hub status answers" sh -c "nsenter -t $init_pid -a yaok-hub status | head -2"
# Each transport runs in its own plugin process, with only its own capabilities.
udp_pid=$(in_ct sh -c 'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline 2>/dev/null | grep -q "plugin-host --plugin .*libyaok-plugin-udp.so" && basename $p; done' | head -1)
check "the UDP transport runs in its own plugin process ($udp_pid)" test -n "$udp_pid"
check "its parent is the hub" test "$(in_ct awk '/^PPid/ {print $2}' /proc/"$udp_pid"/status)" = "$main_pid"
check "it has no capabilities (CapEff, CapPrm, CapAmb all 0)" test "$(in_ct awk '/^Cap(Eff|Prm|Amb)/ {printf "%s ", $2}' /proc/"$udp_pid"/status)" = "0000000000000000 0000000000000000 0000000000000000 "
check "and no_new_privs" test "$(in_ct awk '/^NoNewPrivs/ {print $2}' /proc/"$udp_pid"/status)" = 1
check "database key came from the credential (no store.key)" test ! -e "$root/var/lib/yaok-hub/store.key"
check "identity.key created 0600" test "$(stat -c %a "$root/var/lib/yaok-hub/identity.key" 2>/dev/null)" = 600

step "reload"
check "systemctl reload yaok-hub" in_ct systemctl reload yaok-hub
check "same process after reload" test "$(in_ct systemctl show -P MainPID yaok-hub)" = "$main_pid"

step "console switch under the unit (issue 18: the packaged hub edits its own config)"
# /etc/yaok-hub is root:yaok-hub 1775 (sticky), hub.yaml is the service user's, and the unit
# has ReadWritePaths=/etc/yaok-hub: the console's switch must rewrite one line of hub.yaml.
conf=/etc/yaok-hub/hub.yaml
check "/etc/yaok-hub is root:yaok-hub 1775" test "$(in_ct stat -c '%U:%G %a' /etc/yaok-hub)" = "root:yaok-hub 1775"
check "hub.yaml is yaok-hub's, 644" test "$(in_ct stat -c '%U:%G %a' $conf)" = "yaok-hub:yaok-hub 644"
check "db.key is root's, 600" test "$(in_ct stat -c '%U:%G %a' /etc/yaok-hub/db.key)" = "root:root 600"
check "the unit may write /etc/yaok-hub" sh -c "nsenter -t $init_pid -a systemctl show -P ReadWritePaths yaok-hub | grep -qx /etc/yaok-hub"
console_url=http://127.0.0.1:8480
jar=/root/console.jar
# The password and the tokens go to curl on stdin (printf is a shell builtin), never argv.
console_pw=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
set_console_pw() { printf '%s\n' "$console_pw" | in_ct yaok-hub console-password --config $conf --stdin >/dev/null; }
check "console-password (as root, password on stdin)" set_console_pw
ct_curl() { in_ct curl -sS --max-time 20 -b "$jar" -c "$jar" "$@"; }
csrf_of() { sed -n 's/.*name="csrf" value="\([0-9a-f]*\)".*/\1/p' | head -1; }
# Logs in as a browser does; sets $csrf to the session's CSRF token.
console_login() {
  local page="" token code
  in_ct rm -f "$jar"
  for _ in $(seq 1 100); do   # the console may still be starting: up to 20 s
    page=$(ct_curl "$console_url/login" 2>/dev/null) && break
    sleep 0.2
  done
  token=$(csrf_of <<< "$page")
  [ -n "$token" ] || { echo "no csrf input on the login page"; return 1; }
  code=$(printf 'password=%s&csrf=%s' "$console_pw" "$token" \
    | ct_curl -o /dev/null -w '%{http_code} %{redirect_url}' --data-binary @- "$console_url/login")
  [ "$code" = "303 $console_url/" ] || { echo "POST /login answered $code"; return 1; }
  csrf=$(ct_curl "$console_url/" | csrf_of)
  [ -n "$csrf" ] || { echo "no session csrf on the overview"; return 1; }
}
# Posts the switch; prints the HTTP status and leaves the answer in /root/toggle.html.
console_toggle() { # name true|false
  printf 'enabled=%s&csrf=%s' "$2" "$csrf" \
    | ct_curl -o /root/toggle.html -w '%{http_code}' --data-binary @- "$console_url/transports/$1"
}
udp_row() { in_ct yaok-hub status | awk '$1 == "udp"'; }
csrf=""
check "console login (GET /login, POST /login, GET /)" console_login
udp_state=$(udp_row | awk '{print $3}')
check "udp is running before the switch ($udp_state)" test "$udp_state" = running
cp -p "$root$conf" "$work/hub.yaml.before"
key_sum=$(sha256sum < "$root/etc/yaok-hub/db.key")
# The line of transports.udp.enabled in the packaged file.
udp_line=$(awk '/^transports:/ {t = 1} t && /^  udp:/ {u = 1; next} u && /^    enabled:/ {print NR; exit}' "$work/hub.yaml.before")
check "transports.udp.enabled found (line $udp_line, '$(sed -n "${udp_line:-0}p" "$work/hub.yaml.before" 2>/dev/null)')" \
  sh -c "test -n '$udp_line' && sed -n '${udp_line}p' '$work/hub.yaml.before' | grep -qx '    enabled: true'"
since=$(in_ct date '+%Y-%m-%d %H:%M:%S')
code=$(console_toggle udp false)
check "POST /transports/udp enabled=false answers 303 ($code)" test "$code" = 303
sed "${udp_line}s/^    enabled: true\$/    enabled: false/" "$work/hub.yaml.before" > "$work/hub.yaml.expected"
check "hub.yaml: that one line says enabled: false, every other byte the same" cmp "$work/hub.yaml.expected" "$root$conf"
check "diff shows exactly one changed line" test "$(diff "$work/hub.yaml.before" "$root$conf" | grep -c '^[<>]')" = 2
diff "$work/hub.yaml.before" "$root$conf" | sed 's/^/    /'
udp_off=""
for _ in $(seq 1 50); do   # the reload runs on the hub's queue: up to 10 s
  udp_off=$(udp_row)
  echo "$udp_off" | awk '$3 == "stopped"' | grep -q "disabled in config" && break
  sleep 0.2
done
check "yaok-hub status: udp switched off ($udp_off)" sh -c "echo '$udp_off' | awk '\$3 == \"stopped\"' | grep -q 'disabled in config'"
check "same hub process (a reload, not a restart)" test "$(in_ct systemctl show -P MainPID yaok-hub)" = "$main_pid"
check "hub.yaml still yaok-hub's, mode 644 kept" test "$(in_ct stat -c '%U:%G %a' $conf)" = "yaok-hub:yaok-hub 644"
check "/etc/yaok-hub still root:yaok-hub 1775" test "$(in_ct stat -c '%U:%G %a' /etc/yaok-hub)" = "root:yaok-hub 1775"
check "db.key untouched (same bytes, root, 600)" test "$(sha256sum < "$root/etc/yaok-hub/db.key") $(in_ct stat -c '%U:%G %a' /etc/yaok-hub/db.key)" = "$key_sum root:root 600"
check "no temporary file left in /etc/yaok-hub ($(ls -A "$root/etc/yaok-hub" | paste -sd' '))" \
  test "$(ls -A "$root/etc/yaok-hub" | sort | paste -sd' ')" = "db.key hub.yaml"
check "the journal records the edit" sh -c "nsenter -t $init_pid -a journalctl -u yaok-hub --no-pager -o cat --since '$since' | grep -q 'console: transports.udp.enabled set to false'"
no_secret_in_journal() { ! in_ct journalctl --no-pager | grep -qF -f <(printf '%s\n' "$console_pw" ${csrf:+"$csrf"}); }
check "the journal has neither the console password nor the session's CSRF token" no_secret_in_journal

step "attack check: the service user cannot touch root's files in /etc/yaok-hub (sticky bit)"
as_hub() { in_ct runuser -u yaok-hub -- "$@"; }
check "yaok-hub cannot read db.key" sh -c "! nsenter -t $init_pid -a runuser -u yaok-hub -- cat /etc/yaok-hub/db.key >/dev/null 2>&1"
check "yaok-hub cannot remove db.key" sh -c "! nsenter -t $init_pid -a runuser -u yaok-hub -- rm -f /etc/yaok-hub/db.key 2>/dev/null"
check "yaok-hub cannot rename db.key" sh -c "! nsenter -t $init_pid -a runuser -u yaok-hub -- mv /etc/yaok-hub/db.key /etc/yaok-hub/stolen 2>/dev/null"
check "yaok-hub can create a file there (group-writable)" as_hub sh -c 'echo planted > /etc/yaok-hub/.planted'
check "but cannot rename it over db.key" sh -c "! nsenter -t $init_pid -a runuser -u yaok-hub -- mv -f /etc/yaok-hub/.planted /etc/yaok-hub/db.key 2>/dev/null"
as_hub rm -f /etc/yaok-hub/.planted
check "db.key still the same bytes, root, 600" test "$(sha256sum < "$root/etc/yaok-hub/db.key") $(in_ct stat -c '%U:%G %a' /etc/yaok-hub/db.key)" = "$key_sum root:root 600"
check "the hub still answers" sh -c "nsenter -t $init_pid -a yaok-hub status >/dev/null"

step "watchdog (waiting past WatchdogSec=30)"
started=$(in_ct systemctl show -P ExecMainStartTimestampMonotonic yaok-hub)
for _ in $(seq 1 40); do
  now=$(in_ct cat /proc/uptime | awk '{printf "%d", $1 * 1000000}')
  [ $((now - started)) -gt 33000000 ] && break
  sleep 1
done
check "no watchdog restart (NRestarts=0, same PID)" test "$(in_ct systemctl show -P NRestarts yaok-hub) $(in_ct systemctl show -P MainPID yaok-hub)" = "0 $main_pid"
check "journal has the ready line" sh -c "nsenter -t $init_pid -a journalctl -u yaok-hub --no-pager | grep -q 'ready:'"
# SystemCallErrorNumber=EPERM: a filtered system call shows as EPERM (errno=1). libdispatch's
# "Failed to set thread priority ... errno=13" (EACCES: raising priority without
# CAP_SYS_NICE) is the kernel's normal answer to any unprivileged user, not the sandbox.
if in_ct journalctl -u yaok-hub --no-pager | grep -E "SIGSYS|Operation not permitted|errno=1\b" ; then
  fail "sandbox denied something (see the lines above)"
fi

step "opt-out: ReadOnlyPaths=/etc/yaok-hub in a drop-in makes the switch refuse"
wait_active() {
  local a=""
  for _ in $(seq 1 100); do
    a=$(in_ct systemctl show -P ActiveState yaok-hub)
    [ "$a" = active ] || [ "$a" = failed ] && break
    sleep 0.2
  done
  [ "$a" = active ]
}
mkdir -p "$root/etc/systemd/system/yaok-hub.service.d"
printf '[Service]\nReadOnlyPaths=/etc/yaok-hub\n' > "$root/etc/systemd/system/yaok-hub.service.d/read-only-config.conf"
in_ct systemctl daemon-reload
in_ct systemctl restart yaok-hub
check "restarted with the drop-in" wait_active
cp -p "$root$conf" "$work/hub.yaml.before-optout"
check "console login after the restart" console_login
code=$(console_toggle udp true)
check "the switch is refused (HTTP $code, 422)" test "$code" = 422
check "and says why: Read-only file system" sh -c "nsenter -t $init_pid -a grep -q 'Read-only file system' /root/toggle.html"
check "hub.yaml unchanged" cmp "$work/hub.yaml.before-optout" "$root$conf"
rm -f "$root/etc/systemd/system/yaok-hub.service.d/read-only-config.conf"
rmdir "$root/etc/systemd/system/yaok-hub.service.d"
in_ct systemctl daemon-reload
in_ct systemctl restart yaok-hub
check "restarted without the drop-in" wait_active
main_pid=$(in_ct systemctl show -P MainPID yaok-hub)

step "cold start offline: no network, no network time (the unit waits for neither)"
# A hub in the field boots with no network and a clock that no one has synchronised
# (Docs/operations.md, "Clock and power in the field"). This container has only loopback
# (--private-network) and no time daemon: the root is installed without recommends, so
# without systemd-timesyncd, and nothing enables systemd-time-wait-sync.service.
net_links=$(in_ct awk -F: 'NR > 2 {gsub(/ /, "", $1); print $1}' /proc/net/dev | paste -sd' ')
check "the container has no network but loopback ($net_links)" test "$net_links" = lo
# The kernel's synchronised flag is the host kernel's (not namespaced): shown, not checked.
echo "note: systemd-timesyncd in the root: $(in_ct systemctl show -P LoadState systemd-timesyncd.service);" \
  "timedatectl NTPSynchronized=$(in_ct timedatectl show -p NTPSynchronized --value 2>&1)"
# systemd's own view. The unit names none of them; nothing it pulls in does (in this root nothing
# else pulls them in either); nothing it is ordered after is ordered after them.
offline_deps() { # systemctl arguments; prints the units named that a cold start must not wait for
  local out
  out=$(in_ct systemctl "$@" 2>&1) && [ -n "$out" ] || { echo "(systemctl $*: no answer: $out)"; return; }
  tr ' =' '\n\n' <<< "$out" | grep -xF -e time-sync.target -e systemd-time-wait-sync.service -e network-online.target \
    | sort -u | paste -sd' '
}
deps=$(offline_deps show -p Wants -p Requires -p Requisite -p BindsTo -p Upholds -p After yaok-hub.service)
check "its Wants, Requires, Requisite, BindsTo, Upholds, After name no time-sync.target, systemd-time-wait-sync.service, network-online.target${deps:+ ($deps)}" test -z "$deps"
deps=$(offline_deps list-dependencies --all --plain --no-pager yaok-hub.service)
check "nor does what it pulls in, transitively (list-dependencies --all)${deps:+ ($deps)}" test -z "$deps"
deps=$(offline_deps list-dependencies --after --all --plain --no-pager yaok-hub.service)
check "nor what it is ordered after, transitively (list-dependencies --after --all)${deps:+ ($deps)}" test -z "$deps"
# In practice: a unit that never finishes starting stands for network time and a network that
# never come (as systemd-time-wait-sync.service and NetworkManager-wait-online.service would,
# offline), ordered before both targets and pulling them in, so their start jobs wait for as long
# as it runs. A hub ordered after either would wait with them; this one must restart meanwhile.
cat > "$root/etc/systemd/system/yaok-test-never-online.service" <<'UNIT'
[Unit]
Description=Network time and a network that never come (systemd-test.sh)
DefaultDependencies=no
Wants=time-sync.target network-online.target
Before=time-sync.target network-online.target

[Service]
Type=oneshot
ExecStart=/bin/sleep infinity
TimeoutStartSec=infinity
UNIT
in_ct systemctl daemon-reload
in_ct systemctl start --no-block yaok-test-never-online.service
waiting_targets() { in_ct systemctl list-jobs --no-legend --no-pager | awk '$2 ~ /^(time-sync|network-online)\.target$/ {print $2 " " $4}' | sort | paste -sd, ; }
targets=""
for _ in $(seq 1 50); do   # up to 10 s for the jobs to queue
  targets=$(waiting_targets)
  [ "$targets" = "network-online.target waiting,time-sync.target waiting" ] && break
  sleep 0.2
done
check "time-sync.target and network-online.target are waiting ($targets)" test "$targets" = "network-online.target waiting,time-sync.target waiting"
old_pid=$(in_ct systemctl show -P MainPID yaok-hub)
check "systemctl restart yaok-hub returns meanwhile (within 30 s)" timeout 30 nsenter -t "$init_pid" -a systemctl restart yaok-hub
check "the hub is active again, a new process (READY=1), and the targets still wait" \
  test "$(in_ct systemctl show -P ActiveState yaok-hub) $([ "$(in_ct systemctl show -P MainPID yaok-hub)" != "$old_pid" ] && echo new) $(waiting_targets)" \
    = "active new network-online.target waiting,time-sync.target waiting"
# Stopping the stand-in cancels its start: the targets are reached, a stuck restart proceeds.
in_ct systemctl stop yaok-test-never-online.service
rm -f "$root/etc/systemd/system/yaok-test-never-online.service"
in_ct systemctl daemon-reload
wait_active
main_pid=$(in_ct systemctl show -P MainPID yaok-hub)

step "a hub.yaml that is root's again: the switch refuses and leaves nothing behind"
# Also the service-user way of setting the console password that Docs/operations.md gives
# (a root command need not read the config the service can write).
console_pw=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
set_console_pw_as_hub() {
  printf '%s\n' "$console_pw" | in_ct runuser -u yaok-hub -- env STATE_DIRECTORY=/var/lib/yaok-hub \
    yaok-hub console-password --config $conf --stdin >/dev/null
}
check "console-password as the service user" set_console_pw_as_hub
check "console.pass still yaok-hub's, 600" test "$(in_ct stat -c '%U:%G %a' /var/lib/yaok-hub/console.pass)" = "yaok-hub:yaok-hub 600"
check "console login with that password" console_login
in_ct chown root:root $conf
cp -p "$root$conf" "$work/hub.yaml.before-rootowned"
code=$(console_toggle udp true)
check "the switch is refused (HTTP $code, 422)" test "$code" = 422
check "and says why: cannot keep the owner" \
  sh -c "nsenter -t $init_pid -a grep -q 'cannot keep the owner (uid 0, gid 0) of /etc/yaok-hub/hub.yaml: Operation not permitted' /root/toggle.html"
check "hub.yaml unchanged, still root's" test "$(cmp -s "$work/hub.yaml.before-rootowned" "$root$conf" && echo same) $(in_ct stat -c '%U:%G %a' $conf)" = "same root:root 644"
check "no temporary file left in /etc/yaok-hub ($(ls -A "$root/etc/yaok-hub" | paste -sd' '))" \
  test "$(ls -A "$root/etc/yaok-hub" | sort | paste -sd' ')" = "db.key hub.yaml"
in_ct chown yaok-hub:yaok-hub $conf

step "upgrade (reinstall: postinst try-restarts a running hub, keeps its identity)"
fingerprint=$(in_ct yaok-hub identity | grep fingerprint)
check "dpkg -i yaok-hub again" in_ct sh -c 'dpkg -i /root/debs/yaok-hub_*.deb >/dev/null'
new_pid=$(in_ct systemctl show -P MainPID yaok-hub)
check "restarted (new PID) and active" test "$(in_ct systemctl show -P ActiveState yaok-hub) $([ "$new_pid" != "$main_pid" ] && echo new)" = "active new"
main_pid=$new_pid
check "same identity after upgrade" test "$(in_ct yaok-hub identity | grep fingerprint)" = "$fingerprint"
check "the switched config survived the upgrade (dpkg keeps a changed conffile)" cmp "$work/hub.yaml.expected" "$root$conf"
check "and is still yaok-hub's, 644" test "$(in_ct stat -c '%U:%G %a' $conf)" = "yaok-hub:yaok-hub 644"
check "/etc/yaok-hub still root:yaok-hub 1775 after the upgrade" test "$(in_ct stat -c '%U:%G %a' /etc/yaok-hub)" = "root:yaok-hub 1775"

step "store rewrite (Docs/operations.md, \"Move an older store to 2 KB pages\"), as documented"
last_pages() { in_ct journalctl -u yaok-hub --no-pager -o cat | grep -o 'pages of [0-9]* bytes' | tail -n 1; }
rewrite_store() { in_ct yaok-hub store rewrite --config $conf --key-file /etc/yaok-hub/db.key "$@" > "$work/rewrite.out" 2>&1; }
check "the store was made with 2 KB pages ($(last_pages))" test "$(last_pages)" = "pages of 2048 bytes"
check "refused while the hub runs" sh -c "! nsenter -t $init_pid -a yaok-hub store rewrite --config $conf --key-file /etc/yaok-hub/db.key > $work/rewrite.out 2>&1"
check "and says why ($(tail -n 1 "$work/rewrite.out"))" grep -q 'hub.lock is held by another process' "$work/rewrite.out"
in_ct systemctl stop yaok-hub
check "rewrite to 4 KB pages, as root" rewrite_store --page-size 4096
check "prints what it did ($(tail -n 1 "$work/rewrite.out"))" grep -q 'pages of 2048 -> 4096 bytes' "$work/rewrite.out"
check "store.db still yaok-hub's, 600" test "$(in_ct stat -c '%U:%G %a' /var/lib/yaok-hub/store.db)" = "yaok-hub:yaok-hub 600"
check "no copy left behind" test ! -e "$root/var/lib/yaok-hub/store.db.rewrite"
in_ct systemctl start yaok-hub
check "the hub starts on it" wait_active
check "and logs its page size ($(last_pages))" test "$(last_pages)" = "pages of 4096 bytes"
check "same identity" test "$(in_ct yaok-hub identity | grep fingerprint)" = "$fingerprint"
in_ct systemctl stop yaok-hub
check "the documented command (2 KB, the default)" rewrite_store
check "prints what it did ($(tail -n 1 "$work/rewrite.out"))" grep -q 'pages of 4096 -> 2048 bytes' "$work/rewrite.out"
in_ct systemctl start yaok-hub
check "the hub starts again" wait_active
check "on 2 KB pages ($(last_pages))" test "$(last_pages)" = "pages of 2048 bytes"
check "yaok-hub status answers after the rewrites" sh -c "nsenter -t $init_pid -a yaok-hub status | head -1"
main_pid=$(in_ct systemctl show -P MainPID yaok-hub)

step "relay"
check "dpkg -i yaok-relay" in_ct sh -c 'dpkg -i /root/debs/yaok-relay_*.deb'
relay_up=0
for _ in $(seq 1 100); do
  if in_ct journalctl -u yaok-relay --no-pager | grep -q "^.*listening "; then relay_up=1; break; fi
  [ "$(in_ct systemctl show -P ActiveState yaok-relay)" = failed ] && break
  sleep 0.2
done
check "yaok-relay.service is active and listening" test "$relay_up $(in_ct systemctl show -P ActiveState yaok-relay)" = "1 active"
check "relay key from the credential (no relay.db.key)" test ! -e "$root/var/lib/yaok-relay/relay.db.key"
check "relay.identity created" test -f "$root/var/lib/yaok-relay/relay.identity"
if in_ct journalctl -u yaok-relay --no-pager | grep -E "SIGSYS|Operation not permitted|errno=1\b" ; then
  fail "relay sandbox denied something (see the lines above)"
fi
step "relay cluster node: the packaged drop-in, key and password as credentials"
relay_journal() { in_ct journalctl -u yaok-relay --no-pager -o cat "$@"; }
check "the drop-in is packaged" test -f "$root/usr/share/doc/yaok-relay/examples/cluster.conf"
in_ct install -D -m 0644 /usr/share/doc/yaok-relay/examples/cluster.conf /etc/systemd/system/yaok-relay.service.d/cluster.conf
# A cluster key of its own (not the data directory's), so the key the node prints shows which
# file it used.
cluster_key=$(in_ct sh -c 'yaok-relay key --data-dir /root/clusterkey' | tail -1)
in_ct install -m 0600 -o root -g root /root/clusterkey/relay.identity /etc/yaok-relay/relay.identity
[ -n "$pg_password" ] || pg_password=not-used-without-a-database
( umask 077 && printf '%s\n' "$pg_password" > "$root/etc/yaok-relay/pg-password" )
check "pg-password is root's, 0600" test "$(stat -c '%U %a' "$root/etc/yaok-relay/pg-password")" = "root 600"
set_store() {  # URL: the node's --store, in /etc/default/yaok-relay as the docs say
  in_ct sed -i '/^YAOK_RELAY_OPTS=/d' /etc/default/yaok-relay
  echo "YAOK_RELAY_OPTS=\"--store $1\"" >> "$root/etc/default/yaok-relay"
  in_ct systemctl daemon-reload
}
set_store 'postgres://yaok_relay@/yaok_relay?host=/run/yaok-no-database'
verify=$(in_ct systemd-analyze verify yaok-relay.service 2>&1)
check "systemd-analyze verify yaok-relay.service with the drop-in${verify:+ ($verify)}" test -z "$verify"
check "the drop-in is in effect" sh -c "nsenter -t $init_pid -a systemctl cat yaok-relay | grep -q 'yaok-relay-pg-password:/etc/yaok-relay/pg-password'"
# No database there: the node must fail with the reason, naming the store, and not crash.
since=$(in_ct date '+%Y-%m-%d %H:%M:%S')
in_ct systemctl restart yaok-relay
nodb=""
for _ in $(seq 1 100); do
  nodb=$(relay_journal --since "$since" | grep -m1 "cannot connect to PostgreSQL at /run/yaok-no-database/.s.PGSQL.5432")
  [ -n "$nodb" ] && break
  sleep 0.2
done
check "unreachable database: the journal names the store ($nodb)" test -n "$nodb"
check "and it exited with status 1, not a signal (Result=$(in_ct systemctl show -P Result yaok-relay))" \
  sh -c "nsenter -t $init_pid -a systemctl show -p ExecMainCode -p ExecMainStatus yaok-relay | tr '\n' ' ' | grep -q 'ExecMainCode=1 ExecMainStatus=1'"
if relay_journal --since "$since" | grep -E "Fatal error|core dumped|SIGSEGV|SIGILL|SIGSYS|Operation not permitted"; then
  fail "the cluster node crashed or was denied something (see the lines above)"
fi
if [ ${#pg_bind[@]} -gt 0 ]; then
  set_store 'postgres://yaok_relay@/yaok_relay?host=/run/postgresql'
  since=$(in_ct date '+%Y-%m-%d %H:%M:%S')
  in_ct systemctl restart yaok-relay
  up=0
  for _ in $(seq 1 150); do
    # The node prints "listening …" and then "key …": wait for both, since journald may
    # take them in separately (a CI run can read the journal between the two). Wait for this
    # key's line, not any "key" line: `--since` has whole seconds, so the lines of the run
    # before the restart can fall inside it (a wait for any "key" line can match the previous
    # node's "listening" and "key", and the check below then reads the journal before the new
    # node's lines are in it).
    lines=$(relay_journal --since "$since")
    grep -q "^listening " <<< "$lines" && grep -qx "key $cluster_key" <<< "$lines" && { up=1; break; }
    sleep 0.2
  done
  check "cluster node on PostgreSQL is active and listening" test "$up $(in_ct systemctl show -P ActiveState yaok-relay)" = "1 active"
  check "it signs with the credential's key ($cluster_key)" sh -c "nsenter -t $init_pid -a journalctl -u yaok-relay --no-pager -o cat --since '$since' | grep -qx 'key $cluster_key'"
  check "it migrated the database (schema version $(pg_sql 'SELECT max(version) FROM relay_schema_version'))" \
    test "$(pg_sql 'SELECT count(*) > 0 FROM relay_schema_version')" = t
  check "it logged in as yaok_relay with the password (scram-sha-256)" \
    test "$(pg_sql "SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = 'yaok_relay'")" = t
  relay_pid=$(in_ct systemctl show -P MainPID yaok-relay)
  check "the password is not on its command line" sh -c "! nsenter -t $init_pid -a cat /proc/$relay_pid/cmdline | grep -q '$pg_password'"
  check "nor in its journal" sh -c "! nsenter -t $init_pid -a journalctl -u yaok-relay --no-pager | grep -q '$pg_password'"
  if relay_journal --since "$since" | grep -E "SIGSYS|Operation not permitted|errno=1\b"; then
    fail "cluster node sandbox denied something (see the lines above)"
  fi
fi
in_ct systemctl stop yaok-relay
in_ct rm -rf /etc/systemd/system/yaok-relay.service.d
in_ct systemctl daemon-reload
check "dpkg --purge yaok-relay" in_ct dpkg --purge yaok-relay
check "relay data gone after purge" test ! -e "$root/var/lib/yaok-relay"

step "stop, remove, purge"
check "systemctl stop" in_ct systemctl stop yaok-hub
check "stopped cleanly (Result=success)" test "$(in_ct systemctl show -P Result yaok-hub)" = success
check "dpkg -r yaok-hub" in_ct dpkg -r yaok-hub
check "data kept after remove" test -f "$root/var/lib/yaok-hub/identity.key"
check "dpkg --purge yaok-hub yaok-swift-runtime" in_ct dpkg --purge yaok-hub yaok-swift-runtime
check "data gone after purge" test ! -e "$root/var/lib/yaok-hub"
check "unit gone" sh -c "! nsenter -t $init_pid -a systemctl cat yaok-hub >/dev/null 2>&1"

step "done"
if [ "$failures" -gt 0 ]; then
  echo "journal:"; in_ct journalctl -u yaok-hub --no-pager | tail -n 30
  echo "systemd-test: $failures check(s) failed"; exit 1
fi
echo "systemd-test: all checks passed"
