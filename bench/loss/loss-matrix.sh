#!/bin/bash
# The loss target on loopback: does every RPC complete, exactly once, under
# heavy loss, duplication and reordering, at rates the machine carries
# without faults?  (Results: docs/perf-log.md.)
#
# For each point WORKLOAD:GBPS and each seed, runs one `homa-perf server` and
# one `homa-perf client --test workload --verify` twice, interleaved: without
# faults, then with the full fault mix in both processes
# (drop=0.2,dir=tx,dup=0.05,reorder=0.1,reorder_depth=8,seed=BASE+S).
# Prints one line per run (RPCs, errors, p50 latency, each failure kind) and
# a summary per point.
#
# A fault-free run keeps up when it has no error and its p50 latency is
# below --keep-up-ms (default 20: a fifth of the 100 ms timeout).  An
# open-loop client offered more than the machine carries builds a queue
# that grows for the whole run (p50 latencies of 0.3-4 s in 3 s runs, with
# or without an error at the end), so a point is *carried* only when every
# fault-free run there kept up.  Faulty runs at a point that is not carried
# are printed but do not decide the exit status: the target is about rates
# the machine carries.
#
# --top W[,W...] finds, for each workload, the highest carried rate first:
# fault-free runs up a ladder of rates (from --from, times --step each
# rung) until one does not keep up, then up again from the last good rung
# in finer steps (--fine); then the matrix at the highest rung that kept
# up, then a step lower while any of its fault-free runs did not keep up:
# up to three fine steps (--fine), then coarse ones (--step), --down steps
# in all (default 6).  W3 and W5 need the coarse steps: near the ceiling a
# fault-free run that falls behind (a stall of either process on the two
# cores) stays behind for the rest of the run, so the ceiling is where
# such runs stop, not where the first run misses.
#
# usage: bench/loss/loss-matrix.sh [--perf BIN] [--seeds 5] [--seed-base 600]
#            [--seconds 3] [--keep-up-ms 20] [--keep DIR] [POINT ...] (default
#            points: w1:0.06 w1:0.08 w2:0.24 w3:0.8 w4:3.2 w5:3.2)
#        bench/loss/loss-matrix.sh --top w1,w2,w3,w4,w5 [--from G] [--step 1.25]
#            [--fine 1.06] [--down 6] [same options]
# --keep DIR runs both processes with --counters and keeps the output of
# every run with an error there (WL-GBPS-MODE-SEED.cli / .srv).
# Exit status: 0 every run with faults at a carried point completed every
# RPC (and, with --top, a carried rate was found for every workload), 1
# otherwise, 2 bad usage.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PERF=$ROOT/build/tools/homa-perf
SEEDS=5
BASE=600
SECS=3
KEEP_MS=20
POINTS=
TOP=
FROM=
STEP=1.25
FINE=1.06
DOWN=6
KEEP=
COUNTERS=
while [ $# -gt 0 ]; do
    case "$1" in
    --perf | --seeds | --seed-base | --seconds | --keep-up-ms | --top | --from | --step | --fine | --down | --keep)
        [ $# -ge 2 ] || { echo "loss-matrix: $1 needs a value" >&2; exit 2; } ;;
    esac
    case "$1" in
    --perf) PERF=$2; shift ;;
    --seeds) SEEDS=$2; shift ;;
    --seed-base) BASE=$2; shift ;;
    --seconds) SECS=$2; shift ;;
    --keep-up-ms) KEEP_MS=$2; shift ;;
    --top) TOP=${2//,/ }; shift ;;
    --from) FROM=$2; shift ;;
    --step) STEP=$2; shift ;;
    --fine) FINE=$2; shift ;;
    --down) DOWN=$2; shift ;;
    --keep) KEEP=$2; COUNTERS=--counters; shift ;;
    -h | --help) sed -n 2,41p "$0"; exit 0 ;;
    -*) echo "loss-matrix: unknown option $1" >&2; exit 2 ;;
    *) POINTS="$POINTS $1" ;;
    esac
    shift
done
[ -n "$POINTS$TOP" ] || POINTS="w1:0.06 w1:0.08 w2:0.24 w3:0.8 w4:3.2 w5:3.2"
[ -x "$PERF" ] || { echo "loss-matrix: no homa-perf at $PERF (build first)" >&2; exit 2; }
awk -v s="$STEP" -v f="$FINE" 'BEGIN { exit !(s > 1.01 && f > 1.01 && f <= s) }' ||
    { echo "loss-matrix: need --step >= --fine > 1.01" >&2; exit 2; }
case $DOWN in '' | *[!0-9]*) echo "loss-matrix: --down needs a count" >&2; exit 2 ;; esac
if [ -n "$KEEP" ]; then
    mkdir -p "$KEEP" || { echo "loss-matrix: cannot create $KEEP" >&2; exit 2; }
