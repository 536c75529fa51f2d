#!/bin/bash
# Latency and retransmission efficiency under random loss, on loopback.
#
# For each run and each loss rate (interleaved, so every rate sees the same
# machine load), starts a `homa-perf server` and a `homa-perf client --test
# workload`, both with HOMA_FAULTS=drop=RATE,dir=tx (every packet crosses one
# fault point: the sender's), and prints one table of medians over the runs:
# RPCs, failed, p50 and p99 latency, and retransmitted bytes / DATA bytes
# dropped by fault injection (both processes; 1.0 = only what was lost).
#
# usage: bench/loss/loss-latency.sh [--perf BIN] [--workload w3] [--gbps 0.05]
#            [--seconds 3] [--runs 5] [--losses "0 0.01 0.05 0.2"] [--raw FILE]
#            [--extra KEYS]
# --extra: more HOMA_FAULTS keys for every lossy run (e.g.
#   dup=0.05,reorder=0.1,reorder_depth=8: with drop=0.2, the full fault mix
#   of docs/perf-log.md).
# Exit status: 0 ok, 1 a run produced no result, 2 bad usage.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PERF=$ROOT/build/tools/homa-perf
WORKLOAD=w3
GBPS=0.05
SECONDS_=3
RUNS=5
LOSSES="0 0.01 0.05 0.2"
RAW=
EXTRA=
while [ $# -gt 0 ]; do
    case "$1" in
    --perf) PERF=$2; shift ;;
    --workload) WORKLOAD=$2; shift ;;
    --gbps) GBPS=$2; shift ;;
    --seconds) SECONDS_=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --losses) LOSSES=$2; shift ;;
    --raw) RAW=$2; shift ;;
    --extra) EXTRA=,$2; shift ;;
    -h | --help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "loss-latency: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ -x "$PERF" ] || { echo "loss-latency: $PERF not found (build first)" >&2; exit 2; }
TMP=$(mktemp -d)
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# Sum of a counter ("  engine.NAME  VALUE ...") in a --counters dump.
counter() { awk -v k="$1" '$1 == k { s += $2 } END { print s + 0 }' "$2"; }

status=0
: > "$TMP/rows"
for run in $(seq 1 "$RUNS"); do
    for loss in $LOSSES; do
        port=$((30000 + RANDOM % 20000))
        faults=
        [ "$loss" != 0 ] && faults="drop=$loss,dir=tx$EXTRA,seed=$((run * 7 + 1))"
        HOMA_FAULTS=$faults "$PERF" server --proto homa --port "$port" --counters \
            > "$TMP/srv.out" 2> "$TMP/srv.err" &
        SERVER_PID=$!
        sleep 0.3
        HOMA_FAULTS=${faults/seed=/seed=9} "$PERF" client --proto homa \
            --server "127.0.0.1:$port" --test workload --workload "$WORKLOAD" --gbps "$GBPS" \
            --seconds "$SECONDS_" --verify --json --counters --no-calibrate \
            > "$TMP/cli.out" 2> "$TMP/cli.err"
        kill -INT "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=
        json=$(tail -n 1 "$TMP/cli.out")
        case "$json" in
        '{'*) ;;
        *) echo "loss-latency: run $run loss $loss: no result" >&2; status=1; continue ;;
        esac
        rtx=$(($(counter engine.retransmit_bytes "$TMP/cli.err") +
            $(counter engine.retransmit_bytes "$TMP/srv.err")))
        lost=$(($(counter driver.fault_drop_bytes "$TMP/cli.err") +
            $(counter driver.fault_drop_bytes "$TMP/srv.err")))
        python3 -c '
import json, sys
j = json.loads(sys.argv[1])
lat = j["latency_us"]
print(sys.argv[2], j["rpcs"], j["errors"], j["mismatches"], lat["p50"], lat["p99"], sys.argv[3], sys.argv[4])
' "$json" "$loss" "$rtx" "$lost" >> "$TMP/rows"
    done
done
[ -n "$RAW" ] && cp "$TMP/rows" "$RAW"
python3 - "$TMP/rows" "$WORKLOAD" "$GBPS" "$SECONDS_" "$RUNS" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print(f"workload {sys.argv[2]} at {sys.argv[3]} Gb/s offered, {sys.argv[4]} s per run, "
      f"medians over {sys.argv[5]} runs (errors and mismatched: totals over the runs)")
print("| loss | runs | RPCs | errors | mismatched | p50 us | p99 us | retransmitted / dropped |")
print("|---|---|---|---|---|---|---|---|")
seen = []
for r in rows:
    if r[0] not in seen: seen.append(r[0])
for loss in seen:
    rs = [r for r in rows if r[0] == loss]
    med = lambda i: st.median(float(r[i]) for r in rs)
    ratios = [int(r[6]) / int(r[7]) for r in rs if int(r[7]) > 0]
    ratio = f"{st.median(ratios):.2f}" if ratios else "-"
    print(f"| {float(loss) * 100:g} % | {len(rs)} | {med(1):.0f} | {sum(int(r[2]) for r in rs)} | "
          f"{sum(int(r[3]) for r in rs)} | {med(4):.0f} | {med(5):.0f} | {ratio} |")
EOF
exit $status
