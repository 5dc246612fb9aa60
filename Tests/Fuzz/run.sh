#!/usr/bin/env bash
# Builds the libFuzzer harnesses in Tests/Fuzz/Harnesses against the YaokPluginKit,
# YaokCrypto and YaokWire sources, then runs each for a bounded time.
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
all_harnesses=(envelope bundle contact chunks tlv frames)
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

# Rebuilds a module when any of its sources is newer than its object file.
build_module() {
    local name="$1"; shift
    local obj="$mods/$name.o"
    local stale=0
    [ -f "$obj" ] || stale=1
    for f in "$@"; do [ "$f" -nt "$obj" ] && stale=1; done
    if [ "$stale" = 1 ]; then
        echo "== building module $name"
        "$swiftc" "${flags[@]}" -module-name "$name" -wmo -emit-module -emit-module-path "$mods/$name.swiftmodule" \
            -c -o "$obj" "$@"
    fi
}

build_module YaokPluginKit "$repo"/Sources/PluginAPI/Sources/YaokPluginKit/*.swift
build_module YaokCrypto "$repo"/Sources/YaokCrypto/*.swift
build_module YaokWire "$repo"/Sources/YaokWire/*.swift

for h in "${harnesses[@]}"; do
    src="$here/Harnesses/$h.swift"
    [ -f "$src" ] || { echo "no harness named $h (have: ${all_harnesses[*]})" >&2; exit 2; }
    bin="$out/bin/fuzz-$h"
    if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ] || [ "$here/Harnesses/FuzzSupport.swift" -nt "$bin" ] \
        || [ -n "$(find "$mods" -name '*.o' -newer "$bin" 2>/dev/null)" ]; then
        echo "== building harness $h"
        "$swiftc" "${flags[@]}" -module-name "Fuzz_$h" "$src" "$here/Harnesses/FuzzSupport.swift" \
            "$mods/YaokPluginKit.o" "$mods/YaokCrypto.o" "$mods/YaokWire.o" -lsodium -o "$bin" \
            2> >(grep -v "Cannot export local symbol '__asan" >&2)
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
