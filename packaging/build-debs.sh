#!/usr/bin/env bash
# Builds the Debian packages of Ya OK with dpkg-deb:
#   yaok-swift-runtime  the Swift runtime libraries (no Debian package ships them), in
#                       /usr/lib/yaok-hub/swift; the three packages below depend on it
#   yaok-hub            the hub daemon and CLI, its plugins, default config, systemd unit
#   yaok-relay          the internet relay and its systemd unit
#   yaok                the Ya OK command-line endpoint
#
# Usage: packaging/build-debs.sh [--arch amd64|arm64] [--scratch DIR] [--skip-build] [--out DIR]
#   --arch ARCH    the machine's own architecture (default), or arm64 from amd64: cross-built
#                  with Swift 6.2.3 against Debian 13 (trixie) arm64 (packaging/cross/, as root;
#                  the packages need Debian 13 / Raspberry Pi OS trixie or later)
#   --scratch DIR  the build directory (as SCRATCH). A release build already there is reused:
#                  `swift build -c release` then `--scratch .build` rebuilds nothing that is up to date
#   --skip-build   package the release build in the scratch path as it is, without `swift build`
#   --out DIR      where the .deb files go (default: SCRATCH/debs)
# Environment: SCRATCH (default .build-pkg, for arm64 .build-arm64), VERSION (default
#              0.1.0+git<date>.<commit>), SWIFT (default: swift on PATH, else /opt/swift/usr/bin/swift),
#              YAOK_CROSS_CACHE (the arm64 toolchain's cache, packaging/cross/arm64-toolchain.sh).
# Needs: swift, dpkg-deb, patchelf, binutils (packaging/dev-setup.sh installs them); arm64 also
# needs root the first time (the cross toolchain: mmdebstrap, qemu-user, binfmt_misc).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

skip_build=0
out=""
host_arch=$(dpkg --print-architecture)
arch=$host_arch
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) skip_build=1 ;;
    --out) [ $# -ge 2 ] || { echo "error: --out needs a directory" >&2; exit 2; }; out=$(realpath -m "$2"); shift ;;
    --arch) [ $# -ge 2 ] || { echo "error: --arch needs amd64 or arm64" >&2; exit 2; }; arch=$2; shift ;;
    --scratch) [ $# -ge 2 ] || { echo "error: --scratch needs a directory" >&2; exit 2; }; SCRATCH=$2; shift ;;
    *) echo "usage: $0 [--arch amd64|arm64] [--scratch DIR] [--skip-build] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "${VERSION:-}" ]; then
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  VERSION="0.1.0+git$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date +%Y%m%d).$commit"
fi
maintainer="Ya OK Hub maintainers <hub@yaok.invalid>"
for tool in dpkg-deb patchelf readelf; do
  command -v "$tool" >/dev/null || { echo "error: $tool is missing (apt-get install patchelf binutils dpkg-dev)" >&2; exit 1; }
done

if [ "$arch" = "$host_arch" ]; then
  scratch=${SCRATCH:-.build-pkg}
  swift=${SWIFT:-$(command -v swift || echo /opt/swift/usr/bin/swift)}
  swift_build=("$swift" build -c release --scratch-path "$scratch")
  toolchain_lib=$(dirname "$(dirname "$swift")")/lib/swift/linux
  # Where the dynamic linker finds system libraries, and who owns them.
  multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
  lib_dirs=("/usr/lib/$multiarch" "/lib/$multiarch" /usr/lib /lib)
  sysroot=""
  package_of() { dpkg -S "$1" 2>/dev/null | head -1 | cut -d: -f1; }
  strip_tool=strip
elif [ "$arch" = arm64 ] && [ "$host_arch" = amd64 ]; then
  scratch=${SCRATCH:-.build-arm64}
  cache=$(bash packaging/cross/arm64-toolchain.sh) || { echo "error: no arm64 cross toolchain (above)" >&2; exit 1; }
  sysroot="$cache/sysroot"
  swift_build=(env YAOK_CROSS_CACHE="$cache" bash packaging/cross/swift-arm64.sh build -c release --scratch-path "$scratch")
  toolchain_lib="$sysroot/usr/libexec/swift/lib/swift/linux"
  # Resolved in the arm64 sysroot, never on this machine: its libraries and its packages.
  lib_dirs=("$sysroot/usr/lib/aarch64-linux-gnu" "$sysroot/lib/aarch64-linux-gnu" "$sysroot/usr/lib")
  package_of() { awk -v f="${1#"$sysroot"}" '$1 == f { print $2; exit }' "$cache/sysroot-packages.txt"; }
  strip_tool=aarch64-linux-gnu-strip
  command -v "$strip_tool" >/dev/null || { echo "error: $strip_tool is missing (apt-get install binutils-aarch64-linux-gnu)" >&2; exit 1; }
