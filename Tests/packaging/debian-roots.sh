#!/usr/bin/env bash
# The Debian 12 roots the packaging suites unpack, made once and cached in .build-pkg:
#   base     debootstrap minbase bookworm with the runtime libraries the .deb files depend on
#            (so `dpkg -i` can check Depends without a network): rootfs-<hash>.tgz
#   systemd  base plus systemd, dbus, procps and curl (systemd-test.sh boots it in nspawn):
#            sdroot-<hash>-rootfs-<hash>.tgz
#   arm64    Debian 13 (trixie) arm64, minbase, with the runtime libraries the arm64 .deb files
#            depend on (trixie's names): roots/trixie-arm64-<hash>.tgz in the cross toolchain's
#            cache (/var/cache/yaok-hub-cross). Made with mmdebstrap; its
#            maintainer scripts run under qemu-user (packaging/cross/arm64-toolchain.sh sets
#            that up, and this calls it).
# Each cache is keyed by its package list, so adding a dependency makes a fresh root.
#
# Usage: debian-roots.sh base|systemd|arm64|all — prints the tarball path(s) (all: not arm64).
# Exit 0: made or cached. 77: cannot be made here (reason on stderr). 1: usage.
# Tests/run.sh runs `all` in the background beside `swift test` (both steps wait on the
# network); the suites call it again and find the cache.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/sbin:/sbin"
work="$(pwd)/.build-pkg"
mkdir -p "$work"
cannot() { echo "cannot make the Debian root: $*" >&2; exit 77; }

base_packages=libsodium23,libsqlcipher0,libbluetooth3,libnl-genl-3-200,libqrencode4,adduser,procps
systemd_packages="systemd dbus procps curl"
arm64_packages=libsodium23,libsqlcipher1,libbluetooth3,libnl-genl-3-200,libqrencode4,libstdc++6,adduser,procps
base_tarball="$work/rootfs-$(echo "$base_packages" | md5sum | cut -c1-8).tgz"
systemd_tarball="$work/sdroot-$(echo "$systemd_packages" | md5sum | cut -c1-8)-$(basename "$base_tarball")"

# Two callers at once (the background run and a suite) must not both write one cache.
exec 9> "$work/debian-roots.lock"
flock 9

# The first active (not commented) Debian archive URI apt uses, not the security one.
debian_mirror() {
  local m
  m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]*/debian/?( |$)' | tr -d ' ' | head -1)
  echo "${m:-http://deb.debian.org/debian}"
}

make_base() {
  [ -s "$base_tarball" ] && return 0
  [ "$(id -u)" -eq 0 ] || cannot "needs root (debootstrap)"
  command -v debootstrap >/dev/null || cannot "debootstrap is not installed (apt-get install debootstrap)"
  local mirror fresh="$work/rootfs-new"
  mirror=$(debian_mirror)
  rm -rf "$fresh"
  echo "debootstrap from $mirror" >&2
  if ! debootstrap --variant=minbase --include="$base_packages" bookworm "$fresh" "$mirror" > "$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2; rm -rf "$fresh"
    cannot "debootstrap failed (no Debian mirror reachable?)"
  fi
  tar -C "$fresh" -czf "$base_tarball.tmp" . && mv "$base_tarball.tmp" "$base_tarball"
  rm -rf "$fresh"
}

make_systemd() {
  [ -s "$systemd_tarball" ] && return 0
  make_base
  local fresh="$work/sdroot-new"
  rm -rf "$fresh"; mkdir -p "$fresh"
  tar -C "$fresh" -xzf "$base_tarball"
  cp /etc/resolv.conf "$fresh/etc/resolv.conf"
  if ! chroot "$fresh" env sd_packages="$systemd_packages" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $sd_packages' \
      > "$work/sdroot.log" 2>&1; then
    tail -n 20 "$work/sdroot.log" >&2; rm -rf "$fresh"
    cannot "cannot install systemd in the root (no Debian mirror?)"
  fi
  rm -f "$fresh/etc/resolv.conf"
  tar -C "$fresh" -czf "$systemd_tarball.tmp" . && mv "$systemd_tarball.tmp" "$systemd_tarball"
  rm -rf "$fresh"
}

# Kept with the cross toolchain (outside the clone), so later runs on this machine reuse it.
make_arm64() {
  [ "$(id -u)" -eq 0 ] || cannot "needs root (mmdebstrap)"
  local cache mirror
  cache=$(bash packaging/cross/arm64-toolchain.sh) || cannot "no qemu-user for arm64 (packaging/cross/arm64-toolchain.sh, above)"
  arm64_tarball="$cache/roots/trixie-arm64-$(echo "$arm64_packages" | md5sum | cut -c1-8).tgz"
  [ -s "$arm64_tarball" ] && return 0
  mkdir -p "$cache/roots"
  # mmdebstrap checks with arch-test that this machine runs arm64 binaries (qemu-user).
  command -v arch-test >/dev/null || apt-get install -y -qq --no-install-recommends arch-test >/dev/null \
    || cannot "apt-get install arch-test failed (mmdebstrap needs it for an arm64 root)"
  mirror=$(debian_mirror)
  if ! mmdebstrap --variant=minbase --architectures=arm64 --include="$arm64_packages" --format=tar \
      trixie - "$mirror" 2> "$work/mmdebstrap-arm64.log" | gzip -1 > "$arm64_tarball.tmp"; then
    tail -n 20 "$work/mmdebstrap-arm64.log" >&2; rm -f "$arm64_tarball.tmp"
    cannot "mmdebstrap of trixie arm64 failed (no Debian mirror reachable?)"
  fi
  mv "$arm64_tarball.tmp" "$arm64_tarball"
}

case "${1:-}" in
  base) make_base; echo "$base_tarball" ;;
  systemd) make_systemd; echo "$systemd_tarball" ;;
  arm64) make_arm64; echo "$arm64_tarball" ;;
  all) make_systemd; echo "$base_tarball"; echo "$systemd_tarball" ;;
  *) echo "usage: $0 base|systemd|arm64|all" >&2; exit 1 ;;
esac
