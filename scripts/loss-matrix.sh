#!/bin/bash
# Goal 1 of issue 15 on loopback: does every RPC complete under heavy loss,
# at rates the machine carries without faults?
#
# For each point WORKLOAD:GBPS and each seed, runs one `homa-perf server` and
# one `homa-perf client --test workload --verify` twice, interleaved: without
# faults, then with the goal-1 mix in both processes
# (drop=0.2,dir=tx,dup=0.05,reorder=0.1,reorder_depth=8,seed=BASE+S).
# Prints one line per run (RPCs, errors, each failure kind) and a summary per
# point and mode.
#
# usage: scripts/loss-matrix.sh [--perf BIN] [--seeds 5] [--seed-base 600]
#            [--seconds 3] [POINT ...]      (default points: w1:0.06 w1:0.08
#            w2:0.24 w3:0.8 w4:3.2 w5:3.2)
# Exit status: 0 every run with faults completed every RPC, 1 otherwise,
# 2 bad usage.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PERF=$ROOT/build/tools/homa-perf
SEEDS=5
BASE=600
SECS=3
POINTS=
while [ $# -gt 0 ]; do
    case "$1" in
    --perf) PERF=$2; shift ;;
    --seeds) SEEDS=$2; shift ;;
    --seed-base) BASE=$2; shift ;;
    --seconds) SECS=$2; shift ;;
    -h | --help) sed -n 2,16p "$0"; exit 0 ;;
    -*) echo "loss-matrix: unknown option $1" >&2; exit 2 ;;
    *) POINTS="$POINTS $1" ;;
    esac
    shift
done
[ -n "$POINTS" ] || POINTS="w1:0.06 w1:0.08 w2:0.24 w3:0.8 w4:3.2 w5:3.2"
[ -x "$PERF" ] || { echo "loss-matrix: no homa-perf at $PERF (build first)" >&2; exit 2; }
FAULTS="drop=0.2,dir=tx,dup=0.05,reorder=0.1,reorder_depth=8"
TMP=$(mktemp -d)
SRV=
cleanup() {
    [ -n "$SRV" ] && kill "$SRV" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# run WORKLOAD GBPS FAULTS: one server, one client; the client's report in $TMP/cli
run() {
    local port=$((30000 + RANDOM % 20000))
    HOMA_FAULTS=$3 "$PERF" server --proto homa --port $port >"$TMP/srv" 2>&1 &
    SRV=$!
    sleep 0.3
    HOMA_FAULTS=$3 timeout 300 "$PERF" client --proto homa --server 127.0.0.1:$port \
        --test workload --workload "$1" --gbps "$2" --seconds "$SECS" --no-calibrate \
        --verify >"$TMP/cli" 2>&1
    kill -INT $SRV 2>/dev/null
    wait $SRV 2>/dev/null
    SRV=
}

bad=0
printf '%-4s %-5s %-6s %4s %9s %8s  %s\n' wl gbps mode seed rpcs errors "failure kinds"
for pt in $POINTS; do
    wl=${pt%%:*} g=${pt#*:}
    for s in $(seq 1 "$SEEDS"); do
        for mode in none faults; do
            f=
            [ $mode = faults ] && f="$FAULTS,seed=$((BASE + s))"
            run "$wl" "$g" "$f"
            r=$(awk '/^  rpcs /{print $2}' "$TMP/cli")
            e=$(awk '/^  errors /{print $2}' "$TMP/cli")
            k=$(grep '^  failed ' "$TMP/cli" | sed 's/^  failed *//' | tr '\n' ';')
            printf '%-4s %-5s %-6s %4s %9s %8s  %s\n' "$wl" "$g" $mode "$s" "${r:-?}" "${e:-?}" "$k"
            echo "$wl $g $mode ${r:-0} ${e:-x}" >>"$TMP/all"
            [ $mode = faults ] && [ "${e:-x}" != 0 ] && bad=1
        done
    done
done
echo
echo "summary (point, mode: runs, RPCs, runs with errors)"
awk '{k=$1" "$2" "$3; n[k]++; r[k]+=$4; if ($5!="0") f[k]++; if (!(k in o)) {o[k]=++c; ks[c]=k}}
     END {for (i=1;i<=c;i++) {k=ks[i]; printf "  %-18s %d runs, %d RPCs, %d with errors\n", k, n[k], r[k], f[k]+0}}' "$TMP/all"
exit $bad
