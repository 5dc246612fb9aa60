#!/bin/bash
# guest-stage2.sh — runs as PID 1 in the VM once the overlay root is in place
# (started by guest-init.sh). Sets up the usual mounts, runs the command from the
# kernel command line, writes its exit code to the shared directory, powers off.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /run
# No tmpfs on /tmp: the overlay root is already writable, and a repository checked out
# under the host's /tmp (CI clones there) must stay visible in the guest.
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ip link set lo up
hostname vmlab
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8

arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }

if [ "$(arg vmlab.net)" = 1 ]; then
  modprobe virtio_net
  for _ in $(seq 50); do
    nic=$(ls /sys/class/net | grep -E '^(eth|en)' | head -1)
    [ -n "$nic" ] && break; sleep 0.1
  done
  if [ -n "$nic" ]; then
    ip link set "$nic" up
    ip addr add 10.0.2.15/24 dev "$nic"
    ip route add default via 10.0.2.2
  fi
fi

echo "vmlab: guest up after $(cut -d' ' -f1 /proc/uptime)s"
cd /
bash -c "$(arg vmlab.cmd | base64 -d)"
rc=$?
echo "vmlab: command exited with $rc"
echo "$rc" > "$(arg vmlab.rc)"
sync
echo o > /proc/sysrq-trigger
# Power-off is asynchronous; PID 1 must not exit first (that panics). Spin on builtins
# only: external programs may already be unreachable.
while :; do :; done
