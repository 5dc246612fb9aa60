#!/usr/bin/env bash
# Checks the database key rotation procedure of Docs/operations.md for real: a release
# `yaok-hub` creates its store with a key file, stops; the store is rekeyed with the
# `sqlcipher` CLI exactly as documented; the hub then opens it with the new key (same
# identity, status answers) and no longer with the old one.
#
# Exit 0 pass, 77 skipped (reason printed), 1 fail. Uses the release build in SCRATCH
# (default .build-pkg, built by packaging/build-debs.sh); SKIP_BUILD=0 builds it first.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH="/opt/swift/usr/bin:$PATH"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; [ -f "$dir/hub.log" ] && tail -n 20 "$dir/hub.log"; exit 1; }

command -v sqlcipher >/dev/null || skip "the sqlcipher CLI is not installed (apt-get install sqlcipher)"
command -v swift >/dev/null || skip "no Swift toolchain"
scratch=${SCRATCH:-.build-pkg}
if [ "${SKIP_BUILD:-1}" = 0 ]; then swift build -c release --scratch-path "$scratch" --product yaok-hub || fail "build"; fi
bin=$(swift build -c release --scratch-path "$scratch" --show-bin-path)/yaok-hub
[ -x "$bin" ] || skip "no release build in $scratch (run packaging/build-debs.sh first)"

dir=$(mktemp -d)
hub_pid=""
trap '[ -n "$hub_pid" ] && kill -KILL "$hub_pid" 2>/dev/null; rm -rf "$dir"' EXIT
umask 077
cat > "$dir/hub.yaml" <<EOF
hub:
  data_dir: $dir/data
  control_socket: $dir/control.sock
  plugin_dirs: [$dir/no-plugins]
store:
  key_file: $dir/db.key
transports: {}
EOF
mkdir -p "$dir/no-plugins"

start_hub() { # waits until status answers; returns the hub's fingerprint line
  "$bin" run --config "$dir/hub.yaml" > "$dir/hub.log" 2>&1 &
  hub_pid=$!
  for _ in $(seq 1 100); do
    kill -0 "$hub_pid" 2>/dev/null || return 1
    if "$bin" identity --socket "$dir/control.sock" > "$dir/identity.txt" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}
stop_hub() {
  kill -TERM "$hub_pid"; wait "$hub_pid"; local rc=$?; hub_pid=""; return $rc
}

start_hub || fail "hub did not start with a fresh store"
first=$(grep fingerprint "$dir/identity.txt")
stop_hub || fail "hub did not stop cleanly"
[ -f "$dir/data/store.db" ] || fail "no store.db"
[ "$(stat -c %s "$dir/db.key")" = 32 ] || fail "db.key is not 32 bytes"
cp "$dir/db.key" "$dir/old.key"
# The page size the hub logs at start, as the procedure reads it.
page_size=$(grep -o 'pages of [0-9]* bytes' "$dir/hub.log" | head -n 1 | awk '{print $3}')
[ -n "$page_size" ] || fail "the hub did not log its store's page size"

# The documented procedure (Docs/operations.md, "Rotate the database key").
hex() { od -An -tx1 -v "$1" | tr -d ' \n'; }
new=$(mktemp "$dir/.db.key.new.XXXXXXXX")
head -c 32 /dev/urandom > "$new"
sqlcipher "$dir/data/store.db" > "$dir/sqlcipher.out" 2>&1 <<EOF || fail "sqlcipher rekey: $(cat "$dir/sqlcipher.out")"
PRAGMA key = "x'$(hex "$dir/db.key")'";
PRAGMA cipher_page_size = $page_size;
PRAGMA wal_checkpoint(TRUNCATE);
PRAGMA journal_mode = DELETE;
PRAGMA rekey = "x'$(hex "$new")'";
PRAGMA journal_mode = WAL;
SELECT count(*) FROM sqlite_master;
EOF
grep -qi error "$dir/sqlcipher.out" && fail "sqlcipher reported: $(cat "$dir/sqlcipher.out")"
mv "$new" "$dir/db.key"
cmp -s "$dir/db.key" "$dir/old.key" && fail "key did not change"

start_hub || fail "hub did not start after the rekey"
second=$(grep fingerprint "$dir/identity.txt")
stop_hub || fail "hub did not stop cleanly after the rekey"
[ "$first" = "$second" ] || fail "identity changed across the rekey"
echo "ok: hub opened the rekeyed store ($second)"

# The old key must no longer open it.
cp "$dir/old.key" "$dir/db.key"
if start_hub; then fail "hub opened the store with the old key"; fi
wait "$hub_pid" 2>/dev/null; hub_pid=""
grep -qiE "store|database|key|sqlcipher|file is not a database" "$dir/hub.log" || fail "no useful error with the old key"
echo "ok: old key refused: $(grep -iE 'cannot start' "$dir/hub.log" | head -1)"
echo "rotate-key-test: passed"
