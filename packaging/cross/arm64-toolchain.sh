#!/usr/bin/env bash
# Makes (once) and checks the cross toolchain that builds Ya OK for arm64 on an amd64 Debian
# machine, and prints the cache directory it lives in. Needs root (mmdebstrap, chroot).
#
# What it is, all from Debian's archive (the one apt uses here), pinned below:
#   toolchain/  a Debian sid amd64 root with Swift 6.2.3 (`swiftlang`): the compiler needs
#               glibc >= 2.42, newer than this machine's, so it runs in this root (in-toolchain.sh)
#   sysroot/    Debian 13 (trixie) arm64: libc, the -dev libraries we link, and the aarch64
#               Swift runtime and modules from sid's arm64 `swiftlang`/`libswiftlang`.
#               Linking against trixie (glibc 2.41) keeps the result installable on
#               Raspberry Pi OS trixie; sid would raise the floor to its glibc.
#   sysroot-packages.txt  which Debian package (and version) owns each file of the sysroot,
#               for the .deb Depends (build-debs.sh --arch arm64)
#   sdks/       the Swift SDK (`--swift-sdks-path CACHE/sdks --swift-sdk yaok-aarch64`)
# Size about 4.5 GB; made in 2-5 min from a fast mirror. The cache is keyed by the pins: change
# one and the next run makes it again. Remove the directory to start over.
#
# Environment: YAOK_CROSS_CACHE (default /var/cache/yaok-hub-cross), DEBIAN_MIRROR.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
here=$(cd "$(dirname "$0")" && pwd)

# sid moves; these are the exact versions this was made and tested with.
swift_version=6.2.3-1+b1
sysroot_packages=libc6-dev,libgcc-14-dev,libstdc++-14-dev,linux-libc-dev,libsodium-dev,libsqlcipher-dev,libbluetooth-dev,libnl-genl-3-dev,libqrencode-dev,zlib1g-dev
toolchain_packages="swiftlang=$swift_version,libswiftlang=$swift_version,libc6-dev,git,ca-certificates"
# Raise when what is made below changes (the SDK files, the sysroot's layout).
layout=5
key=$(printf '%s\n' "$swift_version" "$sysroot_packages" "$toolchain_packages" "$layout" | sha256sum | cut -c1-12)

# Resolved: a symlinked cache is used under its real path, which the build caches inside it record.
cache=$(realpath -m "${YAOK_CROSS_CACHE:-/var/cache/yaok-hub-cross}")
mirror=${DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
  | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]*/debian/?( |$)' | tr -d ' ' | head -1 || true)}
