#!/usr/bin/env bash
# The NCCL-style ring allreduce (bench/nccl/nccl_bench) on a cluster in a
# box, with and without a competing W4 load: one rank per host, over the
# Homa plugin and over TCP organised as NCCL's socket transport, while
# `homa-perf cluster` runs W4 between the same hosts over Homa or over TCP.
#
#   bash bench/nccl/nccl-cluster-bench.sh [--build DIR] [--hosts N] [--rate R]
#        [--load F] [--sizes b,...] [--runs R] [--seconds S]
#        [--tc-prio 'MAP;MAP;...']
#
# Defaults: build, 4 hosts, 200mbit links, load 0.5, sizes 8,65536,1048576,
# 3 runs, 45 s of load per loaded case.  Needs root (namespaces); prints a
# table of the median time per allreduce for each (allreduce transport,
# load) pair.  docs/nccl.md explains it and records results.
#
# --tc-prio runs another matrix instead: the plugin's allreduce without
# load, then under W4 over Homa once per NCCL_HOMA_TC_PRIO value (';'
# between values, 'unset' for none; e.g. 'unset;*:7;*:0'), with the
# background's own latency, to show what a traffic class range does.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build HOSTS=4 RATE=200mbit LOAD=0.5 SIZES=8,65536,1048576 RUNS=3 SECONDS_LOAD=45
TC_PRIO=
while [[ $# -gt 0 ]]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECONDS_LOAD=$2; shift 2 ;;
    --tc-prio) TC_PRIO=$2; shift 2 ;;
    -h | --help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "nccl-cluster-bench: unknown option $1" >&2; exit 2 ;;
    esac
done
if [[ $(id -u) -ne 0 ]]; then
    echo "nccl-cluster-bench: needs root (network namespaces)" >&2
    exit 77
fi
BENCH=$BUILD/bench/nccl_bench
PERF=$BUILD/tools/homa-perf
for f in "$BENCH" "$PERF"; do
    [[ -x $f ]] || { echo "nccl-cluster-bench: $f not built" >&2; exit 1; }
done
# tc rate (e.g. 200mbit, 1gbit) in Gbit/s for homa-perf's pacing and load.
GBPS=$(python3 -c "import re,sys; m=re.fullmatch(r'([0-9.]+)(k|m|g)bit','$RATE'); \
print(float(m[1])*{'k':1e-6,'m':1e-3,'g':1}[m[2]]) if m else sys.exit('bad --rate')")
NAME=hxnb$$
WORK=$(mktemp -d)
LOADPID=
cleanup() {
    [[ -n $LOADPID ]] && kill "$LOADPID" 2>/dev/null && wait "$LOADPID" 2>/dev/null
    bash "$ROOT/scripts/homa-cluster" down --name "$NAME" >/dev/null 2>&1 || true
    # KEEP=DIR keeps the per-case outputs (bench logs, the load's JSON).
    if [[ -n ${KEEP:-} ]]; then mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
bash "$ROOT/scripts/homa-cluster" up --name "$NAME" --hosts "$HOSTS" --rate "$RATE" \
    --host-queues prio >/dev/null

bench() { # transport, output file
    "$BENCH" --netns "$NAME" --ranks "$HOSTS" --runs "$RUNS" --sizes "$SIZES" \
        --transport "$1" >"$2" 2>&1 || echo "FAILED" >>"$2"
}
loaded() { # load protocol, allreduce transport, output file
    "$PERF" cluster --cluster "$NAME" --hosts "$HOSTS" --protos "$1" --workload w4 \
        --load "$LOAD" --link-gbps "$GBPS" --seconds "$SECONDS_LOAD" --warmup 0 --drain 2 \
        --json "$3.load.json" >"$3.load.log" 2>&1 &
    LOADPID=$!
    sleep 3 # the load's agents start and reach their rate
    bench "$2" "$3"
    # The load must still be running when the allreduce ends, or part of
    # the allreduce ran unloaded.
    if ! kill -0 "$LOADPID" 2>/dev/null; then
        echo "nccl-cluster-bench: the allreduce outlasted the load; raise --seconds" >>"$3"
    fi
    wait "$LOADPID" || true
    LOADPID=
}
if [[ -n $TC_PRIO ]]; then
    echo "== allreduce over homa, no load, NCCL_HOMA_TC_PRIO unset"
    bench homa "$WORK/tc.none"
    IFS=';' read -r -a maps <<<"$TC_PRIO"
    i=0
    for m in "${maps[@]}"; do
        echo "== allreduce over homa, W4 over homa at load $LOAD, NCCL_HOMA_TC_PRIO=$m"
        echo "$m" >"$WORK/tc.$i.map"
        if [[ $m == unset ]]; then
            loaded homa homa "$WORK/tc.$i"
        else
            NCCL_HOMA_TC_PRIO=$m loaded homa homa "$WORK/tc.$i"
        fi
        i=$((i + 1))
    done
    python3 - "$WORK" <<'PYEOF'
import glob, os, re, sys
work = sys.argv[1]
def times(path):
    txt = open(path).read()
    out = {int(m[2]): float(m[3]) for m in
           re.finditer(r"^(homa|tcp)\s+\d+ ranks\s+(\d+) B\s+([0-9.]+) us", txt, re.M)}
    return out, "FAILED" in txt or "outlasted" in txt
base, _ = times(os.path.join(work, "tc.none"))
sizes = sorted(base)
print("\nmedian time per allreduce over the plugin (us), W4 over Homa in the background")
print("%-14s " % "TC_PRIO" + " ".join("%16s" % f"{s} B" for s in sizes))
print("%-14s " % "(no load)" + " ".join("%16.0f" % base[s] for s in sizes))
n = len(glob.glob(os.path.join(work, "tc.*.map")))
for i in range(n):
    m = open(os.path.join(work, f"tc.{i}.map")).read().strip()
    tm, bad = times(os.path.join(work, f"tc.{i}"))
    print("%-14s " % m + " ".join("%16s" % (f"{tm[s]:.0f} ({tm[s] / base[s]:.2f}x)" if s in tm else "-")
                                  for s in sizes) + ("  (FAILED/incomplete)" if bad else ""))
for i in range(n):
    m = open(os.path.join(work, f"tc.{i}.map")).read().strip()
    lines = [x for x in open(os.path.join(work, f"tc.{i}.load.log")).read().splitlines()
             if "p99" in x or "goodput" in x][:3]
    print(f"\nW4 background, NCCL_HOMA_TC_PRIO={m}:")
    print("\n".join("  " + x for x in lines))
PYEOF
    exit 0
fi
for t in homa tcp; do
    echo "== allreduce over $t, no load"
    bench "$t" "$WORK/$t.none"
    for l in homa tcp; do
        echo "== allreduce over $t, W4 over $l at load $LOAD"
        loaded "$l" "$t" "$WORK/$t.$l"
    done
done
python3 - "$WORK" "$SIZES" <<'PYEOF'
import re, sys, os
work, sizes = sys.argv[1], sys.argv[2].split(",")
def times(path):
    out = {}
    txt = open(path).read()
    for m in re.finditer(r"^(homa|tcp)\s+\d+ ranks\s+(\d+) B\s+([0-9.]+) us", txt, re.M):
        out[int(m[2])] = float(m[3])
    return out, "FAILED" in txt or "outlasted" in txt
rows = []
for t in ("homa", "tcp"):
    for l in ("none", "homa", "tcp"):
        p = os.path.join(work, f"{t}.{l}")
        rows.append((t, l, *times(p)))
allsizes = sorted({s for r in rows for s in r[2]})
print("\nmedian time per allreduce (us); load = the W4 background's protocol")
print("%-10s %-6s " % ("allreduce", "load") + " ".join("%12s" % f"{s} B" for s in allsizes))
for t, l, tm, bad in rows:
    print("%-10s %-6s " % (t, l) + " ".join("%12s" % (f"{tm[s]:.0f}" if s in tm else "-")
                                            for s in allsizes) + ("  (FAILED/incomplete)" if bad else ""))
print("\nslowdown under load (loaded / unloaded):")
base = {t: tm for t, l, tm, _ in rows if l == "none"}
for t, l, tm, _ in rows:
    if l == "none":
        continue
    print("%-10s %-6s " % (t, l) + " ".join("%12s" % (f"{tm[s] / base[t][s]:.2f}x" if s in tm and s in base[t] else "-")
                                            for s in allsizes))
for l in ("homa", "tcp"):
    p = os.path.join(work, f"homa.{l}.load.log")
    if os.path.exists(p):
        tail = [x for x in open(p).read().splitlines() if "p99" in x or "goodput" in x][:3]
        if tail:
            print(f"\nW4 background over {l} (during the homa allreduce):")
            print("\n".join("  " + x for x in tail))
PYEOF
