#!/usr/bin/env bash
# Installs the Debian packages Ya OK Hub builds and runs against. Idempotent; needs root
# (or sudo). The Swift toolchain itself is expected at /opt/swift or on PATH.
set -euo pipefail
packages=(libsodium-dev libsqlcipher-dev libbluetooth-dev libnl-genl-3-dev libqrencode-dev pkg-config iproute2 jq patchelf)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v swift >/dev/null 2>&1; then
  if [ -x /opt/swift/usr/bin/swift ]; then
    echo "note: add /opt/swift/usr/bin to PATH" >&2
  else
    echo "error: no Swift toolchain found (need Swift 6.x)" >&2; exit 1
  fi
fi
