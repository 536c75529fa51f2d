#!/bin/sh
# Same seed -> byte-identical JSON from the command line (--no-wall drops
# the wall-clock fields); the JSON has the fields scripts rely on; --plot
# has homa-plot draw a valid PNG (with --json, without, and for fluid; the
# plot checks are skipped, saying so, without matplotlib); the same for
# `homa-sim fluid`.  Usage: cli_determinism.sh HOMA_SIM OUTDIR
set -e
sim=$1
out=$2
png_ok="$(dirname "$0")/../plot/png_ok.sh"
have_plot=1
"$(dirname "$sim")/homa-plot" --check > /dev/null 2>&1 || {
    have_plot=0
    echo "note: --plot checks skipped: homa-plot --check fails (matplotlib missing?)"
}
args="--workload w2 --load 0.7 --hosts 32 --seed 5 --warmup-ms 0.1 --measure-ms 0.3 --quiet"
"$sim" $args --json "$out/det_a.json" --no-wall > /dev/null
if [ "$have_plot" = 1 ]; then
    rm -f "$out/det.png"
    "$sim" $args --json "$out/det_b.json" --no-wall --plot "$out/det.png" > /dev/null
    "$png_ok" "$out/det.png"
else
    "$sim" $args --json "$out/det_b.json" --no-wall > /dev/null
fi
cmp "$out/det_a.json" "$out/det_b.json"
# --plot when homa-plot cannot be run: a message and exit status 1, no crash
rc=0
HOMA_PLOT=/nonexistent/homa-plot "$sim" $args --plot "$out/none.png" > /dev/null 2> "$out/none.err" || rc=$?
[ "$rc" = 1 ] && grep -q 'HOMA_PLOT=/nonexistent/homa-plot' "$out/none.err" ||
    { echo "--plot without homa-plot: exit status $rc"; cat "$out/none.err"; exit 1; }
for f in short_p99_slowdown short_p50_slowdown buckets achieved_load drops resends sim_time_s; do
    grep -q "\"$f\"" "$out/det_a.json" || { echo "missing $f"; exit 1; }
done
# with wall-clock fields, only the "wall" line differs
"$sim" $args --json "$out/det_c.json" > /dev/null
grep -v '"wall"' "$out/det_c.json" | sed 's/"packets": \([0-9]*\),$/"packets": \1/' > "$out/det_c.trim"
grep -q '"wall_time_s"' "$out/det_c.json"
cmp "$out/det_a.json" "$out/det_c.trim"
# --plot alone (JSON to stdout or none): homa-plot gets a temporary JSON,
# removed afterwards; reproduce-style lists and fluid too
if [ "$have_plot" = 1 ]; then
    rm -rf "$out/tmp" && mkdir "$out/tmp"
    rm -f "$out/alone.svg" "$out/ablate.png" "$out/fluid.png"
    TMPDIR="$out/tmp" "$sim" $args --json - --plot "$out/alone.svg" | python3 -m json.tool > /dev/null
    grep -q '<svg' "$out/alone.svg"
    TMPDIR="$out/tmp" "$sim" ablate --what load --values 0.3,0.5 --workload w2 --hosts 8 \
        --warmup-ms 0.1 --measure-ms 0.2 --quiet --jobs 1 --plot "$out/ablate.png" > /dev/null
    "$png_ok" "$out/ablate.png"
    TMPDIR="$out/tmp" "$sim" fluid --workload w4 --load 0.5 --hosts 8 --measure-ms 20 \
        --order srpt,fifo --plot "$out/fluid.png" > /dev/null
    "$png_ok" "$out/fluid.png"
    [ -z "$(ls "$out/tmp")" ] || { echo "temporary JSON left behind: $(ls "$out/tmp")"; exit 1; }
fi
# the fluid model: same seed, same JSON; both orders; bad input is refused
fargs="fluid --workload w4 --load 0.5 --hosts 16 --seed 2 --measure-ms 50 --order srpt,fifo --no-wall"
"$sim" $fargs --json "$out/fl_a.json" > /dev/null
"$sim" $fargs --json - > "$out/fl_b.json"
cmp "$out/fl_a.json" "$out/fl_b.json"
for f in '"order": "srpt"' '"order": "fifo"' achieved_load_intervals backlog_slope_mb_per_ms rx_idle_pending; do
    grep -q "$f" "$out/fl_a.json" || { echo "fluid: missing $f"; exit 1; }
done
grep -q '"overcommit": 0,' "$out/fl_a.json" || { echo "fluid: default is not unlimited"; exit 1; }
"$sim" fluid --workload w4 --load 0.5 --hosts 16 --measure-ms 20 --overcommit 1 --json - |
    grep -q '"overcommit": 1,' || { echo "fluid: --overcommit did not reach the model"; exit 1; }
"$sim" fluid --workload w4 --overcommit 65 > /dev/null 2>&1 && { echo "overcommit 65 accepted"; exit 1; }
"$sim" fluid --workload w4 --order longest > /dev/null 2>&1 && { echo "bad --order accepted"; exit 1; }
"$sim" fluid --workload w4 --hosts 1 > /dev/null 2>&1 && { echo "1 host accepted"; exit 1; }
"$sim" fluid --workload w4 --order '' > /dev/null 2>&1 && { echo "empty --order accepted"; exit 1; }
"$sim" fluid --workload w4 --measure-ms 4000000 > /dev/null 2>&1 && { echo "over an hour accepted"; exit 1; }
# a workload path that needs escaping still gives valid JSON
if command -v python3 > /dev/null; then
    cp "$(dirname "$0")/../../data/workloads/w1.cdf" "$out/q\"uote.cdf"
    "$sim" fluid --workload "$out/q\"uote.cdf" --hosts 4 --load 0.3 --measure-ms 1 --json - |
        python3 -m json.tool > /dev/null
    "$sim" --workload "$out/q\"uote.cdf" --hosts 4 --load 0.3 --warmup-ms 0.1 --measure-ms 0.2 \
        --quiet --json - | python3 -m json.tool > /dev/null
fi
echo "cli determinism ok"
