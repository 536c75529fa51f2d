#!/usr/bin/env bash
# CPU used by N idle-ish processes on one host, embedded vs through homad
# (results in docs/perf-log.md): each process (bench/runtime/bench_idle)
# has one socket, echoes requests, and sends one 100-byte RPC every
# INTERVAL_MS to the next process of a ring, over loopback.  CPU seconds
# (user + system, all threads) come from /proc/PID/stat over SECONDS, after
# one second of warm-up; in daemon mode homad's own CPU is counted too.
#
# Usage: bench/homad/homad-idle-cpu.sh [N=8] [SECONDS=10] [INTERVAL_MS=10] [BUILD_DIR=build]
set -euo pipefail
n=${1:-8}
secs=${2:-10}
interval=${3:-10}
build=${4:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ $build = /* ]] || build=$root/$build
idle=$build/bench/bench_idle
homad=$build/daemon/homad
for f in "$idle" "$homad"; do
    [[ -x $f ]] || { echo "homad-idle-cpu: $f not built" >&2; exit 2; }
done
tck=$(getconf CLK_TCK)
out=$(mktemp -d)
sock=$out/homad.sock
pids=()
hpid=
cleanup() {
    for p in "${pids[@]}" $hpid; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT

ticks() { # PID: utime + stime, in clock ticks (0 if gone)
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
    s=${s##*) } # fields after the command name
    set -- $s
    echo $((${12} + ${13}))
}

measure() { # mode: prints "mode apps_cpu_s homad_cpu_s rpcs failed"
    local mode=$1 base=$((30000 + RANDOM % 20000))
    pids=()
    hpid=
    local env=(HOMA_DAEMON=)
    if [[ $mode = homad ]]; then
        "$homad" --socket "$sock" 2>"$out/homad.log" &
        hpid=$!
        for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
        env=(HOMA_DAEMON="$sock")
    fi
    for i in $(seq 0 $((n - 1))); do
        env "${env[@]}" "$idle" "$base" "$i" "$n" "$interval" $((secs + 2)) >"$out/app$i" 2>&1 &
        pids+=($!)
    done
    sleep 1
    local a0=0 a1=0 h0=0 h1=0
    for p in "${pids[@]}"; do a0=$((a0 + $(ticks "$p"))); done
    [[ -n $hpid ]] && h0=$(ticks "$hpid")
    sleep "$secs"
    for p in "${pids[@]}"; do a1=$((a1 + $(ticks "$p"))); done
    [[ -n $hpid ]] && h1=$(ticks "$hpid")
    for p in "${pids[@]}"; do wait "$p" || true; done
    pids=()
    if [[ -n $hpid ]]; then
        kill "$hpid"
        wait "$hpid" 2>/dev/null || true
        hpid=
        rm -f "$sock"
    fi
    local ok failed
    ok=$(cat "$out"/app* | awk '/RPCs/ {s += $3} END {print s + 0}')
    failed=$(cat "$out"/app* | awk '/RPCs/ {s += $5} END {print s + 0}')
    rm -f "$out"/app*
    echo "$mode $(awk -v t="$tck" -v a=$((a1 - a0)) 'BEGIN {printf "%.2f", a / t}') \
$(awk -v t="$tck" -v h=$((h1 - h0)) 'BEGIN {printf "%.2f", h / t}') $ok $failed"
}

echo "loadavg before: $(cat /proc/loadavg)"
res=()
res+=("$(measure embedded)")
res+=("$(measure homad)")
echo "loadavg after:  $(cat /proc/loadavg)"
echo "$n processes, one 100 B RPC each every $interval ms, CPU seconds over $secs s:"
printf "%-9s %10s %10s %10s %12s %8s %8s\n" mode "apps" "homad" "total" "% of a core" RPCs failed
for r in "${res[@]}"; do
    set -- $r
    awk -v m="$1" -v a="$2" -v h="$3" -v ok="$4" -v f="$5" -v s="$secs" \
        'BEGIN {printf "%-9s %10.2f %10.2f %10.2f %12.1f %8d %8d\n", m, a, h, a + h, 100 * (a + h) / s, ok, f}'
done