else
  echo "error: cannot build for $arch on $host_arch (arm64 is cross-built from amd64)" >&2; exit 2
fi
out=${out:-$repo/$scratch/debs}

# 1. Release build.
if [ "$skip_build" -eq 0 ]; then
  echo "== swift build -c release for $arch ($scratch)"
  "${swift_build[@]}"
fi
# (A cross build runs in the toolchain's root, where this directory has the same path.)
bin=$("${swift_build[@]}" --show-bin-path)
for f in yaok-hub yaok-relay yaok yaok-bench; do
  [ -x "$bin/$f" ] && continue
  echo "error: $bin/$f is not built: there is no release build in $scratch" >&2
  if [ "$skip_build" -eq 1 ]; then
    for other in .build .build-pkg; do
      [ "$other" != "$scratch" ] && [ -x "$other/release/$f" ] \
        && echo "  a release build is in $other: package it with --scratch $other --skip-build" >&2
    done
    echo "  or leave out --skip-build to build in $scratch" >&2
  fi
  exit 1
done
plugins=("$bin"/libyaok-plugin-*.so)
[ -e "${plugins[0]}" ] || { echo "error: no plugins in $bin" >&2; exit 1; }
[ -d "$toolchain_lib" ] || { echo "error: no Swift runtime in $toolchain_lib" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/yaok-debs.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"
rm -f "$out"/yaok-swift-runtime_*.deb "$out"/yaok-hub_*.deb "$out"/yaok-relay_*.deb "$out"/yaok_*.deb

# The libraries an ELF file names (DT_NEEDED), read from the file itself (readelf works for
# any architecture; ldd would run the file).
needed_of() { readelf -d --wide "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# Files we bundle: the Swift runtime libraries a file needs, transitively.
swift_libs_of() {
  local todo=("$@") seen=" " f lib
  while [ ${#todo[@]} -gt 0 ]; do
    f=${todo[0]}; todo=("${todo[@]:1}")
    for lib in $(needed_of "$f"); do
      [ -e "$toolchain_lib/$lib" ] || continue
      case "$seen" in *" $lib "*) continue ;; esac
      seen="$seen$lib "; echo "$toolchain_lib/$lib"; todo+=("$toolchain_lib/$lib")
    done
  done
}
# Other libraries the file itself names (not their dependencies' dependencies), found where
# the target's dynamic linker would find them; their Debian packages become Depends.
system_libs_of() {
  local lib d
  for lib in $(needed_of "$1"); do
    [ -e "$toolchain_lib/$lib" ] && continue
    for d in "${lib_dirs[@]}"; do
      if [ -e "$d/$lib" ]; then echo "$d/$lib"; continue 2; fi
    done
    echo "error: $1 needs $lib, which is neither in the Swift runtime nor in ${lib_dirs[*]}" >&2; return 1
  done
}

# Maps system libraries to Debian packages ("libsodium23"); libc6 gets the newest GLIBC
# symbol version the files need.
depends_for() {
  local pkgs=() lib real pkg libs
  libs=$(for f in "$@"; do system_libs_of "$f" || exit 1; done | sort -u) || return 1
  for lib in $libs; do
    real=$(readlink -f "$lib")
    pkg=$(package_of "$lib"); [ -n "$pkg" ] || pkg=$(package_of "$real")
    if [ -z "$pkg" ] && [ -z "$sysroot" ]; then pkg=$(package_of "*/$(basename "$lib")"); fi
    [ -n "$pkg" ] || { echo "error: no Debian package provides $lib" >&2; return 1; }
    pkgs+=("$pkg")
  done
  local glibc
  glibc=$(for f in "$@"; do readelf -V --wide "$f"; done | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  for pkg in $(printf '%s\n' "${pkgs[@]}" | sort -u); do
    if [ "$pkg" = libc6 ] && [ -n "$glibc" ]; then printf 'libc6 (>= %s)\n' "$glibc"; else echo "$pkg"; fi
  done | paste -sd, | sed 's/,/, /g'
}

# Our binaries and plugins lose their debug and local symbols (the dynamic symbol table,
# which dlopen/dlsym use, stays); the toolchain's libraries come stripped already.
strip_elf() { "$strip_tool" --strip-unneeded "$1"; }

# Rewrites RUNPATH: no toolchain path, only the bundled runtime relative to the file.
set_runpath() {
  patchelf --set-rpath "$2" "$1"
  if patchelf --print-rpath "$1" | grep -qE '/opt/|/usr/libexec/swift'; then echo "error: $1 still has a toolchain RUNPATH" >&2; exit 1; fi
}

# Writes DEBIAN/control and builds the package. Args: dir name description depends [extra fields]
finish_package() {
  local dir=$1 name=$2 description=$3 depends=$4 extra=${5:-}
  local size
  size=$(du -sk --exclude=DEBIAN "$dir" | cut -f1)
  {
    echo "Package: $name"
    echo "Version: $VERSION"
    echo "Architecture: $arch"
    echo "Maintainer: $maintainer"
    echo "Installed-Size: $size"
    echo "Section: net"
    echo "Priority: optional"
    [ -n "$depends" ] && echo "Depends: $depends"
    [ -n "$extra" ] && printf '%s\n' "$extra"
    echo "Homepage: https://yaok.invalid/"
    printf 'Description: %s\n' "$description"
  } > "$dir/DEBIAN/control"
  # dpkg-deb keeps the modes and, with --root-owner-group, makes everything root:root.
  find "$dir" -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group -Zxz --build "$dir" "$out/${name}_${VERSION}_${arch}.deb" >/dev/null
  echo "built $out/${name}_${VERSION}_${arch}.deb"
}

install_doc() { # dir package
  # operations.md and every document it points to, so its links work on the box (offline).
  local doc
  for doc in $(grep -o 'Docs/[a-z-]*\.md' Docs/operations.md | sort -u) Docs/operations.md; do
    install -D -m 0644 "$doc" "$1/usr/share/doc/$2/$(basename "$doc")"
  done
  install -D -m 0644 packaging/debian/copyright "$1/usr/share/doc/$2/copyright"
}

# 2. The Swift runtime.
rt="$stage/yaok-swift-runtime"
mkdir -p "$rt/DEBIAN" "$rt/usr/lib/yaok-hub/swift"
runtime_libs=$(swift_libs_of "$bin/yaok-hub" "$bin/yaok-relay" "$bin/yaok" "$bin/yaok-bench" "${plugins[@]}" | sort -u)
[ -n "$runtime_libs" ] || echo "note: the binaries need no Swift runtime libraries (static stdlib?)"
for lib in $runtime_libs; do
  install -m 0644 "$lib" "$rt/usr/lib/yaok-hub/swift/"
  set_runpath "$rt/usr/lib/yaok-hub/swift/$(basename "$lib")" '$ORIGIN'
done
install_doc "$rt" yaok-swift-runtime
rt_files=("$rt"/usr/lib/yaok-hub/swift/*)
rt_depends=$(depends_for "${rt_files[@]}")
finish_package "$rt" yaok-swift-runtime \
  "Swift runtime libraries for Ya OK
 The Swift standard library, Foundation, Dispatch and the ICU data they need, as
 built with the toolchain that built Ya OK. Private to the Ya OK packages: they
 live in /usr/lib/yaok-hub/swift and nothing else links against them." \
  "$rt_depends"
runtime_dep="yaok-swift-runtime (= $VERSION)"

# 3. yaok-hub.
hub="$stage/yaok-hub"
mkdir -p "$hub/DEBIAN"
install -D -m 0755 "$bin/yaok-hub" "$hub/usr/bin/yaok-hub"
strip_elf "$hub/usr/bin/yaok-hub"
set_runpath "$hub/usr/bin/yaok-hub" '$ORIGIN/../lib/yaok-hub/swift'
# The benchmark against Reticulum a hub owner can run on the box itself (Docs/operations.md).
install -D -m 0755 "$bin/yaok-bench" "$hub/usr/bin/yaok-bench"
strip_elf "$hub/usr/bin/yaok-bench"
set_runpath "$hub/usr/bin/yaok-bench" '$ORIGIN/../lib/yaok-hub/swift'
install -D -m 0755 Tests/bench/versus-reticulum.sh "$hub/usr/share/yaok-hub/bench/versus-reticulum.sh"
for f in bench.py node.py run.sh README.md; do
  install -D -m 0644 "Tests/bench/reticulum/$f" "$hub/usr/share/yaok-hub/bench/reticulum/$f"
done
chmod 0755 "$hub/usr/share/yaok-hub/bench/reticulum/run.sh"
# The hub refuses plugin files and directories that group or others can write.
install -d -m 0755 "$hub/usr/lib/yaok-hub/plugins"
for p in "${plugins[@]}"; do
  install -m 0644 "$p" "$hub/usr/lib/yaok-hub/plugins/"
  strip_elf "$hub/usr/lib/yaok-hub/plugins/$(basename "$p")"
  set_runpath "$hub/usr/lib/yaok-hub/plugins/$(basename "$p")" '$ORIGIN/../swift'
done
# The packaged config is config/hub.yaml with the console switched on (Docs/console.md);
# the embedded default keeps it off.
install -d -m 0755 "$hub/etc/yaok-hub"
awk 'BEGIN { section = "" } /^[a-z]/ { section = $0 }
     section == "console:" && !done && $0 == "  enabled: false" { print "  enabled: true"; done = 1; next } { print }
     END { if (!done) { print "build-debs: console.enabled not found in config/hub.yaml" > "/dev/stderr"; exit 1 } }' \
  config/hub.yaml > "$hub/etc/yaok-hub/hub.yaml"
chmod 0644 "$hub/etc/yaok-hub/hub.yaml"
install -D -m 0644 packaging/systemd/yaok-hub.service "$hub/lib/systemd/system/yaok-hub.service"
install -D -m 0644 packaging/systemd/yaok-hub.sysusers "$hub/usr/lib/sysusers.d/yaok-hub.conf"
install -D -m 0644 packaging/systemd/yaok-hub.tmpfiles "$hub/usr/lib/tmpfiles.d/yaok-hub.conf"
for plugin in Plugins/*/README.md; do
  name=$(basename "$(dirname "$plugin")")
  install -D -m 0644 "$plugin" "$hub/usr/share/doc/yaok-hub/plugins/$name.md"
done
install_doc "$hub" yaok-hub
echo /etc/yaok-hub/hub.yaml > "$hub/DEBIAN/conffiles"
for s in postinst prerm postrm; do install -m 0755 "packaging/debian/yaok-hub.$s" "$hub/DEBIAN/$s"; done
hub_files=("$hub/usr/bin/yaok-hub" "$hub/usr/bin/yaok-bench" "$hub"/usr/lib/yaok-hub/plugins/*.so)
hub_depends=$(depends_for "${hub_files[@]}")
finish_package "$hub" yaok-hub \
  "Ya OK Hub: field node of the Ya OK delay-tolerant messenger
 Phones attach over Bluetooth LE or Wi-Fi Direct; hubs carry end-to-end
 encrypted messages hop by hop (store and forward) and bridge to an internet
 relay when one is reachable. Every transport is a plugin." \
  "$runtime_dep, $hub_depends, procps, adduser | systemd" \
  "Recommends: bluez"

# 4. yaok-relay.
relay="$stage/yaok-relay"
mkdir -p "$relay/DEBIAN"
install -D -m 0755 "$bin/yaok-relay" "$relay/usr/bin/yaok-relay"
strip_elf "$relay/usr/bin/yaok-relay"
set_runpath "$relay/usr/bin/yaok-relay" '$ORIGIN/../lib/yaok-hub/swift'
install -D -m 0644 packaging/systemd/yaok-relay.service "$relay/lib/systemd/system/yaok-relay.service"
install -D -m 0644 packaging/systemd/yaok-relay.sysusers "$relay/usr/lib/sysusers.d/yaok-relay.conf"
install -D -m 0644 packaging/systemd/yaok-relay.default "$relay/etc/default/yaok-relay"
install -D -m 0644 packaging/systemd/yaok-relay-cluster.conf "$relay/usr/share/doc/yaok-relay/examples/cluster.conf"
install_doc "$relay" yaok-relay
relay_depends=$(depends_for "$relay/usr/bin/yaok-relay")
echo /etc/default/yaok-relay > "$relay/DEBIAN/conffiles"
for s in postinst prerm postrm; do install -m 0755 "packaging/debian/yaok-relay.$s" "$relay/DEBIAN/$s"; done
finish_package "$relay" yaok-relay \
  "Ya OK relay: internet store-and-forward for the Ya OK messenger
 Queues end-to-end encrypted bundles for users who are offline and hands them
 to hubs and phones that come online. Speaks UDP." \
  "$runtime_dep, $relay_depends, adduser | systemd"

# 5. yaok (the endpoint CLI).
cli="$stage/yaok"
mkdir -p "$cli/DEBIAN"
install -D -m 0755 "$bin/yaok" "$cli/usr/bin/yaok"
strip_elf "$cli/usr/bin/yaok"
set_runpath "$cli/usr/bin/yaok" '$ORIGIN/../lib/yaok-hub/swift'
install_doc "$cli" yaok
cli_depends=$(depends_for "$cli/usr/bin/yaok")
finish_package "$cli" yaok \
  "Ya OK command-line endpoint
 A Ya OK user on Linux: keys, contacts, sending and receiving end-to-end
 encrypted messages through a hub or the relay." \
  "$runtime_dep, $cli_depends"
