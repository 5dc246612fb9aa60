#!/usr/bin/env bash
# The Debian 12 roots the packaging suites unpack, made once and cached in .build-pkg:
#   base     debootstrap minbase bookworm with the runtime libraries the .deb files depend on
#            (so `dpkg -i` can check Depends without a network): rootfs-<hash>.tgz
#   systemd  base plus systemd, dbus, procps and curl (systemd-test.sh boots it in nspawn):
#            sdroot-<hash>-rootfs-<hash>.tgz
# Each cache is keyed by its package list, so adding a dependency makes a fresh root.
#
# Usage: debian-roots.sh base|systemd|all — prints the tarball path(s).
# Exit 0: made or cached. 77: cannot be made here (reason on stderr). 1: usage.
# Tests/run.sh runs `all` in the background beside `swift test` (both steps wait on the
# network); the suites call it again and find the cache.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/sbin:/sbin"
work="$(pwd)/.build-pkg"
mkdir -p "$work"
cannot() { echo "cannot make the Debian root: $*" >&2; exit 77; }

base_packages=libsodium23,libsqlcipher0,libbluetooth3,libnl-genl-3-200,adduser,procps
systemd_packages="systemd dbus procps curl"
base_tarball="$work/rootfs-$(echo "$base_packages" | md5sum | cut -c1-8).tgz"
systemd_tarball="$work/sdroot-$(echo "$systemd_packages" | md5sum | cut -c1-8)-$(basename "$base_tarball")"

# Two callers at once (the background run and a suite) must not both write one cache.
exec 9> "$work/debian-roots.lock"
flock 9

make_base() {
  [ -s "$base_tarball" ] && return 0
  [ "$(id -u)" -eq 0 ] || cannot "needs root (debootstrap)"
  command -v debootstrap >/dev/null || cannot "debootstrap is not installed (apt-get install debootstrap)"
  # The first active (not commented) Debian archive URI apt uses, not the security one.
  local mirror fresh="$work/rootfs-new"
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]*/debian/?( |$)' | tr -d ' ' | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
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

case "${1:-}" in
  base) make_base; echo "$base_tarball" ;;
  systemd) make_systemd; echo "$systemd_tarball" ;;
  all) make_systemd; echo "$base_tarball"; echo "$systemd_tarball" ;;
  *) echo "usage: $0 base|systemd|all" >&2; exit 1 ;;
esac
