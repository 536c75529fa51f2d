#!/usr/bin/env bash
# Side-by-side speeds between two VMs: 100 B round trips and 1 MB echo RPCs
# for kernel Homa, TCP, libhoma over UDP and libhoma over raw IP (the module
# unloaded for that one: the raw driver and the module must not share a host).
# Every figure is the median of HX_BENCH_RUNS runs (default 3) of
# HX_BENCH_SECONDS each (default 5), measured VM2 -> VM1, one RPC at a time.
#
#   bash bench/interop/hx-bench.sh          (root; needs a libhoma build in build/)
#
# Under TCG emulation (no KVM) the numbers say nothing about the protocols;
# the script says which accelerator it used. Set HX_ACCEL=kvm where KVM works.
set -euo pipefail
# The interop harness (VMs, builds, hx_vm) is scripts/interop's.
HX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts/interop" && pwd)
source "$HX_DIR/hx-lib.sh"
hx_resolve_env || exit $?
"$HX_DIR/hx-build.sh"
[[ -x $HX_WORK/hx_lpeer ]] || { echo "hx-bench: no libhoma build (build/src/libhoma.a): build the project first" >&2; exit 77; }
runs=${HX_BENCH_RUNS:-3}
secs=${HX_BENCH_SECONDS:-5}
hx_net_up
hx_vm_start 1
hx_vm_start 2

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# measure CLIENT-COMMAND LEN: runs it $runs times in VM2, prints "rtt_us mbps" medians.
measure() {
    local cmd=$1 len=$2 i out rpcs s rtts=() tputs=()
    for ((i = 0; i < runs; i++)); do
        out=$(hx_vm 2 "$cmd --lens $len --seconds $secs" $((secs * 4 + 60)) | grep -E 'rpcs=' | tail -1)
        rpcs=$(sed -E 's/.*rpcs=([0-9]+).*/\1/' <<<"$out")
        s=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$out")
        if [[ -z $rpcs || $rpcs == 0 || $out != *ok* ]]; then
            echo "hx-bench: run failed: $out" >&2
            continue
        fi
        rtts+=("$(awk -v s="$s" -v n="$rpcs" 'BEGIN {printf "%.1f", s / n * 1e6}')")
        tputs+=("$(awk -v s="$s" -v n="$rpcs" -v l="$len" 'BEGIN {printf "%.2f", n * l / s / 1e6}')")
    done
    ((${#rtts[@]})) || { echo "- -"; return; }
    echo "$(printf '%s\n' "${rtts[@]}" | median) $(printf '%s\n' "${tputs[@]}" | median)"
}
row() { # row NAME CLIENT-COMMAND
    local a b
    a=$(measure "$2" 100)
    b=$(measure "$2" 1000000)
    printf '%-22s %14s %16s\n' "$1" "${a% *}" "${b#* }"
}

hx_vm 1 'khoma_peer server --port 4000 >/tmp/k.log 2>&1 &
khoma_peer tcp-server --port 6000 >/tmp/t.log 2>&1 &
hx_lpeer server --udp --port 7000 --seconds 100000 >/tmp/u.log 2>&1 &
sleep 0.5'
echo "hx-bench: VM2 -> VM1, accelerator ${HX_VM_ACCEL[1]}, medians of $runs runs of $secs s"
[[ ${HX_VM_ACCEL[1]} == tcg ]] && echo "hx-bench: TCG emulation: these figures do not reflect the protocols"
printf '%-22s %14s %16s\n' transport "100B RTT (us)" "1MB echo (MB/s)"
row "kernel Homa" "khoma_peer client --server 10.77.0.2:4000"
row "TCP" "khoma_peer tcp-client --server 10.77.0.2:6000"
row "libhoma UDP" "hx_lpeer client --udp --server 10.77.0.2:7000"
for v in 1 2; do
    hx_vm "$v" 'pid=$(pidof khoma_peer); [ -n "$pid" ] && kill $pid; sleep 0.5; rmmod homa'
done
hx_vm 1 'hx_lpeer server --port 7001 --seconds 100000 >/tmp/r.log 2>&1 & sleep 0.5'
row "libhoma raw IP" "hx_lpeer client --server 10.77.0.2:7001"
