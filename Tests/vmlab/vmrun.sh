#!/bin/bash
# vmrun.sh — run one shell command inside a throwaway Linux VM and return its exit code.
#
# The guest is Debian's stock kernel (/boot/vmlinuz-<KVER>) under QEMU with software
# emulation (TCG). Its root file system is THIS machine's root, shared read-only over
# virtio-9p with a tmpfs overlay on top: the guest sees every installed tool and every
# binary you built (same paths), may write anywhere, and all its writes vanish at
# power-off. One directory, VMLAB_SHARE, is shared read-write at the same path so the
# guest can hand files back.
#
#   usage: Tests/vmlab/vmrun.sh 'command run by bash in the guest'
#
# Environment:
#   VMLAB_TIMEOUT  seconds for the whole VM run, boot included (default 300); on expiry
#                  QEMU is killed and the exit code is 124
#   VMLAB_SHARE    read-write directory, same path in the guest (default Tests/vmlab/out)
#   VMLAB_KVER     kernel version (default: newest /lib/modules/*-amd64)
#   VMLAB_MEM      guest memory (default 1G); VMLAB_SMP guest CPUs (default 2)
#   VMLAB_NET=1    add a user-mode virtio NIC (guest 10.0.2.15, host reachable as 10.0.2.2)
#   VMLAB_ACCEL    tcg (default) or kvm
#   VMLAB_PVH=1    boot an uncompressed copy of the kernel (extracted once, cached in the
#                  share) through its PVH entry: skips ~4 s of decompression under TCG
#   VMLAB_QEMU_ARGS  extra QEMU arguments, split on whitespace (e.g. a -drive for a disk,
#                  -pidfile FILE so the caller can kill QEMU: Tests/vmlab/powercut-test.sh)
# Exit code: the guest command's, 124 on timeout, 125 if the guest never reported one,
# 137 if QEMU was killed with SIGKILL from outside before the timeout.
set -euo pipefail

LAB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KVER=${VMLAB_KVER:-$(ls /lib/modules 2>/dev/null | grep -- '-amd64$' | sort -V | tail -1 || true)}
[ -n "$KVER" ] && [ -r "/boot/vmlinuz-$KVER" ] || {
  echo "vmrun: no Debian amd64 kernel found (run Tests/vmlab/setup.sh)" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || { echo "vmrun: qemu-system-x86_64 missing (run Tests/vmlab/setup.sh)" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: $0 'guest command'" >&2; exit 2; }

SHARE=${VMLAB_SHARE:-$LAB/out}
mkdir -p "$SHARE"
SHARE=$(cd "$SHARE" && pwd)
TIMEOUT=${VMLAB_TIMEOUT:-300}

# --- initramfs: busybox + the modules needed to mount 9p and overlayfs ------------------
# Cached per kernel and per content of guest-init.sh.
INIT_SRC=$LAB/guest-init.sh
STAMP=$(cat "$INIT_SRC" | sha256sum | cut -c1-12)
INITRD=$SHARE/initramfs-$KVER-$STAMP.cpio.gz

# Prints a module and, first, everything it depends on (each once).
declare -A SEEN=()
module_closure() {
  local m=$1 dep
  [ -n "${SEEN[$m]:-}" ] && return 0
  SEEN[$m]=1
  for dep in $(modinfo -k "$KVER" -F depends "$m" | tr ',' ' '); do module_closure "$dep"; done
  echo "$m"
}

if [ ! -s "$INITRD" ]; then
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  mkdir -p "$root/bin" "$root/modules"
  cp /bin/busybox "$root/bin/busybox"
  : > "$root/modules/order"
  for m in $(for top in 9pnet_virtio virtio_pci 9p overlay; do module_closure "$top"; done); do
    {
      file=$(modinfo -k "$KVER" -n "$m")
      case $file in
        *.ko)    cp "$file" "$root/modules/$m.ko" ;;
        *.ko.xz) xz -dc "$file" > "$root/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$file" > "$root/modules/$m.ko" ;;
        *) continue ;;   # built into the kernel
      esac
      echo "$m" >> "$root/modules/order"
    }
  done
  install -m 0755 "$INIT_SRC" "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
fi

# --- kernel: the bzImage, or with VMLAB_PVH=1 its uncompressed ELF (Debian's is XZ) -------
KERNEL=/boot/vmlinuz-$KVER
if [ "${VMLAB_PVH:-0}" = 1 ] && grep -q '^CONFIG_PVH=y' "/boot/config-$KVER" 2>/dev/null; then
  VMLINUX=$SHARE/vmlinux-$KVER-$(stat -c %Y-%s "$KERNEL")   # a rebuilt package under the same version gets a new copy
  if [ ! -s "$VMLINUX" ]; then
    python3 - "$KERNEL" "$VMLINUX.tmp.$$" <<'PY' && mv "$VMLINUX.tmp.$$" "$VMLINUX" || rm -f "$VMLINUX.tmp.$$"
import lzma, sys
data = open(sys.argv[1], "rb").read()
at = data.find(b"\xfd7zXZ\x00")
if at < 0:
    sys.exit(1)
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[at:])
if elf[:4] != b"\x7fELF":
    sys.exit(1)
open(sys.argv[2], "wb").write(elf)
PY
  fi
  if [ -s "$VMLINUX" ]; then KERNEL=$VMLINUX; else echo "vmrun: VMLAB_PVH: cannot extract the kernel; booting the bzImage" >&2; fi
fi

# --- run ----------------------------------------------------------------------------------
RCFILE=$SHARE/.guest-rc.$$
rm -f "$RCFILE"
CMD_B64=$(printf '%s' "$*" | base64 -w0)

accel=(-accel tcg,thread=multi -cpu max)
[ "${VMLAB_ACCEL:-tcg}" = kvm ] && accel=(-accel kvm -cpu host)
net=(-nic none)
[ "${VMLAB_NET:-0}" = 1 ] && net=(-nic user,model=virtio-net-pci)
read -r -a extra <<< "${VMLAB_QEMU_ARGS:-}"

set +e
started=$SECONDS
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${accel[@]}" -M pc -m "${VMLAB_MEM:-1G}" -smp "${VMLAB_SMP:-2}" \
  -no-reboot -display none -vga none -monitor none -parallel none -serial stdio "${net[@]}" \
  -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev local,id=share,path="$SHARE",security_model=none,multidevs=remap \
  -device virtio-9p-pci,fsdev=share,mount_tag=share ${extra[@]+"${extra[@]}"} \
  -kernel "$KERNEL" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 vmlab.share=$SHARE vmlab.rc=$RCFILE vmlab.stage2=$LAB/guest-stage2.sh vmlab.net=${VMLAB_NET:-0} vmlab.cmd=$CMD_B64" \
  < /dev/null
qemu_rc=$?
set -e

if [ "$qemu_rc" = 137 ] && [ $((SECONDS - started)) -lt "$TIMEOUT" ]; then
  echo "vmrun: QEMU was killed (SIGKILL from outside)" >&2
  rm -f "$RCFILE"; exit 137
fi
if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
  echo "vmrun: VM killed after ${TIMEOUT}s (VMLAB_TIMEOUT)" >&2
  rm -f "$RCFILE"; exit 124
fi
if [ ! -s "$RCFILE" ]; then
  echo "vmrun: the guest did not report an exit code (qemu exited with $qemu_rc)" >&2
  exit 125
fi
rc=$(cat "$RCFILE"); rm -f "$RCFILE"
exit "$rc"
