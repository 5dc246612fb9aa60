# Shared helpers for the mesh transport's network-namespace tests (sourced, not run).
#
# Each test builds its own namespaces and veth pairs, runs real `yaok-hub` processes
# inside them and removes everything on exit. Needs root (ip netns); without it the
# test prints "SKIP: <reason>" and exits 77 (the suite runner counts that as skipped).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)
BIN=${BIN:-$REPO/.build/debug}
TAG="ykm$(( $$ % 100000 ))"
WORK=$(mktemp -d /tmp/yaok-mesh-XXXXXX)
NAMESPACES=()
declare -A HUBPID=()
LINKNO=0
FAILED=0

cleanup() {
    local rc=$?
    for name in "${!HUBPID[@]}"; do kill -TERM "${HUBPID[$name]}" 2>/dev/null || true; done
    for name in "${!HUBPID[@]}"; do wait "${HUBPID[$name]}" 2>/dev/null || true; done
    for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    if [[ ( $rc -ne 0 && $rc -ne 77 ) || $FAILED -ne 0 || -n ${KEEP:-} ]]; then
        echo "logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

skip() { echo "SKIP: $*"; exit 77; }
pass() { echo "ok - $*"; }
fail() {
    FAILED=1
    echo "FAIL: $*"
    for name in "${!HUBPID[@]}"; do
        echo "--- last lines of hub $name's log ($WORK/$name/hub.log)"
        tail -n 15 "$WORK/$name/hub.log" 2>/dev/null || true
    done
    exit 1
}

preflight() {
    [[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces (ip netns)"
    command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
    command -v jq >/dev/null || skip "jq is not installed"
    ip netns add "$TAG-probe" 2>/dev/null || skip "ip netns add is not permitted here"
    ip netns del "$TAG-probe"
    for f in yaok-hub yaok libyaok-plugin-mesh.so libyaok-plugin-udp.so; do
        [[ -e $BIN/$f ]] || fail "$BIN/$f is missing: build first (swift build), or set BIN to the products directory"
    done
    mkdir -p "$WORK/plugins"
    chmod 755 "$WORK" "$WORK/plugins"
    install -m 755 "$BIN/libyaok-plugin-mesh.so" "$BIN/libyaok-plugin-udp.so" "$WORK/plugins/"
}

# make_ns NAME: a namespace with loopback up.
make_ns() {
    ip netns add "$TAG-$1"
    NAMESPACES+=("$TAG-$1")
    ip -n "$TAG-$1" link set lo up
    mkdir -p "$WORK/$1"
}

# veth_pair NS1 NS2: link number LINKNO+1, a veth pair between two namespaces, both ends up;
# the end in NS1 is ${TAG}l<N>x (link_if_x N), in NS2 ${TAG}l<N>y (link_if_y N).
veth_pair() {
    LINKNO=$((LINKNO + 1))
    local a b
    a=$(link_if_x "$LINKNO") b=$(link_if_y "$LINKNO")
    ip link add "$a" type veth peer name "$b"
    ip link set "$a" netns "$TAG-$1"
    ip link set "$b" netns "$TAG-$2"
    ip -n "$TAG-$1" link set "$a" up
    ip -n "$TAG-$2" link set "$b" up
}

# connect NS1 ADDR1 NS2 ADDR2: a veth pair between two namespaces with /30 addresses.
connect() {
    veth_pair "$1" "$3"
    ip -n "$TAG-$1" addr add "$2/30" dev "$(link_if_x "$LINKNO")"
    ip -n "$TAG-$3" addr add "$4/30" dev "$(link_if_y "$LINKNO")"
}

# connect6 NS1 NS2: a veth pair with no IPv4 address at all: only the IPv6 link-local
# addresses the kernel gives each end. Waits until both have left duplicate address
# detection.
connect6() {
    veth_pair "$1" "$2"
    local a b
    a=$(link_if_x "$LINKNO") b=$(link_if_y "$LINKNO")
    wait_for 20 "a link-local address on $a" link_local_ready "$1" "$a"
    wait_for 20 "a link-local address on $b" link_local_ready "$2" "$b"
}
# link_local NS IF: the interface's IPv6 link-local address (without prefix length).
link_local() { ip -n "$TAG-$1" -6 addr show dev "$2" scope link | awk '/inet6/ { sub(/\/.*/, "", $2); print $2; exit }'; }
link_local_ready() { [[ -n $(link_local "$1" "$2") ]] && ! ip -n "$TAG-$1" -6 addr show dev "$2" | grep -q tentative; }

# The veth names of link N, in its first and second namespace.
link_if_x() { echo "${TAG}l${1}x"; }
link_if_y() { echo "${TAG}l${1}y"; }

# write_config NAME [extra mesh lines...]   (ROUTER_EXTRA: more lines for the router section, indented)
write_config() {
    local name=$1; shift
    {
        cat <<CFG
hub:
  name: $name
  data_dir: $WORK/$name/data
  control_socket: $WORK/$name/control.sock
  plugin_dirs: ["$WORK/plugins"]
  log_level: debug
router:
  custody_timeout_s: 5
${ROUTER_EXTRA:-}
transports:
  udp:
    enabled: true
    listen: 127.0.0.1:7811
    keepalive_s: 1
  mesh:
    enabled: true
    beacon_interval_s: 1
    keepalive_s: 1
    idle_timeout_s: 4
CFG
        for line in "$@"; do echo "    $line"; done
    } > "$WORK/$name/hub.yaml"
}

start_hub() {
    local name=$1
    ip netns exec "$TAG-$name" "$BIN/yaok-hub" run --config "$WORK/$name/hub.yaml" >> "$WORK/$name/hub.log" 2>&1 &
    HUBPID[$name]=$!
    wait_for 30 "hub $name's control socket" hub_status "$name"
}

kill_hub() {
    local name=$1 sig=${2:-TERM}
    kill "-$sig" "${HUBPID[$name]}" 2>/dev/null || true
    wait "${HUBPID[$name]}" 2>/dev/null || true
    unset "HUBPID[$name]"
}

hub_status() { "$BIN/yaok-hub" status --json --socket "$WORK/$1/control.sock" 2>/dev/null; }
mesh_status() { hub_status "$1" | jq -c '.transports[] | select(.name == "mesh") | .status'; }
mesh_links() { hub_status "$1" | jq '.transports[] | select(.name == "mesh") | .status.links'; }
mesh_detail() { hub_status "$1" | jq -r --arg k "$2" '.transports[] | select(.name == "mesh") | .status.details[$k]'; }
# The Prometheus text of a hub's metrics, through its control socket.
hub_metrics() {
    python3 - "$WORK/$1/control.sock" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b'{"command":"metrics"}\n')
data = b""
while not data.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
reply = json.loads(data)
if not reply.get("ok"):
    sys.exit(reply.get("error", "metrics failed"))
print(reply["result"]["text"], end="")
PY
}
# How other hubs name this one: the first 8 hex digits of its Ed25519 key.
hub_id() { hub_status "$1" | jq -r '.hub.signingKey[0:8]'; }
# The router's view: the names of the hub links over tcp, sorted, comma-separated.
tcp_peers() { hub_status "$1" | jq -r '[.router.links[] | select(.kind == "tcp") | .peer] | sort | join(",")'; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls every 0.2 s until COMMAND succeeds.
wait_for() {
    local timeout=$1 what=$2; shift 2
    local deadline=$((SECONDS + timeout))
    while ! "$@" >/dev/null 2>&1; do
        if (( SECONDS >= deadline )); then fail "timed out after ${timeout} s waiting for $what"; fi
        sleep 0.2
    done
}

# links_are NAME N: the hub has exactly N mesh links.
links_are() { [[ $(mesh_links "$1") == "$2" ]]; }

# yaok_in NS HOME ARGS...: runs the endpoint CLI inside a namespace (its hub is on 127.0.0.1:7811 there).
yaok_in() {
    local ns=$1 home=$2 cmd=$3; shift 3
    ip netns exec "$TAG-$ns" "$BIN/yaok" "$cmd" --home "$WORK/$home" "$@"
}

# make_pair HOME1 NAME1 HOME2 NAME2: two endpoints that have each other as contacts.
make_pair() {
    "$BIN/yaok" init --home "$WORK/$1" --name "$2" >/dev/null
    "$BIN/yaok" init --home "$WORK/$3" --name "$4" >/dev/null
    local c1 c2
    c1=$("$BIN/yaok" qr --home "$WORK/$1")
    c2=$("$BIN/yaok" qr --home "$WORK/$3")
    "$BIN/yaok" contacts add --home "$WORK/$1" "$c2" >/dev/null
    "$BIN/yaok" contacts add --home "$WORK/$3" "$c1" >/dev/null
}