mirror=${mirror:-http://deb.debian.org/debian}
log() { echo "arm64-toolchain: $*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap, chroot)"
mkdir -p "$cache"
exec 8> "$cache/.lock"
flock 8

# aarch64 programs run under qemu-user through binfmt_misc (the test roots' maintainer scripts,
# the unit tests, the installed hub). Kernel state, so checked every time.
enable_binfmt() {
  [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
    || die "cannot mount binfmt_misc"
  [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 \
    || die "update-binfmts --enable qemu-aarch64 failed"
}

if [ -f "$cache/ready" ] && [ "$(cat "$cache/ready")" = "$key" ] && command -v qemu-aarch64-static >/dev/null; then
  enable_binfmt
  echo "$cache"; exit 0
fi

need=()
for t in mmdebstrap:mmdebstrap qemu-aarch64-static:qemu-user-static update-binfmts:binfmt-support \
         aarch64-linux-gnu-strip:binutils-aarch64-linux-gnu readelf:binutils; do
  command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
fi

t0=$SECONDS
rm -rf "$cache/toolchain" "$cache/sysroot" "$cache/sdks" "$cache"/*.tmp
rm -f "$cache/ready"
# This archive's sid Release file may be past its Valid-Until (a frozen mirror).
apt_opts=(--aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Retries "3"')

log "toolchain: sid amd64 with swiftlang $swift_version (from $mirror)"
mmdebstrap --quiet --variant=apt "${apt_opts[@]}" --include="$toolchain_packages" sid "$cache/toolchain.tmp" "$mirror" \
  || die "mmdebstrap of the toolchain root failed"
mv "$cache/toolchain.tmp" "$cache/toolchain"

log "sysroot: trixie arm64"
# The downloaded .debs stay (skip the apt cache cleanup) until they are indexed.
mmdebstrap --quiet --variant=extract --architectures=arm64 --skip=cleanup/apt/cache "${apt_opts[@]}" \
  --include="$sysroot_packages" trixie "$cache/sysroot.tmp" "$mirror" || die "mmdebstrap of the arm64 sysroot failed"
mkdir -p "$cache/debs"
for p in libswiftlang swiftlang; do
  f="$cache/debs/${p}_${swift_version}_arm64.deb"
  [ -s "$f" ] || curl -fsS --retry 3 -o "$f.part" "$mirror/pool/main/s/swiftlang/${p}_${swift_version}_arm64.deb" && [ -s "$f.part" ] && mv "$f.part" "$f" || [ -s "$f" ] \
    || die "cannot download ${p}_${swift_version}_arm64.deb"
done
# Which package owns each file: the sysroot's .debs plus the Swift runtime's.
for d in "$cache"/sysroot.tmp/var/cache/apt/archives/*.deb "$cache/debs/libswiftlang_${swift_version}_arm64.deb"; do
  pkg=$(dpkg-deb -f "$d" Package); ver=$(dpkg-deb -f "$d" Version)
  dpkg-deb -c "$d" | awk -v p="$pkg" -v v="$ver" '{ f = $6; sub(/^\./, "", f); if (f !~ /\/$/) print f, p, v }'
done > "$cache/sysroot-packages.txt.tmp"
rm -rf "$cache"/sysroot.tmp/var/cache/apt/archives/*.deb
# The aarch64 runtime (libswiftlang) and, from swiftlang, only the target's modules, headers and
# static libraries (not its aarch64 compiler).
dpkg-deb -x "$cache/debs/libswiftlang_${swift_version}_arm64.deb" "$cache/sysroot.tmp"
dpkg-deb --fsys-tarfile "$cache/debs/swiftlang_${swift_version}_arm64.deb" \
  | tar -x -C "$cache/sysroot.tmp" --wildcards './usr/libexec/swift/lib/swift/*' './usr/libexec/swift/lib/swift_static/*' './usr/libexec/swift/lib/clang/*' \
      --exclude='./usr/libexec/swift/lib/swift/host/*' --exclude='./usr/libexec/swift/lib/swift/embedded/*' \
      --exclude='./usr/libexec/swift/lib/swift/pm/*' --exclude='./usr/libexec/swift/lib/swift/migrator/*' \
  || die "unpacking swiftlang arm64 failed"
# Absolute symlinks in an extracted root point at the host; make them relative to the sysroot.
find "$cache/sysroot.tmp" -type l -lname '/*' | while read -r l; do
  t=$(readlink "$l"); ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$cache/sysroot.tmp$t")" "$l"
done
# Merged /usr, as on an installed trixie (linker scripts name /lib/...; nothing runs to make it).
for d in lib bin sbin; do [ -e "$cache/sysroot.tmp/$d" ] || ln -s "usr/$d" "$cache/sysroot.tmp/$d"; done
# The driver also looks for the runtime (swiftrt.o) under the SDK's usr/lib/swift.
ln -s ../libexec/swift/lib/swift "$cache/sysroot.tmp/usr/lib/swift"
ln -s ../libexec/swift/lib/swift_static "$cache/sysroot.tmp/usr/lib/swift_static"
mv "$cache/sysroot.tmp" "$cache/sysroot"
sed "s#^#/#; s#^//#/#" "$cache/sysroot-packages.txt.tmp" > "$cache/sysroot-packages.txt"; rm -f "$cache/sysroot-packages.txt.tmp"

log "Swift SDK yaok-aarch64"
sysroot="$cache/sysroot"
rt="$sysroot/usr/libexec/swift/lib/swift"
# Debian's 6.2.3 leaves out lib_Testing_Foundation, which SwiftPM's test runner links: an empty one.
ar rc "$rt/linux/lib_Testing_Foundation.a"
bundle="$cache/sdks/yaok-aarch64.artifactbundle"
mkdir -p "$bundle/yaok-aarch64"
cat > "$bundle/info.json" <<JSON
{ "schemaVersion": "1.0",
  "artifacts": { "yaok-aarch64": { "type": "swiftSDK", "version": "$swift_version",
    "variants": [ { "path": "yaok-aarch64", "supportedTriples": ["x86_64-unknown-linux-gnu", "x86_64-pc-linux-gnu"] } ] } } }
JSON
cat > "$bundle/yaok-aarch64/swift-sdk.json" <<JSON
{ "schemaVersion": "4.0",
  "targetTriples": { "aarch64-unknown-linux-gnu": {
    "sdkRootPath": "$sysroot",
    "swiftResourcesPath": "$rt",
    "swiftStaticResourcesPath": "$sysroot/usr/libexec/swift/lib/swift_static",
    "toolsetPaths": ["toolset.json"] } } }
JSON
# lld links for aarch64; the binaries find the runtime where Debian's arm64 package puts it
# (also where the sysroot has it, for qemu-user); build-debs.sh rewrites it for the packages.
cat > "$bundle/yaok-aarch64/toolset.json" <<JSON
{ "schemaVersion": "1.0",
  "swiftCompiler": { "extraCLIOptions": ["-use-ld=lld", "-no-toolchain-stdlib-rpath",
                                          "-Xlinker", "-rpath", "-Xlinker", "/usr/libexec/swift/lib/swift/linux"] },
  "linker": { "path": "/usr/libexec/swift/bin/ld.lld" } }
JSON
(cd "$cache" && "$here/in-toolchain.sh" swift sdk list --swift-sdks-path "$cache/sdks" | grep -qx yaok-aarch64) \
  || die "the toolchain does not see the Swift SDK in $cache/sdks"

enable_binfmt
echo "$key" > "$cache/ready"
log "ready in $((SECONDS - t0)) s: $(du -sh "$cache" | cut -f1) in $cache"
echo "$cache"
