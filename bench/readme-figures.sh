#!/usr/bin/env bash
# Draws the README's figures: runs each experiment briefly, keeps its JSON
# in docs/figures/, and draws the figure from that JSON with homa-plot (the
# one plotting program).  Quicker runs than the ones the README's figures
# quote (those are in the linked documents); the shapes are the same.
#
#   bash bench/readme-figures.sh [BUILD_DIR]    # default build/
#
# The cluster figure needs root (network namespaces); without it, that
# figure is skipped with the reason.  Takes about 4 minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=${1:-$ROOT/build}
OUT=$ROOT/docs/figures
PLOT=$B/tools/homa-plot
mkdir -p "$OUT"
for t in "$B/sim/homa-sim" "$B/tools/homa-perf" "$PLOT"; do
    [[ -x $t ]] || { echo "readme-figures: $t missing: build first (cmake --build $B)" >&2; exit 1; }
done
"$PLOT" --check || { echo "readme-figures: homa-plot cannot draw (python3-matplotlib?)" >&2; exit 1; }

echo "== simulated fabric: W4 at 80 % load, 144 hosts, 20 ms measured"
"$B/sim/homa-sim" --workload w4 --load 0.8 --warmup-ms 5 --measure-ms 20 --no-wall \
    --json "$OUT/sim-w4.json" >/dev/null
"$PLOT" -q "$OUT/sim-w4.json" -o "$OUT/sim-w4-slowdown.png"

echo "== loopback: 100-byte round trips, Homa vs TCP"
"$B/tools/homa-perf" compare --test rtt --seconds 3 --json >"$OUT/compare-rtt.txt"
tail -n 1 "$OUT/compare-rtt.txt" >"$OUT/compare-rtt.json"
rm -f "$OUT/compare-rtt.txt"
"$PLOT" -q "$OUT/compare-rtt.json" --figure latency -o "$OUT/compare-rtt-latency.png"

echo "== loopback: 1 MB RPCs, 8 in flight, Homa vs TCP"
"$B/tools/homa-perf" compare --test tput --seconds 3 --json >"$OUT/compare-tput.txt"
tail -n 1 "$OUT/compare-tput.txt" >"$OUT/compare-tput.json"
rm -f "$OUT/compare-tput.txt"
"$PLOT" -q "$OUT/compare-tput.json" --figure goodput -o "$OUT/compare-tput-goodput.png"

echo "== allreduce, 4 ranks on loopback: Homa vs gloo"
PYTHONPATH=$B/python /usr/bin/python3 "$ROOT/bench/python/allreduce_bench.py" --ranks 4 \
    --sizes 4K,64K,1M,4M,16M --scale 0.3 --json "$OUT/allreduce.json" >/dev/null
"$PLOT" -q "$OUT/allreduce.json" --figure latency -o "$OUT/allreduce-latency.png"

if [[ $(id -u) -eq 0 ]]; then
    echo "== emulated cluster: W4 at 80 % load, 4 hosts"
    "$B/tools/homa-perf" cluster --workload w4 --load 0.8 --hosts 4 --seconds 10 \
        --json "$OUT/cluster-w4.json" >/dev/null
    "$PLOT" -q "$OUT/cluster-w4.json" -o "$OUT/cluster-w4-slowdown.png"
else
    echo "== emulated cluster: skipped (needs root for network namespaces)"
fi
echo "figures in $OUT:"
ls -1 "$OUT"/*.png
