#!/bin/busybox sh
# guest-init.sh — PID 1 of the VM lab's initramfs (copied in by vmrun.sh).
# Mounts the host root (9p, read-only) under a tmpfs overlay, mounts the shared
# read-write directory, and switches to guest-stage2.sh from the host root.
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /hostroot /rw /newroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

for m in $(cat /modules/order); do insmod /modules/$m.ko || echo "vmlab init: insmod $m failed"; done

arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
OPTS=trans=virtio,version=9p2000.L,msize=512000,cache=loose

# virtio devices may appear a moment after the driver loads.
n=0
until mount -t 9p -o ro,$OPTS hostroot /hostroot 2>/dev/null; do
  n=$((n + 1))
  if [ $n -ge 20 ]; then echo "vmlab init: cannot mount the host root over 9p"; poweroff -f; fi
  sleep 0.2
done

mount -t tmpfs -o size=50% tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/hostroot,upperdir=/rw/upper,workdir=/rw/work overlay /newroot

SHARE=$(arg vmlab.share)
mkdir -p /newroot$SHARE
mount -t 9p -o $OPTS share /newroot$SHARE

STAGE2=$(arg vmlab.stage2)
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /bin/bash "$STAGE2"
