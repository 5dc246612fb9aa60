#!/usr/bin/env bash
# `swift SUBCOMMAND ARGS...` for arm64: the cross toolchain (in-toolchain.sh), pkg-config
# pointed at the arm64 sysroot, and the Swift SDK arm64-toolchain.sh made, e.g.
#   packaging/cross/swift-arm64.sh build -c release --scratch-path .build-arm64
# The toolchain must exist already (packaging/cross/arm64-toolchain.sh prints its cache).
# Environment: YAOK_CROSS_CACHE (default /var/cache/yaok-hub-cross); the rest as in-toolchain.sh.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 SUBCOMMAND [ARGS...]   (e.g. build -c release)" >&2; exit 2; }
cache=$(realpath -m "${YAOK_CROSS_CACHE:-/var/cache/yaok-hub-cross}")
sysroot="$cache/sysroot"
subcommand=$1; shift
exec env PKG_CONFIG_SYSROOT_DIR="$sysroot" \
  PKG_CONFIG_PATH="$sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig" \
  bash "$(dirname "$0")/in-toolchain.sh" swift "$subcommand" --swift-sdks-path "$cache/sdks" --swift-sdk yaok-aarch64 "$@"
