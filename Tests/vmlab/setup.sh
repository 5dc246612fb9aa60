#!/bin/bash
# setup.sh — install what the VM lab needs on a Debian 12 host (run as root).
# Idempotent: installs only missing packages, and refreshes the apt index only
# when a package cannot be found in it.
set -euo pipefail

PACKAGES=(
  qemu-system-x86      # the emulator (TCG; KVM is not required)
  linux-image-amd64    # the guest kernel and its modules (bluetooth, hci_vhci, mac80211_hwsim)
  busybox-static       # the guest's initramfs userland
  cpio kmod            # building the initramfs, modinfo
  bluez                # btmgmt, hciconfig, bluetoothd (not needed by the hub, only by proofs)
  bluez-test-tools     # btvirt (virtual controllers), l2test; gatttool comes with bluez
  wpasupplicant iw iproute2 dnsmasq-base
  xxd
  jq                   # the Wi-Fi Direct test reads the hub's JSON status
  e2fsprogs python3    # the power-cut test: mkfs.ext4 for the hub's disk, nbd-disk.py serves it
)

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: must run as root (apt-get install)" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi
echo "setup.sh: installing ${missing[*]}"

# Refresh the index only if some package has no candidate in it.
for p in "${missing[@]}"; do
  cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/{print $2}')
  if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
    echo "setup.sh: '$p' not in the apt index; running apt-get update"
    apt-get update -qq
    break
  fi
done

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup.sh: done"
