#!/usr/bin/env bash
# Several processes per host, embedded vs homad (docs/homad.md; results in
# docs/perf-log.md): `homa-perf cluster --procs P` on one emulated cluster,
# alternating embedded (every process its own engine) and --homad (one
# engine per host), ROUNDS times each.  Prints per run and as medians:
# short-message p50/p99 latency and p99 slowdown, all-message p99 slowdown,
# goodput per host, and the hosts' granted-but-unreceived bytes (mean, p99,
# max, share of the time above max_incoming).  With --plot it draws the
# series of the last round (host 0, both modes) with matplotlib.
#
#   bash bench/homad/homad-cluster.sh [--build DIR] [--rounds R] [--hosts H]
#        [--procs P] [--workload W] [--load F] [--seconds S] [--out DIR]
#        [--rate RATE] [--plot OUT.png] [-- more homa-perf cluster options]
#   bash bench/homad/homad-cluster.sh --analyse DIR [--rounds R] [--plot OUT.png]
#        (the table and plot again from the results an --out DIR kept)
# RATE: the links' rate in tc syntax; default as homa-perf cluster's auto
# (100 Mbit/s per CPU, at most 1 Gbit/s).
# Needs root (network namespaces); exit 77 without.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build ROUNDS=3 HOSTS=4 PROCS=4 WL=w4 LOAD=0.8 SECS=10 OUT="" PLOT=""
ncpu=$(nproc)
RATE=$((ncpu > 10 ? 1000 : ncpu * 100))mbit
EXTRA=() ANALYSE=""
# Debian's python3 (with python3-matplotlib) before another one in PATH.
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
while [[ $# -gt 0 ]]; do
    case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --procs) PROCS=$2; shift 2 ;;
    --workload) WL=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --plot) PLOT=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --analyse) ANALYSE=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h | --help) sed -n 2,18p "$0"; exit 0 ;;
    *) echo "homad-cluster: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ -n $ANALYSE || $(id -u) -eq 0 ]] || { echo "homad-cluster: needs root (network namespaces)" >&2; exit 77; }

analyse() {
    "$PY" - "$1" "$ROUNDS" "$PLOT" <<'EOF'
import json, os, statistics, sys
out, rounds, plot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cols = [("short p50 us", lambda h: h["short_p50_us"]),
        ("short p99 us", lambda h: h["short_p99_us"]),
        ("short p99 sd", lambda h: h["short_p99_slowdown"]),
        ("all p99 sd", lambda h: h["slowdown"]["p99"]),
        ("Gbit/s/host", lambda h: h["gbps"]),
        ("inc mean", lambda h: h["host_incoming_bytes"]["mean"]),
        ("inc p99", lambda h: h["host_incoming_bytes"]["p99"]),
        ("inc max", lambda h: h["host_incoming_bytes"]["max"]),
        ("% > max_inc", lambda h: 100 * h["host_incoming_bytes"]["fraction_above_max_incoming"]),
        ("errors", lambda h: h["errors"])]
print("%-10s %5s " % ("mode", "round") + " ".join("%12s" % c[0] for c in cols))
vals = {}
limit = None
for mode in ("embedded", "homad"):
    for r in range(1, rounds + 1):
        p = os.path.join(out, "%s-%d.json" % (mode, r))
        try:
            h = json.load(open(p))["homa"]
            row = [f(h) for _, f in cols]
            limit = h["host_incoming_bytes"]["max_incoming"]
        except (OSError, ValueError, KeyError, TypeError):
            print("%-10s %5d  (no result)" % (mode, r))
            continue
        vals.setdefault(mode, []).append(row)
        print("%-10s %5d " % (mode, r) + " ".join("%12.4g" % v for v in row))
for mode, rows in vals.items():
    med = [statistics.median(c) for c in zip(*rows)]
    print("%-10s %5s " % (mode, "med") + " ".join("%12.4g" % v for v in med))
if limit is not None:
    print("max_incoming (one engine's cap) = %d bytes" % limit)
if plot:
    import csv
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for mode, color in (("embedded", "#d62728"), ("homad", "#1f77b4")):
        p = os.path.join(out, "%s-%d" % (mode, rounds), "homa-incoming.csv")
        if not os.path.exists(p):
            continue
        t, v = [], []
        for row in csv.DictReader(open(p)):
            t.append(float(row["t_s"]))
            v.append(int(row["host0"]) / 1000)
        ax.plot(t, v, color=color, linewidth=0.6, label=mode)
    if limit is not None:
        ax.axhline(limit / 1000, color="black", linestyle="--", linewidth=0.8,
                   label="max_incoming")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("host 0 granted-but-unreceived (KB)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(plot, dpi=120)
    print("plot: %s" % plot)
EOF
}

if [[ -n $ANALYSE ]]; then
    analyse "$ANALYSE"
    exit
fi
PERF=$BUILD/tools/homa-perf
[[ -x $PERF && -x $BUILD/daemon/homad ]] || { echo "homad-cluster: build $BUILD first" >&2; exit 1; }
NAME=hxcl$$
KEEP_OUT=1
if [[ -z $OUT ]]; then
    OUT=$(mktemp -d)
    KEEP_OUT=0
fi
mkdir -p "$OUT"
cleanup() {
    bash "$ROOT/scripts/homa-cluster" down --name "$NAME" >/dev/null 2>&1 || true
    [[ $KEEP_OUT == 1 ]] || rm -rf "$OUT"
}
trap cleanup EXIT
bash "$ROOT/scripts/homa-cluster" up --name "$NAME" --hosts "$HOSTS" --rate "$RATE" \
    --host-queues prio --subnet 10.81.0 >/dev/null

status=0
for r in $(seq "$ROUNDS"); do
    for mode in embedded homad; do
        flags=()
        [[ $mode == homad ]] && flags=(--homad)
        read -r load1 _ </proc/loadavg
        echo "== round $r $mode (load average $load1)"
        if ! "$PERF" cluster --cluster "$NAME" --hosts "$HOSTS" --procs "$PROCS" --workload "$WL" \
            --load "$LOAD" --seconds "$SECS" --protos homa --verify "${flags[@]}" \
            ${EXTRA[@]+"${EXTRA[@]}"} --json "$OUT/$mode-$r.json" --keep "$OUT/$mode-$r" \
            >"$OUT/$mode-$r.txt" 2>&1; then
            echo "homad-cluster: round $r $mode failed (last lines of its output):" >&2
            tail -n 15 "$OUT/$mode-$r.txt" >&2
            status=1
        fi
    done
done

analyse "$OUT"
echo "results in $OUT$([[ $KEEP_OUT == 1 ]] || echo ' (removed at exit; --out DIR keeps them)')"
exit $status
