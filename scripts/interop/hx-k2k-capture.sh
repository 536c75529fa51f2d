#!/usr/bin/env bash
# Boots two kernel-Homa VMs on one bridge and records, with tcpdump -w on the
# bridge, what the module sends between them: each capture in OUTDIR with a
# line in OUTDIR/README. Usage: hx-k2k-capture.sh OUTDIR
set -euo pipefail
HX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HX_DIR/hx-lib.sh"
out=${1:?usage: hx-k2k-capture.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
"$HX_DIR/hx-build.sh"
hx_resolve_env
hx_net_up
hx_vm_start 1
hx_vm_start 2
readme=$out/README
{
    echo "Kernel Homa to kernel Homa captures (tcpdump -w on the bridge, filter 'ip proto 146 or icmp')."
    echo "Module: $HOMA_MODULE_SRC, kernel $HX_KVER, qemu ${HX_VM_ACCEL[1]}, virtio-net, MTU 1500."
    echo "VM1 10.77.0.2 (server), VM2 10.77.0.3 (client); 10.77.0.1 is the host bridge (silent here)."
    echo "Payload of khoma_peer messages: byte i of a message of length L = hx_pattern(L, i) (scripts/interop/khoma_peer.c)."
    echo "Created $(date -u +%FT%TZ) by scripts/interop/hx-k2k-capture.sh."
    echo
} >"$readme"

cap() { # cap NAME DESCRIPTION VM SCRIPT
    local name=$1 desc=$2 vm=$3 script=$4
    hx_capture_start "$out/$name.pcap"
    local rc=0
    hx_vm "$vm" "$script" 600 >"$out/$name.log" 2>&1 || rc=$?
    sleep 1
    hx_capture_stop
    local n
    n=$(tcpdump -n -r "$out/$name.pcap" 2>/dev/null | wc -l)
    echo "$name.pcap: $desc ($n packets, client exit $rc; client output in $name.log)" >>"$readme"
    echo "hx-k2k-capture: $name: $n packets, rc $rc" >&2
}

hx_vm 1 'khoma_peer server --port 4000 >/tmp/kp.log 2>&1 &
server --port 4001 --validate >/tmp/srv.log 2>&1 &
sleep 0.5; cat /proc/sys/net/homa/unsched_bytes /proc/sys/net/homa/unsched_cutoffs' >"$out/sysctl-defaults.txt"

cap k2k-sizes "khoma_peer client VM2 -> khoma_peer echo server VM1:4000, one RPC each of 1, 1424 (one full packet), 1425, 40000, 40001, 100000, 1000000 B, then a 0 B attempt (refused locally by the kernel: 'message has length zero', no packet)" 2 \
    'khoma_peer client --server 10.77.0.2:4000 --lens 1,1424,1425,40000,40001,100000,1000000; khoma_peer client --server 10.77.0.2:4000 --lens 0'
cap k2k-homa-test "module's util/homa_test invoke to module's util/server VM1:4001, lengths 100, 1424, 100000, 1000000 (request = response length)" 2 \
    'for l in 100 1424 100000 1000000; do homa_test 10.77.0.2:4001 --length $l invoke; done'
cap k2k-many "khoma_peer client, 8 RPCs in flight, lengths 100,5000,60000,300000 cycling, 20 s" 2 \
    'khoma_peer client --server 10.77.0.2:4000 --lens 100,5000,60000,300000 --inflight 8 --seconds 20'
hx_vm 1 'cat /tmp/kp.log /tmp/srv.log; cat /proc/net/homa_metrics' >"$out/vm1-after.txt" 2>&1 || true
hx_vm 2 'cat /proc/net/homa_metrics' >"$out/vm2-after.txt" 2>&1 || true
echo "sysctl-defaults.txt: unsched_bytes and unsched_cutoffs of the module; vm1-after.txt/vm2-after.txt: server logs and /proc/net/homa_metrics at the end" >>"$readme"
echo "hx-k2k-capture: done, see $readme" >&2
