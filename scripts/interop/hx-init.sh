#!/bin/sh
# /init of the kernel-Homa peer VM (busybox). Loads virtio_net and homa.ko,
# configures eth0 from the kernel command line (hx.ip=ADDR/LEN), then either
# runs hx.cmd=BASE64 once and powers off, or serves the control channel on
# /dev/ttyS1: each line from the host is a base64-encoded shell script; its
# output comes back followed by a line "@@HX-DONE <exit status>".
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
for m in failover net_failover virtio_net homa; do
    insmod /mods/$m.ko || echo "hx-init: insmod $m failed"
done
ip=
cmd=
for w in $(cat /proc/cmdline); do
    case $w in
        hx.ip=*) ip=${w#hx.ip=} ;;
        hx.cmd=*) cmd=${w#hx.cmd=} ;;
    esac
done
ip link set lo up
n=0
while ! ip link show eth0 >/dev/null 2>&1 && [ $n -lt 50 ]; do
    sleep 0.1
    n=$((n + 1))
done
[ -n "$ip" ] && ip addr add "$ip" dev eth0
ip link set eth0 up
cd /root || exit 1
if [ -n "$cmd" ]; then
    echo "$cmd" | base64 -d >/tmp/cmd.sh
    sh /tmp/cmd.sh
    echo "@@HX-DONE $?"
    poweroff -f
fi
stty -F /dev/ttyS1 raw -echo 2>/dev/null
exec </dev/ttyS1 >/dev/ttyS1 2>&1
echo "@@HX-READY $(uname -r)"
while read -r line; do
    echo "$line" | base64 -d >/tmp/cmd.sh 2>/dev/null
    sh /tmp/cmd.sh >/tmp/cmd.out 2>&1 </dev/null
    rc=$?
    awk 1 /tmp/cmd.out
    echo "@@HX-DONE $rc"
done
poweroff -f
