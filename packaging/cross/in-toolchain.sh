#!/usr/bin/env bash
# Runs a command (e.g. `swift build --swift-sdk yaok-aarch64 ...`) with the cross toolchain
# that arm64-toolchain.sh made: inside its Debian sid root, in a private mount namespace, with
# the current directory, the cache, /opt/swift-packages (the offline package copies) and the
# system's git settings at the same paths as outside. The current directory must not be /.
# Environment: YAOK_CROSS_CACHE (default /var/cache/yaok-hub-cross); PKG_CONFIG_* pass through.
set -euo pipefail
# Resolved: a symlinked cache is used under its real path, which the build caches inside it record.
cache=$(realpath -m "${YAOK_CROSS_CACHE:-/var/cache/yaok-hub-cross}")
root="$cache/toolchain"
[ -x "$root/usr/libexec/swift/bin/swift" ] || { echo "in-toolchain: no toolchain in $root (run packaging/cross/arm64-toolchain.sh)" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
cwd=$(pwd -P)
[ "$cwd" != / ] || { echo "in-toolchain: run it from a project directory, not /" >&2; exit 2; }
binds=("$cwd" "$cache")
[ -d /opt/swift-packages ] && binds+=(/opt/swift-packages)
# An extra directory the caller needs (a scratch path outside the project).
[ -n "${YAOK_CROSS_BIND:-}" ] && binds+=("$YAOK_CROSS_BIND")
exec unshare --mount --propagation private /bin/bash -c '
  set -e
  root=$1; shift; n=$1; shift
  # /tmp first: a directory bound below (a clone in /tmp) must not be hidden by it.
  mkdir -p "$root/tmp" && mount -t tmpfs tmpfs "$root/tmp"
  for ((i = 0; i < n; i++)); do
    d=$1; shift
    mkdir -p "$root$d"
    mountpoint -q "$root$d" || mount --bind "$d" "$root$d"
  done
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  [ -f /etc/gitconfig ] && cp /etc/gitconfig "$root/etc/gitconfig"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  cwd=$1; shift
  exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/libexec/swift/bin:/usr/bin:/bin LANG=C.UTF-8 TERM=dumb \
    ${PKG_CONFIG_PATH:+PKG_CONFIG_PATH=$PKG_CONFIG_PATH} ${PKG_CONFIG_SYSROOT_DIR:+PKG_CONFIG_SYSROOT_DIR=$PKG_CONFIG_SYSROOT_DIR} \
    ${PKG_CONFIG_LIBDIR:+PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR} ${YAOK_PORTABLE_TESTS:+YAOK_PORTABLE_TESTS=$YAOK_PORTABLE_TESTS} \
    /bin/bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"
' bash "$root" "${#binds[@]}" "${binds[@]}" "$cwd" "$@"