fi
FAULTS="drop=0.2,dir=tx,dup=0.05,reorder=0.1,reorder_depth=8"
TMP=$(mktemp -d)
SRV=
cleanup() {
    [ -n "$SRV" ] && kill "$SRV" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

# run WORKLOAD GBPS FAULTS [TAG]: one server, one client; sets R (RPCs), E
# (errors), P (p50 ms), K (failure kinds) and UP (1: kept up).
run() {
    local port=$((30000 + RANDOM % 20000))
    HOMA_FAULTS=$3 "$PERF" server --proto homa --port $port $COUNTERS >"$TMP/srv" 2>&1 &
    SRV=$!
    sleep 0.3
    HOMA_FAULTS=$3 timeout 300 "$PERF" client --proto homa --server 127.0.0.1:$port \
        --test workload --workload "$1" --gbps "$2" --seconds "$SECS" --no-calibrate \
        --verify $COUNTERS >"$TMP/cli" 2>&1
    kill -INT $SRV 2>/dev/null
    wait $SRV 2>/dev/null
    SRV=
    R=$(awk '/^  rpcs /{print $2}' "$TMP/cli")
    E=$(awk '/^  errors /{print $2}' "$TMP/cli")
    P=$(awk '/^  latency us /{printf "%.3f", $6 / 1000}' "$TMP/cli")
    K=$(grep '^  failed ' "$TMP/cli" | sed 's/^  failed *//' | tr '\n' ';')
    if [ -n "$KEEP" ] && [ "${E:-x}" != 0 ]; then
        cp "$TMP/cli" "$KEEP/$1-$2-${4:-run}.cli"
        cp "$TMP/srv" "$KEEP/$1-$2-${4:-run}.srv"
    fi
    UP=0
    [ "${E:-x}" = 0 ] && awk -v p="${P:-1e9}" -v k="$KEEP_MS" 'BEGIN { exit !(p < k) }' && UP=1
}

mul() { awk -v g="$1" -v s="$2" 'BEGIN { printf "%.3g", g * s }'; }

line() { # WL GBPS MODE SEED
    printf '%-4s %-6s %-6s %4s %9s %8s %10s  %s\n' "$1" "$2" "$3" "$4" "${R:-?}" "${E:-?}" \
        "${P:-?}" "$K"
}

# matrix WL GBPS: the interleaved runs at one point; appends to $TMP/all,
# sets CARRIED (1: every fault-free run kept up).
matrix() {
    CARRIED=1
    for s in $(seq 1 "$SEEDS"); do
        for mode in none faults; do
            f=
            [ $mode = faults ] && f="$FAULTS,seed=$((BASE + s))"
            run "$1" "$2" "$f" "$mode-$s"
            line "$1" "$2" $mode "$s"
            [ $mode = none ] && [ $UP = 0 ] && CARRIED=0
            echo "$1 $2 $mode ${R:-0} ${E:-x} $UP" >>"$TMP/all"
        done
    done
    echo "$1 $2 $CARRIED" >>"$TMP/points"
}

: >"$TMP/all"
: >"$TMP/points"
bad=0
printf '%-4s %-6s %-6s %4s %9s %8s %10s  %s\n' wl gbps mode seed rpcs errors "p50 ms" \
    "failure kinds"
for pt in $POINTS; do
    matrix "${pt%%:*}" "${pt#*:}"
done
for wl in $TOP; do
    from=$FROM
    if [ -z "$from" ]; then
        case $wl in
        w1) from=0.02 ;; w2) from=0.04 ;; w3) from=0.2 ;; *) from=0.4 ;;
        esac
    fi
    # coarse rungs (--step), then fine ones (--fine) up to the first miss
    g=$from last= ceil=
    for st in "$STEP" "$FINE"; do
        [ -n "$last" ] && g=$(mul "$last" "$st")
        while [ -z "$ceil" ] || awk -v g="$g" -v c="$ceil" 'BEGIN { exit !(g < c * 0.999) }'; do
            run "$wl" "$g" "" ladder
            line "$wl" "$g" ladder -
            [ $UP = 1 ] || { ceil=$g; break; }
            last=$g
            g=$(mul "$g" "$st")
        done
        [ -n "$last" ] || break
    done
    if [ -z "$last" ]; then
        echo "loss-matrix: $wl does not keep up even at $from Gb/s (use --from)" >&2
        bad=1
        continue
    fi
    for try in $(seq 0 "$DOWN"); do
        matrix "$wl" "$last"
        [ $CARRIED = 1 ] && break
        st=$FINE
        [ "$try" -ge 3 ] && st=$STEP
        last=$(mul "$last" "$(awk -v s="$st" 'BEGIN { print 1 / s }')")
    done
    [ $CARRIED = 1 ] || { echo "loss-matrix: no carried rate found for $wl" >&2; bad=1; }
done
echo
echo "summary (point: fault-free runs kept up; runs with faults, their RPCs, runs with errors)"
awk 'FNR == NR { c[$1" "$2] = $3; next }
     { k = $1" "$2; if (!(k in o)) { o[k] = ++n; ks[n] = k }
       if ($3 == "none") { nn[k]++; up[k] += $6 }
       else { nf[k]++; rf[k] += $4; if ($5 != "0") ef[k]++ } }
     END { for (i = 1; i <= n; i++) { k = ks[i]
             printf "  %-12s kept up %d of %d; faults: %d runs, %d RPCs, %d with errors  (%s)\n",
                 k, up[k], nn[k], nf[k], rf[k], ef[k] + 0,
                 c[k] ? "carried" : "not carried: beyond the machine without faults" } }' \
    "$TMP/points" "$TMP/all"
# The target: no error with faults wherever the machine carries the rate.
while read -r wl g carried; do
    [ "$carried" = 1 ] || continue
    awk -v w="$wl" -v g="$g" '$1 == w && $2 == g && $3 == "faults" && $5 != "0" { f = 1 }
                              END { exit f }' "$TMP/all" || bad=1
done <"$TMP/points"
exit $bad
