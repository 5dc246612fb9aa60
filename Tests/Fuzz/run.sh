#!/usr/bin/env bash
# Builds the libFuzzer harnesses in Tests/Fuzz/Harnesses against the plugin kit (YaokBase,
# YaokLinkSecurity, YaokPluginKit), YaokCrypto and YaokWire sources (and, for the harnesses that need them, YaokRelayProtocol,
# YaokReconcile, YaokATT, the mesh beacon and the hub's plugin-process protocol), then runs each
# for a bounded time.
#
#   Tests/Fuzz/run.sh [seconds-per-harness] [harness...]     (default: 20 s, all harnesses)
#
# Exits non-zero if a harness fails to build or finds a crash (an invariant check, a Swift
# runtime trap, or an AddressSanitizer report); the crashing input is kept under
# $FUZZ_BUILD_DIR/artifacts/. Environment: FUZZ_BUILD_DIR (default .build-fuzz in the repo),
# SWIFTC (default swiftc), FUZZ_EXTRA_OPTS (extra libFuzzer flags).
#
# Uses the toolchain's own libFuzzer (libclang_rt.fuzzer in the Swift toolchain), so nothing
# beyond the Swift toolchain and libsodium-dev is needed.
set -euo pipefail

seconds="${1:-20}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${FUZZ_BUILD_DIR:-$repo/.build-fuzz}"
case "$out" in /*) ;; *) out="$repo/$out" ;; esac
swiftc="${SWIFTC:-swiftc}"
all_harnesses=(envelope bundle contact chunks tlv frames handshake relay reconcile hubcert beacon att pluginproto)
if [ "$#" -gt 0 ]; then harnesses=("$@"); else harnesses=("${all_harnesses[@]}"); fi

mods="$out/modules"
mkdir -p "$mods" "$out/bin" "$out/artifacts" "$out/cmaps/CYaokPlugin"
# Sanitizers and coverage for every Swift module, so the fuzzer sees edges in the parsers.
flags=(-O -parse-as-library -package-name YaokHub -sanitize=fuzzer,address -I "$mods" -I "$repo/Sources/PluginAPI/Sources/CSodium" -I "$out/cmaps/CYaokPlugin")

cat > "$out/cmaps/CYaokPlugin/module.modulemap" <<MAP
module CYaokPlugin {
    header "$repo/Sources/PluginAPI/Sources/CYaokPlugin/include/yaok_plugin.h"
    export *
}
MAP

# Changed compiler flags invalidate everything built before.
if [ "$(cat "$out/flags" 2>/dev/null)" != "${flags[*]}" ]; then
    rm -f "$mods"/*.o "$out"/bin/fuzz-*
    printf '%s' "${flags[*]}" > "$out/flags"
fi

# Rebuilds a module when the content of its sources, or of a module built before it (which it
# may import: without library evolution a changed layout there must recompile it), changed.
# Content, not times: a fresh clone's files are all new, and CI keeps FUZZ_BUILD_DIR in a cache.
# `build_module [-enable-testing] name sources...` (-enable-testing: for `@testable import`).
built_keys=""
content_key() { cat "$@" | sha256sum | cut -c1-64; }
build_module() {
    local extra=()
    if [ "$1" = -enable-testing ]; then extra=(-enable-testing); shift; fi
    local name="$1"; shift
    local obj="$mods/$name.o"
    local key
    key=$( { printf '%s\n' "${extra[@]+"${extra[@]}"}" "$built_keys"; cat "$@"; } | sha256sum | cut -c1-64)
    built_keys="$built_keys $key"
    if [ ! -f "$obj" ] || [ "$(cat "$obj.key" 2>/dev/null)" != "$key" ]; then
        echo "== building module $name"
        "$swiftc" "${flags[@]}" ${extra[@]+"${extra[@]}"} -module-name "$name" -wmo -emit-module \
            -emit-module-path "$mods/$name.swiftmodule" -c -o "$obj" "$@"
        printf '%s' "$key" > "$obj.key"
    fi
}

# The modules a harness links besides the plugin kit's three, YaokCrypto and YaokWire.
extra_modules() {
    case "$1" in
        relay) echo YaokRelayProtocol ;;
        reconcile) echo YaokReconcile ;;
        att) echo YaokATT YaokBLEGATT ;;
        beacon) echo YaokMeshBeacon ;;
        pluginproto) echo YaokHubPluginProtocol ;;
    esac
}
wanted=" $(for h in "${harnesses[@]}"; do extra_modules "$h"; done | tr '\n' ' ')"
wants() { [[ "$wanted" == *" $1 "* ]]; }

build_module YaokBase "$repo"/Sources/PluginAPI/Sources/YaokBase/*.swift
build_module YaokLinkSecurity "$repo"/Sources/PluginAPI/Sources/YaokLinkSecurity/*.swift
build_module YaokPluginKit "$repo"/Sources/PluginAPI/Sources/YaokPluginKit/*.swift
build_module YaokCrypto "$repo"/Sources/YaokCrypto/*.swift
build_module YaokWire "$repo"/Sources/YaokWire/*.swift
# Whole modules: their only dependencies are the three above and libsodium.
if wants YaokRelayProtocol; then build_module YaokRelayProtocol "$repo"/Sources/YaokRelayProtocol/*.swift; fi
if wants YaokReconcile; then build_module YaokReconcile "$repo"/Sources/YaokReconcile/*.swift; fi
if wants YaokATT; then build_module YaokATT "$repo"/Sources/YaokATT/*.swift; fi
# One file of the BLE plugin: the hub's GATT database (needs only YaokATT).
if wants YaokBLEGATT; then build_module YaokBLEGATT "$repo"/Sources/YaokBluetooth/YaokGATTService.swift; fi
# One file of the mesh plugin: the beacon needs only YaokPluginKit.
if wants YaokMeshBeacon; then build_module YaokMeshBeacon "$repo"/Plugins/Mesh/Sources/Beacon.swift; fi
# Three files of YaokHubCore (which needs NIO, swift-log, Yams): the plugin-process messages, the
# carrier link sessions the hub runs for a plugin process, and the HostCrypto they use.
# Testable: CarrierLinks is internal.
if wants YaokHubPluginProtocol; then
    build_module -enable-testing YaokHubPluginProtocol "$repo"/Sources/YaokSupervision/PluginProcessProtocol.swift \
        "$repo"/Sources/YaokSupervision/CarrierLinks.swift "$repo"/Sources/YaokSupervision/HostCrypto.swift
fi

for h in "${harnesses[@]}"; do
    src="$here/Harnesses/$h.swift"
    [ -f "$src" ] || { echo "no harness named $h (have: ${all_harnesses[*]})" >&2; exit 2; }
    bin="$out/bin/fuzz-$h"
    objs=()
    for m in YaokBase YaokLinkSecurity YaokPluginKit YaokCrypto YaokWire $(extra_modules "$h"); do objs+=("$mods/$m.o"); done
    key=$(content_key "$src" "$here/Harnesses/FuzzSupport.swift" "${objs[@]/%/.key}")
    if [ ! -x "$bin" ] || [ "$(cat "$bin.key" 2>/dev/null)" != "$key" ]; then
        echo "== building harness $h"
        "$swiftc" "${flags[@]}" -module-name "Fuzz_$h" "$src" "$here/Harnesses/FuzzSupport.swift" \
            "${objs[@]}" -lsodium -o "$bin" \
            2> >(grep -v "Cannot export local symbol '__asan" >&2)
        printf '%s' "$key" > "$bin.key"
    fi
done

# The Swift runtime's crash backtracer trips AddressSanitizer; libFuzzer reports crashes itself.
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}"

failed=()
for h in "${harnesses[@]}"; do
    work="$out/corpus/$h"
    mkdir -p "$work"
    seeds=()
    [ -d "$here/corpus/$h" ] && seeds=("$here/corpus/$h")
    log="$out/fuzz-$h.log"
    echo "== fuzzing $h for ${seconds}s"
    # New inputs go to the first (scratch) corpus directory; the committed seeds stay untouched.
    if "$out/bin/fuzz-$h" -max_total_time="$seconds" -max_len=11000 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$h-" ${FUZZ_EXTRA_OPTS:-} \
        "$work" "${seeds[@]}" > "$log" 2>&1; then
        grep -E "stat::number_of_executed_units|stat::new_units_added" "$log" | tr '\n' ' ' | sed 's/^/   /'; echo
    else
        echo "!! $h FAILED (log: $log)"
        grep -E "invariant violated|Fatal error|ERROR: AddressSanitizer|ERROR: libFuzzer|Test unit written" "$log" | head -5 | sed 's/^/   /'
        failed+=("$h")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzzing found problems in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzzing: no crashes in ${harnesses[*]} (${seconds}s each)"
